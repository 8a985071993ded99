"""A second video on a key whose first create just went through: admitted as soon as the budget
allows, and a refusal always names a finite moment to ask again.

The end-to-end timings (tests/e2e/servers.py: 6 requests a 1 s window, a poll every 0.05 s, at most
0.3 s apart), where a window holds twenty poll intervals: a first task whose end its progress
predicted was counted a poll every interval through the window (twenty requests of six), and a
second video accepted a moment later waited for the first to end.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framecast.planner.planner import PlannedJob, TaskPacer
from framecast.service import TaskStatus
from framecast.values import JobKind
from tests.planner.jobs import create_through
from tests.planner.rigs import Rig

WINDOW, ALLOWED = 1.0, 6
INTERVAL, MAX_INTERVAL = 0.05, 0.3
TASK = 8.0  # seconds the first task runs (its progress says so)


class Key(Rig):
    """One key's planner, its budget and queues, on a manual clock."""

    async def spend_a_slot(self) -> None:
        """One request of the budget spent (a create, or a poll)."""
        async with self.budget.slot():
            pass

    def refused_with_a_recheck(self) -> bool:
        """Whether a second video is refused; a refusal must say when to ask again."""
        if self.planner.may_start(1, JobKind.VIDEO):
            return False
        assert 0 < self.planner.recheck_in() < math.inf
        return True


@pytest.fixture
async def key(tmp_path: Path) -> AsyncIterator[Key]:
    async with Key.opened(
        tmp_path, limit=ALLOWED, window=WINDOW, interval=INTERVAL, max_interval=MAX_INTERVAL
    ) as key:
        yield key


async def first_created(key: Key) -> tuple[PlannedJob, TaskPacer]:
    """The first video's create sent and through (its slot spent), its task registered and planned."""
    handle = key.planner.plan(await key.job(guild=1, running=False))
    await create_through(handle, key.spend_a_slot)
    pacer = handle.pacer()
    pacer.next_poll(key.clock.monotonic(), None)
    return handle, pacer


async def poll(key: Key, pacer: TaskPacer, last: float | None, created: float) -> float:
    """Wait for the task's next planned poll and answer it as the fake service does (whole percents,
    0 at the first poll); the poll's time."""
    now = key.clock.monotonic()
    when, _ = pacer.next_poll(now, last)
    await key.clock.advance(max(0.0, when - now))
    async with key.budget.slot():
        pass
    elapsed = key.clock.time() - created
    progress = 0.0 if last is None else round(100 * min(elapsed / TASK, 0.99)) / 100
    pacer.observed(TaskStatus("pending", progress))
    return key.clock.monotonic()


async def test_a_second_video_is_admitted_while_the_first_runs_with_its_end_known(key: Key) -> None:
    created = key.clock.time()
    _, pacer = await first_created(key)
    last: float | None = None
    for _ in range(3):  # the first task's polls: none reported, then its progress (its end known)
        last = await poll(key, pacer, last, created)
    pacer.next_poll(key.clock.monotonic(), last)
    assert all(key.planner.polls.predicted_done(task) is not None for task in key.planner.polls)
    key.queues.push(await key.job(guild=2, running=False))
    # The first task's polls come at most MAX_INTERVAL apart: a few of the window's six requests.
    assert key.planner.demand() <= WINDOW / MAX_INTERVAL + 2
    assert key.planner.may_start(1, JobKind.VIDEO)
    # And so at every moment of the first task's life, not only at its start.
    while key.clock.time() - created < TASK - 1:
        last = await poll(key, pacer, last, created)
        pacer.next_poll(key.clock.monotonic(), last)
        assert key.planner.may_start(1, JobKind.VIDEO), key.clock.time() - created


async def test_a_second_video_waits_only_while_the_first_create_is_sent_and_asks_again_soon(key: Key) -> None:
    key.queues.push(await key.job(guild=2, running=False))
    handle = key.planner.plan(await key.job(guild=1, running=False))

    async def sending() -> None:
        assert key.refused_with_a_recheck()  # one video's create waits for the budget at a time
        await key.spend_a_slot()

    await create_through(handle, sending)
    pacer = handle.pacer()
    key.refused_with_a_recheck()  # its first poll not planned yet: if refused, not for good
    pacer.next_poll(key.clock.monotonic(), None)
    assert key.planner.may_start(1, JobKind.VIDEO)  # the budget has room: at once


async def test_every_refusal_of_a_second_video_asks_again_in_finite_time(key: Key) -> None:
    created = key.clock.time()
    _, pacer = await first_created(key)
    key.queues.push(await key.job(guild=2, running=False))
    last: float | None = None
    refused = 0
    while key.clock.time() - created < TASK:
        refused += key.refused_with_a_recheck()
        last = await poll(key, pacer, last, created)
        refused += key.refused_with_a_recheck()  # between the answer and the next plan too
        pacer.next_poll(key.clock.monotonic(), last)
    assert refused <= 2, refused  # at most the moments before a poll was planned
