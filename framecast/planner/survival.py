"""How long tasks of one kind take, from the recent ones, those still running included: the
planner's one model of durations, persisted as a log-normal row per kind (what a restart starts
from, through ``Store.load_durations`` / ``Store.save_duration``).

Learned from the tasks that finished alone, durations come out short early in a batch: of sixteen videos created together, the first
three to finish are the three shortest, so a median learned from finished tasks alone comes out far
too low, and every poll timed by it comes too early (a wasted request, and another an interval
later). The tasks still running say how long the others take at the least: a task seen pending at
95 s takes longer than 95 s.

A finished task's duration is seldom known exactly either. Without progress reports, the poll that
sees a task done only says it ended after the last poll that found it pending and before this one:
for a task seen done at its first poll, somewhere between its start and that poll. Learning the
middle of that gap teaches a task seen done at 120 s that it took 60 s, though the same polls
would have seen a 115 s task done just the same; timed by such figures, first polls come ever
earlier and find fewer tasks done.

:class:`Survival` therefore keeps each recent finished task of a kind as the interval its polls
pinned it to (a point when progress reports predicted its end) and combines them with the running
tasks' "still pending at this age" by the nonparametric maximum-likelihood estimate for interval-
and right-censored data (Turnbull's self-consistency algorithm). With exact durations it is the
product-limit (Kaplan-Meier) estimate. Pure: no clock, no I/O. (It replaced a log-normal learned
by exponential weighting beside it: two models of one thing, the second read only after a restart.)
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate
from statistics import NormalDist

from framecast.planner.predict import DurationKey, Kind
from framecast.planner.tuning import PlannerTuning
from framecast.values.durations import DurationRow

__all__ = ["MAX_DURATION", "Fit", "Survival", "fit_durations"]

#: Longest duration (seconds) believed: a longer observation is a bug or a stuck task, not data.
MAX_DURATION = 86_400.0
#: A prior's spread in log units (within x2.2 one time in 1.5): cautious, and the widest a fit is read.
_PRIOR_SIGMA = 0.8
#: The narrowest spread read from a fit: durations always vary.
_MIN_SIGMA = 0.1
_NORMAL = NormalDist()

# An exactly known duration t counts as the interval (t - w, t], w this or a billionth of t if
# larger: wide enough to order ties (and to survive rounding), too narrow to matter.
_EXACT = 1e-6
# The self-consistency iteration stops when no interval's share moves by more than this ...
_CONVERGED = 1e-7
# ... or after this many rounds (a few dozen with the samples kept here; the bound keeps a
# pathological sample from stalling the loop).
_MAX_ROUNDS = 400


class Fit:
    """The estimated distribution of durations: shares of probability on disjoint intervals.

    Within an interval the share is spread evenly (nothing seen tells where inside it tasks end).
    The last interval may reach to infinity: the share of tasks still running past every age seen.
    """

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
    """Fit the distribution of durations to what was seen (see the module docstring).

    `finished`: ``(lower, upper)`` for each finished task, its end known to lie in ``(lower, upper]``
    (``lower == upper``: known exactly); `pending`: ages at which running tasks were last seen
    unfinished (each took longer than that).
    """
    observed: list[tuple[float, float]] = []
    for lower, upper in finished:
        if math.isfinite(lower) and math.isfinite(upper) and upper > 0:
            lower = max(0.0, min(lower, upper - max(_EXACT, upper * 1e-9)))
            observed.append((lower, upper))
    observed += [(max(0.0, age), math.inf) for age in pending if math.isfinite(age)]
    # Turnbull's innermost intervals: a left end followed by a right end with no end between them.
    # At a tie, a right end comes first: "done by t" and "pending at t" do not overlap.
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
        # One self-consistency round: each observation spreads its weight over the intervals it
        # covers in proportion to their current shares (prefix sums keep a round linear).
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
    """How long tasks of each kind take: the planner's one model of durations (see the module
    docstring). Below ``learned_after`` tasks finished here (after a restart, or for a kind never
    seen) a kind reads a log-normal: the one its last persisted row describes, else the prior."""

    def __init__(
        self,
        *,
        priors: Mapping[Kind, float],
        keep: int = PlannerTuning.memory,
        learned_after: int = PlannerTuning().learned_after,
    ) -> None:
        """`priors`: a kind's median duration before anything is known (seconds; a cautious spread);
        `keep`: finished durations kept per kind (recent enough to follow a service that changes
        speed); `learned_after`: finished tasks of a kind before its own sample is read."""
        self._priors = {kind: (math.log(seconds), _PRIOR_SIGMA) for kind, seconds in priors.items()}
        self._keep = keep
        self._learned_after = learned_after
        self._finished: dict[DurationKey, deque[tuple[float, float]]] = {}
        self._rows: dict[DurationKey, tuple[float, float, int]] = {}  # restored: (mu, sigma, count)
        # The last fit of each kind, with what it was fitted to: polls ask far more often than
        # tasks are seen (every admission check reads every running task's next poll).
        self._fits: dict[DurationKey, tuple[tuple[float, ...], int, Fit]] = {}
        self._lognormals: dict[DurationKey, tuple[int, tuple[float, float]]] = {}
        self._revision = 0

    def __repr__(self) -> str:
        return f"<Survival kinds={len(self._finished)}>"

    def restore(self, rows: Iterable[DurationRow]) -> None:
        """Start from the rows the store kept (what a restart knows); a row that cannot be right
        (unknown key text, figures not finite, not positive or past :data:`MAX_DURATION`) is
        skipped: a damaged row costs its key's history, never the start-up."""
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
        """A task of `key` finished after between `lower` and `upper` seconds (equal: exactly), seen
        at wall time `at`: the row to persist (None: nothing believable learned)."""
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

    def quantile(self, key: DurationKey, q: float, pending: Iterable[float] = ()) -> float:
        """The duration a fraction `q` of `key`'s tasks finish within, `pending` the ages at which
        running ones were last seen unfinished. Beyond what the sample reaches, its log-normal, at
        least the largest age seen."""
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
        """``(mu, sigma)`` in log seconds: of the finished sample once it reaches its median (sigma
        from its 16th percentile), else the restored row, else the kind's prior."""
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
