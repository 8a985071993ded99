"""The poll plan on its own: when each task is polled, and what the running tasks ask of the budget.

No store, no budget, no queues: a :class:`PollPlan` over a duration model, time on a ManualClock.
"""

from __future__ import annotations

import itertools

import pytest

from framecast.planner.polls import FIRST, TOP, PolledTask, PollPlan, ladder_quantile, poll_at
from framecast.planner.survival import Survival
from framecast.planner.tuning import PlannerTuning
from framecast.service import TaskStatus
from framecast.values import Job, JobKind, JobState
from framecast.values.durations import DurationKey
from framecast.values.service_requests import Priority
from tests.fakes.clock import ManualClock

SCOUTS = PlannerTuning().scouts
LEARNED_AFTER = PlannerTuning().learned_after
THRIFTY_FIRST = PlannerTuning().crowded_rung
INTERVAL = 30.0
WINDOW = 60.0
VIDEO = {"model": "svc-video-v2.0", "prompt": "p", "width": 1152, "height": 768, "num_frames": 121}


def plan_on(clock: ManualClock, crowd: list[float] | None = None) -> PollPlan:
    """A plan over a fresh model; `crowd[0]`: the windows' worth of jobs waiting (may change)."""
    return PollPlan(
        clock=clock,
        durations=Survival(priors={"video": 4 * INTERVAL, "image": INTERVAL}),
        interval=INTERVAL,
        max_interval=6 * INTERVAL,
        crowd=None if crowd is None else (lambda: crowd[0]),
    )


def running_job(clock: ManualClock, job_id: int, **changes: object) -> Job:
    now = clock.time()
    fields: dict[str, object] = {
        "id": job_id,
        "kind": JobKind.VIDEO,
        "state": JobState.RUNNING,
        "guild_id": 1,
        "channel_id": 2,
        "user_id": 3,
        "locale": "en-US",
        "params": dict(VIDEO),
        "created_at": now,
        "updated_at": now,
        "task_id": f"t{job_id}",
        "started_at": now,
        **changes,
    }
    return Job(**fields)  # type: ignore[arg-type]


async def finish_after(plan: PollPlan, clock: ManualClock, job_id: int, seconds: float) -> PolledTask:
    """A task polled every interval until one poll, `seconds` after its create or later, sees it done."""
    task = plan.add(running_job(clock, job_id), video=True)
    elapsed = 0.0
    while elapsed + INTERVAL < seconds:
        await clock.advance(INTERVAL)
        elapsed += INTERVAL
        plan.observed(task, TaskStatus("pending", None))
    await clock.advance(INTERVAL)
    plan.observed(task, TaskStatus("completed", 1.0, "http://x/v.mp4"))
    plan.pop(job_id)
    return task


async def test_a_cold_task_is_polled_every_interval_and_only_to_learn_until_the_prior_age() -> None:
    clock = ManualClock()
    plan = plan_on(clock)
    task = plan.add(running_job(clock, 1), video=True)
    ages = []
    for _ in range(5):
        when, priority = plan.plan(task, clock.monotonic(), None if task.polls == 0 else clock.monotonic())
        assert when == clock.monotonic() + INTERVAL
        ages.append((when - task.started + (clock.monotonic() - clock.time()), task.learning, priority))
        await clock.advance(INTERVAL)
        plan.observed(task, TaskStatus("pending", None))
    # The prior median is 4 intervals: polls before that age only learn; from it on they may see it.
    assert [(learning, priority) for _, learning, priority in ages] == [
        (True, Priority.PROGRESS),
        (True, Priority.PROGRESS),
        (True, Priority.PROGRESS),
        (False, Priority.HIGH),
        (False, Priority.HIGH),
    ]
    assert task.cold and task.polls == 5


async def test_progress_times_the_poll_just_after_the_predicted_end() -> None:
    clock = ManualClock()
    plan = plan_on(clock)
    task = plan.add(running_job(clock, 1), video=True)
    for progress in (0.2, 0.4):  # 20 % per interval: done 5 intervals after the create
        await clock.advance(INTERVAL)
        plan.observed(task, TaskStatus("pending", progress))
    when, priority = plan.plan(task, clock.monotonic(), clock.monotonic())
    end = 5 * INTERVAL  # monotonic: the task started at 0
    # A little after the end (missing it by a hair would cost an interval), never sooner than it.
    assert end < when <= end + 0.2 * INTERVAL and priority == Priority.HIGH and task.likely_done
    # A far end is still polled within the longest gap, so a wrong slope corrects itself.
    for progress in (0.42, 0.44, 0.46):  # 2 % per interval now
        await clock.advance(INTERVAL)
        plan.observed(task, TaskStatus("pending", progress))
    when, _ = plan.plan(task, clock.monotonic(), clock.monotonic())
    assert when == clock.monotonic() + 6 * INTERVAL and not task.likely_done


async def test_a_task_seen_done_teaches_a_duration_between_its_last_two_polls() -> None:
    clock = ManualClock()
    plan = plan_on(clock)
    key = DurationKey.for_params(VIDEO)
    assert key is not None
    for n in range(LEARNED_AFTER):
        task = await finish_after(plan, clock, n + 1, 100.0)  # seen pending at 90 s, done at 120 s
        assert plan.learn(task) is not None
    assert plan.learned(key)
    assert 90.0 <= plan.quantile(key, 0.5) <= 120.0
    # Learned: a new video's first poll is counted at the median, not one interval after its create.
    requests = plan.new_video_requests(clock.monotonic())
    assert requests[0] == (clock.monotonic(), 1.0)
    assert requests[1][0] - clock.monotonic() == plan.quantile(key, 0.5)


async def test_a_new_video_is_counted_one_interval_out_until_its_kind_is_learned() -> None:
    clock = ManualClock()
    plan = plan_on(clock)
    plan.add(running_job(clock, 1), video=True)
    now = clock.monotonic()
    assert plan.new_video_requests(now) == [(now, 1.0), (now + INTERVAL, 2.0)]


async def test_demand_counts_a_likely_done_poll_with_its_download_and_an_unknown_end_at_the_next_poll() -> (
    None
):
    clock = ManualClock()
    plan = plan_on(clock)
    now = clock.monotonic()
    due = plan.add(running_job(clock, 1), video=True)
    due.next_at, due.likely_done = now + 10, True  # the poll that should see it done, then the download
    polling = plan.add(running_job(clock, 2), video=True)
    polling.next_at = (
        now + 5
    )  # its end unknown: a poll at 5 s, then one at 35 s that sees it, and its download
    later = plan.add(running_job(clock, 3), video=True)
    later.next_at, later.likely_done = now + WINDOW + 1, True  # after the window: not counted
    assert plan.demand(now, WINDOW) == 2 + 3
    assert plan.demand(now, WINDOW) == sum(n for at, n in plan.profile(now) if at <= now + WINDOW)
    # An image's create goes before progress polls and polls sent only to learn: only `due` counts.
    assert plan.ahead_of_images(now, WINDOW) == 2
    due.learning = True
    assert plan.ahead_of_images(now, WINDOW) == 0
    assert plan.learning_due(now + 10) and not plan.learning_due(now + 9)


async def test_a_restored_task_keeps_its_last_progress_and_polls_an_interval_after_its_last_poll() -> None:
    clock = ManualClock(start=1000.0)
    plan = plan_on(clock)
    job = running_job(clock, 1, started_at=clock.time() - 200, updated_at=clock.time() - 10, progress=0.5)
    task = plan.add(job, video=True)
    assert task.seen_progress == 0.5 and task.track.progress_at(clock.time() - 10) == 0.5
    when, _ = plan.plan(task, clock.monotonic(), None)
    assert when >= clock.monotonic() - 10 + INTERVAL
    assert plan.get(1) is task and len(plan) == 1 and list(plan) == [task]
    assert plan.pop(1) is task and plan.get(1) is None and len(plan) == 0


async def learned_plan(clock: ManualClock, crowd: list[float]) -> PollPlan:
    """A plan that learned durations of 60-180 s (every 20 s), seen done within a second."""
    plan = plan_on(clock, crowd)
    for n, seconds in enumerate(range(60, 181, 20)):
        task = plan.add(running_job(clock, 100 + n), video=True)
        await clock.advance(seconds - 0.5)
        plan.observed(task, TaskStatus("pending", None))
        await clock.advance(1.0)
        plan.observed(task, TaskStatus("completed", 1.0, "http://x/v.mp4"))
        plan.learn(plan.pop(task.job_id) or task)
    return plan


async def test_while_members_wait_a_new_task_is_first_polled_when_it_is_likely_done() -> None:
    clock = ManualClock()
    crowd = [0.0]
    plan = await learned_plan(clock, crowd)
    quiet = plan.add(running_job(clock, 1), video=True)
    crowd[0] = 1.0  # a window's worth of jobs waits for the key
    crowded = plan.add(running_job(clock, 2), video=True)
    crowd[0] = 3.0  # more members waiting later never raise a rung
    assert (quiet.first, crowded.first) == (FIRST, THRIFTY_FIRST)
    assert quiet.key is not None
    quiet_at, _ = plan.plan(quiet, clock.monotonic(), None)
    crowded_at, priority = plan.plan(crowded, clock.monotonic(), None)
    started = clock.monotonic()  # both were created now
    assert quiet_at - started == pytest.approx(plan.quantile(quiet.key, FIRST))
    assert crowded_at - started == pytest.approx(plan.quantile(quiet.key, THRIFTY_FIRST))
    assert crowded_at > quiet_at + 20.0  # the durations' 80th percentile is well past their median
    assert priority == Priority.HIGH and crowded.likely_done


async def test_once_the_queue_drains_a_task_not_polled_yet_is_polled_as_on_a_quiet_key() -> None:
    # The batch's last videos start while members still wait; then nobody does, and a poll that
    # sees no result costs nobody: their first polls come at the median, not at the high rung
    # chosen when they were created (the key idled while they waited for it).
    clock = ManualClock()
    crowd = [1.0]
    plan = await learned_plan(clock, crowd)
    crowded = plan.add(running_job(clock, 1), video=True)
    polled = plan.add(running_job(clock, 2), video=True)
    assert crowded.key is not None and crowded.first == polled.first == THRIFTY_FIRST
    started = clock.monotonic()
    await clock.advance(INTERVAL)
    # A task already polled without progress keeps its ladder.
    plan.observed(polled, TaskStatus("pending", None))
    late_at, _ = plan.plan(crowded, clock.monotonic(), None)
    assert late_at - started == pytest.approx(plan.quantile(crowded.key, THRIFTY_FIRST))
    crowd[0] = 0.2  # the batch's last video still waits: the rung holds (its polls spread out)
    assert plan.plan(crowded, clock.monotonic(), None)[0] == pytest.approx(late_at)
    crowd[0] = 0.0
    quiet_at, priority = plan.plan(crowded, clock.monotonic(), None)
    assert crowded.first == FIRST and priority == Priority.HIGH
    assert quiet_at - started == pytest.approx(plan.quantile(crowded.key, FIRST))
    assert quiet_at < late_at - 20.0
    crowd[0] = 2.0  # members waiting again never push a promised poll later
    assert plan.plan(crowded, clock.monotonic(), None)[0] == pytest.approx(quiet_at)
    plan.plan(polled, clock.monotonic(), clock.monotonic())
    assert polled.first == THRIFTY_FIRST


async def test_while_members_wait_a_new_video_is_counted_at_the_later_first_poll() -> None:
    clock = ManualClock()
    crowd = [0.0]
    plan = await learned_plan(clock, crowd)
    now = clock.monotonic()
    plan.video_key = DurationKey.for_params(VIDEO)
    assert plan.video_key is not None
    quiet = plan.new_video_requests(now)
    crowd[0] = 3.0
    crowded = plan.new_video_requests(now)
    assert quiet[1] == (now + plan.quantile(plan.video_key, FIRST), 1.5)
    assert crowded[1][0] == now + plan.quantile(plan.video_key, THRIFTY_FIRST) > quiet[1][0] + 20.0
    # The later first poll sees a result more often: less is counted for the one after it.
    assert crowded[2][1] < quiet[2][1]
    assert sum(n for _, n in crowded) == pytest.approx(sum(n for _, n in quiet) - (THRIFTY_FIRST - FIRST))


async def test_an_image_task_is_polled_promptly_however_many_wait() -> None:
    clock = ManualClock()
    plan = plan_on(clock, [5.0])
    images = [plan.add(running_job(clock, n, kind=JobKind.IMAGE), video=False) for n in range(6)]
    now = clock.monotonic()
    assert all(image.first == FIRST for image in images)
    assert {plan.plan(image, now, None)[0] for image in images} == {now + INTERVAL}


async def test_while_members_wait_only_the_scouts_of_a_new_kind_are_polled_every_interval() -> None:
    # Nothing is known of the kind yet: the oldest few tasks (the scouts) are polled every interval
    # to learn it; the later ones wait the longest gap, when they are very likely done, rather than
    # spend a request a window on polls every queued member waits for.
    clock = ManualClock()
    crowd = [1.0]
    plan = plan_on(clock, crowd)
    tasks = []
    for n in range(SCOUTS + 2):
        tasks.append(plan.add(running_job(clock, n + 1), video=True))
        await clock.advance(1.0)
    now = clock.monotonic()
    gaps = [plan.plan(task, now, None)[0] - (task.started + now - clock.time()) for task in tasks]
    assert gaps == pytest.approx([INTERVAL] * SCOUTS + [6 * INTERVAL] * 2)
    assert all(task.likely_done and task.cold for task in tasks)
    assert plan.parks_new() and plan.new_video_cost(now) == [(now + 6 * INTERVAL, 2.0)]
    # Admission weighs a parked video as the scouts poll (see new_video_requests): its create and
    # a poll an interval on.
    assert plan.new_video_requests(now) == [(now, 1.0), (now + INTERVAL, 2.0)]


async def test_on_a_quiet_key_every_task_of_a_new_kind_is_polled_every_interval() -> None:
    clock = ManualClock()
    crowd = [0.0]
    plan = plan_on(clock, crowd)
    tasks = [plan.add(running_job(clock, n + 1), video=True) for n in range(SCOUTS + 2)]
    now = clock.monotonic()
    assert {plan.plan(task, now, None)[0] for task in tasks} == {now + INTERVAL}
    assert not plan.parks_new()
    images = [plan.add(running_job(clock, 100 + n, kind=JobKind.IMAGE), video=False) for n in range(6)]
    crowd[0] = 1.0  # an image's task takes seconds: never parked, whoever waits
    assert {plan.plan(image, now, None)[0] for image in images} == {now + INTERVAL}


async def test_a_parked_task_moves_onto_the_ladder_once_the_scouts_have_taught_its_kind() -> None:
    clock = ManualClock()
    crowd = [1.0]
    plan = plan_on(clock, crowd)
    for n in range(SCOUTS):  # the scouts, older
        plan.add(running_job(clock, 100 + n), video=True)
    late = plan.add(running_job(clock, 200), video=True)
    now = clock.monotonic()
    planned, _ = plan.plan(late, now, None)
    assert planned == pytest.approx(now + 6 * INTERVAL)
    for n in range(LEARNED_AFTER):  # scouts finish at 90 s
        plan.learn(await finish_after(plan, clock, 300 + n, 90.0))
    clock_now = clock.monotonic()
    again, _ = plan.plan(late, clock_now, None)
    assert late.key is not None and plan.learned(late.key)
    assert again < planned  # asked again (the client does every interval), it comes sooner
    assert again == pytest.approx(
        late.started + (clock_now - clock.time()) + plan.quantile(late.key, late.first)
    )


async def test_a_poll_planned_to_learn_a_kind_holds_no_video_once_the_kind_is_learned() -> None:
    # The flag is set when the poll is planned; the poll may then wait for the budget behind the
    # images and downloads for a window while other tasks teach the kind. Videos wait only for
    # polls that still have something to learn (a batch's creates stalled a minute on stale flags).
    clock = ManualClock()
    plan = plan_on(clock)
    waiting = plan.add(running_job(clock, 1), video=True)
    _, priority = plan.plan(waiting, clock.monotonic(), None)
    assert waiting.learning and priority == Priority.PROGRESS
    await clock.advance(INTERVAL)
    assert plan.learning_due(clock.monotonic())  # due, not yet answered: nothing is learned
    for n in range(LEARNED_AFTER):  # meanwhile other tasks of the kind finish and teach it
        plan.learn(await finish_after(plan, clock, 100 + n, 90.0))
    assert waiting.key is not None and plan.learned(waiting.key)
    assert waiting.learning and waiting.next_at <= clock.monotonic()  # its poll still waits
    assert not plan.learning_due(clock.monotonic())


async def test_the_ladder_the_forecast_reads_is_the_one_the_plan_polls() -> None:
    clock = ManualClock()
    plan = await learned_plan(clock, [0.0])
    key = DurationKey.for_params(VIDEO)
    assert key is not None
    first = plan.quantile(key, FIRST)
    # Never done: up every rung to the top, each poll aimed at its rung within the interval's bounds.
    rungs = plan.ladder(key, first, 0.0, 0, FIRST, lambda at: 0.0)
    targets = [plan.quantile(key, ladder_quantile(k)) for k in range(len(rungs))]
    assert rungs[0] == first and ladder_quantile(len(rungs) - 1) == TOP > ladder_quantile(len(rungs) - 2)
    for k in range(1, len(rungs)):
        assert rungs[k] == poll_at(rungs[k - 1], targets[k], interval=INTERVAL, max_interval=6 * INTERVAL)
    # Almost surely done by a poll: the ladder stops there.
    assert plan.ladder(key, first, 0.0, 0, FIRST, lambda at: 1.0) == [first]
    assert plan.ladder(key, first, 0.0, 0, FIRST, lambda at: 0.99 if at > first else 0.0) == rungs[:2]
    # A known end: polls at most the longest gap apart until one at or after it.
    assert list(itertools.islice(plan.toward(0.0, 500.0), 5)) == [0.0, 180.0, 360.0, 500.0, 530.0]
    assert plan.first_poll_at(500.0, 0.0, slack=1.0) == 500.0
    assert plan.first_poll_at(500.0, 499.5, slack=1.0) == 499.5  # within the slack: that poll


async def test_a_task_older_than_every_duration_learned_is_polled_at_the_longest_gap() -> None:
    # Without progress, a task past the ladder's top rung has outlived its kind's known durations;
    # its rung was its own age (the running tasks count in the model), so it was polled every
    # interval until it ended (26 polls for one task in a soak). Now: the longest gap.
    clock = ManualClock()
    plan = await learned_plan(clock, [0.0])
    task = plan.add(running_job(clock, 1), video=True)
    started = clock.monotonic()
    gaps = []
    last = None
    for _ in range(20):
        at, _ = plan.plan(task, clock.monotonic(), last)
        await clock.advance(at - clock.monotonic())
        gaps.append(at - (started if last is None else last))
        last = clock.monotonic()
        plan.observed(task, TaskStatus("pending", None))
    assert clock.monotonic() - started > 600.0  # far past the 180 s longest learned
    assert gaps[-5:] == [plan.max_interval] * 5, gaps
    assert sum(1 for gap in gaps if gap == INTERVAL) <= 6, gaps  # the ladder's rungs, then no more
