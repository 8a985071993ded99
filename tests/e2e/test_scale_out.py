"""Two sharded bot processes on PostgreSQL and Redis: one request budget, each job once, takeover.

Two real ``bot.py`` processes run shards 0 and 1 of 2 (``SHARD_COUNT=2``, ``SHARD_IDS=0`` / ``1``)
against one fake Discord (four guilds, two on each shard) and one fake service whose rate limit is
the bot's ``GEN_RATE_LIMIT``. They share a fresh PostgreSQL database (``DATABASE_URL``, from
tests/pg.py) and a Redis database (``REDIS_URL``, db 9, flushed before and after): the ``cluster``
fixture of tests/e2e/servers.py. Skipped, saying why, unless PostgreSQL answers on 127.0.0.1:5432 and
Redis on 127.0.0.1:6379.

* A burst of jobs across all four guilds: the service never sees more than N requests in any
  window, no 429, every job is delivered exactly once, and each process ran only its shards' jobs.
* ``kill -9`` of one process while its jobs run: once their leases lapse the other process takes
  them over and delivers each exactly once (through the stored interaction token), without
  creating their service tasks again.
"""

from __future__ import annotations

import asyncio
import time

from tests.e2e.harness import World, service_creates
from tests.e2e.servers import LEASE_SECONDS, RATE, SHARDS, SLOW, Cluster
from tests.fakes.gen_service import TaskPlan


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
