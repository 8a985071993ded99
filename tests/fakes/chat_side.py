"""The runner's chat side, recorded: what a job's runner told the chat and delivered to it.

:class:`RecordingReporter` stands in for the Discord side in the runner's and the accounts' unit
tests (tests/jobs/test_runner.py, tests/keys/test_accounts.py); :data:`RUNNER_SETTINGS` are the runner's
timings scaled down for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from framecast.app.admins import RefusedKeyNotice
from framecast.jobs.chat_side import (
    Delivered,
    DeliveryOutcome,
    Interrupted,
    ResultFile,
    ResultToDeliver,
    UploadTooLarge,
)
from framecast.jobs.runner import RunnerSettings
from framecast.values import Job
from framecast.values.reasons import Note

__all__ = ["RUNNER_SETTINGS", "QuietChat", "RecordingReporter"]

MiB = 1024 * 1024

RUNNER_SETTINGS = RunnerSettings(
    poll_interval=0.01,
    poll_timeout=10,
    download_max_bytes=50 * MiB,
    download_timeout=10,
    backoff_base=0.01,
    backoff_max=0.1,
    results_at_once=2,
    image_max_pixels=40_000_000,
    reencode_timeout=300,
)


@dataclass
class RecordingReporter:
    """The chat side, recorded. ``hold`` makes every delivery wait until ``allow(n)`` lets n through."""

    limit: int = 10 * MiB
    hold: bool = False
    files: list[tuple[int, bytes, str]] = field(default_factory=list)
    links: list[tuple[int, str, Note]] = field(default_factory=list)
    changes: list[Job] = field(default_factory=list)
    notices: list[Note | None] = field(default_factory=list)
    started: list[int] = field(default_factory=list)  # job ids whose delivery began, in order
    in_flight: int = 0
    #: The next n deliveries answer Interrupted; with `interrupted_lands`, after landing.
    interrupt: int = 0
    interrupted_lands: bool = False
    #: Files over this many bytes are refused as too large (HTTP 413).
    refuse_over: int | None = None
    limit_asks: list[int | None] = field(default_factory=list)
    looks: int = 0
    #: Jobs the runner said it will deliver after looking (``delivery_pending``).
    pending: list[int] = field(default_factory=list)
    #: Deliveries answer that there was nowhere to post (``Delivered(parked=True)``).
    parked: bool = False
    _allowance: int = 0
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        self.changes.append(job)

    async def upload_limit(self, job: Job, refused: int | None = None) -> int:
        self.limit_asks.append(refused)
        return self.limit if refused is None else min(self.limit, refused // 2)

    async def delivery_pending(self, job: Job) -> None:
        self.pending.append(job.id)

    async def deliver(self, job: Job, result: ResultToDeliver) -> DeliveryOutcome:
        if isinstance(result, ResultFile):
            if self.refuse_over is not None and len(result.data) > self.refuse_over:
                return UploadTooLarge(len(result.data))
            self.notices.append(result.notice)
            data, filename = result.data, result.filename
            return await self._deliver(job.id, lambda: self.files.append((job.id, data, filename)))
        url, reason = result.url, result.reason
        return await self._deliver(job.id, lambda: self.links.append((job.id, url, reason)))

    async def was_delivered(self, job: Job) -> bool:
        self.looks += 1
        return any(j == job.id for j, *_ in self.files + self.links)  # type: ignore[operator]

    async def _deliver(self, job_id: int, record: Callable[[], None]) -> DeliveryOutcome:
        if self.interrupt:
            self.interrupt -= 1
            if self.interrupted_lands:
                record()
            return Interrupted(0.01)
        async with self._changed:
            self.started.append(job_id)
            self.in_flight += 1
            self._changed.notify_all()
            if self.hold:
                await self._changed.wait_for(lambda: self._allowance > 0)
                self._allowance -= 1
            record()
            self.in_flight -= 1
            self._changed.notify_all()
        return Delivered(parked=self.parked)

    async def allow(self, n: int = 1) -> None:
        async with self._changed:
            self._allowance += n
            self._changed.notify_all()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 10) -> None:  # noqa: ASYNC109
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)


class QuietChat:
    """A chat side that shows nothing: for use cases that never talk to it (the admins', the keys').

    It keeps the admins' notices it was handed (``refused_keys``): delivering them is the chat side's.
    """

    def __init__(self) -> None:
        self.refused_keys: list[RefusedKeyNotice] = []

    async def key_refused(self, notice: RefusedKeyNotice) -> None:
        self.refused_keys.append(notice)

    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        pass

    async def upload_limit(self, job: Job, refused: int | None = None) -> int:
        return 25 * 1024 * 1024

    async def was_delivered(self, job: Job) -> bool:
        return False

    async def delivery_pending(self, job: Job) -> None:
        pass

    async def deliver(self, job: Job, result: ResultToDeliver) -> DeliveryOutcome:
        return Delivered()

    def positions_changed(self, guild_id: int, queued: list[int]) -> None:
        pass

    def add_note(self, job: Job, note: Note) -> None:
        pass

    async def remove_job_message(self, job: Job) -> None:
        pass

    async def close(self) -> None:
        pass
