"""When a task that reports no progress is polled: the quantile ladder (its one owner).

Without progress reports, only the durations learned from finished tasks say when a task is likely
done. Its first poll comes at their median; each later one at the next quantile up the ladder, so a
long task costs a few polls more rather than many (the planner also keeps polls an interval apart
and never further apart than the longest gap). The planner times its polls by this rule and the
forecast follows the same rule to say when a member's task will be seen done.
"""

from __future__ import annotations

__all__ = ["LEARNED_AFTER", "TOP_AFTER", "ladder_quantile"]

#: Finished tasks of a kind before their learned durations are trusted to time polls (until then
#: polls come every interval).
LEARNED_AFTER = 3

_FIRST, _STEP, _TOP = 0.5, 0.15, 0.95

#: Polls after which the ladder stays at its top quantile.
TOP_AFTER = round((_TOP - _FIRST) / _STEP)


def ladder_quantile(polls: int) -> float:
    """The duration quantile at which a task is polled next, after `polls` polls of it."""
    return min(_TOP, _FIRST + _STEP * max(0, polls))
