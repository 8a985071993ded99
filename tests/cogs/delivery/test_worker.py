"""The per-job worker: coalescing, urgency, deliveries and the wait for the runner's look.

The worker is real; its owner (what a draw or a delivery does) is a recording stand-in, and the
clock is a settable one (or the manual one, for the periodic refresh), so timing is decided by the
test, not by Discord.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from cogs.delivery.codes import TooLarge
from cogs.delivery.slot import Delivery, Slot
from cogs.delivery.worker import Workers
from framecast.app import (
    Clock,
    Delivered,
    DeliveryOutcome,
    Interrupted,
    Job,
    JobKind,
    JobState,
    ResultFile,
    UploadTooLarge,
)
from tests.fakes.clock import ManualClock

INTERVAL = 0.3
REFRESH = 5.0


class SettableClock:
    """Monotonic time the test sets; wall time is real (unused by the worker)."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass
class Owner:
    clock: Clock
    drawn: list[JobState] = field(default_factory=list)
    delivered: list[bytes | None] = field(default_factory=list)
    landings: list[int] = field(default_factory=list)
    fail_next_draw: bool = False
    #: The next deliveries raise these, in order.
    delivery_failures: list[Exception] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def deliver(self, slot: Slot, delivery: Delivery) -> Delivered:
        if self.delivery_failures:
            raise self.delivery_failures.pop(0)
        assert isinstance(delivery.result, ResultFile)
        self.delivered.append(delivery.result.data)
        self.changed.set()
        return Delivered()

    async def redraw(self, slot: Slot) -> None:
        if self.fail_next_draw:
            self.fail_next_draw = False
            raise RuntimeError("a bug in drawing")
        self.drawn.append(slot.job.state)
        slot.last_edit = self.clock.monotonic()
        self.changed.set()

    async def landed(self, slot: Slot) -> None:
        self.landings.append(slot.job.id)
        self.changed.set()

    def until_move(self, slot: Slot) -> float | None:
        return None

    async def wait(self, predicate: object, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            while not predicate():  # type: ignore[operator]
                self.changed.clear()
                await self.changed.wait()


def make_job(state: JobState = JobState.QUEUED, job_id: int = 1) -> Job:
    return Job(
        id=job_id,
        kind=JobKind.VIDEO,
        state=state,
        guild_id=1,
        channel_id=2,
        user_id=3,
        locale="en-US",
        params={},
        created_at=0.0,
        updated_at=0.0,
    )


@pytest.fixture
async def rig() -> AsyncIterator[tuple[Workers, Owner, SettableClock]]:
    clock = SettableClock()
    owner = Owner(clock)
    workers = Workers(owner, clock=clock, interval=INTERVAL)
    try:
        yield workers, owner, clock
    finally:
        await workers.close()


def change(workers: Workers, job: Job, *, urgent: bool = False) -> Slot:
    slot = workers.slot(job)
    slot.job = job
    slot.wake.set()
    if urgent:
        slot.urgent.set()
    return slot


async def test_changes_within_the_interval_are_coalesced_into_one_draw(
    rig: tuple[Workers, Owner, SettableClock],
) -> None:
    workers, owner, _ = rig
    change(workers, make_job(), urgent=True)
    await owner.wait(lambda: owner.drawn == [JobState.QUEUED])  # the first draw: at once
    change(workers, make_job(JobState.SUBMITTING))
    change(workers, make_job(JobState.RUNNING))
    await asyncio.sleep(INTERVAL / 2)
    assert owner.drawn == [JobState.QUEUED]  # the clock has not moved: still inside the interval
    await owner.wait(lambda: len(owner.drawn) == 2)
    assert owner.drawn == [JobState.QUEUED, JobState.RUNNING]  # one draw, of the latest state


async def test_an_urgent_change_cuts_the_wait_short(rig: tuple[Workers, Owner, SettableClock]) -> None:
    workers, owner, _ = rig
    change(workers, make_job(), urgent=True)
    await owner.wait(lambda: len(owner.drawn) == 1)
    change(workers, make_job(JobState.SUBMITTING))
    await asyncio.sleep(0.02)
    change(workers, make_job(JobState.RUNNING), urgent=True)
    await owner.wait(lambda: len(owner.drawn) == 2, timeout=INTERVAL / 2)


async def test_once_the_interval_has_passed_a_change_is_drawn_at_once(
    rig: tuple[Workers, Owner, SettableClock],
) -> None:
    workers, owner, clock = rig
    change(workers, make_job(), urgent=True)
    await owner.wait(lambda: len(owner.drawn) == 1)
    clock.now += INTERVAL
    change(workers, make_job(JobState.SUBMITTING))
    await owner.wait(lambda: len(owner.drawn) == 2, timeout=INTERVAL / 2)


async def test_a_delivery_goes_through_the_worker_and_ends_it(
    rig: tuple[Workers, Owner, SettableClock],
) -> None:
    workers, owner, _ = rig
    slot = workers.slot(make_job(JobState.DELIVERING))
    slot.looked = True  # the runner always looks before it delivers
    change(workers, slot.job, urgent=True)
    await owner.wait(lambda: len(owner.drawn) == 1)
    future: asyncio.Future[DeliveryOutcome] = asyncio.get_running_loop().create_future()
    slot.delivery = Delivery(ResultFile(b"file", "framecast-1.mp4"), future)
    slot.wake.set()
    assert await asyncio.wait_for(future, 5) == Delivered()  # not held back by the interval
    assert owner.delivered == [b"file"]
    assert slot.task is not None
    await asyncio.wait_for(asyncio.shield(slot.task), 5)
    assert workers.get(1) is None  # finished: the slot is gone
    assert owner.drawn == [JobState.DELIVERING]


async def test_a_restored_delivering_job_waits_for_the_runners_look(
    rig: tuple[Workers, Owner, SettableClock],
) -> None:
    workers, owner, _ = rig
    slot = change(workers, make_job(JobState.DELIVERING), urgent=True)
    await asyncio.sleep(INTERVAL)
    assert owner.drawn == []
    slot.looked = True
    slot.wake.set()
    slot.urgent.set()
    await owner.wait(lambda: owner.drawn == [JobState.DELIVERING])


async def test_a_result_the_runner_found_is_not_drawn_over(rig: tuple[Workers, Owner, SettableClock]) -> None:
    workers, owner, _ = rig
    slot = change(workers, make_job(JobState.DELIVERING, job_id=7), urgent=True)
    slot.looked = True
    slot.job = make_job(JobState.DELIVERED, job_id=7)  # the runner found it and recorded it
    slot.wake.set()
    await owner.wait(lambda: owner.landings == [7])
    assert owner.drawn == []


async def deliver_once(workers: Workers, job: Job) -> DeliveryOutcome:
    slot = workers.slot(job)
    slot.looked = True
    future: asyncio.Future[DeliveryOutcome] = asyncio.get_running_loop().create_future()
    slot.delivery = Delivery(ResultFile(b"x" * 10, "framecast-1.mp4"), future)
    slot.wake.set()
    slot.urgent.set()
    return await asyncio.wait_for(future, 5)


async def test_discord_trouble_answers_interrupted_with_when_to_try_again(
    rig: tuple[Workers, Owner, SettableClock],
) -> None:
    workers, owner, _ = rig
    owner.delivery_failures = [TimeoutError()]
    job = make_job(JobState.DELIVERING)
    assert await deliver_once(workers, job) == Interrupted(1.0)
    assert await deliver_once(workers, job) == Delivered()  # the next attempt goes through
    assert owner.delivered == [b"x" * 10]


async def test_a_413_answers_too_large_with_the_refused_size(
    rig: tuple[Workers, Owner, SettableClock],
) -> None:
    workers, owner, _ = rig
    owner.delivery_failures = [TooLarge("40005")]
    assert await deliver_once(workers, make_job(JobState.DELIVERING)) == UploadTooLarge(10)
    assert owner.delivered == []


async def test_a_failure_no_retry_cures_is_raised_to_the_runner(
    rig: tuple[Workers, Owner, SettableClock],
) -> None:
    workers, owner, _ = rig
    owner.delivery_failures = [RuntimeError("a bug")]
    with pytest.raises(RuntimeError, match="a bug"):
        await deliver_once(workers, make_job(JobState.DELIVERING))


async def test_a_worker_that_died_is_started_again(rig: tuple[Workers, Owner, SettableClock]) -> None:
    workers, owner, clock = rig
    owner.fail_next_draw = True
    change(workers, make_job(), urgent=True)
    await asyncio.sleep(0.05)
    clock.now += INTERVAL
    await owner.wait(lambda: owner.drawn == [JobState.QUEUED])


# ---------------------------------------------------------------------- the periodic refresh


@pytest.fixture
async def manual() -> AsyncIterator[tuple[Workers, Owner, ManualClock]]:
    """Workers that refresh moving estimates every REFRESH seconds of a clock only the test moves."""
    clock = ManualClock(100.0)
    owner = Owner(clock)
    workers = Workers(owner, clock=clock, interval=INTERVAL, refresh=REFRESH)
    try:
        yield workers, owner, clock
    finally:
        await workers.close()


async def nothing_drawn_meanwhile(owner: Owner, count: int) -> None:
    await asyncio.sleep(0.05)  # real time for the worker to act, were it going to
    assert len(owner.drawn) == count


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.RUNNING])
async def test_a_moving_estimate_is_drawn_again_every_refresh_without_any_change(
    manual: tuple[Workers, Owner, ManualClock], state: JobState
) -> None:
    workers, owner, clock = manual
    change(workers, make_job(state), urgent=True)
    await owner.wait(lambda: len(owner.drawn) == 1)
    await clock.advance(REFRESH - 0.5)
    await nothing_drawn_meanwhile(owner, 1)
    await clock.advance(0.5)
    await owner.wait(lambda: len(owner.drawn) == 2)
    await clock.advance(REFRESH)
    await owner.wait(lambda: len(owner.drawn) == 3)
    assert owner.drawn == [state] * 3


async def test_a_change_restarts_the_refresh_period(manual: tuple[Workers, Owner, ManualClock]) -> None:
    workers, owner, clock = manual
    change(workers, make_job(JobState.RUNNING), urgent=True)
    await owner.wait(lambda: len(owner.drawn) == 1)
    await clock.advance(REFRESH / 2)
    change(workers, make_job(JobState.RUNNING))  # a poll's answer: drawn now (the interval passed)
    await owner.wait(lambda: len(owner.drawn) == 2)
    await clock.advance(REFRESH / 2 + 0.5)
    await nothing_drawn_meanwhile(owner, 2)  # the next refresh counts from that draw
    await clock.advance(REFRESH / 2)
    await owner.wait(lambda: len(owner.drawn) == 3)


@pytest.mark.parametrize("state", [JobState.SUBMITTING, JobState.DELIVERING])
async def test_only_queued_and_running_jobs_are_refreshed(
    manual: tuple[Workers, Owner, ManualClock], state: JobState
) -> None:
    workers, owner, clock = manual
    slot = workers.slot(make_job(state))
    slot.looked = True
    change(workers, slot.job, urgent=True)
    await owner.wait(lambda: len(owner.drawn) == 1)
    for _ in range(3):
        await clock.advance(REFRESH)
    await nothing_drawn_meanwhile(owner, 1)


async def test_a_refresh_is_never_faster_than_the_edit_interval() -> None:
    clock = ManualClock(100.0)
    owner = Owner(clock)
    workers = Workers(owner, clock=clock, interval=INTERVAL, refresh=INTERVAL / 10)
    try:
        change(workers, make_job(JobState.RUNNING), urgent=True)
        await owner.wait(lambda: len(owner.drawn) == 1)
        await clock.advance(INTERVAL / 2)
        await nothing_drawn_meanwhile(owner, 1)
        await clock.advance(INTERVAL / 2)
        await owner.wait(lambda: len(owner.drawn) == 2)
    finally:
        await workers.close()


async def test_without_a_refresh_nothing_is_drawn_unprompted() -> None:
    clock = ManualClock(100.0)
    owner = Owner(clock)
    workers = Workers(owner, clock=clock, interval=INTERVAL)
    try:
        change(workers, make_job(JobState.RUNNING), urgent=True)
        await owner.wait(lambda: len(owner.drawn) == 1)
        for _ in range(3):
            await clock.advance(REFRESH)
        await nothing_drawn_meanwhile(owner, 1)
    finally:
        await workers.close()


async def test_a_finished_job_stops_refreshing(manual: tuple[Workers, Owner, ManualClock]) -> None:
    workers, owner, clock = manual
    slot = change(workers, make_job(JobState.RUNNING), urgent=True)
    await owner.wait(lambda: len(owner.drawn) == 1)
    await clock.advance(REFRESH)
    change(workers, make_job(JobState.CANCELLED), urgent=True)
    await owner.wait(lambda: owner.drawn[-1] is JobState.CANCELLED)
    assert slot.task is not None
    await asyncio.wait_for(asyncio.shield(slot.task), 5)  # the worker ended
    count = len(owner.drawn)
    await clock.advance(REFRESH * 3)
    await nothing_drawn_meanwhile(owner, count)
    assert clock.sleepers == 0  # no timer left behind
