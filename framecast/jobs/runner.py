"""The life of one job: create the task, poll it, fetch the result, fit it, deliver it.

The runner is the only code that moves a job through the service-facing part of its state machine.
Every step is persisted through :class:`~framecast.storage.Store` before the next one starts, so a
restarted bot can pick the job up where it stopped (see :meth:`JobRunner.run`). A store that cannot
answer pauses the job where it stands, never fails it (:mod:`framecast.jobs.pause`).
Discord is reached only through the :class:`~framecast.jobs.chat_side.JobReporter` protocol, which
the bot implements: one delivery call per attempt answers delivered, interrupted (try again later)
or too large, and the runner alone decides what happens next (it looks before any re-send).
Each job runs on one API key (:class:`KeyAccount`: the operator's, or its server's own), found
through :class:`JobAccounts`; the key's client carries every request of the job, its planner paces
them, and the task records which key created it (``key_owner``, ``key_last4``): a restart polls
with that key or none.

Everything the service hands over is untrusted. A result is fetched only from the job's own record:
a file the runner saved itself (an image sent inline, kept by :class:`~framecast.jobs.results.LocalResults`)
or the service's link through :meth:`GenerationClient.download`, which refuses anything but safe
http(s). At most ``results_at_once`` results are downloaded or held at once; the bytes must be
what the job asked for (a video, an image) within the pixel limit before anything decodes or
posts them; a re-encode has a deadline; the service's text is cleaned before it is stored.

What the runner sees is counted in the process's :class:`~framecast.ops.metrics.Metrics` (when
given): jobs delivered and failed (by kind, and error code), the delay from the task's completion
to its file in Discord, and every re-encode with its outcome and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framecast.backoff import Backoff
from framecast.clock import Clock
from framecast.jobs.chat_side import (
    ChatUnreadable,
    Delivered,
    Interrupted,
    JobReporter,
    ResultFile,
    ResultLink,
    ResultToDeliver,
    UploadTooLarge,
    result_filename,
)
from framecast.jobs.fitting import FitSettings, ResultFitter
from framecast.jobs.job_keys import CreateFailure, JobAccounts, KeyAccount
from framecast.jobs.leases import LeaseCheck, LeaseLost, LeaseUnknown
from framecast.jobs.outage import StoreOutage
from framecast.jobs.pause import PatientJobs
from framecast.jobs.renamed_models import UnknownModels, next_model
from framecast.jobs.results import LocalResults
from framecast.jobs.service_params import (
    DETAIL_CHARS,
    failure_detail,
    image_params,
    shareable_link,
    video_params,
)
from framecast.ops.metrics import Metrics
from framecast.safetext import clean_text
from framecast.service import GenerationClient, TaskStatus
from framecast.service.errors import (
    AuthError,
    DownloadError,
    DownloadUnavailable,
    RateLimited,
    RequestRejected,
    ServiceError,
    ServiceUnavailable,
    UnknownModel,
)
from framecast.service.refusals import create_refusal
from framecast.storage import Store
from framecast.values import ACTIVE, InvalidTransition, Job, JobKind, JobState
from framecast.values.reasons import ErrorCode, Note
from framecast.values.service_requests import Priority, RefusalKind

__all__ = [
    "JobAccounts",
    "JobReporter",
    "JobRunner",
    "KeyAccount",
    "RunnerSettings",
    "ShuttingDown",
]

log = logging.getLogger(__name__)


class ShuttingDown(Exception):
    """Raised inside a runner when the bot stops: the job keeps its persisted state."""


@dataclass(frozen=True)
class RunnerSettings:
    """The timing and size knobs of a runner (all from configuration)."""

    poll_interval: float
    poll_timeout: float
    download_max_bytes: int
    download_timeout: float
    backoff_base: float
    backoff_max: float
    #: Results downloaded or held in memory at once (download, checks, re-encode and upload).
    results_at_once: int
    #: Largest width x height a result may declare (checked in its headers, before any decoding).
    image_max_pixels: int
    #: Seconds one re-encode may take before it is given up (the job falls back to the link).
    reencode_timeout: float


#: Upload attempts of one result: the first, then one per "too large" refusal (HTTP 413).
_UPLOAD_ATTEMPTS = 5


class JobRunner:
    """Runs jobs on the generation service and hands results to a :class:`JobReporter`."""

    def __init__(
        self,
        *,
        store: Store,
        reporter: JobReporter,
        clock: Clock,
        settings: RunnerSettings,
        results_dir: Path,
        accounts: JobAccounts,
        metrics: Metrics | None = None,
        models: UnknownModels | None = None,
        leases: LeaseCheck | None = None,
        outage: StoreOutage | None = None,
    ) -> None:
        """`accounts`: which API key runs each job (each key's planner paces polls and learns
        durations). `metrics`: where outcomes, delivery delays and re-encodes are counted (None: not
        recorded). `models`: what a job does when the service no longer knows its model (None: it fails).
        `leases`: before each request, a job taken over elsewhere is let go (:class:`LeaseLost`);
        None: every job is this process's. `outage`: the process's view of store outages, which
        jobs wait out (None: the runner's own).
        """
        self._accounts = accounts
        self._models = models
        outage = outage or StoreOutage(
            clock=clock, backoff_base=settings.backoff_base, backoff_max=settings.backoff_max, metrics=metrics
        )
        # Every store call of a job waits out an outage in place: the job keeps its place.
        self._jobs = PatientJobs(store, outage, leases)
        self._reporter = reporter
        self._clock = clock
        self._settings = settings
        self._results = LocalResults(results_dir)
        self._stopping = False
        fit = FitSettings(
            settings.download_max_bytes,
            settings.download_timeout,
            settings.image_max_pixels,
            settings.reencode_timeout,
        )
        #: Loads and fits results, at most `results_at_once` in memory (also a parked one, handed over later).
        self.fitter = ResultFitter(fit, self._results, metrics, at_once=settings.results_at_once)
        self._critical: set[int] = set()
        self._critical_changed = asyncio.Event()
        self._metrics = metrics
        # Clock time each job entered DELIVERING in this process: the service had just reported its
        # result. A job restored in DELIVERING has none (the moment was in another process's life).
        self._completed_at: dict[int, float] = {}

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
        account = self._accounts.for_job(job)
        kept = job.state is JobState.DELIVERING and job.result_local  # its file is here: no key needed
        if account is None and not kept and self._accounts.key_unreadable(job.guild_id):
            # The server's stored key became unreadable (KEY_ENCRYPTION_SECRET changed or unset), the
            # job queued or running: not the operator's key instead; an admin sets the key again.
            return await self._fail(job.id, ErrorCode.GUILD_KEY_UNREADABLE, None)
        if account is None and not kept:
            # The key that created the task was removed or replaced (and the bot restarted): no other
            # key may poll it (the service knows it by its key), nor may the operator's take over.
            log.warning("job %s: the key that created its task is gone or replaced; the job fails", job.id)
            return await self._fail(job.id, ErrorCode.KEY_REMOVED, None)
        if account is not None and account.rejected and job.state in (JobState.QUEUED, JobState.SUBMITTING):
            # Jobs that waited while their server's key was refused: no request is spent to hear it
            # again, and the operator's key does not silently take over.
            return await self._fail(job.id, ErrorCode.GUILD_KEY_REJECTED, None)
        if account is not None:
            self._accounts.bind(job.id, account)
        try:
            return await self._run_resuming(job, account, release_service_slot)
        except (ShuttingDown, LeaseLost, asyncio.CancelledError):
            raise
        except AuthError as exc:
            if account is not None and account.owner is not None:
                # The server's own key: its admins are told (once per key), not the operator.
                log.warning(
                    "job %s: the service rejected server %s's own API key: %s", job.id, account.owner, exc
                )
                failed = await self._fail(job.id, ErrorCode.GUILD_KEY_REJECTED, None)
                try:
                    await self._accounts.key_rejected(account)
                except Exception:
                    log.exception("job %s: could not record the rejected server key", job.id)
                return failed
            # An operator problem, not the member's: say so loudly in the log (never the key).
            log.error(
                "job %s: the generation service rejected the API key (check GEN_API_KEY): %s", job.id, exc
            )
            return await self._fail(job.id, ErrorCode.AUTH, None)
        except ServiceError as exc:
            # The message may carry the service's own words: cleaned before they reach the log.
            log.warning("job %s failed: %s: %s", job.id, exc.code, clean_text(str(exc)))
            return await self._fail(job.id, exc.code, failure_detail(exc))
        except Exception:
            await self._jobs.check_lease(job.id)  # a step that met the new owner's work is no error
            log.exception("job %s: unexpected error", job.id)
            return await self._fail(job.id, ErrorCode.INTERNAL, None)
        finally:
            self._completed_at.pop(job.id, None)
            if account is not None:
                self._accounts.unbind(job.id)

    async def _run_resuming(
        self, job: Job, account: KeyAccount | None, release_service_slot: Callable[[], None]
    ) -> Job:
        """:meth:`_run`; a store outage met outside the job's own patient calls (a request's lease
        check after its budget grant, the chat side's bookkeeping in a delivery) is waited out, then
        the job goes on from its stored state. What only memory knew (a task id, a result) was saved
        by a patient write, and the request that met it was not sent: nothing is done twice."""
        backoff = self._jobs.outage.backoff()
        while True:
            try:
                return await self._run(job, account, release_service_slot)
            except LeaseUnknown:
                await self._jobs.check_lease(job.id)  # waits for the store; LeaseLost if it was lost
            except Exception as exc:
                if not await self._jobs.was_outage(exc, job.id):
                    raise
                log.debug("job %s: paused by a store outage; resuming from its stored state", job.id)
                await self._clock.sleep(backoff.next())
            current = await self._jobs.get(job.id)
            if current is None or current.is_terminal:
                return current if current is not None else job
            job = current

    async def _run(
        self, job: Job, account: KeyAccount | None, release_service_slot: Callable[[], None]
    ) -> Job:
        if job.state in (JobState.QUEUED, JobState.SUBMITTING, JobState.RUNNING):
            assert account is not None  # only a saved result is delivered without a key
        await self._jobs.check_lease(job.id)
        if job.state is JobState.QUEUED:
            job = await self._jobs.transition(job.id, JobState.SUBMITTING, expect=JobState.QUEUED)
            await self._reporter.job_changed(job, urgent=True)
        if job.state is JobState.SUBMITTING:
            assert account is not None
            job = await self._submit(job, account)
        if job.state is JobState.RUNNING:
            assert account is not None
            job = await self._wait(job, account)
        release_service_slot()
        if job.state is JobState.DELIVERING:
            job = await self._deliver(job, account)
        return job

    async def _submit(self, job: Job, account: KeyAccount) -> Job:
        """Create the task on the service; the create is retried while the service is busy."""
        backoff = Backoff(base=self._settings.backoff_base, cap=self._settings.backoff_max)
        client, plan = account.client, account.plan(job)
        # Which key created the task, written with it: after a restart the same key polls it.
        owner: dict[str, Any] = {"key_owner": account.owner, "key_last4": account.key_last4}
        gate = self._jobs.gate(job.id)  # asked again after each budget grant, right before the request

        async def send(sent_now: Callable[[], Priority]) -> Job:
            async with self._critical_step(job.id):
                await self._jobs.check_lease(job.id)
                # Told only now: a create stopped before it is sent (shutdown, a lease lost or
                # waiting for the store) never counted for the key's planner.
                return await self._create(job, client, priority=sent_now(), gate=gate, owner=owner)

        def failure(exc: Exception) -> CreateFailure | None:
            # The client already backed off and retried; the job is kept and tried again later
            # rather than failed, as long as the poll timeout allows. A 429 on a create, or a
            # refusal saying the service runs too many tasks, is the service pushing back: the
            # planner runs fewer tasks for a while (for the key's rate), or holds at the cap
            # and lets the create wait for one of its tasks to end (for its tasks at once).
            if isinstance(exc, UnknownModel) or not isinstance(
                exc, (RateLimited, ServiceUnavailable, RequestRejected)
            ):
                return None
            refusal = create_refusal(exc)
            if isinstance(exc, RequestRejected) and refusal is None:
                return None
            if self._clock.time() - job.updated_at > self._settings.poll_timeout:
                return CreateFailure(refusal, retry_in=None)
            delay = backoff.next()
            if refusal is not RefusalKind.CONCURRENCY:
                log.info("job %s: create deferred (%s), next try in %.1fs", job.id, exc.code, delay)
            # The plan waits for room after a concurrency refusal; otherwise this create is not
            # "the one in flight" meanwhile: a create that the service keeps failing must not
            # hold up every other guild's jobs until the poll timeout.
            return CreateFailure(refusal, retry_in=delay)

        renamed = False  # a create refused for an unknown model is tried once more, never again
        while True:
            try:
                created = await plan.create(send, failure=failure, sleep=self._clock.sleep)
            except UnknownModel as exc:  # once: the model the rule picks from a fresh list, or a failure
                renamed, model = True, await next_model(self._models, job, client, exc, again=renamed)
                job = await self._jobs.update(job.id, params={**job.params, "model": model})
                continue
            if created.state is JobState.DELIVERING:
                self._completed_at[job.id] = self._clock.monotonic()  # the create answered the result
            await self._reporter.job_changed(created, urgent=True)
            return created

    async def _create(
        self,
        job: Job,
        client: GenerationClient,
        *,
        priority: Priority,
        gate: Callable[[], Awaitable[None]],
        owner: dict[str, Any],
    ) -> Job:
        """Send `job`'s create once, at `priority`, and persist what the service answered."""
        if job.kind is JobKind.VIDEO:
            task_id = await client.create_video(video_params(job), priority=priority, gate=gate)
            # Written straight away: the crash window for a duplicate create is between
            # the service's answer and this commit (see README, "what happens when").
            return await self._jobs.transition(
                job.id,
                JobState.RUNNING,
                expect=JobState.SUBMITTING,
                task_id=task_id,
                started_at=self._clock.time(),
                **owner,
            )
        result = await client.create_image(image_params(job), priority=priority, gate=gate)
        if result.task_id is not None:
            return await self._jobs.transition(
                job.id,
                JobState.RUNNING,
                expect=JobState.SUBMITTING,
                task_id=result.task_id,
                started_at=self._clock.time(),
                **owner,
            )
        if result.url is not None:
            return await self._jobs.transition(
                job.id, JobState.DELIVERING, expect=JobState.SUBMITTING, result_url=result.url, **owner
            )
        assert result.data is not None
        # A full or read-only disk is waited out like the store: never created twice.
        save = functools.partial(asyncio.to_thread, self._results.save, job.id, result.data)
        await self._jobs.outage.patiently(save, who=f"job {job.id}")
        return await self._jobs.transition(
            job.id, JobState.DELIVERING, expect=JobState.SUBMITTING, result_local=True, **owner
        )

    async def _wait(self, job: Job, account: KeyAccount) -> Job:
        """Poll the running task until it ends; progress is persisted and shown as it comes."""
        assert job.task_id is not None

        async def on_progress(status: TaskStatus) -> None:
            if self._stopping:
                raise ShuttingDown
            nonlocal job
            # Written after every poll, progress or not: the job's updated_at is then the time of
            # its last poll, which a restarted bot keeps the next poll a whole interval away from.
            job = await self._jobs.update(job.id, progress=status.progress)
            await self._reporter.job_changed(job)

        client, plan = account.client, account.plan(job)
        waiter = client.wait_video if job.kind is JobKind.VIDEO else client.wait_image
        try:
            status = await waiter(
                job.task_id,
                interval=self._settings.poll_interval,
                timeout=self._settings.poll_timeout,
                started_at=job.started_at,
                on_progress=on_progress,
                pacer=plan.pacer(),
                before_poll=self._jobs.gate(job.id),
            )
        except BaseException:
            await plan.ended(completed=False)
            raise
        await plan.ended(completed=True)
        assert status.result_url is not None
        job = await self._jobs.transition(
            job.id,
            JobState.DELIVERING,
            expect=JobState.RUNNING,
            result_url=status.result_url,
            progress=1.0,
        )
        self._completed_at[job.id] = self._clock.monotonic()
        await self._reporter.job_changed(job, urgent=True)
        return job

    async def _deliver(self, job: Job, account: KeyAccount | None) -> Job:
        """Fetch the result, check it, make it fit the destination and deliver it exactly once."""
        if job.result_url is None and not job.result_local:
            raise DownloadError("the service named no result")
        if await self._looked(job):
            log.info("job %s was already delivered before a restart", job.id)
            return await self._finish(job)
        await self._reporter.delivery_pending(job)
        backoff = Backoff(base=self._settings.backoff_base, cap=self._settings.backoff_max)
        give_up_at = self._clock.time() + self._settings.poll_timeout
        while True:
            try:
                # Held from the download to the end of the upload: at most `results_at_once` results in
                # memory at once; the bytes live only in _deliver_held's frame, gone with the slot.
                async with self.fitter.held():
                    return await self._deliver_held(job, account)
            except DownloadUnavailable as exc:  # the host is down for now: waited out, outside the slot
                if self._clock.time() > give_up_at:
                    raise
                log.info("job %s: result not fetched yet (%s); trying again", job.id, exc)
                await self._clock.sleep(backoff.next())

    async def _deliver_held(self, job: Job, account: KeyAccount | None) -> Job:
        await self._jobs.check_lease(job.id)  # after the wait for a slot, before the download
        # A result of the wrong kind or over the pixel limit fails the job here (headers only).
        client = account.client if account is not None else None
        data, info = await self.fitter.load_checked(job, client, gate=self._jobs.gate(job.id))
        limit = await self._reporter.upload_limit(job)
        notice: Note | None = None
        for _ in range(_UPLOAD_ATTEMPTS):
            fitted = await self.fitter.fit(job.kind, data, info, limit)
            if fitted is None:
                break
            payload, ext_out = fitted
            if payload is not data:
                notice = Note.REENCODED
            handed = await self._hand_over(job, ResultFile(payload, result_filename(job.id, ext_out), notice))
            if isinstance(handed, Job):
                return handed
            # The destination's real limit is lower than advertised (or it changed: a lost boost, a
            # move to a channel message): the chat side names the next size worth trying.
            log.info("job %s: upload of %d bytes refused as too large", job.id, handed.size)
            limit = await self._reporter.upload_limit(job, refused=handed.size)
        link = shareable_link(job.result_url, self._accounts.reveals_key)
        if link is None:
            raise DownloadError("the result is too large to upload and the service gave no link to share")
        handed = await self._hand_over(job, ResultLink(link, Note.TOO_LARGE))
        if isinstance(handed, Job):
            return handed
        raise DownloadError("the destination refused even the link as too large")

    async def _hand_over(self, job: Job, result: ResultToDeliver) -> Job | UploadTooLarge:
        """Deliver `result` (retrying interruptions), recorded as DELIVERED before a shutdown may stop it.

        The upload (with its retries) and the record of it form one critical step: a stopping bot
        lets both finish, so a clean stop never leaves a delivered job looking undelivered. When an
        attempt fails in a way that does not say whether the chat took the file (a lost answer), the
        job's message is looked at before anything else happens: a delivery is never repeated.
        Answers the finished job, or the refusal of a file as too large (nothing was delivered).
        """
        finished: Job | None = None
        await self._jobs.check_lease(job.id)
        try:
            async with self._critical_step(job.id):
                outcome = await self._send_patiently(job, result)
                if isinstance(outcome, UploadTooLarge):
                    return outcome
                finished = await self._finish(job, parked=outcome.parked)
        except ShuttingDown:
            if finished is not None:
                return finished
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if finished is None and await self._looked(job):
                log.warning(
                    "job %s: delivery reported %s but the result is on its message",
                    job.id,
                    type(exc).__name__,
                )
                return await self._finish(job)
            raise
        return finished

    async def _send_patiently(self, job: Job, result: ResultToDeliver) -> Delivered | UploadTooLarge:
        """Deliver `result` until it lands, as long as the chat side says another attempt may help;
        before each new attempt the chat is looked at (an interrupted attempt may have landed)."""
        while True:
            await self._jobs.check_lease(job.id)  # each attempt, however long the last one waited
            outcome = await self._reporter.deliver(job, result)
            if not isinstance(outcome, Interrupted):
                return outcome
            await self._clock.sleep(outcome.retry_after)
            if await self._looked(job):
                log.info("job %s: the failed attempt had reached the chat after all", job.id)
                return Delivered()

    async def _looked(self, job: Job) -> bool:
        """Whether the result is on the job's messages, asked until the chat side can tell: a chat
        that cannot be read now is no "not there" (delivering then would upload the file twice)."""
        backoff = Backoff(base=self._settings.backoff_base, cap=self._settings.backoff_max)
        while True:
            await self._jobs.check_lease(job.id)
            try:
                return await self._reporter.was_delivered(job)
            except ChatUnreadable as exc:  # one WARNING per job and outage, the tries after it DEBUG
                say = log.warning if backoff.attempt == 0 else log.debug
                say("job %s: cannot look for its result now (%s); looking again", job.id, exc)
                await self._clock.sleep(backoff.next())

    async def _finish(self, job: Job, *, parked: bool = False) -> Job:
        job = await self._jobs.transition(job.id, JobState.DELIVERED, expect=JobState.DELIVERING)
        if self._metrics is not None:
            self._metrics.job_delivered(job.kind)
            completed_at = self._completed_at.pop(job.id, None)
            if completed_at is not None:
                self._metrics.completion_to_file(job.kind, self._clock.monotonic() - completed_at)
        if not parked:  # else the saved result waits for its requester (framecast.app.parked)
            self._results.forget(job.id)
        await self._reporter.job_changed(job)
        return job

    async def _fail(self, job_id: int, code: ErrorCode, detail: str | None) -> Job:
        """Record the failure (with a safe `detail`) and show it; a job is never left active by it.

        If recording it with the detail fails (whatever the text holds), it is recorded again
        without one: a failure that cannot be stored would leave the job counting against the
        member's limit for ever.
        """
        if detail is not None:
            detail = clean_text(detail, DETAIL_CHARS) or None
        attempts = (detail, None) if detail is not None else (None,)
        for attempt, text in enumerate(attempts, 1):
            try:
                job = await self._jobs.transition(
                    job_id,
                    JobState.FAILED,
                    expect=ACTIVE,
                    error_code=code,
                    error_detail=text,
                )
                break
            except InvalidTransition:
                # A cancel (or a finished delivery) got there first: that outcome stands.
                current = await self._jobs.get(job_id)
                assert current is not None
                return current
            except Exception:
                if attempt == len(attempts):
                    raise
                log.exception("job %s: recording its failure failed; recording it without the detail", job_id)
        if self._metrics is not None:
            self._metrics.job_failed(job.kind, code)
        self._results.forget(job_id)
        await self._reporter.job_changed(job, urgent=True)
        return job
