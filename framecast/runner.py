"""The life of one job: create the task, poll it, fetch the result, fit it, deliver it.

The runner is the only code that moves a job through the service-facing part of its state machine.
Every step is persisted through :class:`~framecast.store.JobStore` before the next one starts, so a
restarted bot can pick the job up where it stopped (see :meth:`JobRunner.run`).
Discord is reached only through the :class:`JobReporter` protocol, which the bot implements.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from framecast import media
from framecast.budget import Priority
from framecast.clock import Clock
from framecast.errors import (
    AuthError,
    DownloadError,
    RateLimited,
    ServiceError,
    ServiceUnavailable,
)
from framecast.jobs import ACTIVE, InvalidTransition, Job, JobKind, JobState
from framecast.service import GenerationClient, ImageParams, TaskStatus, VideoParams
from framecast.store import JobStore

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class UploadTooLarge(Exception):
    """Raised by a reporter when the destination refused the file as too large (HTTP 413)."""


class ShuttingDown(Exception):
    """Raised inside a runner when the bot stops: the job keeps its persisted state."""


class JobReporter(Protocol):
    """What the runner needs from the chat side (implemented by the Discord bot)."""

    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        """Show the job's current state; non-urgent changes may be coalesced."""

    async def upload_limit(self, job: Job) -> int:
        """The largest file, in bytes, the job's destination accepts."""

    async def deliver_file(self, job: Job, data: bytes, filename: str, *, notice: str | None) -> None:
        """Attach the finished file to the job's message. Raises :class:`UploadTooLarge` on a 413."""

    async def deliver_link(self, job: Job, url: str, reason: str) -> None:
        """Post the service's link instead of a file (`reason`: a message key saying why)."""

    async def was_delivered(self, job: Job) -> bool:
        """After a restart: did a delivery of this job already reach the chat?"""


@dataclass(frozen=True)
class RunnerSettings:
    """The timing and size knobs of a runner (all from configuration)."""

    poll_interval: float
    poll_timeout: float
    download_max_bytes: int
    download_timeout: float
    backoff_base: float
    backoff_max: float


#: Upload attempts of one result: the first, then one per "too large" refusal (HTTP 413).
_UPLOAD_ATTEMPTS = 5
#: Per-file limits Discord uses (default, boost tiers, older defaults), largest first.
_KNOWN_LIMITS = tuple(mib * 1024 * 1024 for mib in (500, 100, 50, 25, 10, 8))


def _limit_below(refused: int) -> int:
    """The size to aim at after a file of `refused` bytes was refused as too large."""
    for known in _KNOWN_LIMITS:
        if known < refused * 0.95:
            return known - 64 * 1024
    return refused // 2


# Filenames stay short and never contain user text (Discord caps them, and prompts are untrusted).
def result_filename(job: Job, ext: str) -> str:
    """The attachment name of a job's result, e.g. ``framecast-42.mp4``."""
    return f"framecast-{job.id}.{ext}"


class JobRunner:
    """Runs jobs on the generation service and hands results to a :class:`JobReporter`."""

    def __init__(
        self,
        *,
        store: JobStore,
        client: GenerationClient,
        reporter: JobReporter,
        clock: Clock,
        settings: RunnerSettings,
        results_dir: Path,
    ) -> None:
        self._store = store
        self._client = client
        self._reporter = reporter
        self._clock = clock
        self._settings = settings
        self._results_dir = results_dir
        self._stopping = False
        self._fit_slots = asyncio.Semaphore(1)
        self._critical: set[int] = set()
        self._critical_changed = asyncio.Event()

    def __repr__(self) -> str:
        return f"<JobRunner critical={sorted(self._critical)} stopping={self._stopping}>"

    # -- shutdown support -------------------------------------------------------------------------
    def begin_shutdown(self) -> None:
        """Ask runners to stop at the next safe point (after any step that must not be cut)."""
        self._stopping = True

    def in_critical_section(self, job_id: int) -> bool:
        """True while the job is in a step that should finish before the bot stops."""
        return job_id in self._critical

    async def wait_critical_done(self, job_ids: set[int]) -> None:
        """Wait until none of `job_ids` is inside a critical step."""
        while job_ids & self._critical:
            self._critical_changed.clear()
            await self._critical_changed.wait()

    @contextlib.asynccontextmanager
    async def _critical_step(self, job_id: int) -> AsyncIterator[None]:
        # A create whose answer is lost, or an upload cut half-way, is what makes a restart
        # ambiguous; shutdown lets such a step finish (bounded by SHUTDOWN_TIMEOUT) before cancelling.
        if self._stopping:
            raise ShuttingDown
        self._critical.add(job_id)
        try:
            yield
        finally:
            self._critical.discard(job_id)
            self._critical_changed.set()
        if self._stopping:
            raise ShuttingDown

    # -- the job's life ---------------------------------------------------------------------------
    async def run(self, job: Job, *, release_service_slot: Callable[[], None]) -> Job:
        """Drive `job` from its persisted state to a terminal one.

        `release_service_slot` is called once the job no longer occupies the service (its result
        is known), so the scheduler can start the next job while this one is being delivered.
        Returns the final job. Raises :class:`ShuttingDown` (state kept) or ``CancelledError``.
        """
        try:
            return await self._run(job, release_service_slot)
        except (ShuttingDown, asyncio.CancelledError):
            raise
        except AuthError as exc:
            # An operator problem, not the member's: say so loudly in the log (never the key).
            log.error("job %s: the generation service rejected the API key (check GEN_API_KEY): %s", job.id, exc)
            return await self._fail(job.id, exc.code, None)
        except ServiceError as exc:
            log.warning("job %s failed: %s: %s", job.id, exc.code, exc)
            return await self._fail(job.id, exc.code, _detail(exc))
        except Exception:
            log.exception("job %s: unexpected error", job.id)
            return await self._fail(job.id, "internal", None)

    async def _run(self, job: Job, release_service_slot: Callable[[], None]) -> Job:
        if job.state is JobState.QUEUED:
            job = await self._store.transition(job.id, JobState.SUBMITTING, expect=JobState.QUEUED)
            await self._reporter.job_changed(job, urgent=True)
        if job.state is JobState.SUBMITTING:
            job = await self._submit(job)
        if job.state is JobState.RUNNING:
            job = await self._wait(job)
        release_service_slot()
        if job.state is JobState.DELIVERING:
            job = await self._deliver(job)
        return job

    async def _submit(self, job: Job) -> Job:
        """Create the task on the service; the create is retried while the service is busy."""
        attempt = 0
        while True:
            try:
                async with self._critical_step(job.id):
                    if job.kind is JobKind.VIDEO:
                        task_id = await self._client.create_video(_video_params(job), priority=Priority.NORMAL)
                        # Written straight away: the crash window for a duplicate create is between
                        # the service's answer and this commit (see README, "what happens when").
                        job = await self._store.transition(
                            job.id, JobState.RUNNING, expect=JobState.SUBMITTING,
                            task_id=task_id, started_at=self._clock.time(),
                        )
                    else:
                        result = await self._client.create_image(_image_params(job), priority=Priority.NORMAL)
                        if result.task_id is not None:
                            job = await self._store.transition(
                                job.id, JobState.RUNNING, expect=JobState.SUBMITTING,
                                task_id=result.task_id, started_at=self._clock.time(),
                            )
                        elif result.url is not None:
                            job = await self._store.transition(
                                job.id, JobState.DELIVERING, expect=JobState.SUBMITTING, result_url=result.url,
                            )
                        else:
                            assert result.data is not None
                            path = await asyncio.to_thread(self._save_result, job.id, result.data)
                            job = await self._store.transition(
                                job.id, JobState.DELIVERING, expect=JobState.SUBMITTING,
                                result_url=path.as_uri(),
                            )
                await self._reporter.job_changed(job, urgent=True)
                return job
            except (RateLimited, ServiceUnavailable) as exc:
                # The client already backed off and retried; the job is kept and tried again later
                # rather than failed, as long as the poll timeout allows.
                attempt += 1
                waited = self._clock.time() - job.updated_at
                if waited > self._settings.poll_timeout:
                    raise
                delay = min(self._settings.backoff_max, self._settings.backoff_base * 2 ** min(attempt, 10))
                delay *= random.uniform(0.8, 1.2)
                log.info("job %s: create deferred (%s), next try in %.1fs", job.id, exc.code, delay)
                await self._clock.sleep(delay)

    async def _wait(self, job: Job) -> Job:
        """Poll the running task until it ends; progress is persisted and shown as it comes."""
        assert job.task_id is not None
        last_progress: list[float | None] = [job.progress]

        async def on_progress(status: TaskStatus) -> None:
            if self._stopping:
                raise ShuttingDown
            nonlocal job
            if status.progress != last_progress[0]:
                last_progress[0] = status.progress
                job = await self._store.update(job.id, progress=status.progress)
            await self._reporter.job_changed(job)

        waiter = self._client.wait_video if job.kind is JobKind.VIDEO else self._client.wait_image
        status = await waiter(
            job.task_id,
            interval=self._settings.poll_interval,
            timeout=self._settings.poll_timeout,
            started_at=job.started_at,
            on_progress=on_progress,
        )
        assert status.result_url is not None
        job = await self._store.transition(
            job.id, JobState.DELIVERING, expect=JobState.RUNNING, result_url=status.result_url, progress=1.0,
        )
        await self._reporter.job_changed(job, urgent=True)
        return job

    async def _deliver(self, job: Job) -> Job:
        """Fetch the result, make it fit the destination and deliver it exactly once."""
        assert job.result_url is not None
        if await self._reporter.was_delivered(job):
            log.info("job %s was already delivered before a restart", job.id)
            return await self._finish(job)
        data = await self._fetch(job.result_url)
        info = media.sniff(data)
        kind = info.kind if info else ("video" if job.kind is JobKind.VIDEO else "image")
        ext = info.ext if info else ("mp4" if kind == "video" else "png")
        limit = await self._reporter.upload_limit(job)
        notice: str | None = None
        for _ in range(_UPLOAD_ATTEMPTS):
            fitted = await self._fit(data, kind, ext, limit)
            if fitted is None:
                break
            payload, ext_out = fitted
            if payload is not data:
                notice = "note_reencoded"
            name = result_filename(job, ext_out)
            try:
                return await self._hand_over(
                    job, lambda: self._reporter.deliver_file(job, payload, name, notice=notice),  # noqa: B023
                )
            except UploadTooLarge:
                # The destination's real limit is lower than advertised (or it changed: a lost boost,
                # a move to a channel message). Aim at the next limit Discord is known to use below
                # what failed, or at half of it; never above what the destination now advertises.
                log.info("job %s: upload of %d bytes refused as too large", job.id, len(payload))
                limit = min(await self._reporter.upload_limit(job), _limit_below(len(payload)))
        link = job.result_url if not job.result_url.startswith("file:") else None
        if link is None:
            raise DownloadError("the result is too large to upload and the service gave no link")
        return await self._hand_over(job, lambda: self._reporter.deliver_link(job, link, "note_too_large"))

    async def _hand_over(self, job: Job, send: Callable[[], Awaitable[None]]) -> Job:
        """One delivery attempt, recorded as DELIVERED before a shutdown may stop the job.

        The upload and the record of it form one critical step: a stopping bot lets both finish, so
        a clean stop never leaves a delivered job looking undelivered. When the attempt fails in a
        way that does not say whether Discord took the file (a lost answer), the job's message is
        looked at before anything else happens: a delivery is never repeated.
        """
        finished: Job | None = None
        try:
            async with self._critical_step(job.id):
                await send()
                finished = await self._finish(job)
        except ShuttingDown:
            if finished is not None:
                return finished
            raise
        except (UploadTooLarge, asyncio.CancelledError):
            raise
        except Exception as exc:
            if finished is None and await self._reporter.was_delivered(job):
                log.warning("job %s: delivery reported %s but the result is on its message", job.id,
                            type(exc).__name__)
                return await self._finish(job)
            raise
        return finished

    async def _fit(self, data: bytes, kind: str, ext: str, limit: int) -> tuple[bytes, str] | None:
        """`data` itself when it fits, else a re-encoded copy and its extension; None if nothing fits."""
        if len(data) <= limit:
            return data, ext
        try:
            # One re-encode at a time: each takes both cores and ~100 MiB at 720p (benchmarks/).
            async with self._fit_slots:
                if kind == "video":
                    out = await _in_daemon_thread(media.fit_video, data, limit)
                    return (out, "mp4") if out is not None else None
                return await _in_daemon_thread(media.fit_image, data, limit)
        except media.MediaError as exc:
            log.warning("could not re-encode a result to fit %d bytes: %s", limit, exc)
            return None

    async def _fetch(self, url: str) -> bytes:
        if url.startswith("file:"):
            path = Path(url.removeprefix("file://"))
            try:
                return await asyncio.to_thread(path.read_bytes)
            except OSError as exc:
                raise DownloadError(f"the stored result is missing ({exc.strerror})") from None
        return await self._client.download(
            url, max_bytes=self._settings.download_max_bytes, timeout=self._settings.download_timeout,
        )

    async def _finish(self, job: Job) -> Job:
        job = await self._store.transition(job.id, JobState.DELIVERED, expect=JobState.DELIVERING)
        self._forget_result(job.id)
        await self._reporter.job_changed(job)
        return job

    async def _fail(self, job_id: int, code: str, detail: str | None) -> Job:
        try:
            job = await self._store.transition(
                job_id, JobState.FAILED, expect=ACTIVE, error_code=code, error_detail=detail,
            )
        except InvalidTransition:
            # A cancel (or a finished delivery) got there first: that outcome stands.
            current = await self._store.get(job_id)
            assert current is not None
            return current
        self._forget_result(job_id)
        await self._reporter.job_changed(job, urgent=True)
        return job

    # -- results returned inline (base64 images) are kept on disk until delivered -------------------
    def _save_result(self, job_id: int, data: bytes) -> Path:
        self._results_dir.mkdir(parents=True, exist_ok=True)
        info = media.sniff(data)
        path = self._results_dir / f"job-{job_id}.{info.ext if info else 'bin'}"
        tmp = path.with_suffix(path.suffix + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path

    def _forget_result(self, job_id: int) -> None:
        for path in self._results_dir.glob(f"job-{job_id}.*"):
            with contextlib.suppress(OSError):
                path.unlink()


async def _in_daemon_thread(fn: Callable[..., _T], /, *args: Any) -> _T:
    """Run CPU-bound `fn(*args)` in a daemon thread and await its result.

    Not ``asyncio.to_thread``: ``asyncio.run`` joins the default executor's threads on exit, so a
    stopping bot would wait for a re-encode that can take minutes, past SHUTDOWN_TIMEOUT. A job cut
    off here keeps its DELIVERING state and is fitted again after the restart; the abandoned thread
    only holds memory until it finishes or the process exits.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def work() -> None:
        outcome: tuple[bool, Any]
        try:
            outcome = (True, fn(*args))
        except BaseException as exc:  # handed to the awaiting coroutine
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=work, name=f"framecast-{getattr(fn, '__name__', 'work')}", daemon=True).start()
    return await future


def _video_params(job: Job) -> VideoParams:
    p: dict[str, Any] = job.params
    return VideoParams(
        model=p["model"], prompt=p["prompt"], width=int(p["width"]), height=int(p["height"]),
        num_frames=int(p["num_frames"]), frame_rate=int(p["frame_rate"]),
    )


def _image_params(job: Job) -> ImageParams:
    p: dict[str, Any] = job.params
    return ImageParams(model=p["model"], prompt=p["prompt"], size=str(p["size"]))


def _detail(exc: ServiceError) -> str | None:
    """The service's own words for a failure, when it gave any (shown to the member)."""
    for attr in ("reason", "detail"):
        value = getattr(exc, attr, None)
        if isinstance(value, str) and value.strip():
            return value.strip()[:300]
    return None
