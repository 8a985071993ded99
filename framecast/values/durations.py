"""A learned task duration as the store keeps it (the ``durations`` table).

The planner learns durations (:class:`framecast.planner.survival.Survival`) and the store
persists them; the row they exchange sits here, below both, so neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DurationRow"]


@dataclass(frozen=True)
class DurationRow:
    """One learned duration as persisted (the ``durations`` table).

    ``mean`` is the typical duration in seconds (the geometric mean, i.e. the median of the fitted
    log-normal); ``spread`` is, in seconds, how far one standard deviation (in log space) reaches
    above it; ``count`` how many observations it rests on; ``updated_at`` when it last learned.
    """

    key: str
    mean: float
    spread: float
    count: int
    updated_at: float
