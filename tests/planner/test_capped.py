"""A service that caps the key's tasks at once: the planner learns the cap, holds it, probes it rarely.

A real store, budget, queues and planner on a ManualClock; the service is simulated here (a count
of running tasks and a cap), so a whole batch runs in milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from framecast.keys.shared_plan import KEY_PREFIX, SharedPlanState
from framecast.planner.shared import Pushback, Share, SharedView, summed
from framecast.planner.tuning import PlannerTuning
from framecast.service import TaskStatus
from framecast.values import Job
from framecast.values.service_requests import RefusalKind
from tests.fakes.clock import ManualClock
from tests.planner.rigs import Rig as PlannerRig
from tests.redis_server import REDIS_HOST, REDIS_PORT, requires_redis

PROBE_AFTER = PlannerTuning().probe_after

INTERVAL = 30.0
CONCURRENCY = RefusalKind.CONCURRENCY


class Rig(PlannerRig):
    """The planner rig, with tasks running on the simulated service."""

    async def running(self, n: int) -> list[Job]:
        """`n` tasks created and on the service."""
        jobs = [await self.job() for _ in range(n)]
        for job in jobs:
            self.planner.create_finished(ok=True)
            self.planner.pacer(job)
        return jobs


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with Rig.opened(tmp_path, interval=INTERVAL) as rig:
        yield rig


async def test_a_concurrency_refusal_holds_the_ceiling_at_the_running_count(rig: Rig) -> None:
    jobs = await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    assert rig.planner.ceiling() == 3 and not rig.planner.may_start(3)
    # Creates that go through at the cap (a task ended, the next took its place) do not climb
    # above it: each climb would be one more refusal.
    for job in jobs[:2]:
        await rig.planner.finished(job, completed=False)
        rig.planner.create_finished(ok=True)
        rig.planner.pacer(await rig.job())
        assert rig.planner.ceiling() == 3
    # A refusal at the same count again: held there, never below.
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    assert rig.planner.ceiling() == 3


async def test_a_rate_refusal_still_lowers_the_ceiling_and_climbs_back(rig: Rig) -> None:
    await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=RefusalKind.RATE)
    assert rig.planner.ceiling() == 3
    rig.planner.create_finished(ok=True)
    assert rig.planner.ceiling() == 4
    for _ in range(40):
        rig.planner.create_finished(ok=True)
    assert rig.planner.ceiling() is None  # lifted after enough creates went through


async def test_a_probe_above_the_cap_is_rare_and_a_refused_one_comes_twice_as_late(rig: Rig) -> None:
    await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    for _ in range(PROBE_AFTER - 1):
        rig.planner.create_finished(ok=True)
        assert rig.planner.ceiling() == 3
    rig.planner.create_finished(ok=True)
    assert rig.planner.ceiling() == 4  # one task above the cap may be tried now
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    assert rig.planner.ceiling() == 3
    for _ in range(2 * PROBE_AFTER - 1):
        rig.planner.create_finished(ok=True)
    assert rig.planner.ceiling() == 3
    rig.planner.create_finished(ok=True)
    assert rig.planner.ceiling() == 4


async def test_a_probe_the_service_accepts_raises_the_learned_cap(rig: Rig) -> None:
    await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    for _ in range(PROBE_AFTER):
        rig.planner.create_finished(ok=True)
    assert rig.planner.ceiling() == 4
    await rig.running(1)  # the probe went through: the service runs four of the key's tasks
    assert rig.planner.ceiling() == 4
    for _ in range(PROBE_AFTER - 1):
        rig.planner.create_finished(ok=True)
    assert rig.planner.ceiling() == 4  # held at the new cap, probed again only later


async def test_more_tasks_than_the_cap_seen_without_a_probe_do_not_raise_it(rig: Rig) -> None:
    await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    await rig.running(1)  # e.g. a job restored after a restart: no probe was due
    assert rig.planner.ceiling() == 3


async def test_a_refused_create_waits_for_a_task_to_end_not_a_timer(rig: Rig) -> None:
    jobs = await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    waiting = asyncio.create_task(rig.planner.after_refusal(0, 2.0))
    await rig.clock.advance(INTERVAL)  # far past the fallback: nothing ended, it still waits
    assert not waiting.done()
    await rig.planner.finished(jobs[0], completed=False)
    await asyncio.wait_for(waiting, 1.0)


async def test_a_refused_create_with_no_task_of_the_key_running_waits_the_fallback(rig: Rig) -> None:
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    waiting = asyncio.create_task(rig.planner.after_refusal(0, 2.0))
    await rig.clock.advance(1.0)
    assert not waiting.done()
    await rig.clock.advance(1.5)
    await asyncio.wait_for(waiting, 1.0)


async def test_a_cancelled_task_counts_against_the_cap_until_most_of_its_kind_would_have_ended(
    rig: Rig,
) -> None:
    jobs = await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    assert rig.planner.ceiling() == 3
    # Cancelled: no poll saw it end, and the service has no cancel call, so it may still run there.
    rig.planner.forget(jobs[0].id)
    assert rig.planner.ceiling() == 2 and not rig.planner.may_start(2)
    await rig.clock.advance(2 * INTERVAL)
    assert rig.planner.ceiling() == 2
    await rig.clock.advance(3600)  # far past what most of its kind take
    assert rig.planner.ceiling() == 3


async def test_after_the_longest_wait_one_refused_create_tries_again_not_all(rig: Rig) -> None:
    await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    refused = [await rig.job() for _ in range(3)]
    waiting = [asyncio.create_task(rig.planner.after_refusal(job.id, 2.0)) for job in refused]
    await asyncio.sleep(0)
    await rig.clock.advance(6 * INTERVAL)  # the longest gap between polls: no task seen ending
    for _ in range(10):
        await asyncio.sleep(0)
    assert [task.done() for task in waiting] == [True, False, False]
    rig.planner.create_sent(refused[0])  # tried, and refused again: the next longest wait, one more
    rig.planner.create_failed(refused[0].id, CONCURRENCY)
    await rig.clock.advance(6 * INTERVAL)
    for _ in range(10):
        await asyncio.sleep(0)
    assert [task.done() for task in waiting] == [True, True, False]
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)


async def test_a_task_polled_again_after_it_was_let_go_counts_once(rig: Rig) -> None:
    jobs = await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    rig.planner.forget(jobs[0].id)  # e.g. its job paused for a store outage, then resumed here
    rig.planner.pacer(jobs[0])
    assert rig.planner.ceiling() == 3


async def test_a_task_seen_failed_frees_its_place_at_once(rig: Rig) -> None:
    jobs = await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    rig.planner.pacer(jobs[0]).observed(TaskStatus(state="failed", error="boom"))
    rig.planner.forget(jobs[0].id)
    assert rig.planner.ceiling() == 3


async def test_a_task_created_and_cancelled_before_its_first_poll_still_counts(rig: Rig) -> None:
    await rig.running(2)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    assert rig.planner.ceiling() == 2
    created = await rig.job()
    rig.planner.create_through(created)  # on the service; cancelled before the runner polled it
    rig.planner.release(created.id)
    assert rig.planner.ceiling() == 1
    # A refusal meanwhile learns the cap from every task the service runs, the cancelled one too.
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    await rig.clock.advance(3600)
    assert rig.planner.ceiling() == 3


async def test_one_refused_create_is_woken_for_each_task_that_ends(rig: Rig) -> None:
    jobs = await rig.running(3)
    rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
    refused = [await rig.job() for _ in range(3)]
    waiting = [asyncio.create_task(rig.planner.after_refusal(job.id, 2.0)) for job in refused]

    async def settled() -> list[bool]:
        for _ in range(10):  # let every woken waiter return
            await asyncio.sleep(0)
        return [task.done() for task in waiting]

    assert await settled() == [False, False, False]
    await rig.planner.finished(jobs[0], completed=True)
    # The first to wait, alone: the others would only be refused again.
    assert await settled() == [True, False, False]
    rig.planner.create_deferred(999)  # any other change: the room is the woken one's until it sends
    assert await settled() == [True, False, False]
    rig.planner.create_sent(refused[0])
    rig.planner.create_through(refused[0])
    rig.planner.pacer(refused[0])
    await rig.planner.finished(jobs[1], completed=True)
    assert await settled() == [True, True, False]
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)


async def test_the_learned_cap_is_shared_with_other_processes_as_json() -> None:
    share = Share(running=3, pushback=Pushback(ceiling=3.0, successes=5, rev=4, cap=True, probe_after=24))
    assert Share.from_json(share.to_json()) == share
    # A field written by a version that knew no caps reads as a plain (rate) pushback.
    old = Share.from_json('{"d":1.0,"r":3,"c":3.0,"s":1,"v":2}')
    assert not old.pushback.cap and old.pushback.limit() == 3.0


async def simulate(
    rig: Rig, *, jobs: int, cap: int, raise_to: int | None = None, seed: int = 1
) -> tuple[int, int, int]:
    """Run `jobs` videos through the planner against a service running at most `cap` of them at once.

    The scheduler's part: start a job while the planner admits one; a refused create waits for a
    task to end. With `raise_to`, the service's cap rises to that halfway through. Returns
    (creates, refusals, the most tasks the service ran at once in the second half).
    """
    rng = random.Random(seed)
    queue = [await rig.job() for _ in range(jobs)]
    on_service: list[tuple[float, Job]] = []  # (end time, job)
    refused: Job | None = None
    creates = refusals = most_late = done = 0

    def create(job: Job) -> bool:
        nonlocal creates, refusals
        creates += 1
        if len(on_service) >= cap:
            refusals += 1
            rig.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)
            return False
        rig.planner.create_finished(ok=True)
        rig.planner.pacer(job)
        on_service.append((rig.clock.monotonic() + rng.uniform(120, 240), job))
        return True

    while done < jobs:
        if refused is not None and create(refused):
            refused = None
        while refused is None and queue and rig.planner.may_start(len(on_service)):
            job = queue.pop(0)
            if not create(job):
                refused = job
        if raise_to is not None and done >= jobs // 2:
            cap = raise_to
            most_late = max(most_late, len(on_service))
        on_service.sort(key=lambda item: item[0])
        end, job = on_service.pop(0)
        await rig.clock.advance(max(0.0, end - rig.clock.monotonic()))
        await rig.planner.finished(job, completed=False)
        done += 1
    return creates, refusals, most_late


async def test_a_capped_batch_is_refused_on_at_most_a_tenth_of_its_creates(rig: Rig) -> None:
    creates, refusals, _ = await simulate(rig, jobs=48, cap=3)
    assert creates == 48 + refusals
    assert refusals <= 0.10 * creates


async def test_a_cap_the_service_raises_is_found_by_a_probe(rig: Rig) -> None:
    creates, refusals, most_late = await simulate(rig, jobs=160, cap=3, raise_to=5)
    assert most_late == 5
    assert refusals <= 0.10 * creates


@requires_redis
async def test_a_cap_learned_in_one_process_holds_the_other_at_it_too(tmp_path: Path) -> None:
    key_id = f"test-{uuid.uuid4().hex[:12]}"
    redis = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_timeout=1.0)
    clock = ManualClock()
    try:
        async with contextlib.AsyncExitStack() as processes:
            states = [
                SharedPlanState(
                    redis=redis, key_id=key_id, clock=clock, window=60.0, read=summed, nobody=SharedView()
                )
                for _ in range(2)
            ]
            rigs = [
                await processes.enter_async_context(
                    Rig.opened(tmp_path, name=f"p{n}.sqlite3", interval=INTERVAL, shared=state, clock=clock)
                )
                for n, state in enumerate(states)
            ]
            for state in states:  # closed before the rigs, as each process closes its planner's parts
                processes.push_async_callback(state.aclose)
            a, b = rigs
            await a.running(2)
            await b.running(1)
            for state in (*states, *states):
                assert await state.refresh()
            a.planner.create_finished(ok=False, pushed_back=True, refusal=CONCURRENCY)  # 3 on the key
            for state in (*states, *states):
                assert await state.refresh()
            assert b.planner.ceiling() == 1 and not b.planner.may_start(1)  # 3 less A's 2
            # B's creates that go through keep the key-wide cap where it is (no climb above it).
            for _ in range(3):
                b.planner.create_finished(ok=True)
            for state in (*states, *states):
                assert await state.refresh()
            assert a.planner.ceiling() == 2 and b.planner.ceiling() == 1
    finally:
        await redis.delete(f"{KEY_PREFIX}{key_id}")
        await redis.aclose()
