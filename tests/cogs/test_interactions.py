"""Reading where an interaction comes from: a server's install, or a person's own (user installs)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Literal

import discord
import pytest
from discord import app_commands

from cogs.error_text import ServerRulesApply, error_message
from cogs.i18n import t
from cogs.interactions import actor, admin, requester
from cogs.places import Where, where
from framecast.app import Actor, Admins

DORA, GUILD = 1_200_000_000_000_000_001, 900_000_000_000_000_001


def interaction(
    *,
    guild_id: int | None,
    owners: dict[int, int],
    context: Literal[0, 1, 2],
    user_install: bool = True,
    bot_guilds: frozenset[int] = frozenset(),
) -> Any:
    """An interaction as discord.py reads Discord's payload (``authorizing_integration_owners``);
    `bot_guilds` are the servers the bot is in (its guild cache)."""
    return SimpleNamespace(
        guild_id=guild_id,
        channel_id=77,
        channel=None,
        user=SimpleNamespace(id=DORA),
        locale=discord.Locale.american_english,
        context=app_commands.AppCommandContext._from_value([context]),
        is_guild_integration=lambda: guild_id is not None and owners.get(0) == guild_id,
        is_user_integration=lambda: owners.get(1) == DORA,
        client=SimpleNamespace(
            settings=SimpleNamespace(user_install=user_install),
            get_guild=lambda gid: SimpleNamespace(id=gid) if gid in bot_guilds else None,
        ),
    )


@pytest.mark.parametrize(
    ("guild_id", "owners", "context", "expected"),
    [
        (GUILD, {0: GUILD}, 0, Where.GUILD),  # a server that installed the app
        (GUILD, {0: GUILD, 1: DORA}, 0, Where.GUILD),  # both installs: the server's rules
        (GUILD, {1: DORA}, 0, Where.USER_GUILD),  # a server without the bot: only her install
        (GUILD, {}, 0, Where.GUILD),  # a payload from before user installs
        (None, {1: DORA}, 1, Where.DM),
        (None, {1: DORA}, 2, Where.GROUP_DM),
    ],
)
def test_where_an_interaction_comes_from(
    guild_id: int | None, owners: dict[int, int], context: Literal[0, 1, 2], expected: Where
) -> None:
    assert where(interaction(guild_id=guild_id, owners=owners, context=context)) is expected


@pytest.mark.parametrize("context", [1, 2])
def test_outside_servers_a_person_asks_on_their_own_queue(context: Literal[1, 2]) -> None:
    who = requester(interaction(guild_id=None, owners={1: DORA}, context=context))
    assert who.personal and (who.guild_id, who.user_id, who.channel_id) == (DORA, DORA, 77)
    # With user installs off nothing is asked outside servers.
    with pytest.raises(app_commands.NoPrivateMessage):
        requester(interaction(guild_id=None, owners={1: DORA}, context=context, user_install=False))


def test_a_server_without_the_bot_is_a_personal_queue_too() -> None:
    who = requester(interaction(guild_id=GUILD, owners={1: DORA}, context=0))
    assert who.personal and who.guild_id == DORA


@pytest.mark.parametrize(
    ("owners", "expected"),
    [
        ({1: DORA}, Where.BOT_GUILD_USER_INSTALL),  # only her own install, in a server with the bot
        ({0: GUILD, 1: DORA}, Where.GUILD),  # the server's install too: the server's job
    ],
)
def test_a_server_with_the_bot_is_never_a_personal_queue(owners: dict[int, int], expected: Where) -> None:
    """Her own install used in a server that has Framecast: never her personal queue (which would
    skip the server's blocklist, channels, NSFW rule and quotas and post where its /queue, Cancel
    and Delete cannot see it). With the server's install it is the server's job; without it the
    command is refused, saying the server's rules apply."""
    it = interaction(guild_id=GUILD, owners=owners, context=0, bot_guilds=frozenset({GUILD}))
    place = where(it)
    assert place is expected and not place.personal
    if expected is Where.BOT_GUILD_USER_INSTALL:
        with pytest.raises(ServerRulesApply) as refused:
            requester(it)
        assert error_message(refused.value, "en-US") == t("userinstall_server_rules", "en-US")
        with pytest.raises(ServerRulesApply):
            actor(it)
    else:
        assert requester(it).guild_id == GUILD and actor(it).guild_id == GUILD


def admin_interaction(
    perms: discord.Permissions,
    *,
    guild_id: int | None = GUILD,
    owners: dict[int, int] | None = None,
    **kw: Any,
) -> Any:
    """An interaction for /settings, with the member's permissions there and the application's
    rule of who may administer (``Admins.authorize``, no I/O) behind ``client.core.admins``."""
    it = interaction(guild_id=guild_id, owners={0: GUILD} if owners is None else owners, **kw)
    it.permissions = perms
    it.client.core = SimpleNamespace(admins=SimpleNamespace(authorize=Admins.authorize))
    return it


@pytest.mark.parametrize(
    "perms", [discord.Permissions(manage_guild=True), discord.Permissions(administrator=True)]
)
def test_settings_are_for_a_member_with_manage_server_or_administrator(perms: discord.Permissions) -> None:
    assert admin(admin_interaction(perms, context=0)) == Actor(DORA, GUILD, manages_guild=True)


@pytest.mark.parametrize(
    ("place", "expected"),
    [
        # A member without Manage Server (an Integrations override showed them /settings).
        ({"context": 0}, "settings_error_not_manager"),
        # Through her own install (if Discord ever sent it): a DM, a group DM, a server without the
        # bot are her own queue, which has no settings; a server with the bot follows its rules.
        ({"guild_id": None, "owners": {1: DORA}, "context": 1}, "userinstall_server_only"),
        ({"guild_id": None, "owners": {1: DORA}, "context": 2}, "userinstall_server_only"),
        ({"owners": {1: DORA}, "context": 0}, "userinstall_server_only"),
        ({"owners": {1: DORA}, "context": 0, "bot_guilds": frozenset({GUILD})}, "userinstall_server_rules"),
        # User installs off: servers only, as for every command.
        ({"guild_id": None, "owners": {1: DORA}, "context": 1, "user_install": False}, "error_guild_only"),
    ],
)
def test_who_may_not_change_settings_is_told_why(place: dict[str, Any], expected: str) -> None:
    """The application refuses (``AdminRefused``) or the interaction cannot name a server; either
    way the tree words it, before anything is acknowledged. Manage Server elsewhere gives nothing.

    Raised in a check, it must be one of discord.py's own errors: nothing else reaches the tree's
    handler from there (the member would hear nothing)."""
    perms = discord.Permissions.none() if place == {"context": 0} else discord.Permissions(manage_guild=True)
    with pytest.raises(app_commands.AppCommandError) as refused:
        admin(admin_interaction(perms, **place))
    assert error_message(refused.value, "en-US") == t(expected, "en-US")
