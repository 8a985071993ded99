"""The job store fails under running jobs: PostgreSQL cut or silent, an SQLite disk full or read-only.

The real bot runs with its store behind a fault: PostgreSQL through a TCP relay the test cuts (every
connection reset, new ones refused) or blackholes (nothing passes), and SQLite on a small tmpfs the
test fills and frees, or makes refuse new writes. Each test checks that a store that cannot answer
is a pause: every job is delivered exactly once after it (none lost, none failed, none created
twice), and the outage is one WARNING and one INFO in the log, without a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import (
    StartWorld,
    World,
    hold_route,
    service_creates,
    status_of,
    task_for,
    wait_log,
)
from tests.e2e.servers import Relay
from tests.fakes.gen_service import RecordedRequest, TaskPlan

FOREVER = 10**9  # a TaskPlan that stays pending until the test lets it finish
OUTAGE_BEGINS = "the job store does not answer"
OUTAGE_ENDS = "the job store answers again"
# Leases renewed every second: the upkeep's store calls see an outage's end soon after the last job.
ENV = {"GEN_MAX_RUNNING": "2", "MEMBER_JOB_LIMIT": "5", "LEASE_SECONDS": "3"}


def finish(world: World, prompt: str) -> None:
    """Let the fake task of `prompt` complete at its next poll."""
    task_for(world, prompt).plan = TaskPlan(polls=0)


def when_created(world: World, prompt: str, then: Callable[[], Awaitable[None]]) -> asyncio.Event:
    """Run `then` once the service accepted the create of `prompt`, before the bot hears its answer."""
    done = asyncio.Event()

    async def hook(record: RecordedRequest) -> None:
        body = record.json if isinstance(record.json, dict) else {}
        if not done.is_set() and record.status == 200 and body.get("prompt") == prompt:
            await then()
            done.set()

    world.service.before_answer = hook
    return done


async def outage_met(world: World, job_ids: list[int], timeout: float = 10.0) -> None:
    """Wait until each of `job_ids` waits for the store (or, in code that does not pause, a job's
    runner or the dispatcher gave up): the log says so, and nothing else would notify the test."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    waiting = [f"job {job_id} waits for the job store" for job_id in job_ids]
    while True:
        log = world.bot.log_text()
        if all(sign in log for sign in waiting) or "unexpected error" in log or "crashed" in log:
            return
        assert loop.time() < deadline, f"jobs {job_ids} did not meet the outage within {timeout:g} s"
        await asyncio.sleep(0.02)


async def assert_quiet_outage(world: World, outages: int = 1) -> None:
    """The outage was logged as one WARNING when it began and one INFO when it ended, no traceback.

    The end is seen at the first store call after a quiet moment: a job's, or the leases' upkeep
    (every third of ``LEASE_SECONDS``).
    """
    await wait_log(world, OUTAGE_ENDS, timeout=10)
    log = world.bot.log_text()
    assert "Traceback" not in log, log[log.find("Traceback") - 2000 : log.find("Traceback") + 3000]
    assert log.count(OUTAGE_BEGINS) == outages, log.count(OUTAGE_BEGINS)
    assert log.count(OUTAGE_ENDS) == outages, log.count(OUTAGE_ENDS)
    for words in ("unexpected error", "runner crashed", "dispatcher crashed", "lease upkeep failed"):
        assert words not in log, words


async def delivered_once(world: World, its: dict[str, Any]) -> None:
    """Every job of `its` (prompt -> interaction) delivered once, created once, never shown failed."""
    for it in its.values():
        await world.delivered(it, timeout=30)
    for prompt, it in its.items():
        job_id = await world.job_id(it)
        assert len(world.files_for(job_id)) == 1, f"{prompt!r} delivered {len(world.files_for(job_id))}x"
        assert len(service_creates(world, prompt)) == 1, f"{prompt!r}: its task was created again"
        statuses = [h for h in it.original.history if "❌" in str(h.get("payload"))]
        assert statuses == [], f"{prompt!r} was shown failed"
        await it.wait_original(lambda m: status_of(m).startswith("✅"))


# -- PostgreSQL ------------------------------------------------------------------------------------


async def test_a_postgresql_cut_pauses_running_queued_and_just_created_jobs_and_loses_none(
    pg_relay: tuple[str, Relay], start: StartWorld
) -> None:
    dsn, relay = pg_relay
    world = await start(extra_env={"DATABASE_URL": dsn, **ENV})
    world.service.plans.append(("held:", TaskPlan(polls=FOREVER)))
    polling, first = "held: a lighthouse in fog", "held: a tram at dusk"
    its = {polling: await world.video(polling), first: await world.video(first, member=world.bob)}
    await world.service.wait_for(lambda: all(service_creates(world, p) for p in its), timeout=10)
    # Two slots taken: these wait in the queue, the first of them to be created as the store goes.
    saved, queued = "cut: a kite over dunes", ["queued: a fox in snow", "queued: a boat at night"]
    for prompt in (saved, *queued):
        its[prompt] = await world.video(prompt, member=world.members[0][2])
        await its[prompt].wait_original(lambda m: status_of(m).startswith("⏳"))
    cut = when_created(world, saved, relay.cut)
    finish(world, first)  # its slot frees: the next create is answered into a cut database
    await asyncio.wait_for(cut.wait(), 15)
    # The progress write after a poll, and the save of the new task id, meet the outage.
    await outage_met(world, [await world.job_id(its[polling]), await world.job_id(its[saved])])
    finish(world, polling)
    await relay.restore()
    await delivered_once(world, its)
    await assert_quiet_outage(world)


async def test_a_silent_postgresql_network_pauses_running_jobs_and_loses_none(
    pg_relay: tuple[str, Relay], start: StartWorld
) -> None:
    dsn, relay = pg_relay
    world = await start(extra_env={"DATABASE_URL": dsn, **ENV, "GEN_MAX_RUNNING": "3"})
    world.service.plans.append(("held:", TaskPlan(polls=FOREVER)))
    prompts = ["held: a kite in fog", "held: a tram in rain", "held: a ship in ice"]
    its = {p: await world.video(p, member=m) for p, m in zip(prompts, world.members[0], strict=True)}
    await world.service.wait_for(lambda: all(service_creates(world, p) for p in prompts), timeout=10)
    relay.blackhole()  # accepted, never answered: nothing fails at once, calls just get no answer
    await outage_met(world, [await world.job_id(it) for it in its.values()], timeout=30)
    for prompt in prompts:
        finish(world, prompt)
    await relay.restore()
    await delivered_once(world, its)
    await assert_quiet_outage(world)


# -- SQLite on a small disk --------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs where the bot keeps its database and saved results (``tmp_path/data``)."""
    disk = tmp_path / "data"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    """Fill `disk` to the last byte; returns the file to delete to free it."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while out.write(b"\0" * size):
                    pass
    return filler


async def test_a_full_disk_under_sqlite_pauses_running_jobs_and_inline_images_and_loses_none(
    small_disk: Path, start: StartWorld
) -> None:
    world = await start(extra_env={**ENV, "GEN_MAX_RUNNING": "4"})
    world.service.plans.append(("held:", TaskPlan(polls=FOREVER)))
    world.service.image_shape = "data_b64"  # images come back inline: the bot saves them to disk
    running = ["held: a lighthouse in fog", "held: a tram at dusk"]
    its = {p: await world.video(p, member=m) for p, m in zip(running, world.members[0], strict=False)}
    await world.service.wait_for(lambda: all(service_creates(world, p) for p in running), timeout=10)
    image = "an inline picture of a full disk"
    filler: list[Path] = []

    async def full() -> None:
        filler.append(await asyncio.to_thread(fill, small_disk))

    filled = when_created(world, image, full)
    its[image] = await world.image(image, member=world.members[0][2])
    await asyncio.wait_for(filled.wait(), 15)
    # The progress writes of both running jobs, and the saved image (ENOSPC), meet the full disk.
    await outage_met(world, [await world.job_id(it) for it in its.values()])
    for prompt in running:
        finish(world, prompt)
    filler[0].unlink()
    await delivered_once(world, its)
    await assert_quiet_outage(world)


async def test_a_read_only_results_folder_pauses_an_inline_image_which_is_created_once(
    small_disk: Path, start: StartWorld
) -> None:
    # The results folder turns read-only (a bind mount of itself, remounted read-only) just as the
    # service answers an inline image: the bot cannot keep it (EROFS) until the folder is writable.
    results = small_disk / "results"
    results.mkdir(mode=0o700)
    world = await start(extra_env=ENV)
    world.service.image_shape = "data_b64"
    image = "an inline picture for a read-only disk"

    def mount_read_only() -> None:
        for args in (["--bind", str(results), str(results)], ["-o", "remount,bind,ro", str(results)]):
            subprocess.run(["mount", *args], check=True)

    async def read_only() -> None:
        await asyncio.to_thread(mount_read_only)

    refused = when_created(world, image, read_only)
    its = {image: await world.image(image)}
    try:
        await asyncio.wait_for(refused.wait(), 15)
        await outage_met(world, [await world.job_id(its[image])])
    finally:
        await asyncio.to_thread(subprocess.run, ["umount", str(results)], check=False)
    await delivered_once(world, its)
    await assert_quiet_outage(world)
    assert "EROFS" in world.bot.log_text()


async def test_a_postgresql_cut_between_the_upload_and_its_record_delivers_once(
    pg_relay: tuple[str, Relay], start: StartWorld
) -> None:
    # Discord took the file; before the bot hears so, the store goes: the DELIVERED record (and the
    # chat side's bookkeeping) must wait for it, and the upload must not be made again.
    dsn, relay = pg_relay
    world = await start(extra_env={"DATABASE_URL": dsn, **ENV})
    release, held = hold_route(
        world.discord, "PATCH", "/webhooks/{app_id}/{token}/messages/{message_id}", lambda c: bool(c.uploads)
    )
    prompt = "cut: a lantern on a pier"
    its = {prompt: await world.video(prompt)}
    await world.discord.wait_for(lambda: bool(held), timeout=20, what="the upload")
    await relay.cut()
    release.set()
    await outage_met(world, [await world.job_id(its[prompt])])
    await relay.restore()
    await delivered_once(world, its)
    await wait_log(world, f"job {await world.job_id(its[prompt])}: -> delivered", timeout=20)
    await assert_quiet_outage(world)


async def test_a_postgresql_cut_while_discord_rate_limits_the_upload_delivers_once(
    pg_relay: tuple[str, Relay], start: StartWorld
) -> None:
    # Two dependencies at once: the store goes as the result is ready, and Discord answers the
    # upload with 429s past discord.py's own retries. Neither fails the job; the file lands once.
    dsn, relay = pg_relay
    world = await start(extra_env={"DATABASE_URL": dsn, **ENV})
    world.discord.rate_limit_next("PATCH /api/v10/webhooks", count=7, retry_after=0.05, uploads_only=True)
    prompt = "held: a heron at dawn"
    world.service.plans.append(("held:", TaskPlan(polls=FOREVER)))
    its = {prompt: await world.video(prompt)}
    await world.service.wait_for(lambda: bool(service_creates(world, prompt)), timeout=10)
    finish(world, prompt)
    await world.discord.wait_for(
        lambda: any(r.status == 429 and r.files for r in world.discord.requests), timeout=20, what="a 429"
    )
    await relay.cut()
    await outage_met(world, [await world.job_id(its[prompt])], timeout=30)
    await relay.restore()
    await delivered_once(world, its)
    await wait_log(world, f"job {await world.job_id(its[prompt])}: -> delivered", timeout=30)
    await assert_quiet_outage(world)
