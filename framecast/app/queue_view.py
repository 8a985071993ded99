"""What /queue shows: a server's unfinished jobs in order, each with its place and estimate.

A member sees every job's place, but another member's prompt only where Discord would show them
that prompt's message: in a channel they can read, and an age-restricted channel's prompt only
when they ask from an age-restricted channel. :class:`QueueViewer` carries what the chat side knows
of the viewer; :meth:`QueueViewer.hides` is the rule, here and nowhere else, and :func:`as_seen_by`
applies it for /queue, /history and /job.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from framecast.planner.estimate import Estimate
from framecast.values import Job, JobState
from framecast.values.job import STYLED_PROMPT

__all__ = [
    "RUNNING_STATES",
    "PromptHidden",
    "QueueRow",
    "QueueView",
    "QueueViewer",
    "as_seen_by",
    "order_rows",
]

#: States in which a job holds (or is about to hold, or just left) a task on the service.
RUNNING_STATES = (JobState.SUBMITTING, JobState.RUNNING, JobState.DELIVERING)

#: The job parameters a hidden row leaves out (the member's own words, also inside its style).
_PRIVATE_PARAMS = frozenset({"prompt", STYLED_PROMPT})


def without_prompt(job: Job) -> Job:
    """`job` as a viewer who may not read its prompt gets it: not only unshown but absent (the
    member's words, also inside its style, its chat record with the message to link to, its
    result's link, and the service's failure text, which may quote the prompt), so no renderer
    can leak them."""
    params = {key: value for key, value in job.params.items() if key not in _PRIVATE_PARAMS}
    return dataclasses.replace(
        job, params=params, discord={}, result_url=None, result_local=False, error_detail=None
    )


def as_seen_by(viewer: QueueViewer, job: Job) -> tuple[Job, PromptHidden | None]:
    """What `viewer` may see of `job`, for /queue, /history and /job alike: the job itself, or,
    when :meth:`QueueViewer.hides` it, the job :func:`without_prompt`, and why."""
    hidden = viewer.hides(job)
    return (job if hidden is None else without_prompt(job)), hidden


class PromptHidden(StrEnum):
    """Why /queue does not show a job's prompt to the member who asks."""

    #: The job's channel (or thread) is not one the viewer can read, or is not known to the chat side.
    CHANNEL_NOT_READABLE = "channel_not_readable"
    #: The job's channel is age-restricted, and /queue was used outside an age-restricted channel.
    AGE_RESTRICTED = "age_restricted"


@dataclass(frozen=True)
class QueueViewer:
    """The member asking for /queue, and what the chat side knows of the channels around them.

    `readable_channels`: the channels and threads of the server whose messages the viewer can read
    (any other channel counts as unreadable, an unknown one included). `age_restricted_channels`:
    those of them that are age-restricted (a thread as its parent). `in_age_restricted`: /queue
    was used in an age-restricted channel (or a thread of one).
    """

    user_id: int
    readable_channels: frozenset[int] = frozenset()
    age_restricted_channels: frozenset[int] = frozenset()
    in_age_restricted: bool = False

    @property
    def shown_channels(self) -> frozenset[int]:
        """The channels whose jobs :meth:`hides` shows this viewer (their own jobs show from any):
        the same rule as a set, for a query that must narrow before it decides row by row."""
        if self.in_age_restricted:
            return self.readable_channels
        return self.readable_channels - self.age_restricted_channels

    def hides(self, job: Job) -> PromptHidden | None:
        """Why `job`'s prompt is not shown to this viewer, or None when it is.

        The viewer's own jobs are always shown. An unreadable channel is the reason given before
        the age restriction, so a hidden row never tells what kind of channel the viewer cannot see.
        """
        if job.user_id == self.user_id:
            return None
        if job.channel_id not in self.readable_channels:
            return PromptHidden.CHANNEL_NOT_READABLE
        if job.channel_id in self.age_restricted_channels and not self.in_age_restricted:
            return PromptHidden.AGE_RESTRICTED
        return None


@dataclass(frozen=True)
class QueueRow:
    """One job as /queue shows it: its place (None while running) and what is estimated of it.

    In a row whose prompt is hidden (`hidden` says why), the job carries no prompt at all.
    """

    job: Job
    position: int | None
    estimate: Estimate | None
    #: The job is the viewer's own.
    mine: bool = False
    #: Why the prompt is not shown to this viewer; None when it is.
    hidden: PromptHidden | None = None

    @property
    def prompt(self) -> str | None:
        """The prompt the viewer may see; None when it is hidden."""
        return None if self.hidden is not None else self.job.prompt


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
    viewer: QueueViewer,
) -> list[QueueRow]:
    """This server's unfinished jobs in the order /queue shows them: running (oldest start first),
    then queued by their place in the queue; `viewer`'s own jobs are marked, and the prompts
    `viewer` may not see are left out (the row keeps its place and is counted)."""
    mine = [job for job in jobs if job.guild_id == guild_id]
    running = sorted(
        (job for job in mine if job.state in RUNNING_STATES),
        key=lambda job: (job.started_at or job.created_at, job.id),
    )
    queued = sorted(
        ((job, position(job.id)) for job in mine if job.state is JobState.QUEUED),
        key=lambda pair: (pair[1] if pair[1] is not None else math.inf, pair[0].id),
    )
    rows = [_row(job, None, estimate(job), viewer) for job in running]
    last = 0
    for job, place in queued:
        # A job queued in another process (it took this server's jobs over) has no place here: it
        # is shown after this process's queue, in the order the jobs came, never as running.
        last = place if place is not None else last + 1
        rows.append(_row(job, last, estimate(job), viewer))
    return rows


def _row(job: Job, place: int | None, estimate: Estimate | None, viewer: QueueViewer) -> QueueRow:
    job, hidden = as_seen_by(viewer, job)
    return QueueRow(job, place, estimate, job.user_id == viewer.user_id, hidden)
