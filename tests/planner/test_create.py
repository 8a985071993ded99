"""A job's create through its handle (``PlannedJob.create``): what the planner knows of it at each
moment, however the create ends.

The handle is the one place that tells the planner a create was sent, went through or failed, and
how its next attempt waits. A real planner, budget, store and queues on a ManualClock; the service
is a script: each attempt the handle sends waits for the answer the test gives it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from framecast.jobs.job_keys import CreateFailure
from framecast.values import Job
from framecast.values.service_requests import Priority, RefusalKind
from tests.planner.rigs import Rig as PlannerRig

INTERVAL = 30.0
MAX_INTERVAL = 6 * INTERVAL


class Refused(Exception):
    """The scripted service's answer to an attempt that failed, as the runner judged it."""

    def __init__(self, failure: CreateFailure) -> None:
        super().__init__(failure)
        self.failure = failure


def judged(exc: Exception) -> CreateFailure | None:
    """The runner's judgement of what an attempt raised: the script's failures, nothing else."""
    return exc.failure if isinstance(exc, Refused) else None


class Service:
    """Each create attempt: its priority told to the test (`sent`), then the test's answer awaited."""

    def __init__(self) -> None:
        self.sent: asyncio.Queue[Priority] = asyncio.Queue()
        self._answers: asyncio.Queue[CreateFailure | None] = asyncio.Queue()

    async def send(self, sent_now: Callable[[], Priority]) -> str:
        self.sent.put_nowait(sent_now())
        failure = await self._answers.get()
        if failure is not None:
            raise Refused(failure)
        return "task-1"

    def through(self) -> None:
        self._answers.put_nowait(None)

    def fails(self, refusal: RefusalKind | None, retry_in: float | None) -> None:
        self._answers.put_nowait(CreateFailure(refusal, retry_in))


@dataclasses.dataclass
class Rig(PlannerRig):
    """The planner rig, with the scripted service and the backoffs the handle waits through."""

    service: Service = dataclasses.field(default_factory=Service)
    #: each backoff the handle waits through `sleep`, as it starts
    waits: asyncio.Queue[float] = dataclasses.field(default_factory=asyncio.Queue)

    async def running(self, n: int) -> list[Job]:
        """`n` of the key's tasks on the service (created, polled)."""
        jobs = []
        for _ in range(n):
            job = await self.job()
            self.planner.pacer(job)
            jobs.append(job)
        return jobs

    async def sleep(self, seconds: float) -> None:
        self.waits.put_nowait(seconds)
        await self.clock.sleep(seconds)

    def create(self, job: Job) -> asyncio.Task[str]:
        """`job`'s create through its handle, as the runner sends it."""
        plan = self.planner.plan(job)
        return asyncio.create_task(plan.create(self.service.send, failure=judged, sleep=self.sleep))

    def in_flight(self) -> int:
        """Video creates the planner counts as sent and not answered."""
        videos, _ = self.planner.creates_in_flight()
        return videos

    def occupied(self) -> int:
        """What occupies the key: its tasks, creates in flight, creates backing off after an error."""
        return self.planner.key_now().occupied


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with Rig.opened(tmp_path, interval=INTERVAL, max_interval=MAX_INTERVAL) as rig:
        yield rig


async def test_a_create_is_in_flight_while_sent_and_no_more_once_through(rig: Rig) -> None:
    job = await rig.job(running=False)
    creating = rig.create(job)
    assert await rig.service.sent.get() is Priority.HIGH  # a video's create: in turn with the polls
    assert rig.in_flight() == 1 and rig.occupied() == 1
    rig.service.through()
    assert await creating == "task-1"
    assert rig.in_flight() == 0 and rig.occupied() == 0


async def test_a_create_refused_for_the_keys_tasks_at_once_waits_for_one_to_end_then_is_sent_again(
    rig: Rig,
) -> None:
    tasks = await rig.running(2)
    creating = rig.create(await rig.job(running=False))
    await rig.service.sent.get()
    rig.service.fails(RefusalKind.CONCURRENCY, retry_in=2.0)
    await rig.clock.advance(10.0)  # far past the backoff: no timer, it waits for room
    assert rig.planner.ceiling() == 2  # held at what runs
    assert rig.in_flight() == 0 and rig.occupied() == 2  # neither in flight nor backing off
    assert rig.service.sent.empty() and rig.waits.empty()
    await rig.planner.finished(tasks[0], completed=False)  # one of the key's tasks ended: room
    await rig.service.sent.get()
    assert rig.in_flight() == 1
    rig.service.through()
    await creating
    assert rig.in_flight() == 0 and rig.occupied() == 1


async def test_a_create_the_service_failed_backs_off_out_of_flight_then_is_sent_again(rig: Rig) -> None:
    creating = rig.create(await rig.job(running=False))
    await rig.service.sent.get()
    assert not rig.planner.may_start(1)  # its create is in flight: the next video waits
    rig.service.fails(None, retry_in=10.0)
    assert await rig.waits.get() == 10.0
    assert rig.in_flight() == 0 and rig.occupied() == 1  # backing off: it still holds its place
    assert rig.planner.may_start(1)  # but it is not the one create in flight: the next may start
    assert rig.planner.ceiling() is None  # an error of the service is no pushback
    await rig.clock.advance(10.0)
    await rig.service.sent.get()
    assert rig.in_flight() == 1 and not rig.planner.may_start(1)  # tried again: in flight once more
    rig.service.through()
    await creating
    assert rig.in_flight() == 0 and rig.occupied() == 0


async def test_a_create_refused_for_the_keys_rate_lowers_the_ceiling_and_is_sent_again_after_its_backoff(
    rig: Rig,
) -> None:
    await rig.running(2)
    creating = rig.create(await rig.job(running=False))
    await rig.service.sent.get()
    rig.service.fails(RefusalKind.RATE, retry_in=5.0)
    assert await rig.waits.get() == 5.0
    assert rig.planner.ceiling() == 2  # pushed back: no more tasks than run now, for a while
    assert rig.in_flight() == 0 and rig.occupied() == 2
    await rig.clock.advance(5.0)
    await rig.service.sent.get()
    rig.service.through()
    await creating
    assert rig.planner.ceiling() == 3  # a create through: one more


async def test_a_create_given_up_raises_its_error_at_once_and_leaves_nothing_of_it(rig: Rig) -> None:
    await rig.running(2)
    creating = rig.create(await rig.job(running=False))
    await rig.service.sent.get()
    rig.service.fails(RefusalKind.RATE, retry_in=None)
    with pytest.raises(Refused):
        await creating
    assert rig.waits.empty() and rig.clock.sleepers == 0  # no wait before the error goes on
    assert rig.planner.ceiling() == 2  # the pushback is learned all the same
    assert rig.in_flight() == 0 and rig.occupied() == 2


async def test_a_create_cancelled_while_it_backs_off_after_an_error_leaves_the_key_unoccupied(
    rig: Rig,
) -> None:
    creating = rig.create(await rig.job(running=False))
    await rig.service.sent.get()
    rig.service.fails(None, retry_in=10.0)
    await rig.waits.get()
    assert rig.occupied() == 1  # backing off
    creating.cancel()
    with pytest.raises(asyncio.CancelledError):
        await creating
    assert rig.in_flight() == 0 and rig.occupied() == 0  # the cancelled job holds nothing of the key
    await rig.clock.advance(10.0)
    assert rig.service.sent.empty()  # and never tries again


async def test_a_create_cancelled_while_it_waits_for_room_is_never_sent_again_and_holds_nothing(
    rig: Rig,
) -> None:
    tasks = await rig.running(2)
    creating = rig.create(await rig.job(running=False))
    await rig.service.sent.get()
    rig.service.fails(RefusalKind.CONCURRENCY, retry_in=2.0)
    await rig.clock.advance(0.0)  # the refusal is learned; the create waits for room
    creating.cancel()
    with pytest.raises(asyncio.CancelledError):
        await creating
    await rig.planner.finished(tasks[0], completed=False)  # room: nobody is left to wake
    await rig.clock.advance(MAX_INTERVAL)
    assert rig.service.sent.empty()
    assert rig.in_flight() == 0 and rig.occupied() == 1


async def test_a_create_stopped_before_it_is_sent_never_counts_for_the_key(rig: Rig) -> None:
    plan = rig.planner.plan(await rig.job(running=False))

    async def lease_lost(sent_now: Callable[[], Priority]) -> str:
        raise LookupError("the job's lease was lost before its create was sent")

    with pytest.raises(LookupError):
        await plan.create(lease_lost, failure=judged, sleep=rig.sleep)
    assert rig.in_flight() == 0 and rig.occupied() == 0  # nothing for the runner's unbind to undo
