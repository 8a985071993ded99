"""Injectable clocks.

Everything in the core that measures an interval, keeps a deadline or waits goes through a
:class:`Clock`, so tests can run minutes of service time in a second (:class:`ScaledClock`) or
step time by hand (:class:`ManualClock`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "ScaledClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of time and of waiting."""

    def monotonic(self) -> float:
        """Seconds on a monotonic scale, for intervals, windows and deadlines."""
        ...

    def time(self) -> float:
        """Wall-clock time in epoch seconds, for persisted timestamps."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time."""
        ...


class SystemClock:
    """The real clock: :func:`time.monotonic`, :func:`time.time`, :func:`asyncio.sleep`."""

    def monotonic(self) -> float:
        """Real monotonic seconds."""
        return time.monotonic()

    def time(self) -> float:
        """Real wall-clock epoch seconds."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """Sleep for real."""
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


class ScaledClock:
    """A clock that runs `scale` times faster than real time.

    One real second is `scale` clock seconds: ``ScaledClock(60)`` turns a 60 s rate-limit window
    into one real second. ``monotonic()`` is the real monotonic time times `scale` (so intervals
    measured on it are in clock seconds), ``sleep(s)`` sleeps ``s / scale`` real seconds and
    ``time()`` starts at the real wall time and then advances `scale` times faster.
    """

    def __init__(self, scale: float) -> None:
        if not scale > 0:
            raise ValueError("scale must be > 0")
        self.scale = float(scale)
        self._mono0 = time.monotonic()
        self._wall0 = time.time()

    def monotonic(self) -> float:
        """Real monotonic seconds times the scale."""
        return time.monotonic() * self.scale

    def time(self) -> float:
        """Wall time at creation plus the scaled time elapsed since."""
        return self._wall0 + (time.monotonic() - self._mono0) * self.scale

    async def sleep(self, seconds: float) -> None:
        """Sleep `seconds` clock seconds, i.e. ``seconds / scale`` real seconds."""
        await asyncio.sleep(max(0.0, seconds) / self.scale)

    def __repr__(self) -> str:
        return f"ScaledClock({self.scale:g})"


class ManualClock:
    """A clock that only moves when told to (deterministic tests).

    ``sleep()`` parks the caller until :meth:`advance` moves time past its deadline. Sleepers are
    woken in deadline order, and the event loop is given a few turns after each wake-up so that
    woken coroutines can run (and start new sleeps) before time moves on.
    """

    def __init__(self, start: float = 0.0, *, wall_start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._wall_offset = float(wall_start) - float(start)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        """The manual time."""
        return self._now

    def time(self) -> float:
        """The manual time shifted to a plausible epoch."""
        return self._now + self._wall_offset

    async def sleep(self, seconds: float) -> None:
        """Wait until :meth:`advance` has moved time `seconds` forward."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """How many coroutines are parked in :meth:`sleep`."""
        return sum(1 for _, _, fut in self._sleepers if not fut.done())

    def next_deadline(self) -> float | None:
        """The earliest pending sleep deadline, if any."""
        for deadline, _, fut in sorted(self._sleepers):
            if not fut.done():
                return deadline
        return None

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, waking every sleeper whose deadline is reached."""
        target = self._now + max(0.0, seconds)
        await _settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            if fut.done():  # cancelled sleeper
                continue
            self._now = max(self._now, deadline)
            fut.set_result(None)
            await _settle()
        self._now = target
        await _settle()

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now:g})"


async def _settle(turns: int = 20) -> None:
    # Woken coroutines may chain a few awaits (a future, a lock, a new sleep) before they park
    # again; a handful of loop turns lets that settle without real time passing.
    for _ in range(turns):
        await asyncio.sleep(0)
