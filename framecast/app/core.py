"""The core, assembled in one place: everything Framecast runs on, opened and closed in order.

:meth:`Core.open` builds the parts from :class:`~framecast.config.Settings` in dependency order:

1. the HTTP session, the job store (SQLite), the servers' settings (cached in memory), the key
   vault, the guild queues and the accounts: one request budget, service client and planner per
   API key (the operator's, and each server's own, see :mod:`framecast.keys.accounts`);
2. the model cache (the service's model list, read with the operator's key, refreshed in the
   background);
3. the chat side (a :class:`ChatSide`, built by the caller's factory from the store, the queues
   and the accounts' estimates: it shows positions and writes its bookkeeping into the store);
4. the runner (talks to the service with each job's key, reports to the chat side), the scheduler
   (queues, and slots per key) and the intake (validates and accepts requests under each server's
   policy);
5. then it starts: the model refresh, the scheduler (which restores unfinished jobs) and a
   "resumed" note on every restored job.

Nothing here knows Discord: the bot passes a factory that builds its reporter. Shutting down is two
steps so the chat connection can close in between: :meth:`Core.stop` stops taking work (running
jobs keep their persisted state), :meth:`Core.close` releases the store and the HTTP session.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import aiohttp

from framecast.app.intake import Intake, Limits
from framecast.clock import Clock, SystemClock
from framecast.config import Settings
from framecast.guilds.settings import Ceilings, GuildSettings, Policy, Setting, check_change, resolve
from framecast.jobs import Job
from framecast.jobs.leases import Leases
from framecast.jobs.queues import GuildQueues, QueuePositions
from framecast.jobs.reasons import Note
from framecast.jobs.runner import JobReporter, JobRunner, RunnerSettings
from framecast.jobs.scheduler import Scheduler
from framecast.keys.accounts import Accounts
from framecast.keys.budget import Budget
from framecast.keys.vault import KeyVault
from framecast.ops.metrics import ActiveJobs, Metrics
from framecast.planner.estimate import Estimates
from framecast.planner.planner import Planner, PlannerSettings
from framecast.service import GenerationClient
from framecast.service.model_list import ModelCache
from framecast.store import StoreError
from framecast.stores import Store, open_store

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
        self, *, store: Store, positions: QueuePositions, estimates: Estimates, clock: Clock, metrics: Metrics
    ) -> R_co:
        """The chat side, writing its bookkeeping to `store`, showing `positions` and `estimates`,
        counting its failed requests in `metrics`."""
        ...


@dataclass(eq=False)
class Core(Generic[R]):
    """The opened core. Build it with :meth:`open`; the parts are read-only attributes."""

    settings: Settings
    clock: Clock
    session: aiohttp.ClientSession
    store: Store
    vault: KeyVault
    accounts: Accounts
    models: ModelCache
    queues: GuildQueues
    reporter: R
    runner: JobRunner
    scheduler: Scheduler
    intake: Intake
    #: The operator's ceilings (and defaults) every server's settings are capped by.
    ceilings: Ceilings
    #: This process's leases on jobs (which process runs which job).
    leases: Leases
    #: What /metrics shows (served when HTTP_PORT is set).
    metrics: Metrics
    #: Unfinished jobs by state and kind, kept from the store's change events (read by /metrics).
    active_jobs: ActiveJobs = field(default_factory=ActiveJobs, repr=False)
    #: Every server's own settings (servers without any are absent), kept in step with the store.
    _guild_settings: dict[int, GuildSettings] = field(default_factory=dict, repr=False)
    #: The unfinished jobs found in the store at start-up (they continue).
    restored: list[Job] = field(default_factory=list)
    _stopped: bool = field(default=False, repr=False)
    _closed: bool = field(default=False, repr=False)

    def __repr__(self) -> str:
        return f"<Core scheduler={self.scheduler!r} stopped={self._stopped}>"

    # -- the operator's key (what a single-key bot had) ----------------------------------------------
    @property
    def budget(self) -> Budget:
        """The operator's key's request budget."""
        return self.accounts.operator.budget

    @property
    def client(self) -> GenerationClient:
        """The service client with the operator's key."""
        return self.accounts.operator.client

    @property
    def planner(self) -> Planner:
        """The operator's key's planner."""
        return self.accounts.operator.planner

    # -- servers' settings ---------------------------------------------------------------------------
    def guild_settings(self, guild_id: int) -> GuildSettings:
        """The server's own settings (defaults if it set none), from memory."""
        return self._guild_settings.get(guild_id) or GuildSettings()

    def guild_policy(self, guild_id: int) -> Policy:
        """The server's effective policy: its settings capped by the operator's ceilings."""
        return resolve(self.guild_settings(guild_id), self.ceilings)

    async def update_settings(self, guild_id: int, *, by: int, **changes: object) -> GuildSettings:
        """Validate and persist `changes` to the server's settings (user `by` made them); the new settings.

        Raises :class:`~framecast.guilds.settings.SettingsError` for a value the server may not have.
        Only settings whose value really changes are saved and logged (by name, never by value).
        """
        current = self.guild_settings(guild_id)
        new = check_change(current, self.ceilings, **changes)
        changed = [Setting(name) for name in changes if getattr(new, name) != getattr(current, name)]
        if not changed:
            return current
        await self.store.save_guild_settings(guild_id, new, by=by, changed=changed)
        self._guild_settings[guild_id] = new
        log.info("guild %s: user %s changed %s", guild_id, by, ", ".join(c.value for c in changed))
        return new

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        reporter: ChatSideFactory[R],
        clock: Clock | None = None,
        metrics: Metrics | None = None,
    ) -> Core[R]:
        """Build and start the core; `reporter` builds the chat side (see :class:`ChatSideFactory`).

        `metrics`: where the parts record (the caller may serve it before the core is open).

        If any step fails, what was opened before it is closed again and the error propagates.
        """
        clock = clock or SystemClock()
        s = settings
        async with contextlib.AsyncExitStack() as undo:
            session = aiohttp.ClientSession()
            undo.push_async_callback(session.close)
            store = await open_store(s, clock=clock)
            undo.push_async_callback(store.close)
            # This process's name on job leases is held for its life: a second process started on
            # the same shards by mistake is refused, instead of running the same jobs twice.
            owner = lease_owner(s)
            if not await store.hold_owner(owner):
                raise StoreError(f"another live process already runs as {owner} (the same SHARD_IDS twice?)")
            guild_settings = await store.all_guild_settings()
            vault = KeyVault(enabled=s.guild_keys, secret=s.key_encryption_secret)
            queues = GuildQueues()
            # First: every part below records into it (the accounts each key's requests and budget).
            metrics = metrics or Metrics()
            # One budget, client and planner per API key: the operator's and each server's own.
            accounts = await Accounts.open(
                settings=s,
                session=session,
                clock=clock,
                store=store,
                queues=queues,
                vault=vault,
                planner_settings=_planner_settings(s),
                metrics=metrics,
            )
            undo.push_async_callback(accounts.close)
            models = ModelCache(
                accounts.operator.client,
                clock=clock,
                refresh_every=MODEL_REFRESH_SECONDS,
                default_video=s.gen_video_model,
                default_image=s.gen_image_model,
            )
            chat = reporter(store=store, positions=queues, estimates=accounts, clock=clock, metrics=metrics)
            undo.push_async_callback(chat.close)
            runner = JobRunner(
                store=store,
                reporter=chat,
                clock=clock,
                settings=_runner_settings(s),
                results_dir=s.database_path.parent / "results",
                accounts=accounts,
                metrics=metrics,
            )
            # Every unfinished job is held by one process through a lease (several processes on one
            # PostgreSQL store); with one process the leases are simply always ours.
            leases = Leases(
                store,
                owner=owner,
                lease_seconds=s.lease_seconds,
                clock=clock,
                serves=serves_guild(s),
            )
            scheduler = Scheduler(
                store=store,
                runner=runner,
                admission=accounts,
                queues=queues,
                on_positions_changed=chat.positions_changed,
                clock=clock,
                leases=leases,
            )
            ceilings = Ceilings.from_settings(s)

            def policy_for(guild_id: int) -> Policy:
                # The same cache the core keeps up to date in update_settings.
                return resolve(guild_settings.get(guild_id) or GuildSettings(), ceilings)

            intake = Intake(
                store=store,
                scheduler=scheduler,
                limits=Limits(
                    member_jobs=s.member_job_limit,
                    guild_queue=s.guild_queue_cap,
                    prompt_chars=s.prompt_max_chars,
                ),
                policy_for=policy_for,
                clock=clock,
                quota_period=s.quota_period,
                key_state=accounts.guild_key_state,
            )
            # The intake's in-memory limit counts follow every committed change of a job.
            store.subscribe(intake.observe)
            active_jobs = ActiveJobs()
            store.subscribe(active_jobs.observe)
            metrics.track_jobs(active_jobs.counts)
            metrics.track_queue(queues.total)
            core = cls(
                settings=s,
                clock=clock,
                session=session,
                store=store,
                vault=vault,
                accounts=accounts,
                models=models,
                queues=queues,
                reporter=chat,
                runner=runner,
                scheduler=scheduler,
                intake=intake,
                ceilings=ceilings,
                leases=leases,
                metrics=metrics,
                active_jobs=active_jobs,
                _guild_settings=guild_settings,
            )
            undo.push_async_callback(core.stop)
            await core._start()
            undo.pop_all()
        return core

    async def _start(self) -> None:
        self.models.start()
        self.restored = await self.scheduler.start()
        for job in self.restored:
            await self._resumed(job)
        self.leases.start(self._adopt)

    async def _adopt(self, job: Job) -> None:
        """A job whose lease lapsed (its process died) continues here."""
        # Its server's own key may have been set in the other process after this one started.
        await self.accounts.load_guild(job.guild_id)
        adopted = await self.scheduler.adopt(job)
        if adopted is not None:
            await self._resumed(adopted)

    async def _resumed(self, job: Job) -> None:
        self.intake.track([job])
        self.active_jobs.observe(job)
        # One edit of each surviving job's own message, never a new post: no channel spam.
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
        await self.leases.close()
        await self.scheduler.close(self.settings.shutdown_timeout)
        await self.models.close()
        await self.reporter.close()

    async def close(self) -> None:
        """:meth:`stop` if not done yet, then close the store, every key's client and the session."""
        if self._closed:
            return
        await self.stop()
        self._closed = True
        await self.store.close()
        await self.accounts.close()
        await self.session.close()


def serves_guild(s: Settings) -> Callable[[int], bool] | None:
    """Whether this process serves a guild: its gateway shards' guilds (None: every guild)."""
    if s.shard_count is None or s.shard_ids is None:
        return None
    count, mine = s.shard_count, frozenset(s.shard_ids)
    # Discord's rule for which shard receives a guild's events.
    return lambda guild_id: (guild_id >> 22) % count in mine


def lease_owner(s: Settings) -> str:
    """This process's name on job leases: stable across restarts, so a restarted process gets its
    own jobs back at once instead of waiting for their leases to lapse."""
    if s.shard_ids is None:
        return "framecast"
    return "framecast-shards-" + "-".join(str(i) for i in s.shard_ids)


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
