"""The core, assembled in one place: everything Framecast runs on, opened and closed in order.

:meth:`Core.open` builds the parts from :class:`~framecast.config.Settings` in dependency order:

1. the HTTP session, the job store (SQLite), the servers' settings (cached in memory), the key
   vault, the guild queues and the accounts: one request budget, service client and planner per
   API key (the operator's, and each server's own, see :mod:`framecast.accounts`);
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

import asyncio
import contextlib
import fcntl
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Generic, TypeVar

import aiohttp

from framecast.accounts import Accounts
from framecast.app.admins import Admins
from framecast.app.chat import ChatSide, ChatSideFactory
from framecast.app.deletion import Deletions
from framecast.app.history import MemberHistory
from framecast.app.intake import Intake, Limits
from framecast.app.members import Members
from framecast.app.model_renames import ModelRenames
from framecast.app.parked import ParkedResults
from framecast.app.places_gone import GonePlaces
from framecast.app.settings_book import SettingsBook
from framecast.app.styles import ServerStyles, StyleBook
from framecast.clock import Clock, SystemClock
from framecast.config import Settings
from framecast.guilds.settings import Ceilings, GuildSettings
from framecast.jobs.leases import Leases
from framecast.jobs.outage import StoreOutage
from framecast.jobs.queues import GuildQueues
from framecast.jobs.runner import JobRunner, RunnerSettings
from framecast.jobs.scheduler import Scheduler
from framecast.keys.spent import SpentRequests
from framecast.keys.vault import KeyVault
from framecast.ops.metrics import ActiveJobs, Metrics
from framecast.planner.planner import PlannerSettings
from framecast.service.model_list import ModelCache
from framecast.service.transport import budgeted_session
from framecast.storage import Store, StoreError, open_store
from framecast.values import Job
from framecast.values.reasons import Note

__all__ = ["MODEL_REFRESH_SECONDS", "ChatSide", "ChatSideFactory", "Core"]

log = logging.getLogger(__name__)

#: How often the service's model list is read again.
MODEL_REFRESH_SECONDS = 600.0


R = TypeVar("R", bound=ChatSide)


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
    #: Every server's own settings, read from memory, changed through its one writer.
    book: SettingsBook
    #: What a server's admins can do (/settings): show and change settings, set and remove a key.
    admins: Admins
    #: What a member can do: request, cancel, retry, again, remix, show a job, the queue, models.
    members: Members
    #: Deleting a delivered result (its requester, or Manage Server).
    deletions: Deletions
    #: /history: a member's jobs, a page at a time.
    history: MemberHistory
    #: What a server's admins do with its named prompt styles (/settings styles).
    styles: ServerStyles
    #: A result that could be posted nowhere, handed to its requester through /job (user installs).
    parked: ParkedResults
    #: The unfinished jobs of a deleted channel, or of a server the bot left, ended.
    gone: GonePlaces
    #: Unfinished jobs by state and kind, kept from the store's change events (read by /metrics).
    active_jobs: ActiveJobs = field(default_factory=ActiveJobs, repr=False)
    #: The unfinished jobs found in the store at start-up (they continue).
    restored: list[Job] = field(default_factory=list)
    #: The lock on an SQLite database's file, held while this process runs (None: PostgreSQL).
    held: BinaryIO | None = field(default=None, repr=False)
    _stopped: bool = field(default=False, repr=False)
    _closed: bool = field(default=False, repr=False)

    def __repr__(self) -> str:
        return f"<Core scheduler={self.scheduler!r} stopped={self._stopped}>"

    # -- readiness (what the operator's /readyz asks) -----------------------------------------------
    async def database_answers(self) -> bool:
        """Whether the job store answers now (False while its database is unreachable)."""
        return await self.store.ping()

    async def redis_answers(self) -> bool:
        """Whether the Redis of the shared request budgets answers now (``REDIS_URL``)."""
        return await self.accounts.redis_answers()

    def models_loaded(self) -> bool:
        """Whether the service's model list has been read at least once."""
        return self.models.catalog is not None

    # -- servers' settings ---------------------------------------------------------------------------
    def guild_settings(self, guild_id: int) -> GuildSettings:
        """The server's own settings (defaults if it set none), from memory."""
        return self.book.settings(guild_id)

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        reporter: ChatSideFactory[R],
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        store: Store | None = None,
    ) -> Core[R]:
        """Build and start the core; `reporter` builds the chat side (see :class:`ChatSideFactory`).

        `metrics`: where the parts record (the caller may serve it before the core is open).
        `store`: the job store already opened (and migrated) by the start-up checks
        (:func:`framecast.app.setup_checks.check_setup`); the core owns it from here on.

        If any step fails, what was opened before it is closed again and the error propagates.
        """
        clock = clock or SystemClock()
        s = settings
        async with contextlib.AsyncExitStack() as undo:
            session = budgeted_session()
            undo.push_async_callback(session.close)
            if store is None:
                store = await open_store(s, clock=clock)
            undo.push_async_callback(store.close)
            held = _one_process_on(s.database_path) if s.database_url is None else None
            if held is not None:
                undo.callback(held.close)
            # This process's name on job leases is held for its life: a second process started on
            # the same shards by mistake is refused, instead of running the same jobs twice.
            owner = lease_owner(s)
            if not await store.hold_owner(owner):
                raise StoreError(f"another live process already runs as {owner} (the same SHARD_IDS twice?)")
            # And each shard once: two processes whose SHARD_IDS overlap (0, and 0,1) would both get
            # the shard's events, and answer its commands twice.
            for shard in s.shard_ids or ():
                if not await store.hold_owner(f"framecast-shard-{shard}"):
                    raise StoreError(
                        f"another live process already connects shard {shard} (SHARD_IDS overlap?)"
                    )
            guild_settings = await store.all_guild_settings()
            vault = KeyVault(enabled=s.guild_keys, secret=s.key_encryption_secret)
            queues = GuildQueues()
            # First: every part below records into it (the accounts each key's requests and budget).
            metrics = metrics or Metrics()
            # One budget, client and planner per API key: the operator's and each server's own. Without
            # Redis each budget lives here, and is recorded beside the database for the next start.
            spent = None
            if s.redis_url is None:
                path = s.database_path.parent / f"{owner}.spent-requests"
                window = s.gen_rate_limit.window
                spent = await asyncio.to_thread(SpentRequests.open, path, window=window, clock=clock)
                # The accounts close it first; this closes it when they never opened (twice is nothing).
                undo.push_async_callback(spent.close)
            accounts = await Accounts.open(
                settings=s,
                session=session,
                clock=clock,
                store=store,
                queues=queues,
                vault=vault,
                planner_settings=_planner_settings(s),
                metrics=metrics,
                spent=spent,
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
            ceilings = Ceilings.from_settings(s)
            # The servers' settings: cached here, changed only through the book's one writer.
            book = SettingsBook(store, ceilings, guild_settings)
            # The servers' named styles: cached here (autocomplete answers from memory), one writer.
            style_book = await StyleBook.load(store)
            # Every unfinished job is held by one process through a lease (several processes on one
            # PostgreSQL store); with one process the leases are simply always ours.
            # One view of the store's outages for the whole process: jobs wait them out, logged once.
            outage = StoreOutage(
                clock=clock,
                backoff_base=s.gen_backoff_base / 4,
                # Tried again at least as often as leases are renewed: a task id waiting in memory is
                # saved before any other process could think its lease lapsed.
                backoff_max=min(s.gen_backoff_max, s.lease_seconds / 6),
                metrics=metrics,
            )
            leases = Leases(
                store,
                owner=owner,
                lease_seconds=s.lease_seconds,
                clock=clock,
                serves=serves_guild(s),
                outage=outage,
            )
            runner = JobRunner(
                store=store,
                reporter=chat,
                clock=clock,
                settings=_runner_settings(s),
                results_dir=s.database_path.parent / "results",
                accounts=accounts,
                metrics=metrics,
                # A create refused for a model the service renamed: one fresh list, the one model rule.
                models=ModelRenames(models, book.policy),
                # A process paused past its leases must not go on with jobs another one took over.
                leases=leases,
                outage=outage,
            )
            scheduler = Scheduler(
                store=store,
                runner=runner,
                admission=accounts,
                queues=queues,
                on_positions_changed=chat.positions_changed,
                clock=clock,
                leases=leases,
                outage=outage,
            )
            intake = Intake(
                store=store,
                scheduler=scheduler,
                limits=Limits(
                    member_jobs=s.member_job_limit,
                    guild_queue=s.guild_queue_cap,
                    prompt_chars=s.prompt_max_chars,
                ),
                policy_for=book.policy,
                clock=clock,
                quota_period=s.quota_period,
                key_state=accounts.guild_key_state,
                key_unreadable=accounts.key_unreadable,
            )
            # The intake's in-memory limit counts follow every committed change of a job.
            store.subscribe(intake.observe)
            admins = Admins(
                book=book,
                store=store,
                accounts=accounts,
                vault=vault,
                models=models,
                clock=clock,
                quota_period=s.quota_period,
                notices=chat,
            )
            # A server key the service refuses: the admins' use case says whom to tell, the chat side tells.
            accounts.on_key_rejected(admins.key_rejected)
            members = Members(
                intake=intake,
                store=store,
                scheduler=scheduler,
                models=models,
                shows=chat,
                estimate=accounts.estimate,
                clock=clock,
                poll_timeout=s.gen_poll_timeout,
                reveals_key=accounts.reveals_key,
                styles=style_book,
            )
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
                book=book,
                admins=admins,
                members=members,
                styles=ServerStyles(style_book),
                deletions=Deletions(members=members, jobs=store, remover=chat, clock=clock),
                history=MemberHistory(store),
                parked=ParkedResults(jobs=store, loader=runner.fitter, keys=accounts),
                gone=GonePlaces(store=store, scheduler=scheduler, shows=chat),
                held=held,
            )
            undo.push_async_callback(core.stop)
            await core._start()
            undo.pop_all()
        return core

    async def _start(self) -> None:
        self.models.start()
        await self.runner.fitter.sweep(self.store.get)
        self.restored = await self.scheduler.start()
        for job in self.restored:
            await self._resumed(job)
        self.scheduler.on_ended_elsewhere(self._ended_elsewhere)
        self.leases.start(self._adopt, self.scheduler.let_go)

    async def _adopt(self, job: Job) -> None:
        """A job whose lease lapsed (its process died) continues here."""
        # Its server's own key may have been set in the other process after this one started.
        await self.accounts.load_guild(job.guild_id)
        adopted = await self.scheduler.adopt(job)
        if adopted is not None:
            await self._resumed(adopted)

    async def _ended_elsewhere(self, job: Job) -> None:
        """A job queued here ended in another process (a cancel): its end is shown here too (this
        process's message worker kept drawing it as it knew it, "Queued" with a Cancel button)."""
        self.intake.observe(job)
        self.active_jobs.observe(job)
        await self.reporter.job_changed(job, urgent=True)

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
        if self.held is not None:
            self.held.close()  # the SQLite database is free for another process
        await self.accounts.close()
        await self.session.close()


def serves_guild(s: Settings) -> Callable[[int], bool] | None:
    """Whether this process serves a guild: its gateway shards' guilds (None: every guild)."""
    if s.shard_count is None or s.shard_ids is None:
        return None
    count, mine = s.shard_count, frozenset(s.shard_ids)
    # Discord's rule for which shard receives a guild's events.
    return lambda guild_id: (guild_id >> 22) % count in mine


def _one_process_on(database: Path) -> BinaryIO:
    """An exclusive lock on a file beside the SQLite database, held while the file stays open: a
    second process on the same database (its leases would name the same owner) would run the same
    jobs twice. PostgreSQL's processes hold their names in the database (``Store.hold_owner``)."""
    lock = open(f"{database}.lock", "a+b")  # noqa: SIM115 -- held for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise StoreError(f"another live process already uses the job store {database}") from None
    return lock


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
