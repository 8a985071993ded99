"""The planner's decisions in constructed situations: which request the next slot buys, and when.

A real store (durations persist), a real budget and real queues; time is a ManualClock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framecast.planner.tuning import PlannerTuning
from framecast.service import TaskStatus
from framecast.values import JobKind
from framecast.values.durations import DurationKey
from framecast.values.service_requests import Priority
from tests.planner.jobs import VIDEO
from tests.planner.rigs import Rig

LEARNED_AFTER = PlannerTuning().learned_after
INTERVAL = 30.0


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with Rig.opened(tmp_path, interval=INTERVAL) as rig:
        yield rig


async def teach(rig: Rig, seconds: float, times: int = LEARNED_AFTER) -> None:
    """Let `times` tasks of the VIDEO kind finish after `seconds`, polled every interval meanwhile."""
    for _ in range(times):
        job = await rig.job()
        pacer = rig.planner.pacer(job)
        elapsed = 0.0
        while elapsed + INTERVAL < seconds:
            await rig.clock.advance(INTERVAL)
            elapsed += INTERVAL
            pacer.observed(TaskStatus("pending", None))
        await rig.clock.advance(INTERVAL)
        pacer.observed(TaskStatus("completed", 1.0, "http://x/v.mp4"))
        await rig.planner.finished(job, completed=True)


async def test_nothing_learned_yet_polls_every_interval_at_progress_priority_until_the_prior_age(
    rig: Rig,
) -> None:
    job = await rig.job()
    pacer = rig.planner.pacer(job)
    start = rig.clock.monotonic()
    when, priority = pacer.next_poll(start, None)
    # Sent to learn the task (the prior says videos take 4 intervals): after creates in the budget.
    assert (when, priority) == (start + INTERVAL, Priority.PROGRESS)
    for n in range(1, 4):
        await rig.clock.advance(INTERVAL)
        pacer.observed(TaskStatus("pending", None))
        now = rig.clock.monotonic()
        assert pacer.next_poll(now, now)[0] == start + (n + 1) * INTERVAL  # still every interval
    # As old as the prior says such tasks take: the poll may see the result, so it goes first.
    assert pacer.next_poll(now, now)[1] == Priority.HIGH


async def test_a_planner_opened_with_a_tuning_learns_a_kind_after_that_tunings_scouts(rig: Rig) -> None:
    # Two scouts: the kind is learned once one task finished (every scout but the slowest), where
    # the default tuning waits for three.
    key = DurationKey.for_params(VIDEO)
    rig.planner = await rig.open_planner(tuning=PlannerTuning(scouts=2))
    await teach(rig, 90.0, times=1)
    assert rig.planner.polls.learned(key)
    rig.planner = await rig.open_planner()
    await teach(rig, 90.0, times=1)
    assert not rig.planner.polls.learned(key)


async def test_progress_slope_times_the_poll_that_finds_it_done(rig: Rig) -> None:
    job = await rig.job()
    pacer = rig.planner.pacer(job)
    t0 = rig.clock.monotonic()
    await rig.clock.advance(INTERVAL)
    pacer.observed(TaskStatus("pending", 0.25))  # a quarter done after 30 s: 120 s in all
    when, priority = pacer.next_poll(rig.clock.monotonic(), rig.clock.monotonic())
    assert priority is Priority.HIGH
    assert t0 + 120 <= when <= t0 + 120 + 0.1 * INTERVAL  # just after the predicted end, not every 30 s


async def test_a_task_predicted_far_from_done_waits_but_never_past_the_bound(rig: Rig) -> None:
    job = await rig.job()
    pacer = rig.planner.pacer(job)
    t0 = rig.clock.monotonic()
    await rig.clock.advance(INTERVAL)
    pacer.observed(TaskStatus("pending", 0.01))  # 1 % after 30 s: about 50 minutes to go
    now = rig.clock.monotonic()
    when, priority = pacer.next_poll(now, now)
    assert when == now + 6 * INTERVAL  # the bound, so a wrong estimate corrects itself
    assert priority is Priority.PROGRESS  # only refreshes progress: after creates in the budget
    assert when > t0


async def test_never_more_often_than_the_poll_interval(rig: Rig) -> None:
    job = await rig.job()
    pacer = rig.planner.pacer(job)
    await rig.clock.advance(INTERVAL)
    pacer.observed(TaskStatus("pending", 0.99))  # done "any moment now"
    now = rig.clock.monotonic()
    when, _ = pacer.next_poll(now, now)
    assert when >= now + INTERVAL


async def test_without_progress_the_learned_median_times_the_first_poll(rig: Rig) -> None:
    await teach(rig, 150.0)
    job = await rig.job()
    pacer = rig.planner.pacer(job)
    t0 = rig.clock.monotonic()
    when, priority = pacer.next_poll(t0, None)
    assert 120 <= when - t0 <= 165 and priority is Priority.HIGH  # learned: finished in 120..150 s
    # Still pending there: the next poll aims at a later quantile, at least one interval on.
    await rig.clock.advance(when - t0)
    pacer.observed(TaskStatus("pending", None))
    now = rig.clock.monotonic()
    later, _ = pacer.next_poll(now, now)
    assert later >= now + INTERVAL


async def test_while_a_window_of_members_waits_for_the_key_first_polls_wait_for_a_likely_result(
    rig: Rig,
) -> None:
    # A poll that finds the task still running spends a request every queued member waits for:
    # while they wait, the first poll comes when most such tasks are done.
    await teach(rig, 150.0)
    quiet = rig.planner.pacer(await rig.job())
    t0 = rig.clock.monotonic()
    quiet_at, _ = quiet.next_poll(t0, None)
    for _ in range(rig.budget.allowed):  # more than a window's worth: a task costs 3 requests at least
        rig.queues.push(await rig.job(running=False))
    crowded = rig.planner.pacer(await rig.job())
    crowded_at, priority = crowded.next_poll(t0, None)
    assert crowded_at > quiet_at and priority is Priority.HIGH
    # Only the guilds on this key count: a planner for another key sees a quiet key.
    other_key = await rig.planner_for(lambda guild: guild != 1)
    assert other_key.polls.first_rung() < rig.planner.polls.first_rung()


async def test_learned_durations_survive_a_restart(rig: Rig) -> None:
    await teach(rig, 150.0)
    planner = await rig.reopen()
    job = await rig.job()
    t0 = rig.clock.monotonic()
    when, _ = planner.pacer(job).next_poll(t0, None)
    assert 120 <= when - t0 <= 165


async def test_a_restored_task_keeps_its_first_poll_relative_to_its_creation(rig: Rig) -> None:
    job = await rig.job()
    await rig.clock.advance(20)
    when, _ = rig.planner.pacer(job).next_poll(rig.clock.monotonic(), None)
    assert when == pytest.approx(rig.clock.monotonic() + INTERVAL - 20)


async def test_a_restored_task_waits_a_whole_interval_after_its_last_recorded_poll(rig: Rig) -> None:
    # Created long ago, last polled (recorded on the job) 5 s before the restart: the first poll of
    # the restarted bot must not come sooner than one interval after that poll.
    job = await rig.job()
    await rig.clock.advance(95)
    job = dataclasses.replace(job, updated_at=rig.clock.time())
    await rig.clock.advance(5)
    planner = await rig.reopen()
    when, _ = planner.pacer(job).next_poll(rig.clock.monotonic(), None)
    assert when == pytest.approx(rig.clock.monotonic() + INTERVAL - 5)


async def test_a_restored_task_recorded_in_the_future_is_not_postponed_for_ever(rig: Rig) -> None:
    job = await rig.job()
    job = dataclasses.replace(job, updated_at=rig.clock.time() + 10_000)  # the clock went back
    await rig.clock.advance(40)
    when, _ = rig.planner.pacer(job).next_poll(rig.clock.monotonic(), None)
    assert when <= rig.clock.monotonic() + INTERVAL


async def test_admission_starts_tasks_while_the_budget_can_sustain_them(rig: Rig) -> None:
    planner = rig.planner
    running = 0
    while planner.may_start(running) and running < 100:
        job = await rig.job()
        planner.pacer(job).next_poll(rig.clock.monotonic(), None)  # its create went through
        running += 1
    # Nothing learned: every task polls every 30 s, so two polls each fit in the 60-s window.
    assert 5 <= running <= 8, running
    assert not planner.may_start(running)
    assert planner.demand() + 1 > rig.budget.allowed


async def start_until_refused(rig: Rig, running: int = 0) -> int:
    """Start videos (their creates going through at once) until admission refuses; how many run."""
    while rig.planner.may_start(running) and running < 100:
        job = await rig.job()
        rig.planner.pacer(job).next_poll(rig.clock.monotonic(), None)
        running += 1
    return running


async def start_admitted(rig: Rig, count: int) -> int:
    """Start `count` videos, each admitted (their creates going through at once); how many run."""
    for running in range(count):
        assert rig.planner.may_start(running)
        job = await rig.job()
        rig.planner.pacer(job).next_poll(rig.clock.monotonic(), None)
    return count


async def test_while_the_next_window_is_mostly_free_videos_start_whatever_later_windows_hold(
    rig: Rig,
) -> None:
    # Videos known to take about 165 s: none of their polls is due in the next window. The key
    # would idle now, and a slot left idle is lost for good, whereas polls that crowd a later
    # window only wait a little for the one after it: they start (their creates paced by the
    # budget, one at a time). Over the horizon (VideoAdmission) once the next window is half full.
    await teach(rig, 170.0)
    running = await start_admitted(rig, 25)
    assert rig.planner.demand() == 0
    # Their polls come due together: more than the next three windows hold (each a poll and a
    # download), so nothing lends a create a slot and creates wait.
    await rig.clock.advance(2 * rig.budget.window)
    assert 2 * running + 1 > 3 * rig.budget.allowed
    assert not rig.planner.may_start(running)


async def test_a_full_window_lends_a_create_its_slot_while_the_windows_after_it_have_room(rig: Rig) -> None:
    # A batch's completions coming due together fill the next window, but the three windows from
    # now have room for them and one more create: the video starts, its create in turn with those
    # polls (once held until they were all delivered, the key then idled while it ran).
    await teach(rig, 170.0)
    running = await start_admitted(rig, 20)
    await rig.clock.advance(2 * rig.budget.window)
    assert rig.planner.demand() > rig.budget.allowed
    assert 2 * running + 1 <= 3 * rig.budget.allowed
    assert rig.planner.may_start(running)
    assert rig.planner.create_priority(await rig.job()) is Priority.HIGH
    # An image waiting: it goes first, within the window; nothing lends past it.
    rig.queues.push(dataclasses.replace(await rig.job(running=False), kind=JobKind.IMAGE))
    assert not rig.planner.may_start(running)


async def test_polls_due_in_this_window_are_never_starved_by_creates(rig: Rig) -> None:
    # However empty the windows ahead, a create waits while this window's planned polls (and
    # downloads) need every request of it.
    await teach(rig, 45.0)  # each task's poll and download fall in the next window
    running = await start_until_refused(rig)
    assert rig.planner.demand() + 1 + 2 > rig.budget.allowed  # no room for one more's create and poll
    assert rig.planner.demand() >= 2 * (running - 1)  # every task's poll and download kept their room


async def test_the_batch_last_creates_borrow_at_most_half_a_window(rig: Rig) -> None:
    running = await start_until_refused(rig)  # nothing learned: the next window is planned full
    assert rig.planner.demand() + 1 > rig.budget.allowed
    last = [await rig.job(running=False) for _ in range(2)]
    for job in last:
        rig.queues.push(job)
    # The last videos of a batch: no creates follow them, so they borrow from the window's polls
    # (which then run a few of the key's slots later) rather than start last and end the batch late.
    assert rig.planner.may_start(running)
    more = [await rig.job(running=False) for _ in range(8)]
    for job in more:
        rig.queues.push(job)
    assert not rig.planner.may_start(running)  # a backlog: it waits for room as any create does
    for job in [*more, *last]:
        rig.queues.remove(job.id)
    # Half a window more of polls planned: tasks created on a quiet key (each polled to learn it).
    for job in [await rig.job() for _ in range(4)]:
        rig.planner.pacer(job).next_poll(rig.clock.monotonic(), None)
        running += 1
    for job in last:
        rig.queues.push(job)
    assert rig.planner.demand() + 1 > 1.5 * rig.budget.allowed
    assert not rig.planner.may_start(running)  # never more than half a window borrowed


async def test_the_first_poll_is_not_timed_by_the_shortest_tasks_alone(rig: Rig) -> None:
    # Ten videos created together; the three that finish first (within a minute) teach the model a
    # short duration, but the seven others were still pending at 90 s: such a video takes longer
    # than 90 s as often as not, so a new one is first polled no sooner than that.
    jobs = [await rig.job() for _ in range(10)]
    pacers = [rig.planner.pacer(job) for job in jobs]
    for _ in range(2):
        await rig.clock.advance(INTERVAL)
        for pacer in pacers:
            pacer.observed(TaskStatus("pending", None))
    await rig.clock.advance(INTERVAL)
    for job, pacer in zip(jobs[:3], pacers[:3], strict=True):
        pacer.observed(TaskStatus("completed", 1.0, "http://x/v.mp4"))
        await rig.planner.finished(job, completed=True)
    for pacer in pacers[3:]:
        pacer.observed(TaskStatus("pending", None))
    key = DurationKey.for_params(VIDEO)
    assert key is not None and rig.planner.polls._durations.quantile(key, 0.5) < 90  # learned from the three
    new = await rig.job()
    now = rig.clock.monotonic()
    when, _ = rig.planner.pacer(new).next_poll(now, None)
    assert when - now >= 90


async def test_tasks_seen_done_at_their_first_poll_do_not_pull_the_next_first_poll_earlier(
    rig: Rig,
) -> None:
    # Without progress a task seen done at its first poll ended somewhere before it. Learned as the
    # middle of that gap, six such videos (first polled at the learned median, about 135 s) would
    # say "about 70 s" and pull every later first poll ever earlier; known only to lie before the
    # poll, they leave the median where the polls found it.
    await teach(rig, 150.0)  # pending at 120 s, done at 150 s
    for _ in range(6):
        job = await rig.job()
        pacer = rig.planner.pacer(job)
        now = rig.clock.monotonic()
        when, _ = pacer.next_poll(now, None)
        assert when - now >= 120
        await rig.clock.advance(when - now)
        pacer.observed(TaskStatus("completed", 1.0, "http://x/v.mp4"))
        await rig.planner.finished(job, completed=True)
    key = DurationKey.for_params(VIDEO)
    assert key is not None and rig.planner.polls._durations.quantile(key, 0.5) >= 100  # learned, not halved


async def test_one_create_at_a_time_waits_for_the_budget(rig: Rig) -> None:
    assert rig.planner.may_start(0)
    assert not rig.planner.may_start(1)  # started, but its task is not known yet: create pending


async def test_a_create_backing_off_does_not_hold_up_the_next_job(rig: Rig) -> None:
    assert not rig.planner.may_start(1)  # one create in flight: the next waits for it
    rig.planner.create_deferred(1)  # ...until the service fails it and it backs off
    assert rig.planner.may_start(1)
    rig.planner.create_deferred(2)  # the next one fails as well: creates fail altogether
    assert not rig.planner.may_start(2)
    rig.planner.create_resumed(2)
    assert not rig.planner.may_start(2)  # job 2's create is in flight again
    rig.planner.create_resumed(1)
    rig.planner.create_resumed(2)
    assert not rig.planner.may_start(2)
    assert rig.planner.may_start(0)


async def test_fixed_ceiling_is_respected(rig: Rig) -> None:
    planner = await rig.reopen(ceiling=2)
    for _ in range(2):
        planner.pacer(await rig.job())
    assert not planner.may_start(2)


async def test_pushback_lowers_the_ceiling_and_successes_raise_it_again(rig: Rig) -> None:
    planner = rig.planner
    for _ in range(4):
        planner.pacer(await rig.job())
    planner.create_finished(ok=False, pushed_back=True)
    assert planner.ceiling() == 4
    assert not planner.may_start(4)
    planner.create_finished(ok=True)
    assert planner.ceiling() == 5


async def test_queued_jobs_get_an_estimated_start_and_running_ones_an_eta(rig: Rig) -> None:
    await rig.spend(rig.budget.allowed, every=60.0 / 16)  # a busy key: a slot frees every 60/16 s
    queued = [await rig.job(running=False) for _ in range(3)]
    for job in queued:
        rig.queues.push(job)
    first, third = rig.planner.estimate(queued[0]), rig.planner.estimate(queued[2])
    assert first.starts_in is not None and third.starts_in is not None
    assert third.starts_in > first.starts_in > 0

    job = await rig.job()
    pacer = rig.planner.pacer(job)
    assert rig.planner.estimate(job).remaining is None  # nothing known: no claim
    await rig.clock.advance(INTERVAL)
    pacer.observed(TaskStatus("pending", 0.5))
    shown = rig.planner.estimate(job)
    assert shown.progress == pytest.approx(0.5) and shown.measured
    # Left: until the poll that sees it done, aimed 2 % of its duration after the predicted end.
    assert shown.remaining == pytest.approx(INTERVAL + 0.02 * 2 * INTERVAL, abs=0.5)
    await rig.clock.advance(INTERVAL / 2)
    between = rig.planner.estimate(job)
    assert between.progress is not None and 0.5 < between.progress < 1 and not between.measured
    assert between.remaining is not None and shown.remaining is not None
    assert between.remaining < shown.remaining


async def test_behind_a_full_ceiling_a_queued_job_starts_when_a_slot_frees(rig: Rig) -> None:
    # One task at a time (GEN_MAX_RUNNING=1), the running one half-way through a 4-minute video:
    # the queued job starts in about 2 minutes, not "soon" at the budget's pace.
    planner = await rig.reopen(ceiling=1)
    running = await rig.job()
    pacer = planner.pacer(running)
    await rig.clock.advance(120)
    pacer.observed(TaskStatus("pending", 0.5))
    assert not planner.may_start(1)
    queued = [await rig.job(running=False) for _ in range(2)]
    for job in queued:
        rig.queues.push(job)
    first = planner.estimate(queued[0]).starts_in
    assert first is not None and first == pytest.approx(120, abs=15)
    # The second waits for the first to run too: nothing learned of such jobs, so no claim.
    assert planner.estimate(queued[1]).starts_in is None


async def test_behind_a_full_ceiling_later_waves_use_the_learned_duration(rig: Rig) -> None:
    await teach(rig, 150.0)
    planner = await rig.reopen(ceiling=1)
    running = await rig.job()
    planner.pacer(running)
    await rig.clock.advance(30)
    assert not planner.may_start(1)
    queued = [await rig.job(running=False) for _ in range(2)]
    for job in queued:
        rig.queues.push(job)
    first, second = (planner.estimate(job).starts_in for job in queued)
    assert first is not None and second is not None
    assert 90 <= first <= 180  # seen done by a poll of the ladder, from about 150 s less its age 30
    # Each later wave: the time a new task takes to be seen done (see tests/planner/test_estimate.py).
    assert second == pytest.approx(first + planner._forecast.typical_seen(queued[1]))  # type: ignore[operator]


async def test_a_queued_job_only_waits_for_jobs_on_its_own_key(rig: Rig) -> None:
    own_key_guild = 9
    scoped = await rig.planner_for(lambda guild: guild != own_key_guild)  # the operator key's: all but 9
    await rig.spend(rig.budget.allowed, every=60.0 / 16)  # a busy key: a slot frees every 60/16 s
    others = [await rig.job(guild=own_key_guild, running=False) for _ in range(6)]
    for job in others:
        rig.queues.push(job)
    mine = await rig.job(guild=1, running=False)
    rig.queues.push(mine)
    alone = await rig.job(guild=2, running=False)
    rig.queues.push(alone)
    unscoped, with_scope = rig.planner.estimate(mine).starts_in, scoped.estimate(mine).starts_in
    assert unscoped is not None and with_scope is not None
    # Guild 9's backlog runs on guild 9's own key: it does not delay guild 1's job on this key.
    assert with_scope < unscoped
    after = scoped.estimate(alone).starts_in
    assert after is not None and with_scope < after  # guild 2's job comes after guild 1's on this key
