"""The real ``bot.py`` start-up freezes its heap once every shard is ready (framecast/ops/heap.py).

One process runs both shards of ``SHARD_COUNT=2`` against the fake Discord, with guilds on each
shard; the freeze must come after the last shard's guilds are in (it counts every guild) and show
on ``/metrics``. (The stall it removes at 25,000 guilds: benchmarks/bench_gc.py.)
"""

from __future__ import annotations

import re
import time

from tests.e2e.endpoints import free_port, ops_of, value
from tests.e2e.harness import StartWorld, World, wait_log
from tests.fakes.discord_api import DISCORD_EPOCH_MS

SHARDS = 2


def _guild_id(shard: int, n: int) -> int:
    """A guild id Discord routes to `shard` of `SHARDS`: ``(id >> 22) % SHARDS``."""
    ms = int(time.time() * 1000) - DISCORD_EPOCH_MS - 86400_000 * 30 + 100 * n
    ms -= ms % SHARDS
    return ((ms + shard) << 22) | n


async def test_startup_freezes_the_heap_once_every_shard_is_ready(start: StartWorld) -> None:
    def guilds_on_both_shards(world: World) -> None:
        for shard in range(SHARDS):
            for n in range(2):
                guild = world.discord.add_guild(
                    f"shard {shard} guild {n}", guild_id=_guild_id(shard, 10 * shard + n)
                )
                world.discord.add_channel(guild, "general")

    world = await start(
        setup=guilds_on_both_shards,
        extra_env={"SHARD_COUNT": str(SHARDS), "HTTP_PORT": str(free_port()), "LOG_LEVEL": "INFO"},
    )
    guilds = len(world.discord.guilds)
    assert {(g.id >> 22) % SHARDS for g in world.discord.guilds} == set(range(SHARDS))
    # discord.py identifies the second shard 5 s after the first.
    await world.discord.wait_ready(timeout=30, count=SHARDS)
    at = await wait_log(world, "heap frozen (ready)", timeout=30)
    line = world.bot.log_text()[at:].splitlines()[0]
    found = re.search(r"(\d+) objects .* (\d+) guild\(s\)", line)
    assert found is not None, line
    assert int(found[1]) > 10_000  # the whole start-up heap, not a handful of objects
    assert int(found[2]) == guilds  # frozen after every shard's guilds were in, not after the first
    async with ops_of(world) as ops:
        await ops.until("/readyz", lambda s, _: s == 200, what="ready")
        samples = await ops.samples()
    assert (value(samples, "framecast_gc_frozen_objects") or 0) > 10_000
    assert value(samples, "framecast_heap_sweeps_total", reason="ready") == 1
    # And the bot still works on a frozen heap.
    it = await world.video("after the freeze")
    await world.delivered(it)
