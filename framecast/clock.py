"""Injectable clocks.

Everything in the core that measures an interval, keeps a deadline or waits goes through a
:class:`Clock`, so tests and benchmarks can run minutes of service time in a second
(:class:`ScaledClock`) or step time by hand (the tests' ``ManualClock``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ScaledClock", "SystemClock"]


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
