"""The per-job state the delivery pieces share: one :class:`Slot` per unfinished job."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from dataclasses import dataclass, field

from framecast.jobs import Job, JobState
from framecast.jobs.reasons import Note

__all__ = ["REPORTER_KEYS", "SHOWN_PERCENT", "Delivery", "Slot", "merge", "percent_floor", "with_state"]

#: The highest percentage the job's message has shown (kept in ``job.discord``): the floor of the
#: next one, so that no percentage goes backwards on screen, restarts included.
SHOWN_PERCENT = "shown_percent"
#: Bookkeeping in ``job.discord`` that only the delivery package writes (see :func:`merge`).
REPORTER_KEYS = ("message_id", "channel_message_id", "token_dead", "pinged", SHOWN_PERCENT)


@dataclass
class Delivery:
    """A result waiting for the job's worker: a file (`data`, `filename`) or the service's `link`."""

    data: bytes | None
    filename: str | None
    link: str | None
    notice: Note | None
    future: asyncio.Future[None]


@dataclass
class Slot:
    """One job's message: its latest record, its notes and its worker's bookkeeping."""

    job: Job
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
    #: The highest percentage saved with the job (``SHOWN_PERCENT``): saved again only when it rises.
    saved_percent: int = field(init=False, default=0)
    delivery: Delivery | None = None
    task: asyncio.Task[None] | None = None
    #: The runner has looked for an earlier delivery (``was_delivered``) and said...
    looked: bool = False
    #: ...that the result is already on the message: nothing more is drawn.
    landed: bool = False
    #: Failed delivery attempts in a row (for the retry rule, see ``retries``).
    failed_attempts: int = 0

    def __post_init__(self) -> None:
        # A slot starts from a stored record: whatever floor it carries is saved already.
        self.saved_percent = percent_floor(self.job)

    @property
    def awaits_look(self) -> bool:
        """A job restored while delivering, not drawn yet: its message may already hold the result.

        Drawing "uploading" over a delivered message would be wrong, so nothing is drawn until the
        runner has looked (it always does before a delivery).
        """
        return self.job.state is JobState.DELIVERING and not self.looked and self.last_edit == -math.inf


def percent_floor(job: Job) -> int:
    """The highest percentage the job's message has shown (0: none yet): the next one's floor."""
    value = job.discord.get(SHOWN_PERCENT)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def merge(new: Job, old: Job) -> Job:
    """The newest job record, keeping Discord bookkeeping the delivery package learned meanwhile."""
    if new is old:
        return new
    merged = dict(old.discord)
    merged.update(new.discord)
    # This package is the only writer of these keys and its slot always has their latest value; a
    # record read before it learned them (the runner's copy) must not roll them back, e.g. a real
    # message id back to "@original", which would leave a restarted bot unable to see a delivery.
    for key in REPORTER_KEYS:
        if key in old.discord and old.discord[key] not in (None, "@original"):
            merged[key] = old.discord[key]
    new.discord = merged
    return new


def with_state(job: Job, state: JobState) -> Job:
    """A copy of `job` in `state` (what the message shows; the store is not touched)."""
    return dataclasses.replace(job, state=state)
