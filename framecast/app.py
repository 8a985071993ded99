"""The core, assembled in one place: everything Framecast runs on, opened and closed in order.

:meth:`Core.open` builds the parts from :class:`~framecast.config.Settings` in dependency order:

1. the HTTP session, the job store (SQLite), the request budget and the service client;
2. the model cache (the service's model list, refreshed in the background);
3. the guild queues, then the chat side (a :class:`ChatSide`, built by the caller's factory from
   the store and the queues: it shows positions and writes its bookkeeping into the store);
4. the runner (talks to the service, reports to the chat side), the scheduler (queues and slots)
   and the intake (validates and accepts requests);
5. then it starts: the model refresh, the scheduler (which restores unfinished jobs) and a
   "resumed" note on every restored job.

Nothing here knows Discord: the bot passes a factory that builds its reporter. Shutting down is two
steps so the chat connection can close in between: :meth:`Core.stop` stops taking work (running
jobs keep their persisted state), :meth:`Core.close` releases the store and the HTTP session.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import aiohttp

from framecast.budget import RequestBudget
from framecast.catalog import ModelCache
from framecast.clock import Clock, SystemClock
from framecast.config import Settings
from framecast.intake import Intake, Limits
from framecast.jobs import Job
from framecast.planner.estimate import Estimates
from framecast.planner.planner import Planner, PlannerSettings
from framecast.queues import GuildQueues, QueuePositions
from framecast.reasons import Note
from framecast.runner import JobReporter, JobRunner, RunnerSettings
from framecast.scheduler import Scheduler
from framecast.service import GenerationClient
from framecast.store import JobStore

__all__ = ["MODEL_REFRESH_SECONDS", "ChatSide", "ChatSideFactory", "Core"]

log = logging.getLogger(__name__)

#: How often the service's model list is read again.
MODEL_REFRESH_SECONDS = 600.0


class ChatSide(JobReporter, Protocol):
    """What the core needs of the chat side: a :class:`JobReporter` plus queue moves, notes, closing."""

    def positions_changed(self, guild_id: int, queued: list[int]) -> None:
        """A guild's queue moved: `queued` are its waiting jobs, head first."""
        ...

    def add_note(self, job: Job, note: Note) -> None:
        """Show `note` on the job's message until the job finishes."""
        ...

    async def close(self) -> None:
        """Stop showing jobs (their state is in the store; nothing is lost)."""
        ...


R = TypeVar("R", bound=ChatSide)
R_co = TypeVar("R_co", bound=ChatSide, covariant=True)


class ChatSideFactory(Protocol[R_co]):
    """Builds the chat side once the parts it needs exist (called once by :meth:`Core.open`)."""

    def __call__(
        self, *, store: JobStore, positions: QueuePositions, estimates: Estimates, clock: Clock
    ) -> R_co:
        """The chat side, writing its bookkeeping to `store`, showing `positions` and `estimates`."""
        ...


@dataclass(eq=False)
class Core(Generic[R]):
    """The opened core. Build it with :meth:`open`; the parts are read-only attributes."""

    settings: Settings
    clock: Clock
    session: aiohttp.ClientSession
    store: JobStore
    budget: RequestBudget
    client: GenerationClient
    models: ModelCache
    queues: GuildQueues
    planner: Planner
    reporter: R
    runner: JobRunner
    scheduler: Scheduler
    intake: Intake
    #: The unfinished jobs found in the store at start-up (they continue).
    restored: list[Job] = field(default_factory=list)
    _stopped: bool = field(default=False, repr=False)
    _closed: bool = field(default=False, repr=False)

    def __repr__(self) -> str:
        return f"<Core scheduler={self.scheduler!r} stopped={self._stopped}>"

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        reporter: ChatSideFactory[R],
        clock: Clock | None = None,
    ) -> Core[R]:
        """Build and start the core; `reporter` builds the chat side (see :class:`ChatSideFactory`).

        If any step fails, what was opened before it is closed again and the error propagates.
        """
        clock = clock or SystemClock()
        s = settings
        async with contextlib.AsyncExitStack() as undo:
            session = aiohttp.ClientSession()
            undo.push_async_callback(session.close)
            store = await JobStore.open(s.database_path, clock=clock)
            undo.push_async_callback(store.close)
            budget = RequestBudget(
                s.gen_rate_limit.requests,
                s.gen_rate_limit.window,
                clock=clock,
                backoff_base=s.gen_backoff_base,
                backoff_max=s.gen_backoff_max,
            )
            client = GenerationClient.from_settings(session, s, budget, clock)
            undo.push_async_callback(client.close)
            models = ModelCache(
                client,
                clock=clock,
                refresh_every=MODEL_REFRESH_SECONDS,
                default_video=s.gen_video_model,
                default_image=s.gen_image_model,
            )
            queues = GuildQueues()
            # One planner per API key: it decides what each request of the key's budget buys.
            planner = await Planner.open(
                budget=budget, clock=clock, store=store, queues=queues, settings=_planner_settings(s)
            )
            chat = reporter(store=store, positions=queues, estimates=planner, clock=clock)
            undo.push_async_callback(chat.close)
            runner = JobRunner(
                store=store,
                client=client,
                reporter=chat,
                clock=clock,
                settings=_runner_settings(s),
                results_dir=s.database_path.parent / "results",
                planner=planner,
            )
            scheduler = Scheduler(
                store=store,
                runner=runner,
                admission=planner,
                queues=queues,
                on_positions_changed=chat.positions_changed,
                clock=clock,
            )
            intake = Intake(
                store=store,
                scheduler=scheduler,
                limits=Limits(
                    member_jobs=s.member_job_limit,
                    guild_queue=s.guild_queue_cap,
                    prompt_chars=s.prompt_max_chars,
                ),
            )
            # The intake's in-memory limit counts follow every committed change of a job.
            store.subscribe(intake.observe)
            core = cls(
                settings=s,
                clock=clock,
                session=session,
                store=store,
                budget=budget,
                client=client,
                models=models,
                queues=queues,
                planner=planner,
                reporter=chat,
                runner=runner,
                scheduler=scheduler,
                intake=intake,
            )
            undo.push_async_callback(core.stop)
            await core._start()
            undo.pop_all()
        return core

    async def _start(self) -> None:
        self.models.start()
        self.restored = await self.scheduler.start()
        self.intake.track(self.restored)
        # One edit of each surviving job's own message, never a new post: no channel spam.
        for job in self.restored:
            self.reporter.add_note(job, Note.RESUMED)
            await self.reporter.job_changed(job, urgent=True)

    async def stop(self) -> None:
        """Stop taking work: running jobs stop at a safe point and keep their persisted state.

        Critical steps get ``shutdown_timeout`` seconds to finish. The model refresh and the chat
        side stop too; the store stays open until :meth:`close`. Safe to call twice.
        """
        if self._stopped:
            return
        self._stopped = True
        await self.scheduler.close(self.settings.shutdown_timeout)
        await self.models.close()
        await self.reporter.close()

    async def close(self) -> None:
        """:meth:`stop` if not done yet, then close the store, the service client and the session."""
        if self._closed:
            return
        await self.stop()
        self._closed = True
        await self.store.close()
        await self.client.close()
        await self.session.close()


def _runner_settings(s: Settings) -> RunnerSettings:
    return RunnerSettings(
        poll_interval=s.gen_poll_interval,
        poll_timeout=s.gen_poll_timeout,
        download_max_bytes=s.gen_download_max_bytes,
        download_timeout=s.gen_download_timeout,
        backoff_base=s.gen_backoff_base,
        backoff_max=s.gen_backoff_max,
        results_at_once=s.results_at_once,
        image_max_pixels=s.image_max_pixels,
        reencode_timeout=s.reencode_timeout,
    )


def _planner_settings(s: Settings) -> PlannerSettings:
    return PlannerSettings(
        poll_interval=s.gen_poll_interval,
        poll_max_interval=s.gen_poll_max_interval or 6 * s.gen_poll_interval,
        ceiling=s.gen_max_running,
    )
