"""Jobs: the job model and its state machine, the per-guild queues, the scheduler and the runner.

The package itself exports the pure job model (:mod:`framecast.jobs.model`), so
``from framecast.jobs import Job, JobState`` is all most code needs; the moving parts live in their
own modules (``queues``, ``scheduler``, ``runner``, ``leases``, ``results``, ``reasons``, ``presets``).
"""

from framecast.jobs.model import (
    ACTIVE,
    DELETED_AT,
    DELETED_BY,
    PARKED,
    TERMINAL,
    TRANSITIONS,
    AlreadyRetried,
    DailyQuotaReached,
    Deletion,
    GuildQueueFull,
    InvalidTransition,
    Job,
    JobError,
    JobKind,
    JobLimitError,
    JobNotFound,
    JobState,
    MemberLimitReached,
    NewJob,
    check_transition,
)

__all__ = [
    "ACTIVE",
    "DELETED_AT",
    "DELETED_BY",
    "PARKED",
    "TERMINAL",
    "TRANSITIONS",
    "AlreadyRetried",
    "DailyQuotaReached",
    "Deletion",
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
