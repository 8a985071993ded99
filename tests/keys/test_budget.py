"""The shared request budget: window from the end, priorities, cancellation, 429 back-off."""

from __future__ import annotations

import asyncio
import random

import pytest

from framecast.clock import ScaledClock, SystemClock
from framecast.keys.budget import RequestBudget
from framecast.values.service_requests import Priority
from tests.fakes.clock import ManualClock


class Holder:
    """A task that takes a slot, notes when, and keeps it until told to let go."""

    def __init__(self, budget: RequestBudget, name: str, order: list[str], priority: int = Priority.NORMAL):
        self.name = name
        self.release = asyncio.Event()
        self.granted = asyncio.Event()
        self._budget, self._order, self._priority = budget, order, priority
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async with self._budget.slot(self._priority):
            self._order.append(self.name)
            self.granted.set()
            await self.release.wait()

    async def finish(self) -> None:
        self.release.set()
        await self.task


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_limit_then_window_counts_from_end() -> None:
    clock = ManualClock()
    budget = RequestBudget(3, 10.0, clock=clock)
    order: list[str] = []
    holders = [Holder(budget, f"h{i}", order) for i in range(4)]
    await settle()
    assert order == ["h0", "h1", "h2"] and budget.in_flight == 3 and budget.waiting == 1

    await clock.advance(50)  # in flight: however long it takes, the slot stays taken
    assert order == ["h0", "h1", "h2"]
    await holders[0].finish()  # ends at t=50: its slot is free again at t=60
    await clock.advance(9.9)
    assert order == ["h0", "h1", "h2"]
    await clock.advance(0.1)
    assert order == ["h0", "h1", "h2", "h3"]
    for h in holders[1:]:
        await h.finish()
    assert budget.in_flight == 0 and budget.waiting == 0 and budget.granted_total == 4


async def test_it_says_when_each_used_slot_frees() -> None:
    # What the forecast plays "starts in" over: a window after each request's end; a request still
    # in flight frees a window after now at the soonest.
    clock = ManualClock()
    budget = RequestBudget(3, 10.0, clock=clock)
    order: list[str] = []
    first, second = Holder(budget, "a", order), Holder(budget, "b", order)
    await settle()
    await first.finish()
    await clock.advance(4.0)
    start = clock.monotonic()
    assert budget.frees_at() == pytest.approx([start - 4.0 + 10.0, start + 10.0])
    await second.finish()
    await clock.advance(6.0)  # the first slot has aged out
    assert budget.frees_at() == pytest.approx([start + 10.0])
    assert budget.available() == 2


async def test_priority_then_fifo() -> None:
    clock = ManualClock()
    budget = RequestBudget(1, 1.0, clock=clock)
    order: list[str] = []
    first = Holder(budget, "first", order)
    await settle()
    spec = [("low", Priority.LOW), ("n1", Priority.NORMAL), ("h1", Priority.HIGH), ("n2", Priority.NORMAL),
            ("h2", Priority.HIGH), ("low2", Priority.LOW)]  # fmt: skip
    waiters = []
    for name, prio in spec:
        waiters.append(Holder(budget, name, order, prio))
        await settle()
    await first.finish()
    by_name = {w.name: w for w in waiters}
    for _ in waiters:
        await clock.advance(1.0)
        await by_name[order[-1]].finish()  # the one just granted lets go; the next is picked
    assert order == ["first", "h1", "h2", "n1", "n2", "low", "low2"]


async def test_cancelled_waiter_leaves_no_trace() -> None:
    clock = ManualClock()
    budget = RequestBudget(1, 5.0, clock=clock)
    order: list[str] = []
    first = Holder(budget, "first", order)
    await settle()
    doomed = Holder(budget, "doomed", order, Priority.HIGH)
    after = Holder(budget, "after", order, Priority.LOW)
    await settle()
    assert budget.waiting == 2
    doomed.task.cancel()
    await settle()
    assert doomed.task.cancelled() and budget.waiting == 1
    await first.finish()
    await clock.advance(5.0)
    await after.granted.wait()
    assert order == ["first", "after"]
    await after.finish()
    assert budget.in_flight == 0 and budget.waiting == 0


async def test_cancelled_right_after_grant_returns_the_slot() -> None:
    # A grant made by someone else's release, then a cancel before the waiter ever ran: the slot
    # must come back (nothing was sent), or the budget would shrink for good.
    budget = RequestBudget(2, 1e-9, clock=SystemClock())  # the window expires at once
    order: list[str] = []
    b = Holder(budget, "b", order)
    await settle()
    async with budget.slot():  # "a", held by this very task
        victim = Holder(budget, "victim", order)
        await settle()
        assert budget.waiting == 1
    # a's exit granted the victim's slot synchronously; cancel it before it can run.
    assert budget.in_flight == 2 and budget.waiting == 0
    victim.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await victim.task
    assert "victim" not in order and budget.in_flight == 1
    late = Holder(budget, "late", order)
    await asyncio.wait_for(late.granted.wait(), 1)
    await b.finish()
    await late.finish()
    assert budget.in_flight == 0


async def test_failed_request_still_counts() -> None:
    clock = ManualClock()
    budget = RequestBudget(1, 10.0, clock=clock)
    with pytest.raises(RuntimeError):
        async with budget.slot():
            raise RuntimeError("connection reset")
    assert budget.available() == 0
    order: list[str] = []
    h = Holder(budget, "next", order)
    await clock.advance(9.0)
    assert order == []
    await clock.advance(1.0)
    assert order == ["next"]
    await h.finish()


async def test_one_timer_no_matter_how_many_waiters() -> None:
    clock = ManualClock()
    budget = RequestBudget(2, 10.0, clock=clock)
    order: list[str] = []
    holders = [Holder(budget, str(i), order) for i in range(2)]
    await settle()
    for h in holders:
        await h.finish()
    waiters = [Holder(budget, f"w{i}", order) for i in range(100)]
    await settle()
    assert clock.sleepers == 1  # a single timer wakes the queue: no per-waiter polling
    await clock.advance(10)
    assert len(order) == 4
    for w in waiters:
        w.task.cancel()
    await settle()
    assert budget.waiting == 0


async def test_steady_state_spacing() -> None:
    clock = ManualClock()
    budget = RequestBudget(5, 10.0, clock=clock)
    grants: list[float] = []

    async def instant() -> None:
        async with budget.slot():
            grants.append(clock.monotonic())

    tasks = [asyncio.create_task(instant()) for _ in range(23)]
    await settle()
    for _ in range(5):
        await clock.advance(10)
    await asyncio.gather(*tasks)
    assert grants == [0.0] * 5 + [10.0] * 5 + [20.0] * 5 + [30.0] * 5 + [40.0] * 3


async def test_penalize_backoff_exponential_capped_and_reset() -> None:
    clock = ManualClock()
    budget = RequestBudget(10, 1.0, clock=clock, backoff_base=2.0, backoff_max=20.0, rng=random.Random(7))
    steps = []
    for _ in range(6):
        delay = budget.penalize(None)
        steps.append(delay)
        await clock.advance(delay + 0.001)  # let the pause end before the next 429
    for streak, delay in enumerate(steps):
        raw = min(20.0, 2.0 * 2**streak)
        assert raw / 2 <= delay <= raw, (streak, delay)
    assert budget.streak == 6
    budget.reward()
    assert budget.streak == 0
    assert 1.0 <= budget.penalize(None) <= 2.0


async def test_penalize_honours_retry_after_and_blocks_everyone() -> None:
    clock = ManualClock()
    budget = RequestBudget(10, 1.0, clock=clock, backoff_base=1.0, backoff_max=30.0, rng=random.Random(1))
    delay = budget.penalize(7.0)
    assert 7.0 <= delay <= 7.7
    assert budget.paused_for() == pytest.approx(delay)
    order: list[str] = []
    waiters = [Holder(budget, f"w{i}", order, p) for i, p in enumerate([Priority.LOW, Priority.HIGH])]
    await clock.advance(6.9)
    assert order == []
    # A 429 of a request that was already in flight does not escalate the pause.
    again = budget.penalize(None)
    assert again == pytest.approx(delay - 6.9) and budget.streak == 1
    await clock.advance(delay - 6.9)
    assert order == ["w1"]  # after a 429, one request probes first (highest priority)...
    budget.reward()  # ...and its success lets the others through, even while it is still in flight
    await settle()
    assert order == ["w1", "w0"]
    for w in waiters:
        await w.finish()
    assert 29.9 <= budget.penalize(3600) <= 33.0  # an absurd Retry-After is capped at backoff_max


async def test_concurrent_burst_never_exceeds_window_scaled() -> None:
    # 300 requests of random duration from 50 tasks; the budget's own invariant is checked
    # at every grant: requests in flight + requests that ended within the last window < limit.
    clock = ScaledClock(20)  # a 1 s (clock) window is 50 ms of real time
    limit, window = 8, 1.0
    budget = RequestBudget(limit, window, clock=clock)
    rng = random.Random(3)
    spans: list[tuple[float, float]] = []
    violations: list[float] = []
    remaining = [300]

    async def worker() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            prio = rng.choice(list(Priority))
            async with budget.slot(prio):
                g = clock.monotonic()
                busy = sum(1 for s, e in spans if e > g - window)
                if busy >= limit:
                    violations.append(g)
                index = len(spans)
                spans.append((g, float("inf")))
                await clock.sleep(rng.uniform(0, 0.3))
                spans[index] = (g, clock.monotonic())

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(50))), 30)
    assert len(spans) == 300 and not violations
    # Server-side view: any receive time inside each request's span; no window may hold > limit.
    for trial in range(20):
        r = random.Random(trial)
        times = sorted(r.uniform(s, e) for s, e in spans)
        lo = 0
        for hi, t in enumerate(times):
            while times[lo] <= t - window:
                lo += 1
            assert hi - lo + 1 <= limit
    assert budget.in_flight == 0 and budget.waiting == 0


async def test_probe_after_429_goes_one_at_a_time_until_a_success() -> None:
    clock = ManualClock()
    budget = RequestBudget(10, 1.0, clock=clock, backoff_base=1.0, rng=random.Random(3))
    delay = budget.penalize(None)
    order: list[str] = []
    holders = [Holder(budget, f"p{i}", order) for i in range(3)]
    await clock.advance(delay)
    assert order == ["p0"]
    await holders[0].finish()  # failed or unknown outcome: still probing, the next one alone
    await settle()
    assert order == ["p0", "p1"]
    budget.reward()
    await settle()
    assert order == ["p0", "p1", "p2"]
    for h in holders[1:]:
        await h.finish()


def test_validation_and_repr() -> None:
    clock = ManualClock()
    with pytest.raises(ValueError):
        RequestBudget(0, 1, clock=clock)
    with pytest.raises(ValueError):
        RequestBudget(1, 0, clock=clock)
    budget = RequestBudget(16, 60, clock=clock)
    assert "16/60s" in repr(budget) and budget.available() == 16


async def test_429s_halve_our_share_of_the_window_and_successes_win_it_back() -> None:
    """A key shared with other clients: after 429s the budget allows itself less, then recovers."""
    budget = RequestBudget(16, 60.0, clock=ManualClock(), backoff_base=1.0, backoff_max=10.0)
    assert budget.allowed == 16
    budget.penalize(None)
    assert budget.allowed == 8
    budget.reward()
    budget._push.paused_until = float("-inf")  # the pause is over
    budget.penalize(None)
    assert budget.allowed == 4
    for _ in range(4 + 5 + 6):  # about one window's worth of successes per extra request
        budget.reward()
    assert 6 <= budget.allowed < 16
    for _ in range(400):
        budget.reward()
    assert budget.allowed == 16
