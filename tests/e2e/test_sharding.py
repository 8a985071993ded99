"""Two sharded processes when one stops, restarts, dies mid-upload, or is started twice.

SIGTERM of one shard stops it cleanly and the other takes over its jobs; a restarted shard gets its
own jobs back before their leases lapse; a job whose upload was under way when its process was
killed is delivered exactly once by the survivor; a second process on the same shard leaves the
first one's jobs alone. Uses the ``cluster`` fixture (tests/e2e/servers.py); skipped, saying why,
without PostgreSQL and Redis. (The burst and ``kill -9`` cases: tests/e2e/test_scale_out.py.)
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.e2e.harness import BotProcess, hold_route, service_creates
from tests.e2e.servers import SLOW, Cluster
from tests.fakes.gen_service import TaskPlan


async def _slow_jobs_on(cl: Cluster, shard: int) -> dict[str, int]:
    """One slow job in each guild of `shard`, RUNNING on the service: prompt -> job id."""
    world = cl.world
    world.service.plans.append(("slow", TaskPlan(duration=SLOW)))
    prompts = {f"slow review job on guild {g}": g for g in cl.guilds_of(shard)}
    ids = {}
    for prompt, g in prompts.items():
        ids[prompt] = await world.job_id(await world.video(prompt, guild=g))
    await world.service.wait_for(
        lambda: all(len(service_creates(world, p)) == 1 for p in prompts), timeout=30
    )
    deadline = time.monotonic() + 5
    while any(row["state"] != "running" for j, row in (await cl.jobs()).items() if j in ids.values()):
        assert time.monotonic() < deadline, "the jobs never showed RUNNING"
        await asyncio.sleep(0.05)
    return ids


async def test_sigterm_of_one_shard_stops_cleanly_and_the_other_takes_over(cluster: Cluster) -> None:
    world = cluster.world
    ids = await _slow_jobs_on(cluster, 1)
    began = time.monotonic()
    code = await cluster.bots[1].terminate()
    assert code == 0 and time.monotonic() - began < 10
    if ids:
        await world.discord.wait_for(lambda: all(world.files_for(j) for j in ids.values()), timeout=45)
    await asyncio.sleep(0.5)
    rows = await cluster.jobs()
    for prompt, job_id in ids.items():
        assert len(world.files_for(job_id)) == 1
        assert len(service_creates(world, prompt)) == 1
        assert rows[job_id]["state"] == "delivered" and rows[job_id]["lease_owner"] == "framecast-shards-0"


# A process starts in a few seconds (more on a loaded machine): its leases must outlast that.
@pytest.mark.lease_seconds(20)
async def test_a_restarted_shard_gets_its_own_jobs_back_before_anyone_takes_them(cluster: Cluster) -> None:
    world = cluster.world
    ids = await _slow_jobs_on(cluster, 1)
    assert await cluster.bots[1].terminate() == 0
    mark = world.discord.identify_count
    await cluster.bots[1].start()
    await world.discord.wait_ready(timeout=30, after=mark)
    if ids:
        await world.discord.wait_for(lambda: all(world.files_for(j) for j in ids.values()), timeout=45)
    await asyncio.sleep(0.5)
    rows = await cluster.jobs()
    for prompt, job_id in ids.items():
        assert len(world.files_for(job_id)) == 1
        assert len(service_creates(world, prompt)) == 1
        assert rows[job_id]["lease_owner"] == "framecast-shards-1"
    assert "taken over from a lapsed lease" not in cluster.bots[0].log_text()


async def test_takeover_of_a_job_killed_mid_upload_delivers_it_exactly_once(cluster: Cluster) -> None:
    world = cluster.world
    victim, survivor = 1, 0
    g = cluster.guilds_of(victim)[0]
    release, held = hold_route(
        world.discord,
        "PATCH",
        "/webhooks/{app_id}/{token}/messages/{message_id}",
        when=lambda call: bool(call.uploads),
    )
    it = await world.video("a job cut off mid upload", guild=g)
    job_id = await world.job_id(it)
    await world.discord.wait_for(lambda: held, timeout=20, what="the upload to be stored")
    assert len(world.files_for(job_id)) == 1
    await cluster.bots[victim].kill()
    release.set()
    assert (await cluster.jobs())[job_id]["state"] == "delivering"
    deadline = time.monotonic() + 30
    while (await cluster.jobs())[job_id]["state"] != "delivered":
        assert time.monotonic() < deadline, "the survivor never finished the job"
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    assert len(world.files_for(job_id)) == 1
    assert len(service_creates(world, "a job cut off mid upload")) == 1
    assert (await cluster.jobs())[job_id]["lease_owner"] == f"framecast-shards-{survivor}"
    assert f"job {job_id} taken over from a lapsed lease" in cluster.bots[survivor].log_text()


async def test_a_second_process_on_the_same_shard_leaves_the_first_ones_jobs_alone(
    cluster: Cluster,
    tmp_path: Path,
) -> None:
    world = cluster.world
    ids = await _slow_jobs_on(cluster, 1)
    twin = BotProcess(
        {**cluster.bots[1].env, "DATABASE_PATH": str(tmp_path / "twin" / "f.sqlite3")}, tmp_path / "twin.log"
    )
    await twin.start()
    try:
        await wait_log_of(twin, "scheduler started with", timeout=20)
        if ids:
            await world.discord.wait_for(lambda: all(world.files_for(j) for j in ids.values()), timeout=45)
        await asyncio.sleep(0.5)
        for prompt, job_id in ids.items():
            assert len(world.files_for(job_id)) == 1
            assert len(service_creates(world, prompt)) == 1
        # The twin must not run jobs a live process holds (or must refuse to start at all).
        assert twin.running is False or "scheduler started with 0 unfinished job(s)" in twin.log_text()
    finally:
        if twin.running:
            await twin.terminate()


async def wait_log_of(bot: BotProcess, text: str, timeout: float) -> None:
    """Wait until `bot` logged `text` (or stopped)."""
    deadline = time.monotonic() + timeout
    while text not in bot.log_text():
        if not bot.running:
            return
        assert time.monotonic() < deadline, f"{text!r} never logged"
        await asyncio.sleep(0.05)
