"""A key that refused is asked again as soon as its answer may change, never only when its jobs end.

The dispatcher asks a key that refused again only when something of its own wakes it (a slot of its
freed, its planner moved, a job of its guilds queued or cancelled, its ``recheck_in`` passed). A
wake-up missed there is a job that waits for no reason, so each test drives one such change with
time standing still (a :class:`ManualClock` that no one advances): what starts, started because the
change woke its key, not because the dispatcher happened to look again later.

A real scheduler, store, queues and planner; the stand-in runner tells the planner what the real one
does (create sent, create through, task polled, task ended) when the test says so. Then keys whose
answer moves with time alone (each asked again at its own ``recheck_in``, and not in between), and
a dispatch round that failed (the restarted dispatcher looks at every key again, and a job taken
off the queue is started, never dropped).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from framecast.jobs.queues import GuildQueues
from framecast.jobs.scheduler import Admission, CancelOutcome, Scheduler
from framecast.planner.planner import PlannedJob, Planner
from framecast.storage import Store
from framecast.values import Job, JobKind, JobState, NewJob
from framecast.values.service_requests import Priority
from tests.fakes.clock import ManualClock
from tests.planner.rigs import Rig as PlannerRig

S = JobState
GUILD_A, GUILD_B, GUILD_C = 2001, 2002, 2003
WAIT = 5.0  # real seconds: a hang fails the test instead of blocking the run
INTERVAL = 5.0  # the planner's poll interval (clock seconds; the clock never moves here)


def video(guild: int) -> NewJob:
    return NewJob(
        kind=JobKind.VIDEO,
        guild_id=guild,
        channel_id=guild * 10,
        user_id=7,
        locale="en-US",
        params={"model": "svc-video-v2.0", "prompt": "a cat", "width": 1152, "height": 768, "seconds": 5},
    )


class PlannerRunner:
    """Runs each job as far as the test says, telling the job's planner what the real runner does."""

    def __init__(self, store: Store, planner_of: Callable[[Job], Planner]) -> None:
        self.store = store
        self.planner_of = planner_of
        self.started: list[int] = []
        self.plans: dict[int, PlannedJob] = {}
        self._steps: dict[int, asyncio.Queue[str]] = {}
        self._moved = asyncio.Event()

    async def run(self, job: Job, *, release_service_slot: Callable[[], None]) -> None:
        self.started.append(job.id)
        plan = self.plans[job.id] = self.planner_of(job).plan(job)
        self._moved.set()
        steps = self._steps.setdefault(job.id, asyncio.Queue())
        job = await self.store.transition(job.id, S.SUBMITTING, expect=S.QUEUED)

        async def send(sent_now: Callable[[], Priority]) -> Job:
            # Its create is sent: the one create of the key waiting for the budget, until the test
            # says it went through.
            sent_now()
            while await steps.get() != "created":
                self._moved.set()
            return await self.store.transition(job.id, S.RUNNING, expect=S.SUBMITTING, task_id=f"t{job.id}")

        try:
            job = await plan.create(send, failure=lambda exc: None, sleep=asyncio.sleep)
            self._moved.set()
            while (step := await steps.get()) != "end":
                if step == "polled":
                    plan.pacer()  # its task is polled from now: the planner knows it runs
                self._moved.set()
            await plan.ended(completed=False)
            release_service_slot()
        finally:
            self.planner_of(job).release(job.id)
            self._moved.set()

    def step(self, job: Job, *steps: str) -> None:
        for step in steps:
            self._steps.setdefault(job.id, asyncio.Queue()).put_nowait(step)

    async def settle(self) -> None:
        """Let every woken task run (the store answers from its own thread) until nothing moves."""
        for _ in range(5):
            self._moved.clear()
            await asyncio.sleep(0.02)
            for _ in range(20):
                await asyncio.sleep(0)

    async def wait_started(self, count: int) -> None:
        async def _wait() -> None:
            while len(self.started) < count:
                self._moved.clear()
                await self._moved.wait()

        await asyncio.wait_for(_wait(), WAIT)

    def begin_shutdown(self) -> None:
        pass

    def in_critical_section(self, job_id: int) -> bool:
        return False

    async def wait_critical_done(self, job_ids: set[int]) -> None:
        pass


@dataclasses.dataclass
class Rig:
    clock: ManualClock
    store: Store
    queues: GuildQueues
    planner: Planner
    runner: PlannerRunner
    scheduler: Scheduler

    async def submit(self, guild: int) -> Job:
        job = await self.store.add(video(guild), member_limit=None, guild_cap=None)
        self.scheduler.submit(job)
        return job


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with PlannerRig.opened(tmp_path, interval=INTERVAL) as key:
        planner = key.planner
        runner = PlannerRunner(key.store, lambda job: planner)
        scheduler = Scheduler(
            store=key.store, runner=runner, admission=planner, queues=key.queues, clock=key.clock
        )
        await scheduler.start()
        try:
            yield Rig(key.clock, key.store, key.queues, planner, runner, scheduler)
        finally:
            await scheduler.close(timeout=1.0)


async def test_a_job_queued_right_after_the_first_create_went_through_starts_once_the_task_is_polled(
    rig: Rig,
) -> None:
    first = await rig.submit(GUILD_A)
    await rig.runner.wait_started(1)
    rig.runner.step(first, "created")
    await rig.runner.settle()
    # The first task is created but not polled yet: its key still counts it as a create in flight.
    second = await rig.submit(GUILD_B)
    await rig.runner.settle()
    assert rig.runner.started == [first.id]
    rig.runner.step(first, "polled")
    await rig.runner.wait_started(2)
    assert rig.runner.started == [first.id, second.id]


async def test_a_job_queued_while_the_first_create_is_sent_starts_once_it_went_through_and_is_polled(
    rig: Rig,
) -> None:
    first = await rig.submit(GUILD_A)
    await rig.runner.wait_started(1)
    second = await rig.submit(GUILD_B)
    await rig.runner.settle()
    assert rig.runner.started == [first.id]  # one create at a time waits for the budget
    rig.runner.step(first, "created", "polled")
    await rig.runner.wait_started(2)
    assert rig.runner.started == [first.id, second.id]


async def test_a_job_of_the_same_guild_queued_after_the_first_went_through_starts_once_it_is_polled(
    rig: Rig,
) -> None:
    first = await rig.submit(GUILD_A)
    await rig.runner.wait_started(1)
    rig.runner.step(first, "created", "polled")
    await rig.runner.settle()
    second = await rig.submit(GUILD_A)
    await rig.runner.wait_started(2)
    assert rig.runner.started == [first.id, second.id]


# -- keys whose answer changes with time alone, or whose admission failed ----------------------------


class Keys:
    """Guilds on API keys (what Accounts provides), each key with its own admission."""

    def __init__(self, admissions: dict[str, Admission], key_of: dict[int, str]) -> None:
        self.admissions = admissions
        self.key_of = key_of

    def admission_for(self, guild_id: int) -> tuple[Hashable, Admission]:
        key = self.key_of[guild_id]
        return key, self.admissions[key]

    def admission_for_job(self, job: Job) -> tuple[Hashable, Admission]:
        return self.admission_for(job.guild_id)

    def on_admission_change(self, listener: Callable[[], None]) -> None:
        pass

    def on_key_change(self, listener: Callable[[Hashable], None]) -> None:
        pass  # nothing tells the scheduler: only time (recheck_in) or a freed slot moves these keys


class OpensAt:
    """A key that admits one job from clock time `at` on, and says to be asked again every `every`."""

    def __init__(self, clock: ManualClock, at: float, every: float) -> None:
        self.clock, self.at, self.every = clock, at, every
        self.asked: list[float] = []

    def may_start(self, running: int, kind: JobKind = JobKind.VIDEO) -> bool:
        self.asked.append(self.clock.monotonic())
        return running == 0 and self.clock.monotonic() >= self.at

    def recheck_in(self) -> float:
        return self.every

    def on_change(self, listener: Callable[[], None]) -> None:
        pass


class FailsOnce(OpensAt):
    """A key whose first answer raises (an admission's bug must not stall its queue)."""

    def may_start(self, running: int, kind: JobKind = JobKind.VIDEO) -> bool:
        if not self.asked:
            self.asked.append(self.clock.monotonic())
            raise RuntimeError("admission exploded")
        return super().may_start(running, kind)


class BareRunner(PlannerRunner):
    """Records starts and holds each job until the test ends it (no planner to tell)."""

    async def run(self, job: Job, *, release_service_slot: Callable[[], None]) -> None:
        self.started.append(job.id)
        self._moved.set()
        steps = self._steps.setdefault(job.id, asyncio.Queue())
        while await steps.get() != "end":
            pass
        release_service_slot()


@dataclasses.dataclass
class Bare:
    """A store on a clock no one advances, and a runner that holds each job (no planner to tell)."""

    clock: ManualClock
    store: Store
    runner: BareRunner

    @asynccontextmanager
    async def scheduler(self, admission: Any, **options: Any) -> AsyncIterator[Scheduler]:
        """A started scheduler over them, closed on the way out."""
        scheduler = Scheduler(
            store=self.store, runner=self.runner, admission=admission, clock=self.clock, **options
        )
        try:
            await scheduler.start()
            yield scheduler
        finally:
            await scheduler.close(timeout=1.0)


@pytest.fixture
async def bare(tmp_path: Path) -> AsyncIterator[Bare]:
    clock = ManualClock()
    store = await Store.open(tmp_path / "db.sqlite3", clock=clock)
    try:
        yield Bare(clock, store, BareRunner(store, lambda job: pytest.fail("no planner here")))
    finally:
        await store.close()


async def test_each_key_that_refused_is_asked_again_at_its_own_recheck_time(bare: Bare) -> None:
    clock, store, runner = bare.clock, bare.store, bare.runner
    early, late = OpensAt(clock, at=1.0, every=0.25), OpensAt(clock, at=3.0, every=0.5)
    keys = Keys({"early": early, "late": late}, {GUILD_A: "early", GUILD_B: "late", GUILD_C: "late"})
    async with bare.scheduler(keys) as scheduler:
        a = await store.add(video(GUILD_A), member_limit=None, guild_cap=None)
        b = await store.add(video(GUILD_B), member_limit=None, guild_cap=None)
        scheduler.submit(a)
        scheduler.submit(b)
        await runner.settle()
        assert runner.started == []
        # A job queued later on the late key asks that key; the early one keeps its own time.
        await clock.advance(0.1)
        c = await store.add(video(GUILD_C), member_limit=None, guild_cap=None)
        scheduler.submit(c)
        await runner.settle()
        for _ in range(16):  # time alone moves these keys: four clock seconds in small steps
            await clock.advance(0.25)
            await runner.settle()
        await runner.wait_started(2)
        assert runner.started == [a.id, b.id]
        assert min(t for t in early.asked if t >= 1.0) == 1.0  # asked at its first recheck once open
        assert min(t for t in late.asked if t >= 3.0) <= 3.1 + 0.5
        # Between its rechecks a refusing key is not asked: a few times a second, not every step.
        assert len([t for t in late.asked if t < 3.0]) <= 3.0 / 0.5 + 2


class FewWaiting:
    """A key that starts a job only while at most `most` of its jobs wait: an answer that moves with
    its own queue (a planner's does), never with time, and of which nothing else tells."""

    def __init__(self, queues: GuildQueues, most: int) -> None:
        self.queues, self.most = queues, most

    def may_start(self, running: int, kind: JobKind = JobKind.VIDEO) -> bool:
        return self.queues.waiting(kind)[0] <= self.most

    def recheck_in(self) -> float:
        return float("inf")

    def on_change(self, listener: Callable[[], None]) -> None:
        pass


async def test_a_cancelled_queued_job_wakes_its_key_whose_answer_moves_with_its_queue(bare: Bare) -> None:
    store, runner = bare.store, bare.runner
    queues = GuildQueues()
    keys = Keys({"k": FewWaiting(queues, most=1)}, {GUILD_A: "k", GUILD_B: "k"})
    async with bare.scheduler(keys, queues=queues) as scheduler:
        a = await store.add(video(GUILD_A), member_limit=None, guild_cap=None)
        b = await store.add(video(GUILD_B), member_limit=None, guild_cap=None)
        scheduler.submit(a)
        scheduler.submit(b)
        await runner.settle()
        assert runner.started == []  # two wait: the key refuses, and sleeps
        outcome, _ = await scheduler.cancel(b.id)
        assert outcome is CancelOutcome.CANCELLED
        await runner.wait_started(1)  # one waits now: only the cancel can have woken the key
        assert runner.started == [a.id]


async def test_a_dispatcher_restarted_after_an_admission_failed_looks_at_the_waiting_jobs_again(
    bare: Bare,
) -> None:
    clock, store, runner = bare.clock, bare.store, bare.runner
    # Never asked again by time (inf) and told of no change: only the restart may look again.
    failing = FailsOnce(clock, at=0.0, every=float("inf"))
    keys = Keys({"k": failing}, {GUILD_A: "k"})
    async with bare.scheduler(keys) as scheduler:
        job = await store.add(video(GUILD_A), member_limit=None, guild_cap=None)
        scheduler.submit(job)
        await runner.wait_started(1)  # the dispatcher restarts after half a real second
        assert runner.started == [job.id]


async def test_a_job_taken_off_the_queue_starts_even_when_telling_its_guild_s_positions_fails(
    bare: Bare,
) -> None:
    store, runner = bare.store, bare.runner
    told: list[int] = []

    def positions_changed(guild: int, queued: list[int]) -> None:
        told.append(guild)
        if len(told) == 1:
            raise RuntimeError("the chat side exploded")

    async with bare.scheduler(2, on_positions_changed=positions_changed) as scheduler:
        first = await store.add(video(GUILD_A), member_limit=None, guild_cap=None)
        scheduler.submit(first)
        await runner.wait_started(1)  # not dropped: started, then the failure was logged
        second = await store.add(video(GUILD_B), member_limit=None, guild_cap=None)
        scheduler.submit(second)
        await runner.wait_started(2)
        assert runner.started == [first.id, second.id] and scheduler.position(first.id) == 1
