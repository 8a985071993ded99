"""Telling a server's admins that the service refused the server's own API key.

The core decides whom (:class:`~framecast.app.RefusedKeyNotice`, once per key, from
:meth:`framecast.app.Admins.key_rejected`); this delivers it, through the chat side's
:meth:`DiscordReporter.key_refused <cogs.delivery.reporter.DiscordReporter.key_refused>`: a DM to the
member who set the key if they are still a member, or, when that fails, a notice in the server's
system channel. Never a member's channel, never a ping, nobody else. The notice is in the server's
preferred language. A server of another shard (a job taken over from a process that died) is
fetched from Discord. Failed requests are counted like the rest of the delivery's.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

import discord

from cogs.delivery.errors_metric import DiscordErrors
from cogs.discord_internals import system_channel_id
from cogs.i18n import t
from cogs.literal import as_text
from framecast.app import RefusedKeyNotice

__all__ = ["KeyNotices"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class KeyNotices:
    """Delivers :class:`RefusedKeyNotice`s with `client` (see the module's docstring)."""

    def __init__(self, client: discord.Client, *, errors: DiscordErrors | None = None) -> None:
        """`errors`: where failed requests are counted (default: nowhere)."""
        self._client = client
        self._errors = errors or DiscordErrors()

    def __repr__(self) -> str:
        return "<KeyNotices>"

    async def key_refused(self, notice: RefusedKeyNotice) -> None:
        """Tell that server's admins (the member who set the key, else the system channel); never raises."""
        try:
            await self._tell_admins(notice)
        except Exception:  # the runner that called must never break on a notice
            log.exception("could not tell guild %s that its API key was refused", notice.guild_id)

    async def _tell_admins(self, notice: RefusedKeyNotice) -> None:
        guild_id = notice.guild_id
        guild = self._client.get_guild(guild_id)
        if guild is None:
            # Another shard's server (a job taken over from a process that died): ask Discord.
            guild = await self._quietly(self._client.fetch_guild(guild_id))
        locale = str(guild.preferred_locale.value) if guild else None
        name = as_text(guild.name) if guild else str(guild_id)
        text = t("settings_key_rejected_notice", locale, guild=name, last4=as_text(notice.last4))
        if notice.set_by and await self._dm(guild, notice.set_by, text):
            log.info("guild %s: told the admin who set its API key that the service refused it", guild_id)
            return
        channel = await self._system_channel(guild)
        if channel is None:
            log.warning("guild %s: its API key was refused and no admin could be told", guild_id)
            return
        try:
            with self._errors.counted():
                await channel.send(text, allowed_mentions=discord.AllowedMentions.none())
            log.info("guild %s: its refused API key was announced in the system channel", guild_id)
        except discord.HTTPException as exc:
            log.warning("guild %s: could not post the refused-key notice: HTTP %s", guild_id, exc.status)

    async def _system_channel(self, guild: discord.Guild | None) -> discord.abc.Messageable | None:
        """The guild's system channel, from the cache or (another shard's server) from Discord."""
        if guild is None:
            return None
        if guild.system_channel is not None:
            return guild.system_channel
        channel_id = system_channel_id(guild)
        if channel_id is None:
            return None
        channel = await self._quietly(self._client.fetch_channel(channel_id))
        return channel if isinstance(channel, discord.abc.Messageable) else None

    async def _dm(self, guild: discord.Guild | None, user_id: int, text: str) -> bool:
        """DM `user_id` if they are still a member of `guild`; False when that cannot be done."""
        if guild is None:
            return False
        member = await self._quietly(guild.fetch_member(user_id))
        if member is None:
            return False
        try:
            with self._errors.counted():
                await member.send(text, allowed_mentions=discord.AllowedMentions.none())
        except discord.HTTPException:
            return False
        return True

    async def _quietly(self, request: Coroutine[Any, Any, T]) -> T | None:
        """`request`'s answer, or None when Discord refused it (counted)."""
        try:
            with self._errors.counted():
                return await request
        except discord.HTTPException:
            return None
