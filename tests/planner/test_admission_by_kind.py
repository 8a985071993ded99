"""Admission per kind of job: an image is not held behind videos waiting for the budget.

A real budget, store and queues; time is a ManualClock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framecast.values import JobKind
from framecast.values.service_requests import Priority
from tests.planner.jobs import create_through
from tests.planner.rigs import Rig as PlannerRig

INTERVAL = 30.0


class Rig(PlannerRig):
    """The planner rig, with images admitted and videos started as these tests need them."""

    async def images_admitted(self, running: int) -> int:
        """Admit images until the planner refuses one; how many it admitted. Each is created through
        its handle as the runner does (asking records nothing), and answered with its file at once:
        it no longer occupies the service, but its two requests hold the window's slots."""
        started = 0
        while self.planner.may_start(running, JobKind.IMAGE) and started < 100:
            await create_through(self.planner.plan(await self.job(kind=JobKind.IMAGE, running=False)))
            started += 1
        return started

    async def fill_with_videos(self) -> int:
        """Start videos until the budget can sustain no more; returns how many run."""
        running = 0
        while self.planner.may_start(running) and running < 100:
            pacer = self.planner.pacer(await self.job())
            pacer.next_poll(self.clock.monotonic(), None)  # its create went through
            running += 1
        return running


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with Rig.opened(tmp_path, interval=INTERVAL, scope=lambda g: g != 9) as rig:
        yield rig


async def test_an_image_starts_when_the_window_has_no_room_for_another_video(rig: Rig) -> None:
    running = await rig.fill_with_videos()
    assert not rig.planner.may_start(running, JobKind.VIDEO)
    assert rig.planner.may_start(running, JobKind.IMAGE)


async def test_images_started_within_the_window_count_against_it(rig: Rig) -> None:
    running = await rig.fill_with_videos()
    # Nothing is learned of the videos, so their planned polls are sent to learn them and yield to
    # images: the images' own requests of the window fill it, at most.
    started = await rig.images_admitted(running)
    assert started * 2 <= rig.budget.allowed
    assert started * 2 + rig.planner.demand() <= 2 * rig.budget.allowed  # the polls wait a window at most
    assert started >= 1
    assert not rig.planner.may_start(running, JobKind.IMAGE)  # their requests still hold slots
    await rig.clock.advance(rig.budget.window + 1)
    # A window later their requests are spent and gone; the videos' polls are what is planned now.
    assert rig.planner.may_start(running, JobKind.IMAGE)


async def test_images_go_before_polls_sent_only_to_learn_the_videos(rig: Rig) -> None:
    running = await rig.fill_with_videos()
    # Every video's next poll is one sent to learn it (nothing learned, younger than the prior):
    # it goes after creates in the budget, so images may take the window's room before them...
    assert all(t.learning for t in rig.planner.polls)
    started = await rig.images_admitted(running)
    assert started * 2 + rig.planner.demand() > rig.budget.allowed  # more than the window holds


async def test_a_video_create_waits_while_a_poll_sent_to_learn_a_video_is_due(rig: Rig) -> None:
    running = await rig.fill_with_videos()
    rig.planner.forget(next(iter(rig.planner.polls)).job_id)
    running -= 1
    assert rig.planner.may_start(running, JobKind.VIDEO)
    await rig.clock.advance(INTERVAL)
    # The polls are due and wait for the budget at the priority of polls that refresh progress:
    # a create would go before them there, so no video starts until they have gone (only images do).
    assert not rig.planner.may_start(running, JobKind.VIDEO)
    for task in rig.planner.polls:
        task.learning = False  # answered
    assert rig.planner.may_start(running, JobKind.VIDEO)


async def test_polls_that_will_see_a_result_keep_their_room_from_images(rig: Rig) -> None:
    running = await rig.fill_with_videos()
    for task in rig.planner.polls:
        task.learning = False  # as if each poll were expected to find its video done
    started = await rig.images_admitted(running)
    assert started * 2 + rig.planner.demand() <= rig.budget.allowed


async def test_a_waiting_image_goes_before_a_video_that_would_just_fit(rig: Rig) -> None:
    running = await rig.fill_with_videos()
    # Make room for exactly one more video (one task's planned polls gone).
    rig.planner.forget(next(iter(rig.planner.polls)).job_id)
    running -= 1
    assert rig.planner.may_start(running, JobKind.VIDEO)
    rig.queues.push(await rig.job(kind=JobKind.IMAGE, running=False))
    assert not rig.planner.may_start(running, JobKind.VIDEO)  # it leaves the image its two requests
    assert rig.planner.may_start(running, JobKind.IMAGE)


async def test_an_image_waiting_on_another_key_does_not_hold_videos_back(rig: Rig) -> None:
    running = await rig.fill_with_videos()
    rig.planner.forget(next(iter(rig.planner.polls)).job_id)
    rig.queues.push(await rig.job(9, kind=JobKind.IMAGE, running=False))  # guild 9 runs on another key
    assert rig.planner.may_start(running - 1, JobKind.VIDEO)


async def test_image_creates_may_wait_together_as_the_window_holds_them_but_one_video_create(
    rig: Rig,
) -> None:
    assert rig.planner.may_start(0, JobKind.IMAGE)
    assert rig.planner.may_start(1, JobKind.IMAGE)  # the budget serves them in the order they started
    assert rig.planner.may_start(7, JobKind.IMAGE)  # seven creates not through: 14 requests, and 2
    assert not rig.planner.may_start(8, JobKind.IMAGE)  # eight: the window holds no more
    assert not rig.planner.may_start(1, JobKind.VIDEO)  # one create (of either kind) is in flight


async def test_an_image_that_waited_a_whole_window_goes_before_any_video(rig: Rig) -> None:
    running = await rig.fill_with_videos()
    rig.planner.forget(next(iter(rig.planner.polls)).job_id)
    rig.planner.forget(next(iter(rig.planner.polls)).job_id)
    running -= 2
    rig.queues.push(await rig.job(kind=JobKind.IMAGE, running=False))
    assert rig.planner.may_start(running, JobKind.VIDEO)  # room for the video and the image: order decides
    await rig.clock.advance(rig.budget.window)
    for task in rig.planner.polls:
        task.learning = False  # the videos' due polls went and were answered meanwhile
    # The image still waits (its guild's turn has not come): no video is admitted before it starts.
    image = rig.queues.queued(1)[0]
    assert not rig.planner.may_start(running, JobKind.VIDEO)
    rig.queues.remove(image)  # cancelled: the videos' room is theirs again
    assert rig.planner.may_start(running, JobKind.VIDEO)


async def test_an_image_that_waited_a_whole_window_goes_before_the_polls_expected_to_see_a_result(
    rig: Rig,
) -> None:
    # A batch's completions coming due together fill the window with polls that will see a result:
    # an image keeps out of their way, but not for minutes (images waited behind a batch): once it has waited a
    # whole window it starts, and its create goes first in the budget.
    running = await rig.fill_with_videos()
    for task in rig.planner.polls:
        task.learning = False  # as if each poll were expected to find its video done
    await rig.images_admitted(running)  # whatever room those polls leave is taken by images
    image = await rig.job(kind=JobKind.IMAGE, running=False)
    rig.queues.push(image)
    assert not rig.planner.may_start(running, JobKind.IMAGE)
    assert rig.planner.create_priority(image) is Priority.NORMAL
    await rig.clock.advance(rig.budget.window)
    for task in rig.planner.polls:  # the polls planned meanwhile are as many and as likely
        task.next_at = rig.clock.monotonic()
        task.learning = False
    assert (
        rig.planner.polls.ahead_of_images(rig.clock.monotonic(), rig.budget.window) + 2 > rig.budget.allowed
    )
    assert rig.planner.may_start(running, JobKind.IMAGE)
    assert rig.planner.create_priority(image) is Priority.FIRST
    video = await rig.job(running=False)
    assert rig.planner.create_priority(video) is Priority.HIGH  # in turn with the polls, never before them


async def test_asking_records_nothing(rig: Rig) -> None:
    # Issue 34: admission is a question. The images it admits are counted once they are created
    # (through their handles, as the runner does), never because the scheduler asked.
    running = await rig.fill_with_videos()
    answers = [rig.planner.may_start(running, JobKind.IMAGE) for _ in range(30)]
    assert answers == [True] * 30
    assert rig.planner.key_now().occupied == running


async def test_an_images_requests_hold_the_window_from_when_its_create_is_sent(rig: Rig) -> None:
    running = await rig.fill_with_videos()
    started = await rig.images_admitted(running)
    assert started >= 1 and not rig.planner.may_start(running, JobKind.IMAGE)
    await rig.clock.advance(rig.budget.window + 1)
    assert rig.planner.may_start(running, JobKind.IMAGE)


async def test_a_create_in_flight_occupies_the_key_until_its_runner_lets_go(rig: Rig) -> None:
    job = await rig.job(running=False)

    async def paused() -> None:  # e.g. the store paused the job while its create was sent
        assert rig.planner.key_now().occupied == 1
        raise StorePaused

    with pytest.raises(StorePaused):
        await create_through(rig.planner.plan(job), paused)
    assert rig.planner.key_now().occupied == 1  # not a create failure: still in flight for all it knows
    rig.planner.release(job.id + 1)  # another job: nothing changes
    assert rig.planner.key_now().occupied == 1
    rig.planner.release(job.id)  # paused or failed mid-create (Accounts.unbind tells the planner)
    assert rig.planner.key_now().occupied == 0


class StorePaused(Exception):
    """What the runner's send raised that is no failure of the create."""
