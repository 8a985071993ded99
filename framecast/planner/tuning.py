"""Every tuned number of the planner, in one record.

Each field says what it trades and the figure in ``benchmarks/README.md`` that chose it. Moving
one means rerunning ``benchmarks/bench_planner.py`` on every shape, the random-arrival family
included (the section "Members arriving at random"), and recording the figures there. What is not
here is not tuned: the costs of a job (the service's), the ladder's rule (each poll sees done the
same share of what remains as the first), how far a poll aims past a predicted end (the reports'
whole percents), numerical guards, and the duration model's prior and persisted learning rate
(what a restart starts from, before a kind's recent tasks time its polls).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PlannerTuning"]


@dataclass(frozen=True)
class PlannerTuning:
    """The planner's tuned numbers (see the module docstring). Defaults are what was measured best."""

    #: Videos waiting at most for the batch's last creates, which may borrow: more starts a batch's
    #: tail sooner, fewer keeps a steady trickle's polls on time. 4 -> 8: the mixed shape's bad runs
    #: from 1.65x to 1.27-1.40x the bound (README, "Round 8"); without it, +4 % wait at 80 % random
    #: load (README, "One policy asked now and played forward").
    last_creates: int = 8
    #: Windows of planned requests a create may reach when what it displaces only slips a little (the
    #: batch's last creates; an image, two requests for a whole file): more serves them sooner, the
    #: planned polls later. The last creates' 1.5 (README, "The main shape after"); the
    #: images' 2.0 (image p90 173 s -> 112-120 s, README, "Round 3") merged into it (README,
    #: "One record of eight").
    borrow: float = 1.5
    #: The next window's share planned at most for a video to start whatever later windows hold: a
    #: slot left idle is lost, a crowded later window only delays polls. Videos 1.53-1.67x -> 1.34x
    #: without progress in the mixed shape (README, "Round 8", the idle rule).
    idle: float = 0.5
    #: Windows that together may lend a full next window a video's create: more keeps creates going
    #: while completions come due, at the price of polls slipping later. 1.12-1.17x -> 1.09-1.15x
    #: the bound with progress (README, "Round 10"); without it, +7 % wait at 80 % random load
    #: (README, "One policy asked now and played forward").
    spread: float = 3.0
    #: Videos of a kind not learned yet polled every interval (the others wait for what they teach);
    #: the kind is learned once all of them but the slowest finished: more learns surer, each poll
    #: that sees nothing costs every member waiting. Two to three requests a video fewer in a fresh
    #: batch (README, "Round 7: scouts").
    scouts: int = 4
    #: The ladder's first rung (a duration quantile) while a window's worth of members waits: higher
    #: wastes fewer polls, delivers the early finishers later. 0.15 request a video fewer than the
    #: median; 0.9 measured no better (README, "Round 7").
    crowded_rung: float = 0.8
    #: Finished tasks remembered, per kind for the durations and overall for what a task costs:
    #: more follows a service that changes speed more slowly, fewer follows noise (README, "One
    #: record of eight").
    memory: int = 32
    #: Creates that go through at a ceiling the service pushed back to before one more task is tried
    #: (a probe above a learned cap; the ceiling lifted after a rate refusal): more refusals are
    #: risked the sooner. 2 refusals in 26 creates in the capped shape (README, "A service that caps
    #: the key's tasks at once").
    probe_after: int = 12

    @property
    def learned_after(self) -> int:
        """Finished tasks of a kind before its durations time polls: every scout but the slowest."""
        return max(1, self.scouts - 1)
