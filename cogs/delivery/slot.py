"""The per-job state the delivery pieces share: one :class:`Slot` per unfinished job."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from dataclasses import dataclass, field

from cogs.delivery.record import DiscordRecord
from framecast.app import DeliveryOutcome, Job, JobState, Note, ResultToDeliver

__all__ = ["Delivery", "Slot", "percent_floor", "with_state"]


@dataclass
class Delivery:
    """A result waiting for the job's worker, and where the worker answers how the attempt went."""

    result: ResultToDeliver
    future: asyncio.Future[DeliveryOutcome]


@dataclass
class Slot:
    """One job's message: its latest record, its bookkeeping, its notes and its worker's state."""

    job: Job
    #: The job's Discord bookkeeping, as this process knows it (newest of the stored and learned).
    record: DiscordRecord = field(init=False)
    notes: list[Note] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    urgent: asyncio.Event = field(default_factory=asyncio.Event)
    #: What the message shows now (see ``Rendered.key``): an identical render is not sent again.
    last_key: tuple[object, ...] | None = None
    #: Clock monotonic time of the last edit (-inf: nothing drawn since this process started).
    last_edit: float = -math.inf
    #: Clock monotonic time the worker last drew the message or found nothing to change (the
    #: periodic refresh counts from it).
    last_draw: float = -math.inf
    #: The highest percentage saved with the job (``shown_percent``): saved again only when it rises.
    saved_percent: int = field(init=False, default=0)
    delivery: Delivery | None = None
    task: asyncio.Task[None] | None = None
    #: The runner has looked for an earlier delivery and told us it is not there
    #: (``delivery_pending``): a restored delivering job may be drawn.
    looked: bool = False
    #: This worker put the result on the message (a DELIVERED record arriving later is no news).
    delivered_here: bool = False
    #: Failed delivery attempts in a row (for the retry rule, see ``retries``).
    failed_attempts: int = 0
    #: Failed draws (state changes, moves) in a row: paced by ``retries.draw_pause``, logged once.
    failed_draws: int = 0
    #: The job's place refuses the bot for now: a moderator closed its thread (an edit refused), or
    #: its channel takes no new message from the bot (deleted, hidden or closed to it). Nothing but
    #: the job's end is drawn (``Placement.redraw``); in memory only (after a restart, one refused
    #: request says it again).
    place_closed: bool = False

    def __post_init__(self) -> None:
        # A slot starts from a stored record: whatever floor it carries is saved already.
        self.record = DiscordRecord.from_dict(self.job.discord)
        self.saved_percent = self.record.shown_percent

    def update(self, job: Job) -> None:
        """Take `job` as the newest record, keeping the bookkeeping this process learned meanwhile."""
        self.record = DiscordRecord.from_dict(job.discord).merged(self.record)
        self.job = job

    def learn(self, **changes: object) -> None:
        """Change the bookkeeping in memory (saved by ``Drawing.save``)."""
        self.record = dataclasses.replace(self.record, **changes)  # type: ignore[arg-type]

    @property
    def awaits_look(self) -> bool:
        """A job restored while delivering, not drawn yet: its message may already hold the result.

        Drawing "uploading" over a delivered message would be wrong, so nothing is drawn until the
        runner has looked (it always does before a delivery) and said the result is not there.
        """
        return self.job.state is JobState.DELIVERING and not self.looked and self.last_edit == -math.inf

    @property
    def found_delivered(self) -> bool:
        """The runner found the result already on the message (a DELIVERED record this worker did not make)."""
        return self.job.state is JobState.DELIVERED and not self.delivered_here


def percent_floor(job: Job) -> int:
    """The highest percentage the job's message has shown (0: none yet): the next one's floor."""
    return DiscordRecord.from_dict(job.discord).shown_percent


def with_state(job: Job, state: JobState) -> Job:
    """A copy of `job` in `state` (what the message shows; the store is not touched)."""
    return dataclasses.replace(job, state=state)
