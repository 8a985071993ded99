"""Every tuned number of the planner, in one record: what each trades, and the ``benchmarks/README.md``
heading that chose it. Moving one means rerunning ``benchmarks/bench_planner.py`` on every shape (the
random arrivals included) and recording the figures there. What is not here is not tuned: the costs
of a job, the ladder's rule, numerical guards and the duration model's prior.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PlannerTuning"]


@dataclass(frozen=True)
class PlannerTuning:
    """The planner's tuned numbers; the defaults are what was measured best."""

    #: The batch's last creates: more start its tail sooner, fewer keep polls on time (README, "Round 8").
    last_creates: int = 8
    #: Windows a create may borrow: the last creates and images sooner, polls later (README, "One record").
    borrow: float = 1.5
    #: The next window's share planned for a video to go anyway: idle slots vs late polls (README, "Round 8").
    idle: float = 0.5
    #: Windows lending a full window a video's create: creates go on, polls slip later (README, "Round 10").
    spread: float = 3.0
    #: A new kind's videos polled every interval: surer learning vs blind polls (README, "Round 7: scouts").
    scouts: int = 4
    #: First rung (a quantile) while members crowd: fewer blind polls, early files later (README, "Round 7").
    crowded_rung: float = 0.8
    #: Finished tasks kept: more follow a service's change slower, fewer follow noise (README, "One record").
    memory: int = 32
    #: Creates through before a ceiling is probed: fewer risk refusals sooner (README, "A service that caps").
    probe_after: int = 12

    @property
    def learned_after(self) -> int:
        """Finished tasks of a kind before its durations time polls: every scout but the slowest."""
        return max(1, self.scouts - 1)
