"""The key's requests over the coming minutes, window by window: where a new task's polls would land.

A video created now costs its create at once and its polls minutes later, when it is due to finish.
Admission that looks at the next window only (:meth:`~framecast.planner.planner.Planner.demand`)
sees none of those polls, so it starts tasks whose completions then fall together into one later
window: their polls wait for the budget (the members wait for their files), and the windows before
and after stand idle. :func:`peak_with` looks at every window of the horizon that the new task's
requests would fall in. Pure: times are whatever clock the caller uses (the planner's monotonic).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

__all__ = ["Requests", "peak_with"]

#: ``(time, requests)``: requests expected at a moment (fractions are expectations).
Requests = tuple[float, float]


def peak_with(
    planned: Sequence[Requests], added: Sequence[Requests], *, window: float, start: float
) -> float:
    """The most requests one window would hold with `added` on top of `planned`.

    Only windows ``[s, s + window)`` with ``s >= start`` that hold one of `added`'s requests count:
    the windows the new requests would make fuller (earlier ones are the budget's past).
    """
    events = sorted([*planned, *added])
    times = [t for t, _ in events]
    counts = [0.0]
    for _, n in events:
        counts.append(counts[-1] + n)

    def held(s: float) -> float:
        lo = bisect.bisect_left(times, s)
        hi = bisect.bisect_left(times, s + window)
        return counts[hi] - counts[lo]

    peak = 0.0
    for at, _ in added:
        # A window holding `at` starts in (at - window, at]; the count changes only where a
        # window's left edge passes a request, so those starts (and the earliest) are enough.
        first = max(start, at - window + 1e-6)
        if first > at:
            continue
        starts = [
            first,
            *(t for t in times[bisect.bisect_left(times, first) : bisect.bisect_right(times, at)]),
        ]
        peak = max(peak, *(held(s) for s in starts))
    return peak
