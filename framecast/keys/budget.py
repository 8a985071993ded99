"""The shared request budget: one per API key, every request that carries the key goes through it.

The service allows N requests per rolling window (16 per minute) per key. The budget guarantees
that the server never sees more than N of our requests in any window, whatever the network
delay: a request holds its slot from the moment it is granted until its response has finished
(or it failed), and the slot only becomes free again ``window`` seconds after that *end*.

Why that is enough: take any N+1 requests whose receive times at the server fall in one window
``[t, t + window)``. The last one granted was granted at ``g < t + window``. Each of the other N was
granted earlier and either was still in flight at ``g`` or had ended at ``e >= t > g - window``
(a request ends after the server received it), so at ``g`` all N slots were taken and the grant
could not have happened.

Waiters are served by priority (lower value first), FIFO within a priority. A 429 from the
service (the key may be shared with other clients) pauses every grant via :meth:`penalize`; when
the pause ends, requests go one at a time until one succeeds (:meth:`reward`), so the waiters do
not all rush back into a service that may still be saturated.
All timing uses the injected :class:`~framecast.clock.Clock`; waiters are woken by futures set
from a single timer task, never by polling.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
from collections import deque
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Generic, Protocol, TypeVar

from framecast.backoff import backoff_delay
from framecast.clock import Clock
from framecast.service.budget import Budget
from framecast.values.service_requests import Priority

__all__ = ["KeptBudgets", "Pushback", "RequestBudget", "SpendRecord"]

log = logging.getLogger(__name__)


class Pushback:
    """The one rule for 429s, kept by every budget: how long grants pause, and the share allowed.

    ``Retry-After`` is honoured when given (capped at `backoff_max`); otherwise the pause grows
    exponentially with the streak of 429s (:func:`~framecast.backoff.backoff_delay`: at least half
    of ``backoff_base * 2**streak``, capped). Both get a little jitter so that several clients
    sharing the key do not come back in lock-step. 429s of requests that were already in flight when
    the pause began do not escalate it. The share of the window allowed is the full limit until a
    429 says the key is also spent elsewhere; then halved per 429 and grown back by about one
    request per window of successes (additive increase, multiplicative decrease).
    """

    def __init__(self, limit: int, *, backoff_base: float, backoff_max: float, rng: random.Random) -> None:
        self.limit = limit
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self._rng = rng
        #: Consecutive 429s since the last success.
        self.streak = 0
        #: Requests per window allowed now.
        self.allowed = float(limit)
        #: Monotonic clock time until which no grant is made.
        self.paused_until = float("-inf")

    def __repr__(self) -> str:
        return f"<Pushback streak={self.streak} allowed={self.allowed:.1f}>"

    def penalize(self, now: float, retry_after: float | None) -> tuple[float, bool]:
        """A 429 at `now`: ``(seconds paused from now, whether this began or lengthened a pause)``."""
        if now < self.paused_until:
            # Already paused by an earlier 429 of the same burst: only honour a longer Retry-After.
            remaining = self.paused_until - now
            if retry_after is not None and retry_after > remaining:
                delay = min(self.backoff_max, retry_after) * self._rng.uniform(1.0, 1.1)
                if delay > remaining:
                    self.paused_until = now + delay
                    return delay, True
            return remaining, False
        backoff = backoff_delay(self.streak + 1, base=self.backoff_base, cap=self.backoff_max, rng=self._rng)
        if retry_after is not None and retry_after >= 0:
            delay = min(self.backoff_max, retry_after) * self._rng.uniform(1.0, 1.1)
            if self.streak:
                # 429s in a row despite honouring Retry-After (the key is shared, or the server counts
                # rejected requests): keep growing, or the window never drains.
                delay = max(delay, backoff)
        else:
            delay = backoff
        self.streak += 1
        self.allowed = max(1.0, self.allowed / 2)
        self.paused_until = now + delay
        return delay, True

    def reward(self) -> bool:
        """A success: grow the share back; True when it ended a streak of 429s."""
        if self.allowed < self.limit:
            self.allowed = min(float(self.limit), self.allowed + 1.0 / self.allowed)
        ended = self.streak > 0
        self.streak = 0
        return ended


class _Waiter:
    __slots__ = ("future", "priority", "seq")

    def __init__(self, priority: int, seq: int, future: asyncio.Future[None]) -> None:
        self.priority = priority
        self.seq = seq
        self.future = future

    def __lt__(self, other: _Waiter) -> bool:
        return (self.priority, self.seq) < (other.priority, other.seq)


class SpendRecord(Protocol):
    """Where a budget records its grants and ends (:class:`framecast.keys.spent.SpentOnKey`)."""

    def still_counting(self) -> list[float]: ...

    def granted(self) -> int: ...

    async def recorded(self) -> None: ...

    def ended(self, seq: int) -> None: ...

    def paused_until(self) -> float | None: ...

    def paused(self, until: float) -> None: ...


class _Slot:
    """The async context manager returned by :meth:`RequestBudget.slot`."""

    __slots__ = ("_budget", "_priority", "_held", "_seq")

    def __init__(self, budget: RequestBudget, priority: int) -> None:
        self._budget = budget
        self._priority = priority
        self._held = False
        self._seq = 0

    async def __aenter__(self) -> None:
        await self._budget._acquire(self._priority)
        self._held = True
        if (spent := self._budget._spent) is not None:
            self._seq = spent.granted()
            try:
                await spent.recorded()  # written before the request goes: a crash then still counts it
            except BaseException:
                await self.__aexit__(None, None, None)
                raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._held:
            self._held = False
            # The request may have reached the server even if it failed or was cancelled half-way,
            # so its end always counts.
            self._budget._release()
            if (spent := self._budget._spent) is not None:
                spent.ended(self._seq)


class RequestBudget:
    """At most `limit` requests per rolling `window` seconds, shared by every caller.

    Use ``async with budget.slot(priority): <one HTTP request>``. Call :meth:`penalize` on a 429
    and :meth:`reward` on a success.
    """

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        clock: Clock,
        backoff_base: float = 2.0,
        backoff_max: float = 120.0,
        rng: random.Random | None = None,
        spent: SpendRecord | None = None,
    ) -> None:
        """`spent`: where the key's grants and ends are recorded, and the requests still counting in
        its window that the process before this one sent (:mod:`framecast.keys.spent`)."""
        if limit < 1:
            raise ValueError("limit must be >= 1")
        if not window > 0:
            raise ValueError("window must be > 0")
        if backoff_base <= 0 or backoff_max <= 0:
            raise ValueError("backoff_base and backoff_max must be > 0")
        self.limit = int(limit)
        self.window = float(window)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self._clock = clock
        self._rng = rng or random.Random()
        self._in_flight = 0
        # End times of finished requests still inside the window (monotonic): from the start, those the
        # process before this one sent (a restart must not hand the key a fresh window).
        since = clock.monotonic() - clock.time()
        self._ends: deque[float] = deque(end + since for end in (spent.still_counting() if spent else ()))
        self._spent = spent
        self._waiters: list[_Waiter] = []  # heap; cancelled entries are dropped lazily
        self._live_waiters = 0
        self._seq = itertools.count()
        self._push = Pushback(self.limit, backoff_base=backoff_base, backoff_max=backoff_max, rng=self._rng)
        if spent is not None and (paused := spent.paused_until()) is not None:
            # The service's Retry-After outlives a restart too (never longer than a pause can be).
            self._push.paused_until = min(paused, clock.time() + self.backoff_max * 1.1) + since
        self._timer: asyncio.Task[None] | None = None
        self._timer_deadline = float("inf")
        self._granted_total = 0

    # -- public API ---------------------------------------------------------------------------------
    def slot(self, priority: Priority | int = Priority.NORMAL) -> _Slot:
        """Wait for a slot (priority first, FIFO within a priority) and hold it for one request.

        The window counts from the request's end (the ``async with`` block's exit), so no rolling
        window of the server's receive times can ever hold more than `limit` requests. A caller
        cancelled while waiting leaves no trace.
        """
        return _Slot(self, int(priority))

    def penalize(self, retry_after: float | None = None) -> float:
        """Record a 429: pause every grant and return the pause in clock seconds.

        ``Retry-After`` is honoured when given (capped at `backoff_max`); otherwise the pause grows
        exponentially with the streak of 429s (:func:`~framecast.backoff.backoff_delay`: at least
        half of ``backoff_base * 2**streak``, capped). Both get a little jitter so that several clients sharing the key do not come back in lock-step.
        429s of requests that were already in flight when the pause began do not escalate it.
        Until the next :meth:`reward`, at most one request is in flight at a time.
        """
        delay, new = self._push.penalize(self._clock.monotonic(), retry_after)
        if new:
            log.info("request budget paused for %.2fs after a 429 (streak %d)", delay, self._push.streak)
            if self._spent is not None:
                self._spent.paused(self._clock.time() + delay)
            self._dispatch()
        return delay

    def reward(self) -> None:
        """Record a success: the next 429 starts the backoff from the beginning."""
        if self._push.reward():
            self._dispatch()  # leave probing: every free slot may be granted again

    # -- introspection (status commands, tests, benchmarks) ----------------------------------------
    @property
    def in_flight(self) -> int:
        """Requests currently holding a slot."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Callers waiting for a slot."""
        return self._live_waiters

    @property
    def streak(self) -> int:
        """Consecutive 429s since the last success."""
        return self._push.streak

    @property
    def granted_total(self) -> int:
        """Slots granted since creation."""
        return self._granted_total

    @property
    def allowed(self) -> int:
        """Requests per window we currently allow ourselves (the limit, less after 429s)."""
        return int(self._push.allowed)

    def paused_for(self) -> float:
        """Clock seconds left in a 429 pause (0 when not paused)."""
        return max(0.0, self._push.paused_until - self._clock.monotonic())

    def available(self) -> int:
        """Slots that could be granted right now (ignoring a pause)."""
        self._prune(self._clock.monotonic())
        return max(0, self.allowed - self._in_flight - len(self._ends))

    def used(self) -> int:
        """Requests in flight or finished inside the current window."""
        self._prune(self._clock.monotonic())
        return self._in_flight + len(self._ends)

    def frees_at(self) -> list[float]:
        """When the slots used now free again (monotonic, soonest first): a window after each
        request's end, a request in flight a window from now at the soonest."""
        now = self._clock.monotonic()
        self._prune(now)
        return [end + self.window for end in self._ends] + [now + self.window] * self._in_flight

    def close(self) -> None:
        """Stop the internal timer (waiters still parked stay parked)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_deadline = float("inf")

    def __repr__(self) -> str:
        return (
            f"<RequestBudget {self.limit}/{self.window:g}s in_flight={self._in_flight} "
            f"waiting={self._live_waiters} streak={self._push.streak}>"
        )

    # -- internals --------------------------------------------------------------------------------
    async def _acquire(self, priority: int) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, _Waiter(priority, next(self._seq), fut))
        self._live_waiters += 1
        self._dispatch()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # Granted, but cancelled before it could run: the request was never sent, so the
                # slot goes back without counting an end.
                self._in_flight -= 1
                self._dispatch()
            else:
                self._live_waiters -= 1  # its heap entry is skipped lazily
                # It may have been the head that others were queued behind.
                self._dispatch()
            raise

    def _release(self) -> None:
        self._in_flight -= 1
        self._ends.append(self._clock.monotonic())
        self._dispatch()

    def _prune(self, now: float) -> None:
        window = self.window
        ends = self._ends
        while ends and ends[0] + window <= now:
            ends.popleft()

    def _dispatch(self) -> None:
        """Grant as many waiting slots as the window allows; arm the timer for the next chance."""
        if not self._live_waiters:
            return
        now = self._clock.monotonic()
        if now < self._push.paused_until:
            self._arm(self._push.paused_until)
            return
        self._prune(now)
        waiters = self._waiters
        while waiters:
            head = waiters[0]
            if head.future.done():  # cancelled while waiting
                heapq.heappop(waiters)
                continue
            if self._in_flight + len(self._ends) >= self.allowed:
                break
            if self._push.streak and self._in_flight:
                # After a 429, one request probes the service before everyone comes back at once.
                break
            heapq.heappop(waiters)
            self._in_flight += 1
            self._live_waiters -= 1
            self._granted_total += 1
            head.future.set_result(None)
        if self._live_waiters and self._ends and self._in_flight + len(self._ends) >= self.allowed:
            # The oldest end leaves the window first. (With every slot in flight, the next
            # release dispatches instead.)
            self._arm(self._ends[0] + self.window)

    def _arm(self, deadline: float) -> None:
        if self._timer is not None and not self._timer.done() and self._timer_deadline <= deadline:
            return  # an earlier wake-up is already due; it re-arms if needed
        if self._timer is not None:
            self._timer.cancel()
        self._timer_deadline = deadline
        self._timer = asyncio.get_running_loop().create_task(
            self._wake_at(deadline), name="request-budget-timer"
        )

    async def _wake_at(self, deadline: float) -> None:
        delay = deadline - self._clock.monotonic()
        if delay > 0:
            await self._clock.sleep(delay)
        if self._timer is asyncio.current_task():
            self._timer = None
            self._timer_deadline = float("inf")
        self._dispatch()


K = TypeVar("K", bound=Hashable)


class KeptBudgets(Generic[K]):
    """Budgets of keys no account uses, kept for as long as they still count something.

    A server's key is checked with one request before its account opens, and a removed key may be
    set again a moment later: the account must then spend the budget those requests went through,
    or the key's window holds more requests than its limit (and the service answers 429). A budget
    kept here is handed over by :meth:`take`; untaken, it is closed once it counts nothing (nothing
    in flight or waiting, no request ended within its window, no 429 pause).
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._kept: dict[K, Budget] = {}
        self._expiry: dict[K, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, key: K, make: Callable[[], Budget]) -> Budget:
        """The budget kept for `key`, else a new one from `make` (kept from now on)."""
        budget = self._kept.get(key)
        if budget is None:
            budget = make()
            self.keep(key, budget)
        return budget

    def keep(self, key: K, budget: Budget) -> None:
        """Keep `budget` for `key` until it counts nothing (one kept already: `budget` is closed)."""
        if key in self._kept:
            if self._kept[key] is not budget:
                budget.close()
            return
        self._kept[key] = budget
        self._expiry[key] = asyncio.get_running_loop().create_task(
            self._expire(key, budget), name="kept-budget-expiry"
        )

    def take(self, key: K) -> Budget | None:
        """Hand over the budget kept for `key` (None if there is none); it is no longer kept here."""
        task = self._expiry.pop(key, None)
        if task is not None:
            task.cancel()
        return self._kept.pop(key, None)

    async def _expire(self, key: K, budget: Budget) -> None:
        while True:
            await self._clock.sleep(max(budget.window, budget.paused_for()))
            if not (budget.used() or budget.waiting or budget.paused_for()):
                break
        if self._kept.get(key) is budget:
            del self._kept[key]
            del self._expiry[key]
        budget.close()

    def close(self) -> None:
        """Close every kept budget (at shutdown)."""
        for task in self._expiry.values():
            task.cancel()
        for budget in self._kept.values():
            budget.close()
        self._expiry.clear()
        self._kept.clear()
