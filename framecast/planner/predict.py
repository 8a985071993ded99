"""When will a task finish: one task's progress reports (:class:`ProgressTrack`), and what a
learned duration is keyed by (:class:`DurationKey`; the durations themselves:
:class:`~framecast.planner.survival.Survival`).

A track's end is "elapsed x remaining / done", elapsed counted from when work began (the last
report that showed none, else the task's start): the whole time worked averages out the service's
whole percents and a jump, and a task queued on the service before its work began is not taken
for a slow one. Pure: every time is a wall-clock ``float`` the caller passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

__all__ = ["DurationKey", "Kind", "ProgressTrack"]

# Progress shown between polls stays below this until the service says the task completed:
# an estimate must never claim the work is done.
_PROGRESS_CAP = 0.99
# Below this rate (fraction per second: 1 % per ~12 days) nothing honest can be said.
_MIN_RATE = 1e-9

Kind = Literal["video", "image"]


# ---------------------------------------------------------------------- progress


class ProgressTrack:
    """The progress reports of one task on the service, and what they predict.

    Feed every poll answer to :meth:`observe` (``progress`` a fraction in ``0..1`` as the parser
    gives it, or ``None`` when the service said nothing usable) and the completing poll to
    :meth:`complete`, at wall times. An answer older than the latest is ignored, and a report lower
    than an earlier one counts as a stall (the service never un-does work we could use).
    """

    def __init__(self, started_at: float) -> None:
        """``started_at``: when the task was created on the service (the elapsed time's origin)."""
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
        """Record a poll at ``at`` that found the task still pending, with its ``progress`` if any."""
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
        # A report at the instant of the previous one (or before the start) is news all the same.
        self._last = (max(at, last_t), value)

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
        """When the task is expected to complete (wall time), or ``None`` if progress says nothing.

        Never earlier than the latest poll: a task seen pending then was not done before it.
        After :meth:`complete`, the time the completion was seen.
        """
        if self._completed_at is not None:
            return self._completed_at
        rate = self._rate
        if rate is None or rate < _MIN_RATE or self._last_at is None:
            return None
        last_t, last_p = self._last
        done = last_t + (1.0 - last_p) / rate
        return max(done, self._last_at) if math.isfinite(done) else None

    def progress_at(self, now: float) -> float | None:
        """The estimated progress at ``now``, between polls; ``None`` when no progress was reported.

        Extrapolated from the last report at the smoothed rate, never below that report, and at
        most 0.99 until :meth:`complete` (an estimate never claims the work is done, not even when
        a pending poll said 100 %). Non-decreasing in ``now`` for a given set of observations.
        """
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
        """How long the task took, ``(at least, at most)`` seconds; ``None`` before :meth:`complete`.

        The completing poll only bounds the true completion: it lies between the last pending poll
        (or the start) and that poll. With a rate, the predicted completion inside that gap is
        taken as known (both figures equal); without, the gap itself is the answer (its middle
        would teach a task seen done at its first poll that it took half that long:
        :mod:`framecast.planner.survival`).
        """
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


# ---------------------------------------------------------------------- durations


@dataclass(frozen=True)
class DurationKey:
    """What a duration is learned per: the model, the kind, and a coarse bucket of the work.

    ``bucket`` is ``round(log2(units))`` with units the pixels times frames of a video, the pixels
    of an image: buckets double in work, so presets that cost about the same share one.
    """

    model: str
    kind: Kind
    bucket: int

    @property
    def text(self) -> str:
        """The key as stored (``video:27:svc-video-v2.0``; the model last, as it may hold ``:``)."""
        return f"{self.kind}:{self.bucket}:{self.model}"

    @classmethod
    def parse(cls, text: str) -> DurationKey | None:
        """The key from its :attr:`text`, or ``None`` for text that is not one."""
        parts = text.split(":", 2)
        if len(parts) != 3 or parts[0] not in ("video", "image") or not parts[2]:
            return None
        try:
            bucket = int(parts[1])
        except ValueError:
            return None
        kind: Kind = "video" if parts[0] == "video" else "image"
        return cls(parts[2], kind, bucket)

    @classmethod
    def of(cls, model: str, width: int, height: int, frames: int | None) -> DurationKey:
        """The key of a video (``frames`` given) or an image (``frames`` None) of that size."""
        units = max(1, width) * max(1, height) * (max(1, frames) if frames is not None else 1)
        return cls(model, "video" if frames is not None else "image", round(math.log2(units)))

    @classmethod
    def for_params(cls, params: Mapping[str, Any]) -> DurationKey | None:
        """The key of a job from its parameters (``framecast.app.intake``'s shapes), or ``None``:
        videos carry ``width``, ``height``, ``num_frames``; images a ``size`` like ``1024x1024``."""
        model = params.get("model")
        if not isinstance(model, str) or not model:
            return None
        width, height, frames = params.get("width"), params.get("height"), params.get("num_frames")
        if _is_int(width) and _is_int(height) and _is_int(frames):
            return cls.of(model, width, height, frames)
        size = params.get("size")
        if isinstance(size, str):
            w, _, h = size.partition("x")
            if w.isdigit() and h.isdigit():
                return cls.of(model, int(w), int(h), None)
        return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
