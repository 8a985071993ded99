"""A result that could be posted nowhere, handed to its requester when they ask for it (``/job``).

With user installs, a person's job whose interaction token is spent, and whose requester does not
accept DMs from the bot, has nowhere to be posted, nor has a job whose channel was deleted (or hidden
from the bot, or refused its file) while its result was being delivered: the chat side answers its delivery
``Delivered(parked=True)`` and marks the job in its chat record (:data:`~framecast.jobs.PARKED`,
read as :attr:`Job.parked`), and the runner keeps a result it saved itself (an inline image) instead
of forgetting it. This use case owns what happens next:

* :meth:`ParkedResults.fetch`: only the job's requester gets it. The file is loaded the way the
  runner loads a result (the saved file, or a download of the service's link with the job's own
  key's client, through the URL guard), checked from its headers, and fitted to the upload limit of
  the interaction asking, holding one of the runner's memory slots meanwhile. A failure changes
  nothing: the job stays parked and a later ``/job`` tries again.
* :meth:`ParkedResults.handed_over`: once the chat side has shown the file, the mark is cleared and
  the saved copy forgotten (the requester has the file; nothing else would ever delete it).
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from framecast import media
from framecast.app.actors import Actor
from framecast.app.chat import JobBookkeeping
from framecast.jobs.chat_side import result_filename
from framecast.jobs.job_keys import KeyAccount
from framecast.service import GenerationClient
from framecast.service.errors import ServiceError
from framecast.values import PARKED, Job, JobKind

__all__ = [
    "PARKED",
    "ParkedFile",
    "ParkedOutcome",
    "ParkedProblem",
    "ParkedResults",
    "ParkedUnavailable",
    "ResultLoader",
]

log = logging.getLogger(__name__)


class ResultLoader(Protocol):
    """How results are loaded and fitted (the runner's :class:`~framecast.jobs.fitting.ResultFitter`)."""

    def held(self) -> AbstractAsyncContextManager[None]:
        """One of the memory slots results are held in (the runner's bound covers these too)."""
        ...

    async def load_checked(self, job: Job, client: GenerationClient | None) -> tuple[bytes, media.MediaInfo]:
        """The saved file, or a download of the service's link with `client`, checked from its
        headers (a ServiceError when it cannot be loaded or is no such file)."""
        ...

    async def fit(
        self, kind: JobKind, data: bytes, info: media.MediaInfo, limit: int
    ) -> tuple[bytes, str] | None:
        """`data` or a re-encoded copy within `limit`, and its extension; None when nothing fits."""
        ...

    def forget(self, job_id: int) -> None:
        """Delete the job's saved result, if any."""
        ...


class JobKeys(Protocol):
    """Which key a job ran on (:class:`~framecast.accounts.Accounts`)."""

    def for_job(self, job: Job) -> KeyAccount | None:
        """The key that created the job's task (None: it is gone)."""
        ...


class ParkedProblem(StrEnum):
    """Why a parked result cannot be handed over now."""

    NOT_YOURS = "not_yours"  # no such job, or another person's: only its requester gets it
    NOT_PARKED = "not_parked"  # not a delivered job waiting for its requester (posted, handed over)
    GONE = "gone"  # nothing left to load: the saved copy is missing and the service gave no link
    DOWNLOAD_FAILED = "download_failed"  # loading or checking it failed now; the job stays parked
    TOO_LARGE = "too_large"  # over the asking interaction's upload limit, even re-encoded


@dataclass(frozen=True)
class ParkedFile:
    """The parked result, ready to attach: `data` fits the limit it was asked for."""

    job: Job
    data: bytes = field(repr=False)
    #: The file's extension (``mp4``, ``png``...), after any re-encode.
    ext: str
    #: The file was re-encoded to fit.
    reencoded: bool = False

    @property
    def filename(self) -> str:
        """The attachment's name (the same as a posted result's)."""
        return result_filename(self.job.id, self.ext)


@dataclass(frozen=True)
class ParkedUnavailable:
    """The parked result of job `job_id` cannot be handed over now: `problem` says why."""

    job_id: int
    problem: ParkedProblem


#: What :meth:`ParkedResults.fetch` answers.
ParkedOutcome = ParkedFile | ParkedUnavailable


class ParkedResults:
    """Fetching a parked result for its requester, and recording that they have it."""

    def __init__(self, *, jobs: JobBookkeeping, loader: ResultLoader, keys: JobKeys) -> None:
        """`jobs`: the stored jobs and their chat records; `loader`: the runner's result loader;
        `keys`: which key downloads a job's result."""
        self._jobs = jobs
        self._loader = loader
        self._keys = keys

    def __repr__(self) -> str:
        return "<ParkedResults>"

    async def fetch(self, actor: Actor, job_id: int, limit: int) -> ParkedOutcome:
        """Job `job_id`'s parked result for `actor`, its requester, fitted to `limit` bytes.

        Nothing is recorded here: the job stays parked until :meth:`handed_over`. A memory slot is
        held for the load, the check and any re-encode; the caller then holds only the fitted file
        (at most `limit` bytes) until it is shown.
        """
        job = await self._jobs.get(job_id)
        if job is None or job.user_id != actor.user_id:
            return ParkedUnavailable(job_id, ParkedProblem.NOT_YOURS)
        if not job.parked:
            return ParkedUnavailable(job_id, ParkedProblem.NOT_PARKED)
        account = None if job.result_local else self._keys.for_job(job)
        if not job.result_local and (job.result_url is None or account is None):
            return ParkedUnavailable(job_id, ParkedProblem.GONE)
        async with self._loader.held():
            try:
                # As the runner loads it: a link that now serves an error page is no file.
                data, info = await self._loader.load_checked(job, account.client if account else None)
            except ServiceError as exc:
                log.info("job %s: its parked result could not be loaded (%s)", job_id, exc.code)
                # A saved copy that cannot be read will not come back; a link may answer later.
                problem = ParkedProblem.GONE if job.result_local else ParkedProblem.DOWNLOAD_FAILED
                return ParkedUnavailable(job_id, problem)
            fitted = await self._loader.fit(job.kind, data, info, limit)
        if fitted is None:
            return ParkedUnavailable(job_id, ParkedProblem.TOO_LARGE)
        payload, ext = fitted
        return ParkedFile(job, payload, ext, reencoded=payload is not data)

    async def handed_over(self, actor: Actor, job_id: int) -> bool:
        """`actor` was shown job `job_id`'s parked result: it is parked no more, its saved copy goes.

        True when this call recorded it; False (nothing changes) for anyone but the requester, or a
        job that is not parked (any more: two ``/job`` at once both hand it over, once recorded).
        """
        job = await self._jobs.get(job_id)
        if job is None or job.user_id != actor.user_id or not job.parked:
            return False
        await self._jobs.patch_discord(job_id, {PARKED: False})
        self._loader.forget(job_id)
        log.info("job %s: its parked result was handed to its requester", job_id)
        return True
