"""One process on PostgreSQL (``DATABASE_URL``, no sharding) works like one on SQLite.

Videos and images are delivered, and a job killed mid-poll continues on the same service task at
once after a restart (the process keeps its lease owner). Skipped, saying why, without PostgreSQL
on 127.0.0.1:5432.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg

from tests.e2e.harness import StartWorld, service_creates
from tests.fakes.gen_service import TaskPlan


async def test_one_process_on_postgresql_without_shards_works_like_sqlite(
    pg_dsn: str,  # first: the database outlives the bot
    start: StartWorld,
) -> None:
    dsn = pg_dsn
    world = await start(extra_env={"DATABASE_URL": dsn})
    world.service.plans.append(("slow", TaskPlan(duration=2.0)))
    video = await world.video("a plain video on postgres", member=world.members[0][0])
    image = await world.image("a plain image on postgres", member=world.members[0][1])
    slow = await world.video("a slow video on postgres", member=world.members[0][2])
    await world.delivered(video)
    await world.delivered(image)
    slow_id = await world.job_id(slow)
    await world.service.wait_for(lambda: len(service_creates(world, "a slow video on postgres")) == 1)
    # A crash mid-poll, then a restart: the job continues on the same task, at once (same owner).
    await asyncio.sleep(0.3)
    await world.bot.kill()
    restarted = time.monotonic()
    await world.restart_bot()
    await world.delivered(slow, timeout=30)
    assert time.monotonic() - restarted < 15
    assert len(service_creates(world, "a slow video on postgres")) == 1
    assert len(world.files_for(slow_id)) == 1
    # The file is in Discord a moment before the job is recorded DELIVERED: allow that moment.
    deadline = time.monotonic() + 5
    while True:
        conn = await asyncpg.connect(dsn, timeout=5)
        try:
            rows = await conn.fetch("SELECT id, state, lease_owner FROM jobs ORDER BY id")
        finally:
            await conn.close()
        if [r["state"] for r in rows] == ["delivered"] * 3 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert [r["state"] for r in rows] == ["delivered"] * 3
    assert {r["lease_owner"] for r in rows} == {"framecast"}
