"""What members are told between polls: "left" and "starts in", in constructed situations.

The pure parts (the poll rule, the duration cdf, the mean of when a task is seen done, the figure
shown among the polls that may see it) directly;
the forecast through a real planner (real store, budget and queues, a ManualClock).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framecast.planner.estimate import DurationCdf, expected_seen, likeliest_close
from framecast.planner.polls import PollPlan
from framecast.planner.survival import Survival
from framecast.planner.tuning import PlannerTuning
from framecast.service import TaskStatus
from framecast.values import Job, JobKind
from framecast.values.durations import DurationKey
from tests.fakes.clock import ManualClock
from tests.planner.jobs import VIDEO
from tests.planner.rigs import Rig as PlannerRig

LEARNED_AFTER = PlannerTuning().learned_after
INTERVAL = 30.0
# The images queued here (an image model of their own, passed as `params`; nothing is learned of it).
IMAGE = {"model": "svc-image-v1", "prompt": "p", "size": "1024x1024"}


# -- the pure parts ---------------------------------------------------------------------------------


def first_poll_at(end: float, planned: float, *, interval: float, max_interval: float) -> float:
    """The plan's first poll that sees an end, with the forecast's slack (a twentieth of an interval)."""
    model = Survival(priors={"video": 120.0, "image": 20.0})
    plan = PollPlan(clock=ManualClock(), durations=model, interval=interval, max_interval=max_interval)
    return plan.first_poll_at(end, planned, slack=0.05 * interval)


def test_the_poll_that_sees_a_known_end_follows_the_planners_rule() -> None:
    # The planned poll is after the end: that one sees it.
    assert first_poll_at(50, 60, interval=30, max_interval=180) == 60
    # The end is later: the next poll is aimed at it (an interval after the last one at the least).
    assert first_poll_at(100, 60, interval=30, max_interval=180) == 100
    assert first_poll_at(70, 60, interval=30, max_interval=180) == 90
    # Never longer apart than the longest gap: a far end takes several polls to reach.
    assert first_poll_at(500, 60, interval=30, max_interval=180) == 500
    assert first_poll_at(500, 60, interval=30, max_interval=100) == 500
    assert first_poll_at(430, 0, interval=30, max_interval=100) == 430


def test_the_duration_cdf_inverts_the_quantiles() -> None:
    model = Survival(priors={"video": 120.0, "image": 20.0})
    key = DurationKey.for_params(VIDEO)
    assert key is not None
    cdf = DurationCdf(lambda q: model.quantile(key, q))
    for q in (0.1, 0.3, 0.5, 0.7, 0.9):
        assert cdf(model.quantile(key, q)) == pytest.approx(q, abs=0.01)
    ages = [0, 10, 60, 120, 200, 400, 2000]
    values = [cdf(a) for a in ages]
    assert values == sorted(values) and values[0] == 0.0 and values[-1] <= 1.0


def test_the_mean_of_when_a_poll_sees_it_done() -> None:
    polls = [100.0, 130.0, 160.0]
    # 30 % done by the first poll, 80 % by the second, the rest by the last.
    chances = {100.0: 0.3, 130.0: 0.8}
    assert expected_seen(polls, chances.__getitem__) == pytest.approx(0.3 * 100 + 0.5 * 130 + 0.2 * 160)
    # Surely done by the first: that one. No chance before the last: the last one.
    assert expected_seen(polls, lambda at: 1.0) == 100
    assert expected_seen(polls, lambda at: 0.0) == 160
    # A chance that seems to fall (a noisy estimate) never makes a poll count negatively.
    assert expected_seen(polls, {100.0: 0.5, 130.0: 0.4}.__getitem__) == pytest.approx(50 + 0.5 * 160)


def test_left_shows_a_figure_within_a_fifth_of_either_poll_when_one_exists() -> None:
    # First poll in 90 s or the next in 120 s, even odds: 96 s is within 20 % of both (the mean,
    # 105 s, is too; 96 s is off by less on average, relative to each wait).
    shown = likeliest_close([90.0, 120.0], [0.5, 0.5], floor=30.0, within=0.2)
    assert shown == pytest.approx(96.0)
    assert abs(shown - 90) <= 0.2 * 90 and abs(shown - 120) <= 0.2 * 120


def test_left_bets_on_the_likelier_poll_when_none_is_close_to_both() -> None:
    # 10 s or 40 s: nothing is within a fifth of both, and the mean (31 s) is far from either.
    assert likeliest_close([10.0, 40.0], [0.3, 0.7], floor=30.0, within=0.2) == 40.0
    assert likeliest_close([10.0, 40.0], [0.7, 0.3], floor=30.0) == 10.0
    # A single possible poll: that one.
    assert likeliest_close([75.0], [1.0], floor=30.0) == 75.0


# -- through the planner ----------------------------------------------------------------------------


class Rig(PlannerRig):
    """The planner rig, with durations taught by tasks seen done."""

    async def teach(self, seconds: float, times: int = LEARNED_AFTER) -> None:
        """Let `times` videos finish after `seconds` (each seen done by a poll right then)."""
        for _ in range(times):
            job = await self.job()
            pacer = self.planner.pacer(job)
            await self.clock.advance(seconds)
            pacer.observed(TaskStatus("completed", 1.0, "http://x/v.mp4"))
            await self.planner.finished(job, completed=True)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with Rig.opened(tmp_path, interval=INTERVAL) as rig:
        yield rig


async def test_left_counts_to_the_poll_that_sees_the_task_done(rig: Rig) -> None:
    # 90 % after 30 s: the service is done at about 33 s, but the next poll may come only an
    # interval after the last: "Generating…" lasts until 60 s, and that is what is shown.
    job = await rig.job()
    pacer = rig.planner.pacer(job)
    start = rig.clock.monotonic()
    pacer.next_poll(start, None)
    await rig.clock.advance(INTERVAL)
    pacer.observed(TaskStatus("pending", 0.9))
    when, _ = pacer.next_poll(rig.clock.monotonic(), rig.clock.monotonic())
    left = rig.planner.estimate(job).remaining
    assert left == pytest.approx(when - rig.clock.monotonic()) and left == pytest.approx(INTERVAL)


async def test_left_aims_at_the_planned_poll_just_after_the_predicted_end(rig: Rig) -> None:
    # 25 % after 30 s: done at about 120 s; the planner polls a little after that, and "left" says so.
    job = await rig.job()
    pacer = rig.planner.pacer(job)
    pacer.next_poll(rig.clock.monotonic(), None)
    await rig.clock.advance(INTERVAL)
    pacer.observed(TaskStatus("pending", 0.25))
    when, _ = pacer.next_poll(rig.clock.monotonic(), rig.clock.monotonic())
    left = rig.planner.estimate(job).remaining
    assert left is not None and 90 < left <= 100
    assert left == pytest.approx(when - rig.clock.monotonic())


async def test_without_progress_an_overdue_task_still_has_time_left(rig: Rig) -> None:
    # Videos take 150 s; this one was seen pending at 150 s: it is not "finishing" — the next poll
    # (an interval later at the least) is the earliest that can see it done.
    await rig.teach(150.0)
    job = await rig.job()
    pacer = rig.planner.pacer(job)
    first, _ = pacer.next_poll(rig.clock.monotonic(), None)
    shown = rig.planner.estimate(job)
    assert shown.progress is None  # no figure is made up
    # The first poll, at the learned median, likely sees it done; the later ones weigh a little.
    assert shown.remaining is not None
    assert first - rig.clock.monotonic() <= shown.remaining < first - rig.clock.monotonic() + INTERVAL
    await rig.clock.advance(first - rig.clock.monotonic())
    pacer.observed(TaskStatus("pending", None))
    when, _ = pacer.next_poll(rig.clock.monotonic(), rig.clock.monotonic())
    left = rig.planner.estimate(job).remaining
    assert left is not None and left >= when - rig.clock.monotonic() >= INTERVAL


async def test_a_queue_on_a_spent_key_starts_when_its_window_frees_not_a_pace_apart(rig: Rig) -> None:
    # The key's window is spent now: its sixteen slots free together a window later, and the six
    # queued videos' creates go out then (the scheduler sends them as fast as slots free), so each is
    # told "a minute", not a pace of 13 s a job that has them trickle out.
    await rig.spend(rig.budget.allowed)
    queued = [await rig.job(running=False) for _ in range(6)]
    for job in queued:
        rig.queues.push(job)
    starts = [rig.planner.estimate(job).starts_in for job in queued]
    assert starts == pytest.approx([60.0] * 6)


async def test_a_queue_on_a_busy_key_starts_as_its_slots_free(rig: Rig) -> None:
    # Slots spent one every 60/16 s over the last window free the same way: one create each, the
    # first when the oldest slot frees.
    await rig.spend(rig.budget.allowed, every=60.0 / 16)
    queued = [await rig.job(running=False) for _ in range(3)]
    for job in queued:
        rig.queues.push(job)
    starts = [rig.planner.estimate(job).starts_in for job in queued]
    assert starts == pytest.approx([60.0 / 16, 2 * 60.0 / 16, 3 * 60.0 / 16])


async def test_the_first_tasks_polled_every_interval_do_not_count_in_what_a_task_costs(rig: Rig) -> None:
    # Until a few videos have finished nothing is known of their end, so each is polled every
    # interval: five polls for a 150 s video. The jobs queued behind them will cost what a task
    # costs once durations are learned, which the first ones do not say: how many windows' worth
    # wait (where a new task's first poll starts on the ladder) does not grow with them.
    async def run(polls_until_done: int) -> None:
        job = await rig.job()
        pacer = rig.planner.pacer(job)
        last = None
        for n in range(polls_until_done):
            now = rig.clock.monotonic()
            when, _ = pacer.next_poll(now, last)
            await rig.clock.advance(max(0.0, when - now))
            last = rig.clock.monotonic()
            done = n == polls_until_done - 1
            pacer.observed(
                TaskStatus("completed", 1.0, "http://x/v.mp4") if done else TaskStatus("pending", None)
            )
        await rig.planner.finished(job, completed=True)

    queued = await rig.job(running=False)
    rig.queues.push(queued)
    before = rig.planner.polls.first_rung()
    for _ in range(LEARNED_AFTER):
        await run(5)
    assert rig.planner.polls.first_rung() == pytest.approx(before)
    await run(2)  # seen done at its second poll: four requests, more than the least a video costs
    assert rig.planner.polls.first_rung() > before  # fewer jobs a window: the queue is a longer wait


async def test_videos_wait_for_the_images_waiting_on_the_key(rig: Rig) -> None:
    await rig.spend(rig.budget.allowed, every=60.0 / 16)  # a slot frees every 60/16 s
    video = await rig.job(running=False)
    rig.queues.push(video)
    before = rig.planner.estimate(video).starts_in
    images = [await rig.job(guild=2, kind=JobKind.IMAGE, params=IMAGE, running=False) for _ in range(3)]
    for image in images:
        rig.queues.push(image)
    after = rig.planner.estimate(video).starts_in
    assert before is not None and after is not None
    # Images go first: the scheduler sends one create at a time, so the video starts once the
    # images' creates have gone out, each image's download before the next one's create (the
    # budget serves a download before a create).
    assert after - before == pytest.approx(5 * 60 / 16)


async def test_behind_a_cap_the_queue_starts_as_tasks_are_seen_done(rig: Rig) -> None:
    # One task at a time; the running one is half-way at its first poll: seen done by the poll
    # aimed just after its end, and the next job then runs as long as a new task takes.
    await rig.teach(200.0)
    planner = await rig.reopen(ceiling=1)
    running = await rig.job()
    pacer = planner.pacer(running)
    planned, _ = pacer.next_poll(rig.clock.monotonic(), None)
    await rig.clock.advance(planned - rig.clock.monotonic())  # polled on time
    pacer.observed(TaskStatus("pending", 0.5))
    when, _ = pacer.next_poll(rig.clock.monotonic(), rig.clock.monotonic())
    assert not planner.may_start(1)
    queued = [await rig.job(running=False) for _ in range(2)]
    for job in queued:
        rig.queues.push(job)
    first, second = (planner.estimate(job).starts_in for job in queued)
    assert first is not None and second is not None
    # Never before the poll that frees the slot: a start shown sooner would be optimistic.
    assert first == pytest.approx(when - rig.clock.monotonic())
    typical = planner._forecast.typical_seen(queued[1])
    key = DurationKey.for_params(VIDEO)
    assert key is not None
    # The mean of when a new task is seen done: its first poll at the median, later ones after it.
    assert typical is not None and typical >= planner.polls.quantile(key, 0.5)
    assert second == pytest.approx(first + typical)


async def test_behind_a_cap_a_task_let_go_holds_a_slot_until_it_ends_and_starts_in_says_so(
    rig: Rig,
) -> None:
    # One task at a time, and it was cancelled: the service still runs it, so the ceiling left is
    # 0 and nothing runs here. "Starts in" raised IndexError (a traceback per redraw); now the
    # queue starts when the task let go stops counting, one typical task apart.
    await rig.teach(200.0)
    planner = await rig.reopen(ceiling=1)
    running = await rig.job()
    planner.pacer(running)
    planner.forget(running.id)
    assert planner.ceiling() == 0
    queued = [await rig.job(running=False) for _ in range(2)]
    for job in queued:
        rig.queues.push(job)
    first, second = (planner.estimate(job).starts_in for job in queued)
    [ends] = planner.key_now().abandoned
    typical = planner._forecast.typical_seen(queued[1])
    assert typical is not None and first is not None and second is not None
    assert first == pytest.approx(ends) and second == pytest.approx(ends + typical)


async def test_with_more_tasks_let_go_than_the_cap_a_slot_frees_when_fewer_than_the_cap_are_left(
    rig: Rig,
) -> None:
    await rig.teach(200.0)
    planner = await rig.reopen(ceiling=1)
    first = await rig.job()
    planner.pacer(first)
    planner.forget(first.id)
    await rig.clock.advance(INTERVAL)
    second = await rig.job()
    planner.pacer(second)
    planner.forget(second.id)
    [frees] = planner.key_now().abandoned  # one slot, free once both ended: the later end
    queued = await rig.job(running=False)
    rig.queues.push(queued)
    assert planner.estimate(queued).starts_in == pytest.approx(frees)
    assert frees == pytest.approx(planner._abandoned[second.id] - rig.clock.monotonic())


async def test_left_counts_to_the_poll_as_planned_even_after_late_polls(rig: Rig) -> None:
    # The budget has made a poll wait 10 s past its planned time. "left" still counts to the next
    # poll as planned: the poll that sees a task done goes first in the budget, and in
    # bench_planner.py the measured lateness added to it made "left" worse, not better.
    job = await rig.job()
    pacer = rig.planner.pacer(job)
    planned, _ = pacer.next_poll(rig.clock.monotonic(), None)
    await rig.clock.advance(planned - rig.clock.monotonic() + 10)
    pacer.observed(TaskStatus("pending", 0.9))
    when, _ = pacer.next_poll(rig.clock.monotonic(), rig.clock.monotonic())
    left = rig.planner.estimate(job).remaining
    assert left == pytest.approx(when - rig.clock.monotonic())


async def busy_tasks(rig: Rig, count: int) -> tuple[list[Job], float]:
    """`count` videos half-way at their first poll, all predicted to end together; their next poll."""
    jobs = [await rig.job() for _ in range(count)]
    pacers = [rig.planner.pacer(job) for job in jobs]
    for pacer in pacers:
        pacer.next_poll(rig.clock.monotonic(), None)
    await rig.clock.advance(INTERVAL)
    for pacer in pacers:
        pacer.observed(TaskStatus("pending", 0.5))
    whens = {pacer.next_poll(rig.clock.monotonic(), rig.clock.monotonic())[0] for pacer in pacers}
    assert len(whens) == 1  # due at the same moment
    return jobs, whens.pop()


async def test_left_counts_the_polls_due_before_it_when_the_key_has_no_slot_free(rig: Rig) -> None:
    # Twenty polls fall due together on a key whose window is spent now: they go out when its
    # slots free, a window later, each followed by its download as admission counts it (sixteen
    # slots: eight polls and eight downloads); the next eight go a window after that, the last
    # four a window later still. A member whose poll is in a later lot is told so, not shown the
    # plan (polls 20-60 s late early in a batch made "left" optimistic by half).
    jobs, when = await busy_tasks(rig, 20)
    await rig.spend(rig.budget.allowed)
    now = rig.clock.monotonic()
    assert when < now + 60.0
    lefts = [rig.planner.estimate(job).remaining for job in jobs]
    assert lefts == pytest.approx([60.0] * 8 + [120.0] * 8 + [180.0] * 4)


async def test_slots_free_now_let_the_first_due_polls_go_as_planned(rig: Rig) -> None:
    # The same six polls on an idle key: ten polls' worth of slots are free, so none waits.
    jobs, when = await busy_tasks(rig, 6)
    assert rig.budget.available() == rig.budget.allowed
    lefts = [rig.planner.estimate(job).remaining for job in jobs]
    assert lefts == pytest.approx([when - rig.clock.monotonic()] * 6)


async def test_left_counts_the_images_that_have_waited_a_window_before_the_polls(rig: Rig) -> None:
    # Images that have waited a whole window go before the polls expected to see a result (the
    # planner's rule): their two creates take two of the slots the polls wait for (their downloads
    # queue behind the polls already waiting).
    for _ in range(2):
        rig.queues.push(await rig.job(kind=JobKind.IMAGE, params=IMAGE, running=False))
    await rig.clock.advance(60.0)
    jobs, _ = await busy_tasks(rig, 20)
    await rig.spend(rig.budget.allowed)
    lefts = [rig.planner.estimate(job).remaining for job in jobs]
    assert lefts == pytest.approx([60.0] * 7 + [120.0] * 8 + [180.0] * 5)  # one poll fewer in the first lot


async def test_a_queued_video_waits_for_the_creates_in_flight(rig: Rig) -> None:
    # A slot frees every 60/16 s. A video admitted a moment ago has its create waiting for the
    # budget: the policy starts no video while a create is in flight, so the queued one starts on
    # the slot after it (the play ignored it: at 110 % load "starts in" came out 30-40 % early).
    await rig.spend(rig.budget.allowed, every=60.0 / 16)
    queued = await rig.job(running=False)
    rig.queues.push(queued)
    before = rig.planner.estimate(queued).starts_in
    rig.planner.create_sent(await rig.job())
    rig.queues.push(await rig.job(running=False))  # the queues changed: the play is played again
    after = rig.planner.estimate(queued).starts_in
    assert before == pytest.approx(60.0 / 16)
    assert after == pytest.approx(2 * 60.0 / 16)
