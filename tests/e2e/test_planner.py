"""The planner end to end, at the production ratio scaled 30x (16 requests per 2 s, polls every 1 s).

No fixed number of tasks: the planner starts tasks while the budget can sustain them. The fake
service enforces exactly the configured budget and logs every request, so the tests read the
service's own view: no window over the limit, no task polled faster than the interval.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections import defaultdict
from pathlib import Path

from tests.e2e.harness import World, close_world, make_world, status_of, statuses_seen
from tests.fakes.gen_service import POLL_PATH, TaskPlan

INTERVAL = 1.0
PLANNED = {
    "GEN_MAX_RUNNING": "",  # automatic: the planner decides
    "GEN_RATE_LIMIT": "16/2",
    "GEN_POLL_INTERVAL": str(INTERVAL),
    "GEN_POLL_TIMEOUT": "60",
    "MEMBER_JOB_LIMIT": "3",
}


def polls_by_task(world: World) -> dict[str, list[float]]:
    """Receive times of the polls of each task, in order."""
    times: dict[str, list[float]] = defaultdict(list)
    for r in world.service.requests:
        if r.path == POLL_PATH and r.auth_ok:
            times[r.query.get("video_id", "")].append(r.received)
    return times


def most_running(world: World) -> int:
    """The most tasks that were on the service at once (from creation to the poll that saw them end)."""
    events: list[tuple[float, int]] = []
    last_poll = {task: times[-1] for task, times in polls_by_task(world).items()}
    for task in world.service.tasks.values():
        events.append((task.created, 1))
        events.append((last_poll.get(task.id, task.created), -1))
    running = best = 0
    for _, step in sorted(events):
        running += step
        best = max(best, running)
    return best


async def test_a_burst_spends_the_key_within_its_limit_fairly_and_never_polls_too_often(
    tmp_path: Path,
) -> None:
    world = await make_world(tmp_path, guilds=4, members=3, extra_env=PLANNED)
    try:
        await world.start_bot()
        world.service.rate_limit = (16, 2.0)
        rng = random.Random(9)
        world.service.plans = [
            (f"g{g} m{m} j{j} ", TaskPlan(duration=rng.uniform(2.0, 6.0), polls=0))
            for g in range(4)
            for m in range(3)
            for j in range(2)
        ]
        its = await asyncio.gather(
            *[
                world.video(f"g{g} m{m} j{j} ", member=world.members[g][m], guild=g)
                for j in range(2)
                for m in range(3)
                for g in range(4)
            ]
        )
        await asyncio.gather(*[world.delivered(it, timeout=90) for it in its])
        for it in its:
            assert len(world.files_for(await world.job_id(it))) == 1  # delivered once
        # The service's own log: never a window over the limit, never a 429 of our making.
        assert world.service.count(status=429) == 0
        assert world.service.max_in_window(2.0) <= 16
        # Never a task polled faster than GEN_POLL_INTERVAL (a little slack for the clock's grain).
        for task, times in polls_by_task(world).items():
            gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
            assert all(gap >= INTERVAL * 0.95 for gap in gaps), (task, gaps)
        # Adaptive concurrency: more than the old fixed four when the budget allows it.
        assert most_running(world) > 4
        # Fairness between guilds: round-robin creates, every guild served early.
        creates = [r.json["prompt"] for r in world.service.requests if r.path == "/v1/videos" and r.json]
        for g in range(4):
            assert sum(p.startswith(f"g{g} ") for p in creates[:8]) >= 1, creates[:8]
    finally:
        await close_world(world)


async def test_durations_learned_before_a_restart_still_pace_the_polls(tmp_path: Path) -> None:
    world = await make_world(tmp_path, extra_env=PLANNED)
    try:
        await world.start_bot()
        world.service.progress_shape = "missing"  # nothing but learned durations to go on
        world.service.default_plan = TaskPlan(duration=4.0, polls=0)
        for round_ in range(3):
            its = await asyncio.gather(*[world.video(f"learn {round_} {i}") for i in range(2)])
            await asyncio.gather(*[world.delivered(it, timeout=60) for it in its])
        await world.restart_bot()
        world.service.clear()
        it = await world.video("after the restart")
        await world.delivered(it, timeout=60)
        # Learned: about 4 s, so the first poll waits for it instead of coming after 1 s, and the
        # task costs one or two polls, not four.
        polls = polls_by_task(world)
        assert len(polls) == 1
        (times,) = polls.values()
        assert len(times) <= 2, times
    finally:
        await close_world(world)


async def test_the_message_shows_honest_estimates_between_polls_that_never_go_backwards(
    tmp_path: Path,
) -> None:
    env = {**PLANNED, "EDIT_INTERVAL": "0.2", "GEN_MAX_RUNNING": "1", "GEN_POLL_INTERVAL": "2"}
    world = await make_world(tmp_path, extra_env=env)
    try:
        await world.start_bot()
        world.service.default_plan = TaskPlan(duration=8.0, polls=0)
        first = await world.video("a long slow pan")
        second = await world.video("the next one waits")  # one task at a time: this one queues
        queued = await second.wait_original(
            lambda m: "starts in" in status_of(m) or "starting soon" in status_of(m)
        )
        assert "#1 in this server's queue" in status_of(queued)
        msg = await world.delivered(first, timeout=60)
        seen = statuses_seen(msg)
        # Between polls (every 2 s) the percentage moves, marked as an estimate, with the time left.
        estimated = [s for s in seen if "≈" in s]
        assert estimated and any("left" in s for s in estimated), seen
        percents = [int(p) for s in seen for p in re.findall(r"(\d+)%", s)]
        assert len(set(percents)) >= 3 and percents == sorted(percents), seen
        # Polls stayed at least an interval apart: the estimates cost no request.
        for times in polls_by_task(world).values():
            assert all(b - a >= 2.0 * 0.95 for a, b in zip(times, times[1:], strict=False)), times
        await world.delivered(second, timeout=60)
    finally:
        await close_world(world)


async def test_a_create_the_service_keeps_failing_does_not_hold_up_other_guilds(tmp_path: Path) -> None:
    world = await make_world(tmp_path, guilds=2, extra_env=PLANNED)
    try:
        await world.start_bot()
        # The service answers 503 to this one create for as long as the job may wait (60 s).
        world.service.plans = [("stuck ", TaskPlan(reject_status=503, reject_message="upstream trouble"))]
        world.service.default_plan = TaskPlan(duration=0.5, polls=0)
        stuck = await world.video("stuck in creation", member=world.members[0][0], guild=0)
        await world.service.wait_for(lambda: world.service.count(status=503) >= 1)
        others = [
            await world.video(f"other {g} {i}", member=world.members[g][0], guild=g)
            for g in (0, 1)
            for i in range(1)
        ]
        # Delivered while the stuck create is still retrying, not after it gives up.
        await asyncio.gather(*[world.delivered(it, timeout=20) for it in others])
        stuck_id = await world.job_id(stuck)
        assert not world.files_for(stuck_id)
    finally:
        await close_world(world)
