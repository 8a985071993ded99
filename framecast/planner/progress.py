"""When a task will finish, from its progress reports (:class:`ProgressTrack`).

The end is "elapsed x remaining / done", elapsed counted from when work began: the whole time worked
averages out the service's whole percents and jumps, and a task queued on the service before its work
began is not taken for a slow one. Pure: every time is a wall-clock ``float`` the caller passes.
"""

from __future__ import annotations

import math

__all__ = ["ProgressTrack"]

# Progress estimated between polls stays below this until the task is seen completed.
_PROGRESS_CAP = 0.99
# Below this rate (fraction per second) nothing honest can be said.
_MIN_RATE = 1e-9


class ProgressTrack:
    """The progress reports of one task on the service (:meth:`observe`, :meth:`complete`), and what
    they predict. An answer older than the latest is ignored; a lower report counts as a stall."""

    def __init__(self, started_at: float) -> None:
        """``started_at``: when the task was created on the service."""
        self._started_at = float(started_at)
        self._worked_from = self._started_at  # when work began: the last report that showed none
        self._last: tuple[float, float] = (self._started_at, 0.0)  # (time, monotone progress)
        self._last_at: float | None = None  # the latest poll, with or without progress
        self._pending_at: float | None = None  # the latest poll that found the task unfinished
        self._completed_at: float | None = None
        self._reports = 0

    @property
    def last_at(self) -> float | None:
        """When the task was last observed (any poll), or ``None``."""
        return self._last_at

    @property
    def completed(self) -> bool:
        """Whether :meth:`complete` was called."""
        return self._completed_at is not None

    def observe(self, at: float, progress: float | None) -> None:
        """Record a poll at ``at`` that found the task pending, with its ``progress`` (0..1) if any."""
        if self._completed_at is not None:
            return
        if self._last_at is not None and at < self._last_at:
            return  # a late answer to an older poll: the newer one already said more
        self._last_at = at
        self._pending_at = at
        if progress is None:
            return
        last_t, last_p = self._last
        value = max(last_p, progress)
        self._reports += 1
        if value <= 0:
            self._worked_from = max(self._worked_from, at)  # no work yet: it may be queued there
        self._last = (max(at, last_t), value)  # a report at the previous one's instant is news too

    @property
    def _rate(self) -> float | None:
        """Progress a second since work began (None: no work shown, or no time to measure it over)."""
        at, value = self._last
        if value <= 0 or at <= self._worked_from:
            return None
        return value / (at - self._worked_from)

    def complete(self, at: float) -> None:
        """Record the poll at ``at`` that found the task completed."""
        if self._completed_at is None:
            self._completed_at = max(at, self._last_at) if self._last_at is not None else at
            self._last_at = self._completed_at

    def predicted_done(self) -> float | None:
        """When the task is expected to complete (wall time; not before the latest poll), or ``None``."""
        if self._completed_at is not None:
            return self._completed_at
        rate = self._rate
        if rate is None or rate < _MIN_RATE or self._last_at is None:
            return None
        last_t, last_p = self._last
        done = last_t + (1.0 - last_p) / rate
        return max(done, self._last_at) if math.isfinite(done) else None

    def progress_at(self, now: float) -> float | None:
        """The estimated progress at ``now`` (never below the last report, below 1 until completed),
        or ``None`` when no progress was reported."""
        if self._completed_at is not None:
            return 1.0
        if not self._reports:
            return None
        last_t, last_p = self._last
        rate = self._rate
        if rate is None or now <= last_t:
            return min(last_p, _PROGRESS_CAP)
        guess = last_p + rate * (now - last_t)
        return max(min(last_p, _PROGRESS_CAP), min(guess, _PROGRESS_CAP))

    def bounds(self) -> tuple[float, float] | None:
        """How long the task took, ``(at least, at most)`` seconds (equal when progress predicted its end
        within the polls' gap); ``None`` before :meth:`complete`."""
        if self._completed_at is None:
            return None
        seen = self._completed_at
        before = self._pending_at if self._pending_at is not None else self._started_at
        before = min(max(before, self._started_at), seen)
        rate = self._rate
        if rate is not None and rate >= _MIN_RATE:
            last_t, last_p = self._last
            predicted = last_t + (1.0 - last_p) / rate
            if math.isfinite(predicted):
                before = seen = min(max(predicted, before), seen)
        return max(0.0, before - self._started_at), max(0.0, seen - self._started_at)
