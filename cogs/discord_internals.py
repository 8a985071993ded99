"""The few places Framecast reaches past discord.py's public API, each because none exists.

Everything else in ``bot.py`` and ``cogs/`` uses discord.py's documented API. What is here is
pinned to discord.py 2.7 (``requirements.txt``); when upgrading, read each function again against
the new release and delete what a public option now covers.
"""

from __future__ import annotations

import logging
from typing import Any

import discord
import discord.gateway
import discord.http
import yarl

__all__ = [
    "count_as_deferred",
    "discard_http_session",
    "dispatched_by_discord_py",
    "gateway_url",
    "never_connected",
    "point_discord_at",
    "quiet_voice_warnings",
    "system_channel_id",
]

log = logging.getLogger(__name__)


def point_discord_at(*, api_base_url: str | None, gateway_url: str | None) -> None:
    """Send discord.py's REST and gateway traffic elsewhere (a proxy, or the tests' fake Discord).

    discord.py has no option for either address: the REST base is the class attribute
    ``Route.BASE`` (read by every request, interaction replies included) and the first gateway
    address is ``DiscordWebSocket.DEFAULT_GATEWAY``. Both are process-wide, like this setting.
    """
    if api_base_url:
        discord.http.Route.BASE = api_base_url.rstrip("/")
        log.info("Discord REST requests go to %s", discord.http.Route.BASE)
    if gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
        log.info("Discord gateway connections go to %s", gateway_url)


def quiet_voice_warnings() -> None:
    """Keep discord.py from warning "PyNaCl is not installed" and "davey is not installed" at start-up.

    The bot has no voice, so neither library is needed; discord.py warns once per process from
    ``Client.__init__``, unless these class flags (its own once-only switches) are already off.
    """
    import discord.voice_client

    discord.voice_client.VoiceClient.warn_nacl = False
    discord.voice_client.VoiceClient.warn_dave = False


def gateway_url() -> str:
    """The address discord.py opens its first gateway connection to (with its API version).

    Needed to probe the gateway before ``Client.connect`` (see :mod:`cogs.startup`); discord.py
    builds this address inside ``DiscordWebSocket.from_client`` and exposes no way to ask for it.
    """
    base = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    return str(base.with_query(v=discord.http.INTERNAL_API_VERSION, encoding="json"))


async def discard_http_session(client: discord.Client) -> None:
    """Close a failed log-in's HTTP session so the next ``Client.login`` can open a working one.

    ``login()`` opens a new session on every call and hands it the client's connector, which
    closing the old session closes too; discord.py only makes a new connector when the attribute
    is unset (``MISSING``), and offers no public reset (``Client.clear`` leaves the connector).
    """
    await client.http.close()
    client.http.connector = discord.utils.MISSING


def never_connected(client: discord.Client) -> bool:
    """Whether the client has never opened a gateway connection (``Client.ws`` is still unset).

    discord.py 2.7.1's ``Client.connect`` crashes (an ``AttributeError`` on ``None``) when its very
    first connection fails, instead of retrying; telling that crash from a real refusal (a bad
    token's close code 4004 comes after the connection opened) needs the undocumented ``ws``.
    """
    return client.ws is None


def system_channel_id(guild: discord.Guild) -> int | None:
    """The id of the guild's system channel, also when that channel is not in the cache.

    ``Guild.system_channel`` answers only from this process's cache, so it is None for a guild of
    another shard (fetched over REST); the id Discord sent is kept in ``Guild._system_channel_id``
    and has no public accessor.
    """
    channel_id = getattr(guild, "_system_channel_id", None)
    return channel_id if isinstance(channel_id, int) else None


def count_as_deferred(interaction: discord.Interaction[Any], *, thinking: bool) -> None:
    """Record on `interaction` the deferral Discord holds though discord.py never heard its answer.

    A defer whose answer is lost (a 502 from a proxy in front of Discord) is sent again by
    discord.py and refused with 40060, "already acknowledged": Discord has it. discord.py sets
    ``InteractionResponse._response_type`` only on an answer it heard and has no public setter, so
    ``is_done()`` (and every reply that asks it) would act as if nothing had been sent.
    """
    updates = interaction.type in (discord.InteractionType.component, discord.InteractionType.modal_submit)
    kind = (
        discord.InteractionResponseType.deferred_message_update
        if updates and not thinking
        else discord.InteractionResponseType.deferred_channel_message
    )
    interaction.response._response_type = kind


def dispatched_by_discord_py(client: discord.Client, interaction: discord.Interaction[Any]) -> bool:
    """Whether discord.py hands `interaction` (a click or a form submit) to a handler of ours: a
    dynamic item whose template its custom id matches, a view's item, or a modal waiting for it.

    discord.py silently drops a custom id nothing claims, and keeps its claims in the connection's
    private ``ViewStore`` (``_dynamic_items``, ``_views``, ``_modals``); there is no public way to ask.
    """
    data: Any = interaction.data or {}
    custom_id = str(data.get("custom_id", ""))
    store = client._connection._view_store
    if interaction.type is discord.InteractionType.modal_submit:
        return custom_id in store._modals
    if any(pattern.fullmatch(custom_id) for pattern in store._dynamic_items):
        return True
    key = (int(data.get("component_type", 0) or 0), custom_id)
    message_id = interaction.message.id if interaction.message is not None else None
    return key in store._views.get(message_id, {}) or key in store._views.get(None, {})
