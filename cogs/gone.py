"""Places that go away under queued and running jobs: a deleted channel or thread, a server that
removed the bot (or was deleted). The core ends their unfinished jobs (framecast/app/places_gone.py);
this cog only tells it what Discord said is gone, and the chat side which closed thread is open again.

discord.py reports a deleted channel's cached threads as deleted too (``raw_thread_delete``), and
a guild's removal only when it was not merely an outage (``guild_remove``, not
``guild_unavailable``). What went while the bot was away is found on connecting (``on_ready``): a
server missing from the cache, and a channel missing from it that Discord says is unknown (a thread
the bot cannot see is missing from the cache too, and its jobs must not end for that).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import discord
from discord.ext import commands

from cogs.delivery.codes import DISCORD_TROUBLE, DiscordCode, describe
from framecast.app import StoreUnavailable, is_store_outage

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)


class PlacesGone(commands.Cog):
    """Tells the core which channels, threads and servers are gone (and the chat side which threads
    opened again)."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    @commands.Cog.listener()
    async def on_guild_channel_delete(self, channel: discord.abc.GuildChannel) -> None:
        """A channel was deleted: its jobs end."""
        await _unless_the_store_is_out(self.bot.core.gone.channels_gone(channel.guild.id, (channel.id,)))

    @commands.Cog.listener()
    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        """A thread was deleted (also one of a deleted channel): its jobs end."""
        await _unless_the_store_is_out(
            self.bot.core.gone.channels_gone(payload.guild_id, (payload.thread_id,))
        )

    @commands.Cog.listener()
    async def on_thread_join(self, thread: discord.Thread) -> None:
        """A thread came into the bot's cache: new, or a closed one opened again (discord.py drops
        closed threads from its cache). Its jobs' progress shows there again."""
        self.bot.core.reporter.thread_opened(thread.id)

    @commands.Cog.listener()
    async def on_thread_update(self, before: discord.Thread, after: discord.Thread) -> None:
        """A thread still in the cache changed; open, its jobs' progress shows there."""
        if not after.archived:
            self.bot.core.reporter.thread_opened(after.id)

    @commands.Cog.listener()
    async def on_guild_remove(self, guild: discord.Guild) -> None:
        """The bot left the server (kicked, or the server was deleted): its queue ends."""
        await _unless_the_store_is_out(self.bot.core.gone.server_left(guild.id))

    @commands.Cog.listener()
    async def on_ready(self) -> None:
        """What went while the bot was away ends too: a server that removed it (Discord's READY
        lists every server it is in, those in an outage too), and a channel or thread Discord says
        is unknown. Only this process's shards' servers are judged; the others are not in its cache."""
        await _unless_the_store_is_out(self._ended_while_away())

    async def _ended_while_away(self) -> None:
        gone = self.bot.core.gone
        for guild_id, channel_ids in (await gone.places_with_jobs()).items():
            if not self._on_my_shards(guild_id):
                continue
            guild = self.bot.get_guild(guild_id)
            if guild is None:
                if await self._left(guild_id):
                    await gone.server_left(guild_id)
                continue
            if guild.unavailable:
                continue  # an outage of Discord's: its channels are not known now
            deleted = [
                channel_id
                for channel_id in channel_ids
                if guild.get_channel_or_thread(channel_id) is None and await self._deleted(channel_id)
            ]
            if deleted:
                await gone.channels_gone(guild_id, deleted)

    async def _left(self, guild_id: int) -> bool:
        """Whether Discord confirms the bot is no longer in the server (404 Unknown Guild, or 403
        Missing Access). Missing from the cache alone is not enough: the queue of a server the
        cache has not caught up with must not end for that (any other answer keeps it)."""
        try:
            await self.bot.fetch_guild(guild_id)
        except discord.HTTPException as exc:
            return exc.code in (DiscordCode.UNKNOWN_GUILD, DiscordCode.MISSING_ACCESS)
        except DISCORD_TROUBLE as exc:
            log.info("server %s: could not look whether the bot is still in it (%s)", guild_id, describe(exc))
        return False

    async def _deleted(self, channel_id: int) -> bool:
        """Whether Discord says the channel is no more (404 Unknown Channel). A channel missing from
        the cache may be a thread the bot cannot see (403), or archived: those stay, as does any
        other answer."""
        try:
            await self.bot.fetch_channel(channel_id)
        except discord.NotFound as exc:
            return exc.code == DiscordCode.UNKNOWN_CHANNEL
        except DISCORD_TROUBLE as exc:
            log.info("channel %s: could not look whether it still exists (%s)", channel_id, describe(exc))
        return False

    def _on_my_shards(self, guild_id: int) -> bool:
        count = self.bot.shard_count
        if count is None:
            return True
        # The shards this process runs (AutoShardedBot's ``shard_ids``; None: all of them).
        ids: list[int] | None = getattr(self.bot, "shard_ids", None)
        return ids is None or (guild_id >> 22) % count in ids


async def _unless_the_store_is_out(telling: Awaitable[object]) -> None:
    """Tell the core; while the store is out (the core logs that once) the news is dropped: those
    jobs end at the next connection (``on_ready``), or fail when their delivery finds nowhere to go."""
    try:
        await telling
    except Exception as exc:
        if not (isinstance(exc, StoreUnavailable) or is_store_outage(exc, bare=False)):
            raise
        log.info("a channel or server is gone, but the store is out: its jobs go on for now")


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(PlacesGone(bot))
