"""How honest the estimates a member sees are (issue 17, item 4): each one checked against what happened.

A queued job's message says "starts in about N minutes"; a running one's "Generating… about N
minutes left" (``cogs/views/render.py``, from the key's planner's :class:`Estimate`). The benchmark's
recording chat side looks at every job as its message would be drawn: at every change of the job
and every ``EDIT_INTERVAL`` between changes (the real chat side redraws that often). Each look at a
queued job with a ``starts_in``, and each look at a running job with a ``remaining``, is one
estimate the member saw, stamped with the time it was shown. Afterwards each is compared with what
happened:

* **starts in**: the job left the queue (its first change past ``QUEUED``);
* **left**: the "Generating…" status ended, i.e. the job left ``RUNNING`` (the bot saw the task
  completed and began fetching the file). That is what the words promise: the time left of the
  generation, not of the upload after it.

The error of one estimate is ``|estimate - actual| / max(actual, floor)``, with ``actual`` the
seconds from the look to the event and ``floor`` one poll interval (30 clock seconds): below that
the message says "less than a minute" whatever the figure, and a few seconds' miss on a tiny wait
must not count as hundreds of percent. Looks are counted as they come, so a job that waits long is
seen (and weighs) more often, as it is by its member. The figure reported per shape is the median of
these errors; the p90 beside it shows the tail, how many were too early, and the median signed
error (``bias``) whether the figures lean early (optimistic: below zero) or late.

Two readings of each estimate are scored: the planner's figure itself (``raw``), and the figure as
the message words it (``as read``: "about 3 minutes" reads 180 s, "less than a minute" 30 s,
"finishing…"/"starting soon" 0 s; see :func:`cogs.views.render.time_ahead`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from framecast.planner.estimate import Estimate
from framecast.values import JobState

__all__ = ["GOAL", "EstimateErrors", "Look", "Scored", "as_read", "estimate_errors", "rows", "summary"]

#: Estimates are counted where they are actually drawn: "starts in" on a queued job's message,
#: "left" on a running one's (a job being submitted shows neither).
_STARTS_STATE = JobState.QUEUED
_LEFT_STATE = JobState.RUNNING


class Look(Protocol):
    """One look at a job as its message would show it (the benchmark's ``Shown``)."""

    at: float  # real monotonic seconds
    state: JobState
    estimate: Estimate | None


@dataclass
class EstimateErrors:
    """Relative errors of every "starts in" and "left" shown in one run (see the module docstring)."""

    starts: list[float] = field(default_factory=list)
    left: list[float] = field(default_factory=list)
    starts_read: list[float] = field(default_factory=list)
    left_read: list[float] = field(default_factory=list)
    #: How many shown estimates were too early (the event came later than promised).
    starts_optimistic: int = 0
    left_optimistic: int = 0
    #: The signed errors, (estimate - actual) / max(actual, floor): below zero, too early.
    starts_signed: list[float] = field(default_factory=list)
    left_signed: list[float] = field(default_factory=list)


def as_read(seconds: float) -> float:
    """The seconds a member reads from the message's words for `seconds` ahead (see render.time_ahead)."""
    if seconds <= 0:
        return 0.0
    if seconds < 60:
        return 30.0
    minutes = max(1, math.floor(seconds / 60 + 0.5))
    if minutes >= 10:
        minutes = 5 * math.floor(minutes / 5 + 0.5)
    if minutes < 60:
        return 60.0 * minutes
    return 3600.0 * max(1, math.floor(seconds / 3600 + 0.5))


def _first_after(looks: Sequence[Look], states: Callable[[JobState], bool]) -> float | None:
    return next((look.at for look in looks if states(look.state)), None)


def estimate_errors(jobs: Iterable[Sequence[Look]], *, scale: float, floor: float) -> EstimateErrors:
    """The errors of every estimate shown, one sequence of looks per job (in the order they were taken).

    `scale`: clock seconds per real second (looks are stamped in real seconds, estimates are in
    clock seconds); `floor`: the smallest actual wait an error is relative to (clock seconds).
    A job whose event never came (not started, or never finished generating) is left out.
    """
    out = EstimateErrors()
    for looks in jobs:
        started = _first_after(looks, lambda s: s is not JobState.QUEUED)
        ended = _first_after(
            looks, lambda s: s not in (JobState.QUEUED, JobState.SUBMITTING, JobState.RUNNING)
        )
        for look in looks:
            e = look.estimate
            if e is None:
                continue
            if look.state is _STARTS_STATE and e.starts_in is not None and started is not None:
                actual = max(0.0, (started - look.at) * scale)
                out.starts.append(_error(e.starts_in, actual, floor))
                out.starts_read.append(_error(as_read(e.starts_in), actual, floor))
                out.starts_optimistic += e.starts_in < actual
                out.starts_signed.append((e.starts_in - actual) / max(actual, floor))
            elif look.state is _LEFT_STATE and e.remaining is not None and ended is not None:
                actual = max(0.0, (ended - look.at) * scale)
                out.left.append(_error(e.remaining, actual, floor))
                out.left_read.append(_error(as_read(e.remaining), actual, floor))
                out.left_optimistic += e.remaining < actual
                out.left_signed.append((e.remaining - actual) / max(actual, floor))
    return out


def _error(estimate: float, actual: float, floor: float) -> float:
    return abs(estimate - actual) / max(actual, floor)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(values: Sequence[float], optimistic: int | None = None, signed: Sequence[float] = ()) -> str:
    """``18% (p90 41%, n 312, 40% too early, bias -2%)``: the median error, its tail, how many, how
    many too early, and the median signed error (below zero: the figures lean early)."""
    if not values:
        return "none shown"
    text = f"{statistics.median(values):.0%} (p90 {_quantile(values, 0.9):.0%}, n {len(values)}"
    if optimistic is not None:
        text += f", {optimistic / len(values):.0%} too early"
    if signed:
        text += f", bias {statistics.median(signed):+.0%}"
    return text + ")"


#: The goal: the median absolute error of each kind of estimate, in each shape.
GOAL = 0.25


class Scored(Protocol):
    """A run's figures: its estimates' errors (None: the run shows no estimates, the naive bot)."""

    @property
    def estimates(self) -> EstimateErrors | None: ...


def rows() -> list[tuple[str, Callable[[Scored], str]]]:
    """Table rows for a benchmark's runs: a label and how to print one run's figure."""

    def cell(pick: Callable[[EstimateErrors], list[float]], starts: bool | None) -> Callable[[Scored], str]:
        def text(result: Scored) -> str:
            errors = result.estimates
            if errors is None:
                return "n/a"
            if starts is None:
                return summary(pick(errors))
            early = errors.starts_optimistic if starts else errors.left_optimistic
            return summary(pick(errors), early, errors.starts_signed if starts else errors.left_signed)

        return text

    return [
        ('"starts in" error, median (goal <= 25%)', cell(lambda e: e.starts, True)),
        ('"starts in" error as read, median', cell(lambda e: e.starts_read, None)),
        ('"left" error, median (goal <= 25%)', cell(lambda e: e.left, False)),
        ('"left" error as read, median', cell(lambda e: e.left_read, None)),
    ]
