"""Where an interaction comes from, and through which install: a server's, or a person's own."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import discord

__all__ = ["Where", "where"]


class Where(StrEnum):
    """Where an interaction comes from, and through which install (stored with a job as ``context``)."""

    GUILD = "guild"  # a server that installed the app (the bot is a member)
    DM = "dm"  # the person's DM with the app's bot
    GROUP_DM = "group_dm"  # a group DM, or a DM between other people (user install)
    USER_GUILD = "user_guild"  # a server without the bot, where only the person's own install authorised it
    # A server that has the bot, where only the person's own install authorised the command: the
    # server's install did not (its admins did not allow it there). Refused: a personal job there
    # would skip the server's rules and post where its /queue, Cancel and Delete cannot see it.
    BOT_GUILD_USER_INSTALL = "bot_guild_user_install"

    @property
    def personal(self) -> bool:
        """The request joins the person's own queue (no server's settings, key or channels)."""
        return self in (Where.DM, Where.GROUP_DM, Where.USER_GUILD)


def where(interaction: discord.Interaction[Any]) -> Where:
    """Where `interaction` comes from (no I/O).

    In a server, the server's own install wins (the bot is there, with the server's rules); a server
    that did not install the app is reached only through the person's install. Outside servers,
    Discord's ``context`` tells the DM with the bot from group DMs and other people's DMs.
    """
    if interaction.guild_id is not None:
        if interaction.is_guild_integration() or not interaction.is_user_integration():
            return Where.GUILD
        # The bot's own cache (no I/O): a server the bot is in is never a personal queue's place.
        if interaction.client.get_guild(interaction.guild_id) is not None:
            return Where.BOT_GUILD_USER_INSTALL
        return Where.USER_GUILD
    if interaction.context.private_channel:
        return Where.GROUP_DM
    return Where.DM
