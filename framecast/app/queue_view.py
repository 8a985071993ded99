"""What /queue shows: a server's unfinished jobs in order, each with its place and estimate."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from framecast.jobs import Job, JobState
from framecast.planner.estimate import Estimate

__all__ = ["RUNNING_STATES", "QueueRow", "QueueView", "order_rows"]

#: States in which a job holds (or is about to hold, or just left) a task on the service.
RUNNING_STATES = (JobState.SUBMITTING, JobState.RUNNING, JobState.DELIVERING)


@dataclass(frozen=True)
class QueueRow:
    """One job as /queue shows it: its place (None while running) and what is estimated of it."""

    job: Job
    position: int | None
    estimate: Estimate | None
    #: The job is the viewer's own.
    mine: bool = False


@dataclass(frozen=True)
class QueueView:
    """A server's queue as one member sees it: running jobs first, then the queue in order."""

    rows: tuple[QueueRow, ...]
    viewer: int
    #: Wall-clock time the estimates count from (epoch seconds).
    now: float

    @property
    def running(self) -> int:
        """How many of the rows are running."""
        return sum(1 for row in self.rows if row.position is None)

    @property
    def queued(self) -> int:
        """How many of the rows wait in the queue."""
        return len(self.rows) - self.running


def order_rows(
    jobs: Sequence[Job],
    guild_id: int,
    *,
    position: Callable[[int], int | None],
    estimate: Callable[[Job], Estimate | None],
    viewer: int | None = None,
) -> list[QueueRow]:
    """This server's unfinished jobs in the order /queue shows them: running (oldest start first),
    then queued by their place in the queue; `viewer`'s own jobs are marked."""
    mine = [job for job in jobs if job.guild_id == guild_id]
    running = sorted(
        (job for job in mine if job.state in RUNNING_STATES),
        key=lambda job: (job.started_at or job.created_at, job.id),
    )
    queued = sorted(
        ((job, position(job.id)) for job in mine if job.state is JobState.QUEUED),
        key=lambda pair: (pair[1] if pair[1] is not None else math.inf, pair[0].id),
    )
    return [QueueRow(job, None, estimate(job), job.user_id == viewer) for job in running] + [
        QueueRow(job, place, estimate(job), job.user_id == viewer) for job, place in queued
    ]
