"""When will a task finish? Completion prediction from progress reports and from learned durations.

Two predictors, both pure (no I/O, no clock: every time is a wall-clock ``float`` the caller passes):

* :class:`ProgressTrack` follows one task whose polls may report progress. Its end is "elapsed x
  remaining / done", elapsed counted from when work began (the last report that showed none, else
  the task's start): the whole time worked averages out the service's whole percents and a jump,
  and a task queued on the service before its work began is not taken for a slow one.
* :class:`DurationModel` learns how long finished tasks took, per model and size bucket, for the
  polls that report no progress (and for tasks not started yet). It works in log space (durations
  are positive and skewed: a log-normal fits them better than a normal) and starts from a cautious
  prior. :meth:`DurationModel.snapshot` / :meth:`DurationModel.restore` with :class:`DurationRow`
  carry it across restarts through ``Store.load_durations`` / ``Store.save_duration``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal, TypeGuard

from framecast.values.durations import DurationRow

__all__ = [
    "MAX_DURATION",
    "DurationKey",
    "DurationModel",
    "Prediction",
    "ProgressTrack",
]

#: Longest duration (seconds) believed: a longer observation is a bug or a stuck task, not data.
MAX_DURATION = 86_400.0

# Progress shown between polls stays below this until the service says the task completed:
# an estimate must never claim the work is done.
_PROGRESS_CAP = 0.99
# Below this rate (fraction per second: 1 % per ~12 days) nothing honest can be said.
_MIN_RATE = 1e-9

_NORMAL = NormalDist()

Kind = Literal["video", "image"]


# ---------------------------------------------------------------------- progress


class ProgressTrack:
    """The progress reports of one task on the service, and what they predict.

    Feed every poll answer to :meth:`observe` (``progress`` a fraction, or ``None`` when the service
    said nothing usable) and the completing poll to :meth:`complete`. Values are taken defensively:
    out-of-order or non-finite times are ignored, progress is clamped to ``0..1``, and a report
    lower than an earlier one counts as a stall (the service never un-does work we could use).
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
    def started_at(self) -> float:
        """When the task was created."""
        return self._started_at

    @property
    def last_progress(self) -> float | None:
        """The highest progress the service reported (``None``: it never reported any)."""
        return self._last[1] if self._reports else None

    @property
    def last_at(self) -> float | None:
        """When the task was last observed (any poll), or ``None``."""
        return self._last_at

    @property
    def reports(self) -> int:
        """How many polls reported a progress (the prediction's footing)."""
        return self._reports

    @property
    def completed(self) -> bool:
        """Whether :meth:`complete` was called."""
        return self._completed_at is not None

    def observe(self, at: float, progress: float | None) -> None:
        """Record a poll at ``at`` that found the task still pending, with its ``progress`` if any."""
        if self._completed_at is not None or not math.isfinite(at):
            return
        if self._last_at is not None and at < self._last_at:
            return  # a late answer to an older poll: the newer one already said more
        self._last_at = at
        self._pending_at = at
        if progress is None or not math.isfinite(progress):
            return
        last_t, last_p = self._last
        value = max(last_p, min(1.0, max(0.0, progress)))
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
        if self._completed_at is None and math.isfinite(at):
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

    def remaining(self, now: float) -> float | None:
        """Seconds from ``now`` until the predicted completion (0 when overdue), or ``None``."""
        done = self.predicted_done()
        return None if done is None else max(0.0, done - now)

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
        if rate is None or math.isnan(now) or now <= last_t:
            return min(last_p, _PROGRESS_CAP)
        guess = last_p + rate * (now - last_t)
        if math.isnan(guess):  # 0 x inf, from absurd times: say only what was reported
            guess = last_p
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


@dataclass(frozen=True)
class Prediction:
    """An expected duration: ``mean`` and ``spread`` in seconds as in :class:`DurationRow`;
    ``count`` the observations behind it (0: the prior, or borrowed from another bucket)."""

    mean: float
    spread: float
    count: int


@dataclass
class _Stats:
    """Log-space running estimate of one key's durations."""

    mu: float
    var: float
    count: int
    updated_at: float

    def row(self, key: str) -> DurationRow:
        sigma = math.sqrt(self.var)
        mean = math.exp(self.mu)
        return DurationRow(key, mean, mean * math.expm1(sigma), self.count, self.updated_at)


class DurationModel:
    """Learned task durations per :class:`DurationKey`, starting from a cautious prior.

    Each key's estimate is a weighted mean and variance of ``log(seconds)``. The prior counts as
    ``prior_weight`` observations, so the first few real ones move the estimate quickly; after
    that a floor on the weight (``alpha``) keeps it following a service that gets slower or
    faster (once a kind is learned the planner times polls by the recent tasks,
    :mod:`framecast.planner.survival`: this model is what a restart starts from). ``min_sigma``
    keeps it from claiming more certainty than durations allow. A key never seen borrows from the nearest bucket of the same model (scaled by
    ``2 ** (work_exponent x bucket distance)`` and less certain); a model never seen gets the prior.
    """

    def __init__(
        self,
        *,
        video_prior: float = 120.0,
        image_prior: float = 20.0,
        prior_sigma: float = 0.8,
        prior_weight: float = 1.0,
        alpha: float = 0.1,
        min_sigma: float = 0.1,
        work_exponent: float = 0.5,
    ) -> None:
        """Priors in seconds; ``prior_sigma`` in log units (0.8: within x2.2 one time in 1.5)."""
        for name, value in (("video_prior", video_prior), ("image_prior", image_prior)):
            if not 0 < value <= MAX_DURATION:
                raise ValueError(f"{name} must be in (0, {MAX_DURATION:g}] seconds")
        if not 0 < alpha <= 1 or prior_weight < 0 or min_sigma <= 0 or prior_sigma < min_sigma:
            raise ValueError("alpha in (0, 1], prior_weight >= 0, 0 < min_sigma <= prior_sigma")
        self._priors: dict[Kind, float] = {"video": math.log(video_prior), "image": math.log(image_prior)}
        self._prior_var = prior_sigma**2
        self._prior_weight = prior_weight
        self._alpha = alpha
        self._min_var = min_sigma**2
        self._work_exponent = work_exponent
        self._stats: dict[DurationKey, _Stats] = {}

    @staticmethod
    def key_for(model: str, width: int, height: int, frames: int | None) -> DurationKey:
        """The key of a video (``frames`` given) or an image (``frames`` None) of that size."""
        units = max(1, width) * max(1, height) * (max(1, frames) if frames is not None else 1)
        kind: Kind = "video" if frames is not None else "image"
        return DurationKey(model, kind, round(math.log2(units)))

    @classmethod
    def key_for_params(cls, params: Mapping[str, Any]) -> DurationKey | None:
        """The key of a job from its parameters (``framecast.app.intake``'s shapes), or ``None``.

        Videos carry ``width``, ``height``, ``num_frames``; images a ``size`` like ``1024x1024``.
        """
        model = params.get("model")
        if not isinstance(model, str) or not model:
            return None
        width, height, frames = params.get("width"), params.get("height"), params.get("num_frames")
        if _is_int(width) and _is_int(height) and _is_int(frames):
            return cls.key_for(model, width, height, frames)
        size = params.get("size")
        if isinstance(size, str):
            w, _, h = size.partition("x")
            if w.isdigit() and h.isdigit():
                return cls.key_for(model, int(w), int(h), None)
        return None

    def expected(self, key: DurationKey) -> Prediction:
        """The expected duration of a task with this key."""
        mu, var, count = self._estimate(key)
        mean = math.exp(mu)
        return Prediction(mean, mean * math.expm1(math.sqrt(var)), count)

    def quantile(self, key: DurationKey, q: float) -> float:
        """The duration (seconds) that a fraction ``q`` of such tasks finish within (log-normal)."""
        if not 0 < q < 1:
            raise ValueError("q must be in (0, 1)")
        mu, var, _ = self._estimate(key)
        return math.exp(mu + _NORMAL.inv_cdf(q) * math.sqrt(var))

    def typical_within(self, key: DurationKey, lower: float, upper: float) -> float:
        """The likeliest single figure for a task known to have taken ``lower`` to ``upper`` seconds.

        The model's median given that interval (what :meth:`learn` takes from a task whose polls
        only bound its end); the nearer bound when the model gives the interval no chance at all.
        """
        if not upper > lower:
            return upper
        mu, var, _ = self._estimate(key)
        sigma = math.sqrt(var)
        low, high = (_NORMAL.cdf((math.log(t) - mu) / sigma) if t > 0 else 0.0 for t in (lower, upper))
        if high - low < 1e-9:
            return min(max(math.exp(mu), lower), upper)
        middle = min(max((low + high) / 2, 1e-12), 1 - 1e-12)
        return min(max(math.exp(mu + _NORMAL.inv_cdf(middle) * sigma), lower), upper)

    def learn(self, key: DurationKey, seconds: float, *, at: float) -> DurationRow | None:
        """Learn that a task with this key took ``seconds``; return the row to persist.

        Absurd observations (not finite, ``<= 0`` or over :data:`MAX_DURATION`) are ignored and
        give ``None``. ``at`` is the wall time, stamped on the row.
        """
        if not (math.isfinite(seconds) and 0 < seconds <= MAX_DURATION):
            return None
        stats = self._stats.get(key)
        if stats is None:
            mu, var, _ = self._estimate(key)
            stats = self._stats[key] = _Stats(mu, var, 0, at)
        weight = max(self._alpha, 1.0 / (stats.count + self._prior_weight + 1.0))
        delta = math.log(seconds) - stats.mu
        stats.mu += weight * delta
        # Exponentially weighted variance (West's update); floored: durations always vary.
        stats.var = max(self._min_var, (1.0 - weight) * (stats.var + weight * delta * delta))
        stats.count += 1
        stats.updated_at = at
        return stats.row(key.text)

    def snapshot(self) -> list[DurationRow]:
        """Every learned key as rows (for persistence)."""
        return [stats.row(key.text) for key, stats in self._stats.items()]

    def restore(self, rows: Iterable[DurationRow]) -> None:
        """Replace what was learned by ``rows`` (from :meth:`snapshot` or the store).

        Rows that cannot be right (unknown key text, non-finite or non-positive figures, a
        duration past :data:`MAX_DURATION`) are skipped: a damaged row costs its key's history,
        never the start-up.
        """
        self._stats.clear()
        for row in rows:
            key = DurationKey.parse(row.key)
            if (
                key is None
                or not (math.isfinite(row.mean) and 0 < row.mean <= MAX_DURATION)
                or not (math.isfinite(row.spread) and row.spread >= 0)
                or row.count < 0
                or not math.isfinite(row.updated_at)
            ):
                continue
            sigma = math.log1p(row.spread / row.mean)
            self._stats[key] = _Stats(
                math.log(row.mean), max(self._min_var, sigma * sigma), row.count, row.updated_at
            )

    def _estimate(self, key: DurationKey) -> tuple[float, float, int]:
        """``(mu, var, count)`` for the key: its own, borrowed from a neighbour, or the prior."""
        stats = self._stats.get(key)
        if stats is not None:
            return stats.mu, stats.var, stats.count
        neighbours = [k for k in self._stats if k.model == key.model and k.kind == key.kind]
        if not neighbours:
            return self._priors[key.kind], self._prior_var, 0
        near = min(neighbours, key=lambda k: (abs(k.bucket - key.bucket), k.bucket))
        source = self._stats[near]
        steps = key.bucket - near.bucket
        # Work doubles per bucket; time grows with it by an uncertain power, hence the widening.
        mu = source.mu + self._work_exponent * steps * math.log(2)
        var = source.var + (0.35 * steps) ** 2
        return mu, var, 0


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
