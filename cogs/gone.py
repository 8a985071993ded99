"""Places that go away under queued and running jobs: a deleted channel or thread, a server that
removed the bot (or was deleted). The core ends their unfinished jobs (framecast/app/places_gone.py);
this cog only tells it what Discord said is gone.

discord.py reports a deleted channel's cached threads as deleted too (``raw_thread_delete``), and
a guild's removal only when it was not merely an outage (``guild_remove``, not
``guild_unavailable``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord
from discord.ext import commands

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)


class PlacesGone(commands.Cog):
    """Tells the core which channels, threads and servers are gone."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    @commands.Cog.listener()
    async def on_guild_channel_delete(self, channel: discord.abc.GuildChannel) -> None:
        """A channel was deleted: its jobs end."""
        await self.bot.core.gone.channels_gone(channel.guild.id, (channel.id,))

    @commands.Cog.listener()
    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        """A thread was deleted (also one of a deleted channel): its jobs end."""
        await self.bot.core.gone.channels_gone(payload.guild_id, (payload.thread_id,))

    @commands.Cog.listener()
    async def on_guild_remove(self, guild: discord.Guild) -> None:
        """The bot left the server (kicked, or the server was deleted): its queue ends."""
        await self.bot.core.gone.server_left(guild.id)


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(PlacesGone(bot))
