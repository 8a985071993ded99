"""A clock for deterministic tests: time moves only when the test says so."""

from __future__ import annotations

import asyncio
import heapq
import itertools

__all__ = ["ManualClock"]


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
