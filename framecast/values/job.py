"""The job model: kinds, states, the state machine and the job records.

A job is one member's request for one video or image. Its life is a small explicit state machine
(``TRANSITIONS``); :class:`framecast.storage.Store` persists jobs and is the only place that
changes a job's state, always through :func:`check_transition`.

This module is pure: no I/O, no asyncio, no Discord.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "ACTIVE",
    "AlreadyRetried",
    "DailyQuotaReached",
    "STYLED_PROMPT",
    "DELETED_AT",
    "DELETED_BY",
    "Deletion",
    "PARKED",
    "TERMINAL",
    "TRANSITIONS",
    "GuildQueueFull",
    "InvalidTransition",
    "Job",
    "JobError",
    "JobKind",
    "JobLimitError",
    "JobNotFound",
    "JobState",
    "MemberLimitReached",
    "NewJob",
    "check_transition",
]


class JobKind(StrEnum):
    """What a job generates."""

    VIDEO = "video"
    IMAGE = "image"


class JobState(StrEnum):
    """Where a job is in its life. The values are what the store persists: never rename them."""

    QUEUED = "queued"  # accepted and persisted, waiting for a free slot on the service
    SUBMITTING = "submitting"  # the create request is (or may be) in flight
    RUNNING = "running"  # the service accepted it: task_id is set, we poll it
    DELIVERING = "delivering"  # result ready: downloading / fitting / posting it to Discord
    DELIVERED = "delivered"  # terminal: the member got the result
    FAILED = "failed"  # terminal: error_code / error_detail say why
    CANCELLED = "cancelled"  # terminal: the member (or a moderator) cancelled it


#: States a job never leaves.
TERMINAL: frozenset[JobState] = frozenset({JobState.DELIVERED, JobState.FAILED, JobState.CANCELLED})

#: Every non-terminal state. These jobs count against the member limit and are resumed after a restart.
ACTIVE: frozenset[JobState] = frozenset(JobState) - TERMINAL

#: The legal moves. Anything not listed here is refused by :func:`check_transition`.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.SUBMITTING, JobState.CANCELLED, JobState.FAILED}),
    JobState.SUBMITTING: frozenset(
        {
            JobState.RUNNING,
            JobState.DELIVERING,  # image models may answer the create request with the result itself
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.QUEUED,  # restart while the create was in flight: its outcome is unknown, queue again
        }
    ),
    JobState.RUNNING: frozenset({JobState.DELIVERING, JobState.FAILED, JobState.CANCELLED}),
    # No CANCELLED here: once the result exists, delivering it is cheaper than explaining a cancel.
    JobState.DELIVERING: frozenset({JobState.DELIVERED, JobState.FAILED}),
    JobState.DELIVERED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class JobError(Exception):
    """Base class of the job and job-store errors."""


class InvalidTransition(JobError):
    """A state change that the state machine forbids, or whose expected current state did not match.

    ``str()`` names the job (when known), the current and the requested state; it never contains
    job parameters or Discord bookkeeping.
    """

    def __init__(
        self,
        old: JobState,
        new: JobState,
        *,
        job_id: int | None = None,
        expected: frozenset[JobState] | None = None,
    ) -> None:
        self.old = old
        self.new = new
        self.job_id = job_id
        self.expected = expected
        subject = f"job {job_id}" if job_id is not None else "job"
        if expected is not None and old not in expected:
            wanted = "/".join(sorted(s.value for s in expected))
            message = f"{subject}: state is {old}, expected {wanted} (requested {old} -> {new})"
        else:
            message = f"{subject}: illegal transition {old} -> {new}"
        super().__init__(message)


class JobNotFound(JobError, LookupError):
    """No job has this id."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} not found")


class JobLimitError(JobError):
    """A new job was refused because a limit is reached. Nothing was stored."""


class MemberLimitReached(JobLimitError):
    """The member already has ``limit`` active (queued or in progress) jobs."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"member already has {limit} active job(s) (limit {limit})")


class GuildQueueFull(JobLimitError):
    """The server's queue already holds ``cap`` queued jobs."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        super().__init__(f"server queue is full ({cap} queued job(s))")


class DailyQuotaReached(JobLimitError):
    """The member already had ``limit`` jobs of this kind in this guild in the current quota period.

    Failed jobs do not count (the member got nothing for them); cancelled ones do.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"member reached the daily quota ({limit} job(s))")


class AlreadyRetried(JobError):
    """The failed job ``retry_of`` already has its retry job ``existing_id``: one failure, one retry.

    Raised by the store inside the inserting transaction, so two clicks of Retry at the same
    moment (or in two processes) cannot both create a job. Nothing was stored.
    """

    def __init__(self, retry_of: int, existing_id: int) -> None:
        self.retry_of = retry_of
        self.existing_id = existing_id
        super().__init__(f"job {retry_of} was already retried as job {existing_id}")


def check_transition(old: JobState, new: JobState, *, job_id: int | None = None) -> None:
    """Raise :class:`InvalidTransition` unless ``old -> new`` is in :data:`TRANSITIONS`."""
    if new not in TRANSITIONS[old]:
        raise InvalidTransition(old, new, job_id=job_id)


#: The keys of a job's chat record (``Job.discord``) that say its result message was deleted: when
#: (epoch seconds) and by whom (a user id). Kept there, not in a column: nothing queries them.
DELETED_AT, DELETED_BY = "deleted_at", "deleted_by"


@dataclass(frozen=True)
class Deletion:
    """A delivered job's result message was deleted: when (epoch seconds) and by whom (a user id)."""

    at: float
    by: int


#: The key of a job's chat record (``Job.discord``) that says its result could be posted nowhere and
#: waits for its requester (true; written by the chat side, cleared once handed over: see
#: ``framecast.app.parked``).
PARKED = "parked"


#: The job parameter holding the prompt as its style expanded it (absent: no style), kept at
#: submission so a style removed or changed later does not change a queued job.
STYLED_PROMPT = "styled_prompt"


@dataclass
class NewJob:
    """A job as accepted from a member, before the store gives it an id and timestamps."""

    kind: JobKind
    guild_id: int
    channel_id: int
    user_id: int
    locale: str
    params: dict[str, Any]  # model, prompt, width/height/num_frames/frame_rate or size
    retry_of: int | None = None  # id of the job this one retries
    key_owner: int | None = None  # the guild whose own API key runs the task (None: the operator's)
    # Opaque to the core (the Discord side's message/token bookkeeping). Kept out of repr() because it
    # may hold interaction tokens.
    discord: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Job:
    """A persisted job. Instances are snapshots: change a job through the store, never by mutation."""

    id: int
    kind: JobKind
    state: JobState
    guild_id: int
    channel_id: int
    user_id: int
    locale: str
    params: dict[str, Any]  # model, prompt, width/height/num_frames/frame_rate or size
    created_at: float  # wall clock (epoch seconds)
    updated_at: float  # wall clock, maintained by the store on every write
    task_id: str | None = None  # the generation service's task id once created
    started_at: float | None = None  # wall clock when the service task was created (keeps the deadline)
    progress: float | None = None  # 0..1 as last reported by the service
    # The service's http(s) link to the result. Never a local path: see `result_local`.
    result_url: str | None = None
    # True when the bot holds the result itself (an image the service sent inline, saved under the
    # runner's results directory by job id). Local results are found by job id, never by a URL.
    result_local: bool = False
    error_code: str | None = None  # machine-readable (ServiceError.code or a Discord-side code)
    error_detail: str | None = None  # safe-to-show detail
    retry_of: int | None = None
    # The guild whose own API key created (and polls) the service task; None: the operator's key.
    key_owner: int | None = None
    discord: dict[str, Any] = field(default_factory=dict, repr=False)  # may hold tokens: not in repr()
    # The last four characters of the key that created the task (None: a job of before they were kept).
    key_last4: str | None = None

    @property
    def is_terminal(self) -> bool:
        """True once the job can never change state again."""
        return self.state in TERMINAL

    @property
    def prompt(self) -> str:
        """The member's prompt (empty string if the params carry none)."""
        value = self.params.get("prompt") if isinstance(self.params, Mapping) else None
        return value if isinstance(value, str) else ""

    @property
    def service_prompt(self) -> str:
        """What the service gets: the prompt inside the job's style (kept at submission), else :attr:`prompt`."""
        value = self.params.get(STYLED_PROMPT) if isinstance(self.params, Mapping) else None
        return value if isinstance(value, str) else self.prompt

    @property
    def deleted(self) -> Deletion | None:
        """When and by whom the job's result message was deleted; None while it was not.

        Read from the chat record, where the delete use case writes it; a malformed entry reads as
        not deleted (the record is the chat side's, and older rows have no such keys).
        """
        record = self.discord if isinstance(self.discord, Mapping) else {}
        at, by = record.get(DELETED_AT), record.get(DELETED_BY)
        if isinstance(at, bool) or not isinstance(at, int | float):
            return None
        if isinstance(by, bool) or not isinstance(by, int):
            return None
        return Deletion(float(at), by)

    @property
    def parked(self) -> bool:
        """The job is delivered but its result was posted nowhere: it waits for its requester.

        Read from the chat record (:data:`PARKED`); anything but ``true`` reads as not parked.
        """
        record = self.discord if isinstance(self.discord, Mapping) else {}
        return self.state is JobState.DELIVERED and record.get(PARKED) is True
