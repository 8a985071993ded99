"""How long tasks of one kind take, from the recent ones: the planner's one model of durations.

Finished tasks alone mislead: early in a batch the first to finish are the shortest, so polls timed
by them come too early; a task still running says the others take at least its age. A finished task
is kept as the interval its polls pinned it to (a point when progress predicted its end): its middle
would teach a task seen done at its first poll that it took half as long. :class:`Survival` fits
both by Turnbull's self-consistency (the NPMLE for interval- and right-censored data), persisted as a
log-normal row per kind for a restart. Pure: no clock, no I/O. History: ``docs/ARCHITECTURE.md``.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate
from statistics import NormalDist

from framecast.planner.tuning import PlannerTuning
from framecast.values.durations import DurationKey, DurationRow, Kind

__all__ = ["MAX_DURATION", "Fit", "Survival", "fit_durations"]

#: Longest duration (seconds) believed: a longer observation is a bug or a stuck task, not data.
MAX_DURATION = 86_400.0
#: A prior's spread in log units: cautious, and the widest a fit is read.
_PRIOR_SIGMA = 0.8
#: The narrowest spread read from a fit: durations always vary.
_MIN_SIGMA = 0.1
_NORMAL = NormalDist()
# An exact duration t counts as (t - w, t], w this or t / 1e9: enough to order ties, too little to matter.
_EXACT = 1e-6
# The self-consistency iteration stops when no share moves by more than this, or after _MAX_ROUNDS.
_CONVERGED = 1e-7
_MAX_ROUNDS = 400


class Fit:
    """Shares of probability on disjoint intervals of duration, each spread evenly (the last may be open)."""

    def __init__(self, intervals: Sequence[tuple[float, float]], shares: Sequence[float]) -> None:
        self._intervals = list(intervals)
        self._shares = list(shares)

    def __repr__(self) -> str:
        return f"<Fit intervals={len(self._intervals)}>"

    def quantile(self, q: float) -> float | None:
        """The duration within which a fraction `q` of tasks finish, or None beyond what was seen."""
        if not 0 < q < 1:
            raise ValueError("q must be in (0, 1)")
        below = 0.0
        for (start, end), share in zip(self._intervals, self._shares, strict=True):
            if share > 0 and below + share >= q - 1e-9:
                if math.isinf(end):
                    return None
                return start + (end - start) * min(1.0, max(0.0, (q - below) / share))
            below += share
        return None


def fit_durations(finished: Iterable[tuple[float, float]], pending: Iterable[float]) -> Fit:
    """Fit durations to `finished` tasks, each ended within ``(lower, upper]`` (equal: exactly), and
    `pending` ages at which running tasks were last seen unfinished."""
    observed: list[tuple[float, float]] = []
    for lower, upper in finished:
        if math.isfinite(lower) and math.isfinite(upper) and upper > 0:
            lower = max(0.0, min(lower, upper - max(_EXACT, upper * 1e-9)))
            observed.append((lower, upper))
    observed += [(max(0.0, age), math.inf) for age in pending if math.isfinite(age)]
    # Turnbull's innermost intervals: a left end, then a right end (first at a tie: "done by t" and
    # "pending at t" do not overlap).
    ends = sorted([(lower, 1) for lower, _ in observed] + [(upper, 0) for _, upper in observed])
    intervals = [
        (a, b) for (a, a_left), (b, b_left) in zip(ends, ends[1:], strict=False) if a_left and not b_left
    ]
    starts = [a for a, _ in intervals]
    stops = [b for _, b in intervals]
    # Each observation covers a run of consecutive innermost intervals: [first, last).
    runs = [(bisect_left(starts, lower), bisect_right(stops, upper)) for lower, upper in observed]
    runs = [(first, last) for first, last in runs if first < last]
    if not runs:
        return Fit([], [])
    shares = [1.0 / len(intervals)] * len(intervals)
    weight = 1.0 / len(runs)
    for _ in range(_MAX_ROUNDS):
        # Each observation spreads its weight over its intervals by their shares (prefix sums: linear).
        total = [0.0, *accumulate(shares)]
        spread = [0.0] * (len(intervals) + 1)
        for first, last in runs:
            covered = total[last] - total[first]
            if covered > 0:
                spread[first] += weight / covered
                spread[last] -= weight / covered
        updated = [share * factor for share, factor in zip(shares, accumulate(spread), strict=False)]
        moved = max(abs(new - old) for new, old in zip(updated, shares, strict=True))
        shares = updated
        if moved < _CONVERGED:
            break
    return Fit(intervals, shares)


class Survival:
    """How long tasks of each kind take; below ``learned_after`` finished here, a kind reads a
    log-normal: its restored row's, else its prior."""

    def __init__(
        self,
        *,
        priors: Mapping[Kind, float],
        keep: int = PlannerTuning.memory,
        learned_after: int = PlannerTuning().learned_after,
    ) -> None:
        """`priors`: each kind's median seconds before anything is known; `keep`: tasks kept per kind."""
        self._priors = {kind: (math.log(seconds), _PRIOR_SIGMA) for kind, seconds in priors.items()}
        self._keep = keep
        self._learned_after = learned_after
        self._finished: dict[DurationKey, deque[tuple[float, float]]] = {}
        self._rows: dict[DurationKey, tuple[float, float, int]] = {}  # restored: (mu, sigma, count)
        # The last fit of each kind, with what it was fitted to: polls ask far more often than tasks end.
        self._fits: dict[DurationKey, tuple[tuple[float, ...], int, Fit]] = {}
        self._lognormals: dict[DurationKey, tuple[int, tuple[float, float]]] = {}
        self._revision = 0

    def __repr__(self) -> str:
        return f"<Survival kinds={len(self._finished)}>"

    def restore(self, rows: Iterable[DurationRow]) -> None:
        """Start from the rows the store kept; a row that cannot be right is skipped, never the start-up."""
        for row in rows:
            key = DurationKey.parse(row.key)
            if (
                key is None
                or row.count < 0
                or not (0 < row.mean <= MAX_DURATION and 0 <= row.spread < math.inf)
            ):
                continue
            self._rows[key] = (
                math.log(row.mean),
                max(_MIN_SIGMA, math.log1p(row.spread / row.mean)),
                row.count,
            )
        self._revision += 1

    def finished(self, key: DurationKey, lower: float, upper: float, *, at: float) -> DurationRow | None:
        """A task of `key` took ``(lower, upper]`` seconds, seen at wall time `at`: the row to persist."""
        if not (0 < upper <= MAX_DURATION and 0 <= lower <= upper):
            return None
        self._finished.setdefault(key, deque(maxlen=self._keep)).append((lower, upper))
        self._revision += 1
        mu, sigma = self._lognormal(key)
        mean = math.exp(mu)
        return DurationRow(key.text, mean, mean * math.expm1(sigma), self.count(key), at)

    def count(self, key: DurationKey) -> int:
        """Finished tasks of `key` known: kept here, and counted in its restored row."""
        return len(self._finished.get(key, ())) + self._rows.get(key, (0.0, 0.0, 0))[2]

    def longest(self, key: DurationKey) -> float | None:
        """The longest of `key`'s tasks kept that finished here (at most; None: none yet)."""
        return max((upper for _, upper in self._finished.get(key, ())), default=None)

    def quantile(self, key: DurationKey, q: float, pending: Iterable[float] = ()) -> float:
        """The duration a fraction `q` of `key`'s tasks finish within, `pending` the running ones' ages;
        beyond the sample, its log-normal (at least the largest age seen)."""
        done = self._finished.get(key, ())
        if len(done) >= self._learned_after:
            ages = tuple(sorted(a for a in pending if a > 0))
            cached = self._fits.get(key)
            if cached is not None and cached[0] == ages and cached[1] == self._revision:
                fit = cached[2]
            else:
                fit = fit_durations(done, ages)
                self._fits[key] = (ages, self._revision, fit)
            value = fit.quantile(q)
            if value is not None:
                return value
            largest = max(*(u for _, u in done), *ages)
        else:
            largest = 0.0
        mu, sigma = self._lognormal(key)
        return max(largest, math.exp(mu + _NORMAL.inv_cdf(q) * sigma))

    def _lognormal(self, key: DurationKey) -> tuple[float, float]:
        """``(mu, sigma)`` in log seconds: the finished sample's, else the restored row's, else the prior."""
        cached = self._lognormals.get(key)
        if cached is not None and cached[0] == self._revision:
            return cached[1]
        done = self._finished.get(key, ())
        row = self._rows.get(key)
        found = (row[0], row[1]) if row is not None else self._priors[key.kind]
        if len(done) >= self._learned_after or (done and row is None):
            fit = fit_durations(done, ())
            median, low = fit.quantile(0.5), fit.quantile(0.16)
            if median is not None and median > 0:
                sigma = math.log(median / low) if low else _PRIOR_SIGMA
                found = math.log(median), min(_PRIOR_SIGMA, max(_MIN_SIGMA, sigma))
        self._lognormals[key] = (self._revision, found)
        return found
