"""How long tasks of one kind take, from the recent ones, those still running included.

The duration model (:class:`~framecast.planner.predict.DurationModel`) learns from the tasks that
finished. Early in a batch those are the short ones: of sixteen videos created together, the first
three to finish are the three shortest, so a median learned from finished tasks alone comes out far
too low, and every poll timed by it comes too early (a wasted request, and another an interval
later). The tasks still running say how long the others take at the least: a task seen pending at
95 s takes longer than 95 s. :class:`Survival` keeps the recent finished durations of each kind and
combines them with the running tasks' "still pending at this age" by the product-limit
(Kaplan-Meier) estimate, which is free of that bias. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable

__all__ = ["Survival", "product_limit_quantile"]

#: Finished durations kept per kind: recent enough to follow a service that changes speed.
KEEP = 32


def product_limit_quantile(finished: Iterable[float], pending: Iterable[float], q: float) -> float | None:
    """The duration within which a fraction `q` of tasks finish (Kaplan-Meier), or None.

    `finished`: durations of tasks that finished; `pending`: ages at which running tasks were last
    seen unfinished (censored observations). None when the sample does not reach `q` (more than
    ``1 - q`` of it is still running at its largest age: the quantile lies beyond what was seen).
    """
    if not 0 < q < 1:
        raise ValueError("q must be in (0, 1)")
    # At a tie a finish counts before a censoring: a task seen pending at t was at risk at t.
    events = sorted([(t, 0) for t in finished] + [(t, 1) for t in pending])
    at_risk = len(events)
    surviving = 1.0
    i = 0
    while i < len(events):
        t = events[i][0]
        ended = 0
        j = i
        while j < len(events) and events[j][0] == t:
            ended += events[j][1] == 0
            j += 1
        if ended:
            surviving *= 1.0 - ended / at_risk
            if 1.0 - surviving >= q - 1e-12:
                return t
        at_risk -= j - i
        i = j
    return None


class Survival:
    """Recent finished durations per kind of task (see the module docstring)."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._finished: dict[Hashable, deque[float]] = {}

    def __repr__(self) -> str:
        return f"<Survival kinds={len(self._finished)}>"

    def finished(self, key: Hashable, seconds: float) -> None:
        """A task of `key` finished after `seconds`."""
        if seconds > 0:
            self._finished.setdefault(key, deque(maxlen=self._keep)).append(seconds)

    def count(self, key: Hashable) -> int:
        """Finished durations of `key` kept."""
        return len(self._finished.get(key, ()))

    def quantile(self, key: Hashable, q: float, pending: Iterable[float]) -> tuple[float | None, float]:
        """``(quantile or None, the largest age seen)`` for `key`, with `pending` running ages.

        None when the sample does not reach `q`: then the quantile is beyond the largest age seen,
        which the caller uses as a floor for its own estimate.
        """
        done = list(self._finished.get(key, ()))
        ages = [a for a in pending if a > 0]
        largest = max([*done, *ages], default=0.0)
        return product_limit_quantile(done, ages, q), largest
