"""The ground floor: the pure values every package of the core shares. It imports nothing of ours.

* :mod:`~framecast.values.job`: a job, its kinds and states, the state machine, the job errors;
* :mod:`~framecast.values.reasons`: why a job failed (``ErrorCode``) and notes (``Note``);
* :mod:`~framecast.values.presets`: sizes, lengths and frame rates;
* :mod:`~framecast.values.durations`: a learned task duration as persisted (``DurationRow``);
* :mod:`~framecast.values.service_requests`: what a request to the service is for (``Priority``,
  ``RequestKind``) and why the service refused one (``RefusalKind``).

No I/O, no asyncio, no other package of ``framecast`` (``tests/test_layers.py`` checks): the
packages above (jobs, storage, planner, service, keys, ops...) all read these, so a value here
never pulls one of them into another. The package itself exports the job model, so
``from framecast.values import Job, JobState`` is all most code needs.
"""

from framecast.values.job import (
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
