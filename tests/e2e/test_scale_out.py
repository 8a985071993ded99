"""Two sharded bot processes on PostgreSQL and Redis: one request budget, each job once, takeover.

Two real ``bot.py`` processes run shards 0 and 1 of 2 (``SHARD_COUNT=2``, ``SHARD_IDS=0`` / ``1``)
against one fake Discord (four guilds, two on each shard) and one fake service whose rate limit is
the bot's ``GEN_RATE_LIMIT``. They share a fresh PostgreSQL database (``DATABASE_URL``, from
tests/pg.py) and a Redis database (``REDIS_URL``, db 9, flushed before and after). Skipped, saying
why, unless PostgreSQL answers on 127.0.0.1:5432 and Redis on 127.0.0.1:6379.

* A burst of jobs across all four guilds: the service never sees more than N requests in any
  window, no 429, every job is delivered exactly once, and each process ran only its shards' jobs.
* ``kill -9`` of one process while its jobs run: once their leases lapse the other process takes
  them over and delivers each exactly once (through the stored interaction token), without
  creating their service tasks again.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tests.e2e.harness import (
    MEMBER_PERMS,
    BotProcess,
    World,
    close_world,
    make_world,
    service_creates,
)
from tests.fakes.discord_api import snowflake_at
from tests.fakes.gen_service import TaskPlan
from tests.pg import fresh_database

SHARDS = 2
RATE = (6, 1.0)  # GEN_RATE_LIMIT: 6 requests per (scaled) second, for both processes together
LEASE_SECONDS = 3.0
REDIS_URL = os.environ.get("FRAMECAST_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
SLOW = 8.0  # seconds a "slow" task stays pending: long enough to kill its process mid-way
CREATED = re.compile(r"created video task (\S+)")


@dataclass
class Cluster:
    """The world (fakes, four guilds) and the two bot processes, by shard."""

    world: World
    bots: dict[int, BotProcess]
    dsn: str

    def shard_of(self, guild_index: int) -> int:
        return (self.world.guilds[guild_index].id >> 22) % SHARDS

    def guilds_of(self, shard: int) -> list[int]:
        return [g for g in range(len(self.world.guilds)) if self.shard_of(g) == shard]

    async def jobs(self) -> dict[int, asyncpg.Record]:
        """The shared job table: id -> (guild_id, state, lease_owner)."""
        conn = await asyncpg.connect(self.dsn, timeout=5)
        try:
            rows = await conn.fetch("SELECT id, guild_id, state, lease_owner FROM jobs ORDER BY id")
        finally:
            await conn.close()
        return {int(r["id"]): r for r in rows}

    def created_prompts(self, shard: int) -> list[str]:
        """Prompts of the service tasks the process of `shard` created (from its log)."""
        tasks = self.world.service.tasks
        return [tasks[t].prompt for t in CREATED.findall(self.bots[shard].log_text()) if t in tasks]

    async def wait_created(self, shard: int, prompts: list[str], timeout: float = 5.0) -> None:
        """Wait until the log of `shard`'s process shows exactly these tasks created (a log line
        follows the service's answer, so it may trail the service's record a little)."""
        deadline = time.monotonic() + timeout
        while sorted(self.created_prompts(shard)) != sorted(prompts):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"shard {shard} created {sorted(self.created_prompts(shard))}, expected {sorted(prompts)}"
                )
            await asyncio.sleep(0.05)


async def _redis_or_skip() -> aioredis.Redis:
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        await client.aclose()
        pytest.skip(
            f"Redis is not reachable at {REDIS_URL} ({type(exc).__name__}); start a server or set "
            "FRAMECAST_TEST_REDIS_URL to run the multi-process test"
        )
    return client


def _guild_id(shard: int, n: int) -> int:
    """A fresh guild snowflake that Discord's rule ``(id >> 22) % 2`` puts on `shard`."""
    base = snowflake_at(time.time() - 86400 * 30)
    ms = (base >> 22) - (base >> 22) % SHARDS + shard + SHARDS * n
    return (ms << 22) | (base & ((1 << 22) - 1))


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Both processes connected (shard 0 synced the commands); torn down with SIGTERM."""
    redis = await _redis_or_skip()
    async with fresh_database() as dsn:
        await redis.flushdb()
        world = await make_world(tmp_path, guilds=0)
        bots: dict[int, BotProcess] = {}
        try:
            # Four guilds, alternating shards 0, 1, 0, 1, each with a channel and three members.
            for g in range(4):
                guild = world.discord.add_guild(f"Guild {g}", guild_id=_guild_id(g % SHARDS, g // SHARDS))
                world.guilds.append(guild)
                world.channels.append(world.discord.add_channel(guild, "general"))
                world.members[g] = [
                    world.discord.add_member(guild, f"member{g}-{i}", permissions=MEMBER_PERMS)
                    for i in range(3)
                ]
            world.service.rate_limit = RATE
            world.env.update(
                {
                    "DATABASE_URL": dsn,
                    "REDIS_URL": REDIS_URL,
                    "LEASE_SECONDS": str(LEASE_SECONDS),
                    "SHARD_COUNT": str(SHARDS),
                    "GEN_RATE_LIMIT": f"{RATE[0]}/{RATE[1]:g}",
                    "MEMBER_JOB_LIMIT": "3",
                }
            )
            for shard in range(SHARDS):
                env = {
                    **world.env,
                    "SHARD_IDS": str(shard),
                    # Each process keeps its own local files (results of inline images) apart.
                    "DATABASE_PATH": str(tmp_path / f"shard{shard}" / "framecast.sqlite3"),
                }
                bots[shard] = BotProcess(env, tmp_path / f"bot-shard{shard}.log")
            mark = world.discord.identify_count
            await bots[0].start("--sync")
            await bots[1].start()
            try:
                await world.discord.wait_ready(timeout=30, after=mark, count=SHARDS)
            except TimeoutError:
                for shard, bot in bots.items():
                    print(f"--- shard {shard} (exit {bot.proc and bot.proc.returncode}):")
                    print(bot.log_text()[-4000:])
                raise
            await world.discord.wait_for(lambda: world.discord.command_syncs >= 1, timeout=10)
            sessions = [s for s in world.discord.sessions if s.live and s.ready]
            assert sorted(s.shard for s in sessions if s.shard) == [(0, SHARDS), (1, SHARDS)], (
                "each process must IDENTIFY as its own shard"
            )
            yield Cluster(world=world, bots=bots, dsn=dsn)
        finally:
            for bot in bots.values():
                if bot.running:
                    await bot.terminate()
            await close_world(world)
            for bot in bots.values():
                log = bot.log_text()
                for secret in (world.env["DISCORD_TOKEN"], world.env["GEN_API_KEY"]):
                    assert secret not in log, "a secret reached a bot's log"
                for it in world.discord.interactions:
                    assert not it.token or it.token not in log, "an interaction token reached a bot's log"
            await redis.flushdb()
            await redis.aclose()


def _assert_within_budget(world: World) -> None:
    assert world.service.count(status=429) == 0, "the service answered 429"
    seen = world.service.max_in_window()
    assert seen <= RATE[0], f"{seen} requests in one {RATE[1]:g}s window (limit {RATE[0]})"


async def test_a_burst_across_two_shards_keeps_one_budget_and_delivers_each_job_once(
    cluster: Cluster,
) -> None:
    world = cluster.world
    prompts = {(g, m): f"burst guild {g} member {m}" for g in range(4) for m in range(3)}
    its = await asyncio.gather(
        *(world.video(p, member=world.members[g][m], guild=g) for (g, m), p in prompts.items())
    )
    ids = [await world.job_id(it) for it in its]
    assert len(set(ids)) == len(ids) == 12
    # The fake Discord sent each interaction only to the shard session that handles its guild.
    for session in (s for s in world.discord.sessions if s.live):
        guilds = {int(e["d"]["guild_id"]) for e in session.events if e["t"] == "INTERACTION_CREATE"}
        assert len(guilds) == 2 and all(session.handles_guild(g) for g in guilds), session.shard
    for it in its:
        await world.delivered(it, timeout=60)

    await asyncio.sleep(0.5)  # a late second upload would show up here
    for job_id in ids:
        assert len(world.files_for(job_id)) == 1, (
            f"job {job_id} was delivered {len(world.files_for(job_id))}x"
        )
    jobs = await cluster.jobs()
    assert {jobs[j]["state"] for j in ids} == {"delivered"}
    _assert_within_budget(world)

    # Each process created exactly its own shards' tasks, and held its own shards' jobs.
    for shard in range(SHARDS):
        mine = sorted(p for (g, _), p in prompts.items() if cluster.shard_of(g) == shard)
        await cluster.wait_created(shard, mine)
    for (g, _), job_id in zip(prompts, ids, strict=True):
        assert jobs[job_id]["lease_owner"] == f"framecast-shards-{cluster.shard_of(g)}"
    for prompt in prompts.values():
        assert len(service_creates(world, prompt)) == 1


async def test_kill_9_of_one_process_and_the_other_finishes_its_jobs_once(cluster: Cluster) -> None:
    world = cluster.world
    world.service.plans.append(("slow", TaskPlan(duration=SLOW)))
    victim, survivor = 1, 0
    # One job in each of the victim's guilds (few enough that its planner starts them all at once)
    # and one of the survivor's own: prompt -> the shard whose process accepts it.
    jobs = {
        f"slow job on guild {g}": cluster.shard_of(g)
        for g in cluster.guilds_of(victim) + cluster.guilds_of(survivor)[:1]
    }
    guild_of = {p: int(p.rsplit(" ", 1)[1]) for p in jobs}
    its = {p: await world.video(p, guild=guild_of[p]) for p in jobs}
    ids = {p: await world.job_id(it) for p, it in its.items()}
    # Every task exists on the service (its process created it and is polling it): now the crash.
    await world.service.wait_for(lambda: all(len(service_creates(world, p)) == 1 for p in jobs), timeout=30)
    victims = sorted(p for p, s in jobs.items() if s == victim)
    await cluster.wait_created(victim, victims)
    # The task ids are stored too (RUNNING): a kill between a create's answer and that write leaves
    # a job whose task nobody can know (the service has no idempotency key), so it is created again.
    deadline = time.monotonic() + 5
    while any(row["state"] != "running" for row in (await cluster.jobs()).values()):
        assert time.monotonic() < deadline, "the jobs never showed RUNNING"
        await asyncio.sleep(0.05)
    killed_at = time.monotonic()
    await cluster.bots[victim].kill()
    assert not any(world.files_for(ids[p]) for p in victims), "the victim's jobs ended before the kill"

    for it in its.values():
        await world.delivered(it, timeout=45)
    took = time.monotonic() - killed_at
    assert took >= LEASE_SECONDS, f"delivered {took:.1f}s after the kill: before the lease could lapse"

    await asyncio.sleep(0.5)
    rows = await cluster.jobs()
    survivor_log = cluster.bots[survivor].log_text()
    for prompt, job_id in ids.items():
        assert len(world.files_for(job_id)) == 1, f"{prompt!r} delivered {len(world.files_for(job_id))}x"
        assert rows[job_id]["state"] == "delivered"
        assert len(service_creates(world, prompt)) == 1, f"{prompt!r}: its task was created again"
        assert rows[job_id]["lease_owner"] == f"framecast-shards-{survivor}"
        if jobs[prompt] == victim:
            assert f"job {job_id} taken over from a lapsed lease" in survivor_log
    _assert_within_budget(world)
    # The victim's members got their file where they asked for it.
    for prompt, it in its.items():
        message = await world.delivered(it, timeout=1)
        assert message.channel_id == world.channels[guild_of[prompt]].id
