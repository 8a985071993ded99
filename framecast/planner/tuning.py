"""Every tuned number of the planner's policy, in one record (issue 34).

Each field says what it trades and the figure in ``benchmarks/README.md`` that chose it. Moving
one means rerunning ``benchmarks/bench_planner.py`` on every shape, the random-arrival family
included (the section "Members arriving at random"), and recording the figures there.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PlannerTuning"]


@dataclass(frozen=True)
class PlannerTuning:
    """The policy's tuned numbers (see the module docstring). Defaults are what was measured best."""

    #: Videos waiting at most for the batch's last creates, which may borrow from the planned polls:
    #: more starts a batch's tail sooner, fewer keeps a steady trickle's polls on time. 4 -> 8 took the
    #: mixed shape's bad runs from 1.65x to 1.27-1.40x the bound (README, "Round 8"). Under random
    #: arrivals it is the rule that admits (the queue is mostly shorter): without it and ``borrow``,
    #: +4 % wait at 80 % load, +7-10 % on the main batch (README, "Issue 34, second step").
    last_creates: int = 8
    #: How far those last creates may borrow (windows of planned requests): more ends the batch sooner,
    #: its polls then wait. Half a window (README, "The main shape after issue 17 items 1 and 2").
    borrow: float = 1.5
    #: The next window's share planned at most for a video to start whatever later windows hold: a slot
    #: left idle is lost, a crowded later window only delays polls. Videos 1.53-1.67x -> 1.34x without
    #: progress in the mixed shape (README, "Round 8", the idle rule).
    idle: float = 0.5
    #: Windows that together may lend a full next window a video's create: more keeps creates going
    #: while completions come due, at the price of polls slipping later. 1.12-1.17x -> 1.09-1.15x the
    #: bound with progress (README, "Round 10"); without it, +7 % wait at 80 % random load (README,
    #: "Issue 34, second step").
    spread: float = 3.0
    #: How far images may push back the planned polls (windows): more serves images sooner, the videos'
    #: files later. Image p90 173 s -> 112-120 s in the mixed shape (README, "Round 3: images before the
    #: polls sent only to learn a video").
    images_push: float = 2.0
    #: Images' creates that may wait for the budget at once: more lets a burst of images queue in the
    #: budget, fewer keeps a freed slot for the polls. Same figure as ``images_push``.
    image_creates: int = 4
    #: Videos of a kind not learned yet polled every interval (the others wait for what they teach):
    #: more learns sooner, each poll that sees nothing costs every member waiting. Two to three
    #: requests a video fewer in a fresh batch (README, "Round 7: scouts").
    scouts: int = 4
    #: The ladder's first rung (a duration quantile) while a window's worth of members waits: higher
    #: wastes fewer polls, delivers the early finishers later. 0.15 request a video fewer than the
    #: median; 0.9 measured no better (README, "Round 7").
    crowded_rung: float = 0.8
