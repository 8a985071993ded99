"""When a task is polled before anything says its end: the quantile ladder (its one owner).

Without progress reports, only the durations learned from finished tasks say when a task is likely
done (with progress, only until its first poll reports some). Its first poll comes at a low rung;
each later one at the next quantile up the ladder, so a long task costs a few polls more rather
than many (the planner also keeps polls an interval apart and never further apart than the longest
gap). The planner times its polls by this rule and the forecast follows the same rule to say when a
member's task will be seen done.

Where the ladder starts depends on who waits for the key (issue 17). On a quiet key the first poll
comes at the median: a poll that finds the task still running costs a request nobody else wanted,
and half the files come sooner. While members wait in the queue for the key, every request a poll
spends without seeing a result delays every one of them (the queue moves at the key's rate), so
the first poll climbs towards a high quantile (:func:`first_rung`): nearly every poll sees a
result and the key buys more videos an hour, for a later file on the tasks that finish early. Also
for tasks that report progress: a poll that finds one running gives its end, but that poll is a
request the queue waited for, and with the batch's creates sent first (the scouts,
:mod:`framecast.planner.polls`) their polls crowd the key afterwards; measured, the higher rung
cut 0.15 request a video and brought the files sooner (``benchmarks/README.md``, round 7). Once
nobody waits, a task not polled yet goes back to the median: a poll that sees no result costs
nobody again, and the batch's last tasks were otherwise polled late while the key idled (round 9).
"""

from __future__ import annotations

__all__ = [
    "FIRST",
    "LEARNED_AFTER",
    "first_rung",
    "ladder_quantile",
    "poll_at",
    "top_after",
]

#: Finished tasks of a kind before their learned durations are trusted to time polls (until then
#: polls come every interval).
LEARNED_AFTER = 3

#: The first rung on a quiet key: the median.
FIRST = 0.5

_STEP, _TOP = 0.15, 0.95


def first_rung(waiting: float, crowded: float) -> float:
    """The first rung of a task created while `waiting` windows' worth of jobs wait for the key.

    `waiting`: the jobs in the queue over the jobs the key starts in one window (0: nobody waits).
    From the median on a quiet key up to `crowded` once a window's worth waits (the tuned
    :attr:`PlannerTuning.crowded_rung <framecast.planner.tuning.PlannerTuning.crowded_rung>`).
    """
    crowd = min(1.0, max(0.0, waiting))
    return FIRST + (crowded - FIRST) * crowd


def poll_at(last: float, target: float, *, interval: float, max_interval: float) -> float:
    """When a task's next poll comes, aimed at `target`: never sooner than `interval` after the
    `last` one, never later than `max_interval` after it (the one clamp: the plan's and the
    forecast's)."""
    earliest = last + interval
    return min(max(earliest, target), max(earliest, last + max_interval))


def top_after(first: float = FIRST) -> int:
    """Polls after which the ladder that starts at `first` stays at its top quantile."""
    return max(0, round((_TOP - first) / _STEP))


def ladder_quantile(polls: int, first: float = FIRST) -> float:
    """The duration quantile at which a task is polled next, after `polls` polls of it.

    `first`: the task's first rung (:func:`first_rung` at its create; :data:`FIRST` once nobody waits).
    """
    return min(_TOP, first + _STEP * max(0, polls))
