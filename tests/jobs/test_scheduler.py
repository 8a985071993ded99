"""The scheduler: per-guild FIFO, round-robin across guilds, slots, positions, cancel, restore, shutdown.

A real :class:`Store` (SQLite on ``tmp_path``) and a stand-in runner. The stand-in records the order
in which jobs are started and waits for the test to tell each job what to do next (release its
service slot, finish, crash), so every step is driven by events: no sleeps, no timing assumptions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc

from framecast.clock import SystemClock
from framecast.jobs.outage import StoreOutage
from framecast.jobs.runner import ShuttingDown
from framecast.jobs.scheduler import AccountAdmission, Admission, CancelOutcome, FixedAdmission, Scheduler
from framecast.storage import Store
from framecast.values import Job, JobKind, JobState, NewJob
from framecast.values.reasons import ErrorCode

S = JobState
GUILD_A, GUILD_B, GUILD_C = 1001, 1002, 1003
WAIT = 5.0  # upper bound for any single wait: a hang fails the test instead of blocking the run


class Signal:
    """Something changed: waiters re-check their condition (a sync `fire`, usable from listeners)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async def _wait() -> None:
            while not predicate():
                self._event.clear()
                await self._event.wait()

        await asyncio.wait_for(_wait(), WAIT)


class StandInRunner:
    """What the scheduler needs from a JobRunner, driven step by step by the test.

    ``run()`` records the start, moves a freshly queued job to RUNNING in the store (as the real runner
    does before it waits on the service), then obeys commands sent with :meth:`release`,
    :meth:`finish` and :meth:`crash`.
    """

    def __init__(self, store: Store, signal: Signal) -> None:
        self.store = store
        self.signal = signal
        self.started: list[int] = []
        self.ended: list[int] = []
        self.cancelled: list[int] = []
        self.critical: set[int] = set()
        self.shutdown_begun = False
        self.waiting_for_critical = asyncio.Event()
        self.concurrent_holders_seen: list[int] = []  # slot holders (per the runner) at each start
        self._holding: set[int] = set()
        self._commands: dict[int, asyncio.Queue[str]] = {}
        #: Called right after a job released its service slot, in the same step (no await between).
        self.after_release: Callable[[], None] | None = None

    # -- the interface the scheduler uses -----------------------------------------------------------
    async def run(self, job: Job, *, release_service_slot: Callable[[], None]) -> None:
        self.started.append(job.id)
        if job.state in (S.QUEUED, S.SUBMITTING, S.RUNNING):
            self._holding.add(job.id)
        self.concurrent_holders_seen.append(len(self._holding))
        self.signal.fire()
        commands = self._queue(job.id)
        try:
            if job.state is S.QUEUED:
                await self.store.transition(job.id, S.SUBMITTING, expect=S.QUEUED)
                await self.store.transition(job.id, S.RUNNING, expect=S.SUBMITTING, task_id=f"task-{job.id}")
            while True:
                command = await commands.get()
                if command == "release":
                    await self.store.transition(job.id, S.DELIVERING, expect=S.RUNNING)
                    self._holding.discard(job.id)
                    release_service_slot()
                    if self.after_release is not None:
                        self.after_release()
                elif command == "finish":
                    current = await self.store.get(job.id)
                    assert current is not None
                    if current.state is S.RUNNING:
                        await self.store.transition(job.id, S.DELIVERING, expect=S.RUNNING)
                    await self.store.transition(job.id, S.DELIVERED, expect=S.DELIVERING)
                    return
                elif command == "crash":
                    raise RuntimeError(f"runner exploded on job {job.id}")
                elif command == "leave_critical":
                    self.critical.discard(job.id)
                    self.signal.fire()
                    if self.shutdown_begun:
                        raise ShuttingDown()
        except asyncio.CancelledError:
            self.cancelled.append(job.id)
            raise
        finally:
            self._holding.discard(job.id)
            self.ended.append(job.id)
            self.signal.fire()

    def begin_shutdown(self) -> None:
        self.shutdown_begun = True

    def in_critical_section(self, job_id: int) -> bool:
        return job_id in self.critical

    async def wait_critical_done(self, ids: set[int]) -> None:
        self.waiting_for_critical.set()
        await self.signal.wait_for(lambda: not (ids & self.critical))

    # -- what the scheduler let happen ---------------------------------------------------------------
    def is_running(self, job_id: int) -> bool:
        """The scheduler started the job and its run has not ended."""
        return job_id in self.started and job_id not in self.ended

    @property
    def holding(self) -> int:
        """Jobs started by the scheduler that still occupy a service slot."""
        return len(self._holding)

    # -- test controls ------------------------------------------------------------------------------
    def release(self, job_id: int) -> None:
        self._queue(job_id).put_nowait("release")

    def finish(self, job_id: int) -> None:
        self._queue(job_id).put_nowait("finish")

    def crash(self, job_id: int) -> None:
        self._queue(job_id).put_nowait("crash")

    def leave_critical(self, job_id: int) -> None:
        self._queue(job_id).put_nowait("leave_critical")

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        await self.signal.wait_for(predicate)

    async def wait_started(self, count: int) -> None:
        await self.wait_for(lambda: len(self.started) >= count)

    async def wait_ended(self, job_id: int) -> None:
        await self.wait_for(lambda: job_id in self.ended)

    async def finish_and_wait(self, job_id: int) -> None:
        self.finish(job_id)
        await self.wait_ended(job_id)

    # -- internals ----------------------------------------------------------------------------------
    def _queue(self, job_id: int) -> asyncio.Queue[str]:
        return self._commands.setdefault(job_id, asyncio.Queue())


# ---------------------------------------------------------------------- helpers / fixtures


def new_job(guild: int, user: int = 7, prompt: str = "a cat") -> NewJob:
    return NewJob(
        kind=JobKind.VIDEO,
        guild_id=guild,
        channel_id=guild * 10,
        user_id=user,
        locale="en-US",
        params={
            "model": "svc-video-v2.0",
            "prompt": prompt,
            "width": 1152,
            "height": 768,
            "num_frames": 121,
            "frame_rate": 24,
            "seconds": 5,
        },
    )


class Harness:
    """A real store, the stand-in runner, and a view of every job's state fed by the store's listener."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.signal = Signal()
        self.runner = StandInRunner(store, self.signal)
        self.positions: list[tuple[int, list[int]]] = []
        self.states: dict[int, JobState] = {}
        self.scheduler: Scheduler | None = None
        store.subscribe(self._on_job)

    def _on_job(self, job: Job) -> None:
        self.states[job.id] = job.state
        self.signal.fire()

    def make(self, max_running: int | AccountAdmission) -> Scheduler:
        self.scheduler = Scheduler(
            store=self.store,
            runner=self.runner,
            admission=max_running,
            on_positions_changed=lambda guild, ids: self.positions.append((guild, list(ids))),
        )
        return self.scheduler

    async def add(self, guild: int, user: int = 7) -> Job:
        return await self.store.add(new_job(guild, user), member_limit=None, guild_cap=None)

    async def add_many(self, guilds: Iterable[int]) -> list[Job]:
        return [await self.add(g) for g in guilds]

    async def wait_state(self, job_id: int, state: JobState) -> None:
        await self.signal.wait_for(lambda: self.states.get(job_id) is state)

    async def running_job(self, guild: int = GUILD_A) -> Job:
        """Submit one job and wait until the stand-in runner has moved it to RUNNING."""
        assert self.scheduler is not None
        job = await self.add(guild)
        self.scheduler.submit(job)
        await self.wait_state(job.id, S.RUNNING)
        return job

    async def flush(self) -> None:
        """Give the dispatcher its chance to act: two round trips through the store's worker thread."""
        for _ in range(2):
            await self.store.get(0)


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    store = await Store.open(tmp_path / "db.sqlite3")
    harness = Harness(store)
    try:
        yield harness
    finally:
        if harness.scheduler is not None:
            await harness.scheduler.close(timeout=1.0)
        await store.close()


async def state_of(store: Store, job_id: int) -> JobState:
    job = await store.get(job_id)
    assert job is not None
    return job.state


# ---------------------------------------------------------------------- ordering and slots


async def test_jobs_of_one_guild_start_in_fifo_order(h: Harness) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    jobs = await h.add_many([GUILD_A] * 5)
    for job in jobs:
        scheduler.submit(job)
    for n in range(1, 6):
        await h.runner.wait_started(n)
        await h.runner.finish_and_wait(h.runner.started[-1])
    assert h.runner.started == [j.id for j in jobs]


async def test_fifo_holds_with_several_slots(h: Harness) -> None:
    scheduler = h.make(max_running=3)
    await scheduler.start()
    jobs = await h.add_many([GUILD_A] * 6)
    for job in jobs:
        scheduler.submit(job)
    await h.runner.wait_started(3)
    assert h.runner.started == [j.id for j in jobs[:3]]
    for job in jobs[:3]:
        await h.runner.finish_and_wait(job.id)
    await h.runner.wait_started(6)
    assert h.runner.started == [j.id for j in jobs]


async def test_round_robin_across_guilds(h: Harness) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    a = await h.add_many([GUILD_A] * 4)
    b = await h.add_many([GUILD_B] * 2)
    c = await h.add_many([GUILD_C])
    for job in a + b + c:  # no await in between: the dispatcher sees all seven at once
        scheduler.submit(job)
    for n in range(1, 8):
        await h.runner.wait_started(n)
        await h.runner.finish_and_wait(h.runner.started[-1])
    expected = [a[0], b[0], c[0], a[1], b[1], a[2], a[3]]
    assert h.runner.started == [j.id for j in expected]


async def test_late_guild_never_waits_behind_the_backlog(h: Harness) -> None:
    """The guarantee the e2e fairness test relies on: at most one more job of the busy guild."""
    scheduler = h.make(max_running=2)
    await scheduler.start()
    a = await h.add_many([GUILD_A] * 10)
    for job in a:
        scheduler.submit(job)
    await h.runner.wait_started(2)
    b = await h.add(GUILD_B)
    scheduler.submit(b)
    assert scheduler.position(b.id) == 1
    while b.id not in h.runner.started:
        oldest = next(j for j in h.runner.started if j not in h.runner.ended)
        await h.runner.finish_and_wait(oldest)
        await h.runner.wait_for(lambda: len(h.runner.started) - len(h.runner.ended) == 2)
    # The two running when B arrived, then at most one more of A's.
    assert h.runner.started.index(b.id) <= 3, h.runner.started


async def test_late_guild_starts_in_the_next_free_slot(h: Harness) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    a = await h.add_many([GUILD_A] * 10)
    for job in a:
        scheduler.submit(job)
    await h.runner.wait_started(1)
    b = await h.add(GUILD_B)
    scheduler.submit(b)
    await h.runner.finish_and_wait(a[0].id)  # the first slot that frees...
    await h.runner.wait_started(2)
    assert h.runner.started == [a[0].id, b.id]  # ...goes to the guild that has had no turn yet


async def test_never_more_than_max_running_hold_a_slot(h: Harness) -> None:
    scheduler = h.make(max_running=2)
    await scheduler.start()
    jobs = await h.add_many([GUILD_A, GUILD_B, GUILD_A, GUILD_C, GUILD_B, GUILD_A, GUILD_C])
    for job in jobs:
        scheduler.submit(job)
    await h.runner.wait_started(2)
    await h.flush()
    assert h.runner.started == [jobs[0].id, jobs[1].id]
    assert h.runner.holding == 2
    # Nothing beyond the two slots was taken off the queues: every other job keeps its place.
    assert [scheduler.position(j.id) for j in jobs[2:]] == [1, 1, 1, 2, 2]
    started, ended = h.runner.started, h.runner.ended
    for _ in jobs:
        await h.runner.wait_for(lambda: len(started) - len(ended) == min(2, len(jobs) - len(ended)))
        assert h.runner.holding <= 2
        victim = next(j for j in started if j not in ended)
        await h.runner.finish_and_wait(victim)
    assert sorted(started) == sorted(j.id for j in jobs)
    assert max(h.runner.concurrent_holders_seen) == 2
    assert h.runner.holding == 0
    assert all(h.states[j.id] is S.DELIVERED for j in jobs)


async def test_releasing_the_slot_lets_the_next_job_start_while_delivering(h: Harness) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    first, second = await h.add_many([GUILD_A, GUILD_A])
    scheduler.submit(first)
    scheduler.submit(second)
    await h.wait_state(first.id, S.RUNNING)
    assert h.runner.started == [first.id]
    h.runner.release(first.id)  # first moves to DELIVERING and gives the service slot back
    await h.runner.wait_started(2)
    assert h.runner.started == [first.id, second.id]
    assert first.id not in h.runner.ended  # still delivering
    assert h.runner.is_running(first.id) and h.runner.is_running(second.id)
    assert h.runner.holding == 1  # only `second` holds a slot
    await h.runner.finish_and_wait(first.id)
    await h.runner.finish_and_wait(second.id)
    assert h.runner.holding == 0
    assert not h.runner.is_running(first.id)


# ---------------------------------------------------------------------- positions


async def test_positions_are_per_guild_and_move_with_the_queue(h: Harness) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    blocker = await h.running_job(GUILD_C)
    a1, a2, b1, a3 = await h.add_many([GUILD_A, GUILD_A, GUILD_B, GUILD_A])
    assert [scheduler.submit(j) for j in (a1, a2, b1, a3)] == [1, 2, 1, 3]
    assert [scheduler.position(j.id) for j in (a1, a2, b1, a3)] == [1, 2, 1, 3]
    h.positions.clear()

    await h.runner.finish_and_wait(blocker.id)  # the slot goes to the next guild in turn: A
    await h.runner.wait_started(2)
    assert h.runner.started[-1] == a1.id
    assert (GUILD_A, [a2.id, a3.id]) in h.positions
    assert scheduler.position(a2.id) == 1
    assert scheduler.position(a3.id) == 2
    assert scheduler.position(b1.id) == 1

    await h.wait_state(a1.id, S.RUNNING)
    await h.runner.finish_and_wait(a1.id)  # then B
    await h.runner.wait_started(3)
    assert h.runner.started[-1] == b1.id
    assert h.positions[-1] == (GUILD_B, [])
    assert scheduler.position(a2.id) == 1
    assert scheduler.position(a3.id) == 2

    await h.wait_state(b1.id, S.RUNNING)
    await h.runner.finish_and_wait(b1.id)
    await h.runner.wait_started(4)
    assert h.positions[-1] == (GUILD_A, [a3.id])
    assert scheduler.position(a3.id) == 1
    assert scheduler.position(blocker.id) is None  # finished
    assert scheduler.position(999_999) is None  # never seen


# ---------------------------------------------------------------------- cancel


async def test_cancel_a_queued_job(h: Harness) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    blocker = await h.running_job()
    q1, q2, q3 = await h.add_many([GUILD_A] * 3)
    for queued in (q1, q2, q3):
        scheduler.submit(queued)
    h.positions.clear()

    outcome, job = await scheduler.cancel(q2.id)
    assert outcome is CancelOutcome.CANCELLED
    assert job is not None and job.state is S.CANCELLED
    assert await state_of(h.store, q2.id) is S.CANCELLED
    assert scheduler.position(q2.id) is None
    assert scheduler.position(q3.id) == 2
    assert h.positions == [(GUILD_A, [q1.id, q3.id])]

    outcome, _ = await scheduler.cancel(q1.id)
    assert outcome is CancelOutcome.CANCELLED
    assert scheduler.position(q3.id) == 1
    assert h.positions[-1] == (GUILD_A, [q3.id])

    await h.runner.finish_and_wait(blocker.id)
    await h.runner.wait_started(2)
    assert h.runner.started == [blocker.id, q3.id]  # the cancelled ones never started


async def test_cancel_a_running_job_cancels_its_task_and_frees_the_slot(h: Harness) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    job = await h.running_job()
    waiting = await h.add(GUILD_A)
    scheduler.submit(waiting)

    outcome, cancelled = await scheduler.cancel(job.id)
    assert outcome is CancelOutcome.CANCELLED
    assert cancelled is not None and cancelled.state is S.CANCELLED
    await h.runner.wait_for(lambda: job.id in h.runner.cancelled)
    assert await state_of(h.store, job.id) is S.CANCELLED
    await h.runner.wait_started(2)  # the slot it held went to the next job
    assert h.runner.started == [job.id, waiting.id]
    assert not h.runner.is_running(job.id)


async def test_a_cancel_answered_as_the_dispatcher_starts_that_job_frees_its_slot(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first queued job is cancelled, and the store's answer to the cancel comes in the very
    loop turn the dispatcher starts that job (a running job's slot was just freed): the job's task
    is cancelled before it ever ran. Its slot is freed all the same: the key runs as many jobs as
    before and the job behind starts (the slot stayed taken for ever, and at one slot the queue
    stalled)."""
    scheduler = h.make(max_running=1)
    await scheduler.start()
    blocker = await h.running_job()
    first, behind = await h.add_many([GUILD_A] * 2)
    scheduler.submit(first)
    scheduler.submit(behind)
    answered = asyncio.Event()
    transition = h.store.transition

    async def held(job_id: int, to: JobState, **kwargs: Any) -> Job:
        job = await transition(job_id, to, **kwargs)
        if to is S.CANCELLED:
            await answered.wait()  # written; its answer reaches the scheduler when the test says
        return job

    monkeypatch.setattr(h.store, "transition", held)
    cancel = asyncio.ensure_future(scheduler.cancel(first.id))
    await h.wait_state(first.id, S.CANCELLED)
    # The blocker's slot is freed, and in the same step the cancel's answer comes: the dispatcher,
    # woken first, starts `first`, and the cancel then stops its task before its first step.
    h.runner.after_release = answered.set
    h.runner.release(blocker.id)
    assert (await asyncio.wait_for(cancel, WAIT))[0] is CancelOutcome.CANCELLED
    await h.runner.finish_and_wait(blocker.id)
    await h.runner.wait_started(2)
    assert h.runner.started == [blocker.id, behind.id]


async def test_cancel_a_submitting_job(h: Harness) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    job = await h.add(GUILD_A)
    await h.store.transition(job.id, S.SUBMITTING, expect=S.QUEUED)
    outcome, cancelled = await scheduler.cancel(job.id)
    assert outcome is CancelOutcome.CANCELLED
    assert cancelled is not None and cancelled.state is S.CANCELLED


async def test_abandon_fails_running_and_queued_jobs_with_the_code_and_spares_a_delivery(h: Harness) -> None:
    """What ends the jobs of a deleted channel: like a cancel (out of the queue, the task stopped,
    its slot to the next job), but failed with the code; a job being delivered keeps its course."""
    scheduler = h.make(max_running=1)
    await scheduler.start()
    delivering = await h.running_job()
    h.runner.release(delivering.id)
    await h.wait_state(delivering.id, S.DELIVERING)
    running = await h.running_job()
    queued, behind = await h.add_many([GUILD_A, GUILD_B])
    scheduler.submit(queued)
    scheduler.submit(behind)

    for job in (queued, running):
        outcome, ended = await scheduler.abandon(job.id, ErrorCode.CHANNEL_GONE)
        assert outcome is CancelOutcome.CANCELLED
        assert ended is not None and ended.state is S.FAILED and ended.error_code == "channel_gone"
    assert scheduler.position(queued.id) is None
    await h.runner.wait_for(lambda: running.id in h.runner.cancelled)
    await h.runner.wait_started(3)  # the running job's slot went to the one behind, not to `queued`
    assert h.runner.started == [delivering.id, running.id, behind.id]

    outcome, kept = await scheduler.abandon(delivering.id, ErrorCode.CHANNEL_GONE)
    assert outcome is CancelOutcome.TOO_LATE and kept is not None and kept.state is S.DELIVERING
    assert h.runner.is_running(delivering.id)


async def test_cancel_is_too_late_while_delivering_or_after_the_end(h: Harness) -> None:
    scheduler = h.make(max_running=2)
    await scheduler.start()
    delivering = await h.running_job()
    h.runner.release(delivering.id)
    await h.wait_state(delivering.id, S.DELIVERING)

    outcome, job = await scheduler.cancel(delivering.id)
    assert outcome is CancelOutcome.TOO_LATE
    assert job is not None and job.state is S.DELIVERING
    assert await state_of(h.store, delivering.id) is S.DELIVERING
    assert delivering.id not in h.runner.cancelled and h.runner.is_running(delivering.id)

    await h.runner.finish_and_wait(delivering.id)
    outcome, job = await scheduler.cancel(delivering.id)
    assert outcome is CancelOutcome.TOO_LATE
    assert job is not None and job.state is S.DELIVERED

    failed = await h.add(GUILD_B)
    await h.store.transition(failed.id, S.FAILED, expect=S.QUEUED, error_code="auth")
    assert (await scheduler.cancel(failed.id))[0] is CancelOutcome.TOO_LATE

    queued = await h.add(GUILD_B)
    await h.store.transition(queued.id, S.CANCELLED, expect=S.QUEUED)
    outcome, job = await scheduler.cancel(queued.id)  # twice: the second is too late
    assert outcome is CancelOutcome.TOO_LATE
    assert job is not None and job.state is S.CANCELLED


async def test_cancel_an_unknown_job(h: Harness) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    assert await scheduler.cancel(424242) == (CancelOutcome.UNKNOWN, None)


# ---------------------------------------------------------------------- restore after a restart


async def test_start_restores_unfinished_jobs(h: Harness) -> None:
    q1 = await h.add(GUILD_A)
    sub = await h.add(GUILD_A)
    await h.store.transition(sub.id, S.SUBMITTING, expect=S.QUEUED)
    q3 = await h.add(GUILD_A)
    run = await h.add(GUILD_B)
    await h.store.transition(run.id, S.SUBMITTING)
    await h.store.transition(run.id, S.RUNNING, task_id="task-running", started_at=1.0)
    dlv = await h.add(GUILD_C)
    await h.store.transition(dlv.id, S.SUBMITTING)
    await h.store.transition(dlv.id, S.RUNNING, task_id="task-delivering")
    await h.store.transition(dlv.id, S.DELIVERING)
    done = await h.add(GUILD_A)
    await h.store.transition(done.id, S.FAILED, error_code="auth")
    q_b = await h.add(GUILD_B)

    scheduler = h.make(max_running=1)
    restored = await scheduler.start()

    assert [j.id for j in restored] == [q1.id, sub.id, q3.id, run.id, dlv.id, q_b.id]
    by_id = {j.id: j for j in restored}
    assert by_id[sub.id].state is S.QUEUED  # create outcome unknown: queued again
    assert await state_of(h.store, sub.id) is S.QUEUED
    assert by_id[run.id].state is S.RUNNING and by_id[dlv.id].state is S.DELIVERING
    # Re-attached at once, without waiting for the dispatcher; RUNNING holds the only slot.
    assert h.runner.is_running(run.id) and h.runner.is_running(dlv.id)
    assert h.runner.holding == 1
    assert [scheduler.position(j) for j in (q1.id, sub.id, q3.id, q_b.id)] == [1, 2, 3, 1]
    assert scheduler.position(done.id) is None

    await h.runner.wait_started(2)
    await h.flush()
    assert sorted(h.runner.started) == sorted([run.id, dlv.id])
    assert h.positions == []  # the dispatcher took nothing off a queue: the RUNNING job holds the slot
    assert not h.runner.is_running(done.id)

    # The DELIVERING job does not hold a slot: only finishing the RUNNING one lets the queue move.
    await h.runner.finish_and_wait(run.id)
    await h.runner.wait_started(3)
    assert h.runner.started[2] == q1.id  # guild A's turn came first (its jobs came first)
    order = [q1.id]
    for _ in range(3):
        count = len(h.runner.started)
        await h.runner.finish_and_wait(order[-1])
        await h.runner.wait_started(count + 1)
        order.append(h.runner.started[-1])
    assert order == [q1.id, q_b.id, sub.id, q3.id]  # per guild in id order, guilds in turn
    assert await state_of(h.store, dlv.id) is S.DELIVERING  # untouched until its runner finishes it


# ---------------------------------------------------------------------- shutdown


async def test_close_cancels_ordinary_jobs_waits_for_critical_ones_and_keeps_states(h: Harness) -> None:
    scheduler = h.make(max_running=2)
    await scheduler.start()
    plain = await h.running_job(GUILD_A)
    critical = await h.running_job(GUILD_B)
    queued = await h.add(GUILD_C)
    scheduler.submit(queued)
    h.runner.critical.add(critical.id)
    before = {j: await state_of(h.store, j) for j in (plain.id, critical.id, queued.id)}

    closing = asyncio.create_task(scheduler.close(timeout=WAIT))
    await asyncio.wait_for(h.runner.waiting_for_critical.wait(), WAIT)
    await h.runner.wait_for(lambda: plain.id in h.runner.cancelled)
    assert h.runner.shutdown_begun
    assert critical.id not in h.runner.ended  # still inside its critical step
    assert not closing.done()

    h.runner.leave_critical(critical.id)  # the step completes; the runner pauses for shutdown
    await asyncio.wait_for(closing, WAIT)
    h.scheduler = None  # closed already
    assert critical.id in h.runner.ended and critical.id not in h.runner.cancelled
    assert queued.id not in h.runner.started  # no new work once closing
    after = {j: await state_of(h.store, j) for j in (plain.id, critical.id, queued.id)}
    assert after == before == {plain.id: S.RUNNING, critical.id: S.RUNNING, queued.id: S.QUEUED}


async def test_close_gives_up_on_a_critical_step_after_the_timeout(h: Harness) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    stuck = await h.running_job()
    h.runner.critical.add(stuck.id)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.wait_for(scheduler.close(timeout=0.2), WAIT)
    h.scheduler = None
    elapsed = loop.time() - began
    assert h.runner.waiting_for_critical.is_set()
    assert elapsed >= 0.15  # it waited for the step the whole timeout (giving up at all: the wait_for)
    assert stuck.id in h.runner.cancelled  # cancelled once the wait timed out
    assert await state_of(h.store, stuck.id) is S.RUNNING


# ---------------------------------------------------------------------- failures


async def test_a_crashing_runner_is_logged_and_frees_its_slot(
    h: Harness,
    caplog: pytest.LogCaptureFixture,
) -> None:
    scheduler = h.make(max_running=1)
    await scheduler.start()
    doomed, nxt = await h.add_many([GUILD_A, GUILD_A])
    scheduler.submit(doomed)
    scheduler.submit(nxt)
    await h.wait_state(doomed.id, S.RUNNING)
    with caplog.at_level(logging.ERROR, logger="framecast.jobs.scheduler"):
        h.runner.crash(doomed.id)
        await h.runner.wait_started(2)
    assert h.runner.started == [doomed.id, nxt.id]
    assert not h.runner.is_running(doomed.id)
    crash_logs = [r for r in caplog.records if r.name == "framecast.jobs.scheduler" and r.exc_info]
    assert len(crash_logs) == 1
    assert str(doomed.id) in crash_logs[0].getMessage()
    assert isinstance(crash_logs[0].exc_info[1], RuntimeError)  # type: ignore[index]
    await h.wait_state(nxt.id, S.RUNNING)
    await h.runner.finish_and_wait(nxt.id)
    assert h.runner.holding == 0


# ---------------------------------------------------------------------- one admission per API key


class Keys:
    """Guilds on API keys, each key with its own fixed number of slots (what Accounts provides)."""

    def __init__(self, slots: dict[str, int], key_of: dict[int, str]) -> None:
        self.admissions: dict[str, Admission] = {k: FixedAdmission(n) for k, n in slots.items()}
        self.key_of = key_of
        self.listeners: list[Callable[[], None]] = []

    def admission_for(self, guild_id: int) -> tuple[Hashable, Admission]:
        key = self.key_of.get(guild_id, "operator")
        return key, self.admissions[key]

    def admission_for_job(self, job: Job) -> tuple[Hashable, Admission]:
        return self.admission_for(job.guild_id)

    def on_admission_change(self, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    def on_key_change(self, listener: Callable[[Hashable], None]) -> None:
        pass  # a fixed number of slots changes only when a job frees one (which the scheduler sees)

    def open_key(self, guild: int, key: str, slots: int) -> None:
        """A guild sets its own key: new admission, and every listener hears of it."""
        self.admissions[key] = FixedAdmission(slots)
        self.key_of[guild] = key
        for listener in self.listeners:
            listener()


async def test_each_key_admits_its_own_jobs_and_a_saturated_key_keeps_its_guilds_turn(h: Harness) -> None:
    keys = Keys({"operator": 1, "own": 1}, {GUILD_B: "own"})
    scheduler = h.make(keys)
    await scheduler.start()
    a1, a2, b1, b2, c1 = await h.add_many([GUILD_A, GUILD_A, GUILD_B, GUILD_B, GUILD_C])
    for job in (a1, a2, b1, b2, c1):
        scheduler.submit(job)
    # One slot per key: A's first job on the operator's key, B's on its own key, at once.
    await h.runner.wait_started(2)
    await h.flush()
    assert h.runner.started == [a1.id, b1.id]
    # B's key frees a slot: B's next job starts; A and C (operator key, full) still wait.
    await h.runner.finish_and_wait(b1.id)
    await h.runner.wait_started(3)
    await h.flush()
    assert h.runner.started[2] == b2.id
    # The operator key frees a slot: C goes first (A was served last on that key), then A.
    await h.runner.finish_and_wait(a1.id)
    await h.runner.wait_started(4)
    assert h.runner.started[3] == c1.id
    await h.runner.finish_and_wait(c1.id)
    await h.runner.wait_started(5)
    assert h.runner.started[4] == a2.id


async def test_a_key_opened_later_wakes_the_dispatcher(h: Harness) -> None:
    keys = Keys({"operator": 1}, {})
    scheduler = h.make(keys)
    await scheduler.start()
    a, b = await h.add_many([GUILD_A, GUILD_B])
    scheduler.submit(a)
    scheduler.submit(b)
    await h.runner.wait_started(1)
    await h.flush()
    assert h.runner.started == [a.id]  # B waits behind A on the one operator slot
    keys.open_key(GUILD_B, "own", 1)  # B's admin sets the server's own key
    await h.runner.wait_started(2)
    assert h.runner.started == [a.id, b.id] and h.runner.is_running(a.id)


class Counted(FixedAdmission):
    """A fixed number of slots that counts how often it was asked."""

    def __init__(self, max_running: int) -> None:
        super().__init__(max_running)
        self.asked = 0

    def may_start(self, running: int, kind: JobKind = JobKind.VIDEO) -> bool:
        self.asked += 1
        return super().may_start(running, kind)


@pytest.mark.parametrize("starts", [2, 12])
async def test_a_dispatch_round_asks_each_key_once_however_many_jobs_it_starts(
    h: Harness, starts: int
) -> None:
    # Counted, not timed: four saturated keys whose guilds come first in the round, then
    # `starts` guilds on a key with room. One round starts every job that key admits and asks each
    # saturated key once, not once per job it starts (which made keys x jobs questions).
    keys = Keys({"open": starts}, {})
    full = {f"full-{n}": Counted(0) for n in range(4)}
    keys.admissions.update(full)
    waiting_guilds = [100 + n for n in range(4)]
    open_guilds = [200 + n for n in range(starts)]
    keys.key_of.update({guild: f"full-{n}" for n, guild in enumerate(waiting_guilds)})
    keys.key_of.update(dict.fromkeys(open_guilds, "open"))
    scheduler = h.make(keys)
    await scheduler.start()
    jobs = await h.add_many(waiting_guilds + open_guilds)
    for job in jobs:  # in one go: the dispatcher sees them all in one round
        scheduler.submit(job)
    await h.runner.wait_started(starts)
    await h.flush()
    assert sorted(h.runner.started) == sorted(job.id for job in jobs[4:])
    assert [admission.asked for admission in full.values()] == [1, 1, 1, 1]
    assert all(scheduler.position(job.id) == 1 for job in jobs[:4])  # still queued, first in line


async def test_a_freed_slot_asks_only_its_own_key(h: Harness) -> None:
    # Counted, not timed: twenty keys of one slot each, two jobs each. Once every key is full, a
    # job ending on one key asks that key alone (asking every waiting key on each freed slot made
    # the cost of a job grow with the number of keys), and its server's next job starts.
    keys = Keys({}, {})
    counted = {f"own-{n}": Counted(1) for n in range(20)}
    keys.admissions.update(counted)
    guilds = [300 + n for n in range(20)]
    keys.key_of.update({guild: f"own-{n}" for n, guild in enumerate(guilds)})
    scheduler = h.make(keys)
    await scheduler.start()
    first = await h.add_many(guilds)
    second = await h.add_many(guilds)
    for job in first + second:
        scheduler.submit(job)
    await h.runner.wait_started(20)
    await h.flush()
    asked = {key: admission.asked for key, admission in counted.items()}
    await h.runner.finish_and_wait(first[5].id)
    await h.runner.wait_started(21)
    await h.flush()
    assert h.runner.started[-1] == second[5].id
    assert {key for key, admission in counted.items() if admission.asked != asked[key]} == {"own-5"}
    assert all(scheduler.position(job.id) == 1 for job in second)


class ByKind:
    """One key whose budget admits at most `videos` videos' worth of running jobs, and images up to
    `images` (an image's requests are spent at once: it fits where another video does not)."""

    def __init__(self, videos: int, images: int) -> None:
        self.limits = {JobKind.VIDEO: videos, JobKind.IMAGE: images}

    def may_start(self, running: int, kind: JobKind = JobKind.VIDEO) -> bool:
        return running < self.limits[kind]

    def recheck_in(self) -> float:
        return float("inf")

    def on_change(self, listener: Callable[[], None]) -> None:
        pass


async def test_an_image_goes_ahead_of_videos_that_cannot_start_and_takes_no_video_s_turn(h: Harness) -> None:
    h.scheduler = scheduler = Scheduler(
        store=h.store,
        runner=h.runner,
        admission=ByKind(videos=1, images=2),
        on_positions_changed=lambda guild, ids: h.positions.append((guild, list(ids))),
    )
    await scheduler.start()
    v1, v2 = await h.add_many([GUILD_A, GUILD_A])
    image = await h.store.add(
        dataclasses.replace(new_job(GUILD_A), kind=JobKind.IMAGE, params={"prompt": "a cat", "size": "1x1"}),
        member_limit=None,
        guild_cap=None,
    )
    for job in (v1, v2, image):
        scheduler.submit(job)
    # v1 takes the one video's room; v2 cannot start, the image behind it can: it goes ahead.
    await h.runner.wait_started(2)
    await h.flush()
    assert h.runner.started == [v1.id, image.id]
    assert scheduler.position(v2.id) == 1
    # Once v1 frees its slot, the image's room is the videos' again: v2 is next.
    await h.runner.finish_and_wait(v1.id)
    await h.runner.finish_and_wait(image.id)
    await h.runner.wait_started(3)
    assert h.runner.started[2] == v2.id


# ---------------------------------------------------------------------- a store outage


class ReadsFail:
    """The real store, whose next `times` reads of a job meet an outage (SQLite on a full disk)."""

    def __init__(self, store: Store, times: int) -> None:
        self._store = store
        self.times = times

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get(self, job_id: int) -> Job | None:
        if self.times > 0:
            self.times -= 1
            raise sa_exc.OperationalError("SELECT", {}, sqlite3.OperationalError("database or disk is full"))
        return await self._store.get(job_id)


async def test_a_job_taken_off_the_queue_in_a_store_outage_keeps_its_place_and_starts_after_it(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    reads = ReadsFail(h.store, times=3)
    scheduler = Scheduler(
        store=reads,  # type: ignore[arg-type]
        runner=h.runner,
        admission=1,
        outage=StoreOutage(clock=SystemClock(), backoff_base=0.001, backoff_max=0.01),
    )
    h.scheduler = scheduler
    await scheduler.start()
    first, second = await h.add_many([GUILD_A, GUILD_A])
    with caplog.at_level(logging.INFO):
        scheduler.submit(first)
        scheduler.submit(second)
        await h.runner.wait_started(1)  # read back once the store answered: not dropped
        assert reads.times == 0 and scheduler.position(second.id) == 1
        await h.runner.finish_and_wait(first.id)
        await h.runner.wait_started(2)
    assert h.runner.started == [first.id, second.id]
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
    assert sum("does not answer" in r.getMessage() for r in caplog.records) == 1
