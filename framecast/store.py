"""SQLite persistence of jobs (and of the planner's learned task durations).

Every accepted job is written here, committed with ``synchronous=FULL``, before the member is told it
is queued, so a crash or restart (even SIGKILL) loses nothing: after a restart :meth:`JobStore.active`
gives back every unfinished job in FIFO order. :meth:`JobStore.transition` is the only way a job's
state changes; it validates the move against :data:`framecast.jobs.TRANSITIONS` and compare-and-sets
the old state, so e.g. a cancel and a completion racing each other cannot both win.

Design:

* stdlib ``sqlite3`` in WAL mode, one connection, used from ONE dedicated worker thread
  (``ThreadPoolExecutor(max_workers=1)``): the event loop never blocks on disk I/O, the connection is
  never shared between threads, and operations run in the order they were submitted.
* Every write is one ``BEGIN IMMEDIATE`` transaction: the write lock is taken before anything is
  read, so check-then-write sequences (limits, compare-and-set) are atomic even against another
  process using the same file.
* ``params`` and ``discord`` are JSON text (``ensure_ascii=False``: prompts stay readable in the file
  and round-trip exactly).
* The schema is versioned with ``PRAGMA user_version``; :data:`_MIGRATIONS` holds one step per version.
* The guild tables (server settings, servers' encrypted API keys, the settings audit log) are read and
  written by the :class:`framecast.guildstore.GuildTables` mixin, on the same connection and thread.

Cancellation: an operation already handed to the worker thread completes even if the awaiting task is
cancelled (a thread cannot be interrupted); one still waiting in the worker's queue is dropped. So a
cancelled ``await store.add(...)`` may or may not have stored the job.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from framecast.guilds.settings import KeyStatus
from framecast.guildstore import GuildTables, SettingsChange, StoredKey
from framecast.jobs import (
    ACTIVE,
    AlreadyRetried,
    DailyQuotaReached,
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
from framecast.leases import LEASE_MIGRATION, SqliteLeases
from framecast.planner.predict import DurationRow

if TYPE_CHECKING:
    from framecast.clock import Clock

__all__ = [
    "SCHEMA_VERSION",
    "AlreadyRetried",
    "DailyQuotaReached",
    "GuildQueueFull",
    "InvalidTransition",
    "JobLimitError",
    "JobNotFound",
    "JobStore",
    "MemberLimitReached",
    "SettingsChange",
    "StoreClosed",
    "StoreError",
    "StoredKey",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Current schema version (``PRAGMA user_version``).
SCHEMA_VERSION = 4

# Seconds a connection waits for another connection's write lock. Only matters when a second process
# (an operator's sqlite3 shell, a second bot by mistake) holds the file; our own writes are serialised
# by the single worker thread.
_BUSY_TIMEOUT = 10.0

_ACTIVE_SQL = ", ".join(f"'{s.value}'" for s in sorted(ACTIVE))
_STATES_SQL = ", ".join(f"'{s.value}'" for s in JobState)
_KINDS_SQL = ", ".join(f"'{k.value}'" for k in JobKind)
_KEY_STATUSES_SQL = ", ".join(f"'{k.value}'" for k in KeyStatus)

# One tuple of statements per schema version: _MIGRATIONS[n] upgrades version n to n + 1. Never edit a
# released step; append a new one. Plain column types (no STRICT, no RETURNING) so that older system
# SQLite libraries work too; types are checked in Python by _encode() instead.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        # AUTOINCREMENT: ids are never reused, so id order is acceptance (FIFO) order for ever and an id
        # kept in a Discord button or in retry_of can never point at a different job.
        f"""
        CREATE TABLE jobs (
            id           INTEGER PRIMARY KEY AUTOINCREMENT,
            kind         TEXT    NOT NULL CHECK (kind IN ({_KINDS_SQL})),
            state        TEXT    NOT NULL CHECK (state IN ({_STATES_SQL})),
            guild_id     INTEGER NOT NULL,
            channel_id   INTEGER NOT NULL,
            user_id      INTEGER NOT NULL,
            locale       TEXT    NOT NULL,
            params       TEXT    NOT NULL,
            created_at   REAL    NOT NULL,
            updated_at   REAL    NOT NULL,
            task_id      TEXT,
            started_at   REAL,
            progress     REAL,
            result_url   TEXT,
            error_code   TEXT,
            error_detail TEXT,
            retry_of     INTEGER,
            discord      TEXT    NOT NULL DEFAULT '{{}}'
        )
        """,
        # Member history newest first (schema v1; no query of this version reads history).
        "CREATE INDEX jobs_member ON jobs (guild_id, user_id, id)",
        # Partial indexes over unfinished jobs only: they stay small however long the history grows.
        # Queries must repeat this exact WHERE term (_OPEN) for SQLite to use them.
        # The limit checks of add() (rowid order comes free after the equality columns):
        f"CREATE INDEX jobs_open ON jobs (guild_id, state, user_id) WHERE state IN ({_ACTIVE_SQL})",
        # active(): unfinished jobs already in id (FIFO) order, no scan of the history, no sort.
        f"CREATE INDEX jobs_open_fifo ON jobs (id) WHERE state IN ({_ACTIVE_SQL})",
    ),
    (
        # Results the bot saved itself are flagged, no longer named by a file: URL in result_url (a
        # string the service could also send). The runner finds them under its results directory by
        # job id. Version-1 rows that held such a URL are converted.
        "ALTER TABLE jobs ADD COLUMN result_local INTEGER NOT NULL DEFAULT 0 CHECK (result_local IN (0, 1))",
        "UPDATE jobs SET result_local = 1, result_url = NULL WHERE result_url LIKE 'file:%'",
        # One failed job gives at most one retry job. Version 1 allowed a double click to create two:
        # the older retry keeps the link, later ones become plain jobs, so the unique index can exist.
        """
        UPDATE jobs SET retry_of = NULL
        WHERE retry_of IS NOT NULL
          AND id NOT IN (SELECT MIN(id) FROM jobs WHERE retry_of IS NOT NULL GROUP BY retry_of)
        """,
        "CREATE UNIQUE INDEX jobs_retry_of ON jobs (retry_of) WHERE retry_of IS NOT NULL",
    ),
    (
        # The planner's learned task durations (framecast/planner/predict.py: DurationRow), one row
        # per model and size bucket, so predictions survive a restart instead of starting from the
        # prior again.
        """
        CREATE TABLE durations (
            key        TEXT    PRIMARY KEY,
            mean       REAL    NOT NULL,
            spread     REAL    NOT NULL,
            count      INTEGER NOT NULL,
            updated_at REAL    NOT NULL
        )
        """,
    ),
    (
        # Issue 10. The guild whose own API key created a job's service task (NULL: the operator's).
        "ALTER TABLE jobs ADD COLUMN key_owner INTEGER",
        # Daily quota counts (add(quota=...)): a range scan over one member's jobs of one kind.
        "CREATE INDEX jobs_quota ON jobs (guild_id, user_id, kind, created_at)",
        # A server's own settings, as GuildSettings.to_json() text (only the overridden fields).
        """
        CREATE TABLE guild_settings (
            guild_id   INTEGER PRIMARY KEY,
            data       TEXT    NOT NULL,
            updated_at REAL    NOT NULL,
            updated_by INTEGER NOT NULL
        )
        """,
        # A server's own API key: Fernet ciphertext only; last4 is the one plain part (shown to admins).
        f"""
        CREATE TABLE guild_keys (
            guild_id INTEGER PRIMARY KEY,
            token    BLOB    NOT NULL,
            last4    TEXT    NOT NULL,
            status   TEXT    NOT NULL CHECK (status IN ({_KEY_STATUSES_SQL})),
            set_by   INTEGER NOT NULL,
            set_at   REAL    NOT NULL
        )
        """,
        # Who changed which setting when (never the values: one of them is the API key).
        """
        CREATE TABLE settings_log (
            id       INTEGER PRIMARY KEY AUTOINCREMENT,
            guild_id INTEGER NOT NULL,
            user_id  INTEGER NOT NULL,
            setting  TEXT    NOT NULL,
            at       REAL    NOT NULL
        )
        """,
        "CREATE INDEX settings_log_guild ON settings_log (guild_id, id)",
        *LEASE_MIGRATION,
    ),
)

_COLUMNS = (
    "id",
    "kind",
    "state",
    "guild_id",
    "channel_id",
    "user_id",
    "locale",
    "params",
    "created_at",
    "updated_at",
    "task_id",
    "started_at",
    "progress",
    "result_url",
    "result_local",
    "error_code",
    "error_detail",
    "retry_of",
    "key_owner",
    "discord",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM jobs"
_OPEN = f"state IN ({_ACTIVE_SQL})"
#: The jobs that use up a member's daily quota (both stores count with this term): not failed jobs
#: (they gave the member nothing), nor jobs cancelled before the service started them (they cost
#: nothing); everything else, cancelled running jobs included, does.
QUOTA_COUNTS = (
    f"state <> '{JobState.FAILED.value}' AND NOT (state = '{JobState.CANCELLED.value}' AND task_id IS NULL)"
)

# Field name -> (type, nullable) for every field update()/transition() may write. id and state are
# excluded on purpose (identity; state changes only through transition()), updated_at because the
# store maintains it.
_FIELD_TYPES: dict[str, tuple[type, bool]] = {
    "kind": (JobKind, False),
    "guild_id": (int, False),
    "channel_id": (int, False),
    "user_id": (int, False),
    "locale": (str, False),
    "params": (dict, False),
    "created_at": (float, False),
    "task_id": (str, True),
    "started_at": (float, True),
    "progress": (float, True),
    "result_url": (str, True),
    "result_local": (bool, False),
    "error_code": (str, True),
    "error_detail": (str, True),
    "retry_of": (int, True),
    "key_owner": (int, True),
    "discord": (dict, False),
}
_NEW_JOB_FIELDS = (
    "kind",
    "guild_id",
    "channel_id",
    "user_id",
    "locale",
    "params",
    "retry_of",
    "key_owner",
    "discord",
)


class StoreError(JobError):
    """The job store cannot be used (e.g. the database was written by a newer Framecast)."""


class StoreClosed(StoreError, RuntimeError):
    """The store was closed; no further operations are accepted."""


class JobStore(SqliteLeases, GuildTables):
    """Durable job storage. Create with :meth:`open`, release with :meth:`close`.

    All methods are coroutines that run their SQL on the store's single worker thread. Every write is
    committed (``synchronous=FULL``) before the coroutine returns. Returned :class:`Job` objects are
    fresh snapshots read back from the database.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        executor: ThreadPoolExecutor,
        now: Callable[[], float],
        path: Path,
    ) -> None:
        # Private: use JobStore.open(). The connection belongs to the executor's only thread.
        self._conn = conn
        self._executor = executor
        self._now = now
        self._path = path
        self._closing = False
        self._close_future: asyncio.Future[None] | None = None
        self._listeners: list[Callable[[Job], None]] = []

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    async def open(cls, path: Path | str | os.PathLike[str], *, clock: Clock | None = None) -> JobStore:
        """Open (creating the file, its parent directory and the schema if needed) the store at ``path``.

        ``clock.time()`` stamps ``created_at``/``updated_at``; without a clock, ``time.time()``.
        Raises :class:`StoreError` if the database's schema is newer than this code knows.
        """
        path = Path(path)
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="framecast-store")
        loop = asyncio.get_running_loop()
        try:
            conn = await loop.run_in_executor(executor, _connect, path)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        now = clock.time if clock is not None else time.time
        log.info("job store open: %s (schema v%d)", path, SCHEMA_VERSION)
        return cls(conn, executor, now, path)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closing

    async def close(self) -> None:
        """Finish the queued operations, checkpoint the WAL into the main file and close. Idempotent."""
        if self._close_future is None:
            self._closing = True
            loop = asyncio.get_running_loop()
            # FIFO worker: everything submitted before this runs first.
            self._close_future = loop.run_in_executor(self._executor, self._close_sync)
            # The queued close still runs; the worker thread exits after it.
            self._executor.shutdown(wait=False)
        if self._close_future.done():
            self._close_future.result()
            return
        # Shielded: a cancelled caller must not leave the connection half-closed.
        await asyncio.shield(self._close_future)

    def subscribe(self, listener: Callable[[Job], None]) -> None:
        """Call ``listener(job)`` after every committed add and state change (on the event loop).

        Listeners keep derived, in-memory views (such as per-member counts) in step with the one
        place that changes state. They must be quick and must not raise.
        """
        self._listeners.append(listener)

    def _notify(self, job: Job) -> Job:
        for listener in self._listeners:
            try:
                listener(job)
            except Exception:
                log.exception("job store listener failed")
        return job

    async def __aenter__(self) -> JobStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ writes

    async def add(
        self,
        job: NewJob,
        *,
        member_limit: int | None,
        guild_cap: int | None,
        quota: tuple[int, float] | None = None,
    ) -> Job:
        """Store a new QUEUED job and return it, committed to disk.

        In one transaction: if ``quota`` is ``(limit, since)`` and the member already has ``limit``
        jobs of this kind in the guild created at or after ``since`` (epoch seconds, on the store's
        clock) that did not fail, raises :class:`DailyQuotaReached`; if ``member_limit`` is not None and the member already has that many
        active (non-terminal) jobs in the guild, raises :class:`MemberLimitReached`; if ``guild_cap``
        is not None and the guild already has that many QUEUED jobs, raises :class:`GuildQueueFull`
        (in that order: the quota, then the member limit, then the guild cap). If ``job.retry_of`` is set and that job already has a
        retry, raises :class:`AlreadyRetried` (checked before the limits: a second click of Retry
        is told about the first one). Nothing is stored when it raises. ``params`` and
        ``discord`` must be JSON-serialisable dicts with string keys (tuples come back as lists).
        """
        values = {name: _encode(name, getattr(job, name)) for name in _NEW_JOB_FIELDS}
        checked_quota = _check_quota(quota)
        return self._notify(
            await self._call(
                self._add_sync, values, member_limit, guild_cap, checked_quota, self._timestamp()
            )
        )

    async def transition(
        self,
        job_id: int,
        to: JobState,
        *,
        expect: JobState | Collection[JobState] | None = None,
        **fields: Any,
    ) -> Job:
        """Move the job to state ``to``, writing ``fields`` in the same transaction; return the new job.

        THE only place a state changes. Raises :class:`InvalidTransition` when ``old -> to`` is not in
        ``TRANSITIONS`` or when ``expect`` is given and the current state is not (one of) it;
        :class:`JobNotFound` for an unknown id; ``ValueError``/``TypeError`` for bad ``fields`` (see
        :meth:`update`). The update is a compare-and-set on the state that was checked.
        """
        to = JobState(to)
        expected = _expect_set(expect)
        values = _encode_fields(fields)
        return self._notify(
            await self._call(self._transition_sync, job_id, to, expected, values, self._timestamp())
        )

    async def update(self, job_id: int, **fields: Any) -> Job:
        """Write ``fields`` (any job field except ``id``, ``state`` and ``updated_at``) and return the job.

        Raises ``ValueError`` for ``id``/``state``/``updated_at`` or an unknown field name, ``TypeError``
        for a value of the wrong type, :class:`JobNotFound` for an unknown id. Terminal jobs may be
        updated too (e.g. Discord bookkeeping after delivery).
        """
        values = _encode_fields(fields)
        return await self._call(self._update_sync, job_id, values, self._timestamp())

    async def patch_discord(self, job_id: int, changes: Mapping[str, Any]) -> Job:
        """Merge ``changes`` into the job's ``discord`` dict (shallow) and return the job.

        Read-modify-write inside one transaction, so two coroutines patching different keys cannot
        lose each other's change (which ``update(discord=job.discord | {...})`` on a stale snapshot
        could). Raises :class:`JobNotFound` for an unknown id.
        """
        patch = dict(changes)
        _dumps(patch)  # fail here, on the caller's side, if it is not serialisable
        return await self._call(self._patch_discord_sync, job_id, patch, self._timestamp())

    # ------------------------------------------------------------------ reads

    async def get(self, job_id: int) -> Job | None:
        """The job with this id, or None."""
        return await self._call(self._get_sync, job_id)

    async def hold_owner(self, owner: str) -> bool:
        """Hold the name `owner` for this process's life: always true here (one process per file)."""
        return True

    async def ping(self) -> bool:
        """Whether the database answers (a readiness check)."""
        return await self._call(lambda: self._conn.execute("SELECT 1").fetchone() is not None)

    async def active(self) -> list[Job]:
        """Every non-terminal job, ordered by id (acceptance order: the FIFO order after a restart)."""
        return await self._call(self._query_sync, f"{_SELECT} WHERE {_OPEN} ORDER BY id", ())

    # ------------------------------------------------------------------ learned durations

    async def load_durations(self) -> list[DurationRow]:
        """Every stored duration row, ordered by key."""
        return await self._call(self._load_durations_sync)

    async def save_duration(self, row: DurationRow) -> None:
        """Insert or replace the row with ``row.key``, committed to disk.

        Raises ``TypeError``/``ValueError`` (nothing written) for a value SQLite would store wrongly:
        a non-string key, non-finite figures, a negative or non-integer count.
        """
        values = _encode_duration(row)
        await self._call(self._save_duration_sync, values)

    # ------------------------------------------------------------------ worker-thread side

    def _timestamp(self) -> float:
        # Read on the event-loop thread: the clock is not promised to be thread-safe.
        return _encode("created_at", self._now())

    def _transaction(self) -> AbstractContextManager[None]:
        return _immediate(self._conn)

    async def _call(self, fn: Callable[..., _T], /, *args: Any) -> _T:
        if self._closing:
            raise StoreClosed("job store is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    def _close_sync(self) -> None:
        try:
            busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:
                # Another connection is reading; the WAL stays and is checkpointed on next open.
                log.debug("job store: WAL checkpoint incomplete at close (database busy)")
        except sqlite3.Error as exc:
            log.warning("job store: WAL checkpoint failed at close: %s", exc)
        finally:
            self._conn.close()
        log.info("job store closed: %s", self._path)

    def _fetch(self, job_id: int) -> Job | None:
        row = self._conn.execute(f"{_SELECT} WHERE id = ?", (job_id,)).fetchone()
        return _row_to_job(row) if row is not None else None

    def _get_sync(self, job_id: int) -> Job | None:
        return self._fetch(job_id)

    def _query_sync(self, sql: str, args: tuple[Any, ...]) -> list[Job]:
        return [_row_to_job(row) for row in self._conn.execute(sql, args)]

    def _count_active_sync(self, guild_id: int, user_id: int) -> int:
        sql = f"SELECT COUNT(*) FROM jobs WHERE guild_id = ? AND user_id = ? AND {_OPEN}"
        return int(self._conn.execute(sql, (guild_id, user_id)).fetchone()[0])

    def _count_queued_sync(self, guild_id: int) -> int:
        # The redundant _OPEN term lets SQLite use the small partial index.
        sql = f"SELECT COUNT(*) FROM jobs WHERE guild_id = ? AND state = ? AND {_OPEN}"
        return int(self._conn.execute(sql, (guild_id, JobState.QUEUED.value)).fetchone()[0])

    def _count_quota_sync(self, guild_id: int, user_id: int, kind: str, since: float) -> int:
        sql = (
            "SELECT COUNT(*) FROM jobs WHERE guild_id = ? AND user_id = ? AND kind = ? AND created_at >= ?"
            f" AND {QUOTA_COUNTS}"
        )
        args = (guild_id, user_id, kind, since)
        return int(self._conn.execute(sql, args).fetchone()[0])

    def _add_sync(
        self,
        values: dict[str, Any],
        member_limit: int | None,
        guild_cap: int | None,
        quota: tuple[int, float] | None,
        now: float,
    ) -> Job:
        with _immediate(self._conn):
            # The write lock is held from here: no other writer can slip a job in between the counts
            # and the insert, so concurrent accepts cannot overshoot a limit, and two retries of one
            # job cannot both be stored (the unique index jobs_retry_of backs this up).
            retry_of = values["retry_of"]
            if retry_of is not None:
                existing = self._conn.execute(
                    "SELECT id FROM jobs WHERE retry_of = ?", (retry_of,)
                ).fetchone()
                if existing is not None:
                    raise AlreadyRetried(retry_of, int(existing[0]))
            if quota is not None:
                limit, since = quota
                used = self._count_quota_sync(values["guild_id"], values["user_id"], values["kind"], since)
                if used >= limit:
                    raise DailyQuotaReached(limit)
            if member_limit is not None:
                if self._count_active_sync(values["guild_id"], values["user_id"]) >= member_limit:
                    raise MemberLimitReached(member_limit)
            if guild_cap is not None:
                if self._count_queued_sync(values["guild_id"]) >= guild_cap:
                    raise GuildQueueFull(guild_cap)
            row = {**values, "state": JobState.QUEUED.value, "created_at": now, "updated_at": now}
            cur = self._conn.execute(
                f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                tuple(row.values()),
            )
            job_id = cur.lastrowid
            assert job_id is not None
            job = self._fetch(job_id)
        assert job is not None
        log.debug("job %d: added (%s, guild %d)", job.id, job.kind, job.guild_id)
        return job

    def _transition_sync(
        self,
        job_id: int,
        to: JobState,
        expected: frozenset[JobState] | None,
        values: dict[str, Any],
        now: float,
    ) -> Job:
        with _immediate(self._conn):
            row = self._conn.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            old = JobState(row[0])
            if expected is not None and old not in expected:
                raise InvalidTransition(old, to, job_id=job_id, expected=expected)
            check_transition(old, to, job_id=job_id)
            assignments = {**values, "state": to.value, "updated_at": now}
            # Column names come from the _FIELD_TYPES whitelist, never from the caller's strings.
            cur = self._conn.execute(
                f"UPDATE jobs SET {_set_clause(assignments)} WHERE id = ? AND state = ?",
                (*assignments.values(), job_id, old.value),
            )
            if cur.rowcount != 1:
                # Cannot happen while we hold the write lock; if that assumption ever breaks, fail loudly
                # rather than let two transitions both win.
                now_state = self._conn.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
                current = JobState(now_state[0]) if now_state else old
                raise InvalidTransition(current, to, job_id=job_id, expected=frozenset({old}))
            job = self._fetch(job_id)
        assert job is not None
        log.debug("job %d: %s -> %s", job_id, old, to)
        return job

    def _update_sync(self, job_id: int, values: dict[str, Any], now: float) -> Job:
        with _immediate(self._conn):
            assignments = {**values, "updated_at": now}
            cur = self._conn.execute(
                f"UPDATE jobs SET {_set_clause(assignments)} WHERE id = ?",
                (*assignments.values(), job_id),
            )
            if cur.rowcount == 0:
                raise JobNotFound(job_id)
            job = self._fetch(job_id)
        assert job is not None
        return job

    def _patch_discord_sync(self, job_id: int, patch: dict[str, Any], now: float) -> Job:
        with _immediate(self._conn):
            row = self._conn.execute("SELECT discord FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            merged = {**json.loads(row[0]), **patch}
            self._conn.execute(
                "UPDATE jobs SET discord = ?, updated_at = ? WHERE id = ?", (_dumps(merged), now, job_id)
            )
            job = self._fetch(job_id)
        assert job is not None
        return job

    def _load_durations_sync(self) -> list[DurationRow]:
        sql = "SELECT key, mean, spread, count, updated_at FROM durations ORDER BY key"
        return [
            DurationRow(row["key"], row["mean"], row["spread"], row["count"], row["updated_at"])
            for row in self._conn.execute(sql)
        ]

    def _save_duration_sync(self, values: tuple[str, float, float, int, float]) -> None:
        with _immediate(self._conn):
            # The key is the whole primary key: replacing the row is the upsert.
            self._conn.execute(
                "INSERT OR REPLACE INTO durations (key, mean, spread, count, updated_at) VALUES (?, ?, ?, ?, ?)",
                values,
            )


# ---------------------------------------------------------------------- helpers (worker thread)


def _connect(path: Path) -> sqlite3.Connection:
    _prepare_owner_only(path)
    # isolation_level=None: no implicit transactions; we issue BEGIN IMMEDIATE / COMMIT ourselves.
    # check_same_thread stays on: it asserts the one-thread rule.
    conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT, isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        mode = _journal_mode_wal(conn)
        if str(mode).lower() != "wal":
            log.warning("job store: WAL not available for %s (journal_mode=%s)", path, mode)
        # FULL: the WAL is fsynced at every commit, so an acknowledged job survives power loss too,
        # not just a process crash.
        conn.execute("PRAGMA synchronous=FULL")
        _migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _journal_mode_wal(conn: sqlite3.Connection) -> str:
    """Switch to WAL; returns the journal mode now in force.

    Another connection opening a new database at the same moment can make this pragma fail with
    "database is locked" at once (SQLite's busy handler does not cover the switch), so it is tried
    again for up to the busy timeout.
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


#: The database holds members' live interaction tokens: only the bot's own user may read it.
_FILE_MODE = 0o600
_DIR_MODE = 0o700
# SQLite's companions of the database file. SQLite creates them with the database file's own
# permission bits, so a 0600 database gets 0600 companions (tests/test_store.py checks it).
_COMPANIONS = ("-wal", "-shm", "-journal")


def _prepare_owner_only(path: Path) -> None:
    """Create the database's directory (0700) and file (0600); tighten existing ones that are looser.

    The file is created here, before SQLite opens it, because SQLite would create it with the
    process umask (usually 0644). A directory that already existed is the operator's (a Docker
    volume, say) and is left as it is.
    """
    if not path.parent.exists():
        # The mode applies to the last directory (the umask can only take bits away).
        path.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, _FILE_MODE)
    os.close(fd)
    for candidate in (path, *(path.with_name(path.name + suffix) for suffix in _COMPANIONS)):
        if candidate.exists():
            _tighten(candidate, _FILE_MODE)


def _tighten(path: Path, mode: int) -> None:
    """Remove permissions beyond `mode` (never adds any); a failure is only logged."""
    try:
        current = path.stat().st_mode & 0o777
        if current & ~mode:
            os.chmod(path, current & mode)
            log.info(
                "job store: %s was mode %o, now %o (it holds interaction tokens)",
                path,
                current,
                current & mode,
            )
    except FileNotFoundError:
        pass  # a companion (-journal) another connection just removed: nothing left to protect
    except OSError as exc:
        log.warning("job store: cannot restrict the permissions of %s: %s", path, exc.strerror)


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to :data:`SCHEMA_VERSION` (one transaction for all missing steps)."""
    if _user_version(conn) == SCHEMA_VERSION:
        return
    with _immediate(conn):
        # Re-read under the write lock: another process may have migrated meanwhile.
        version = _user_version(conn)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"database schema v{version} is newer than this Framecast supports (v{SCHEMA_VERSION})"
            )
        for step in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[step]:
                conn.execute(statement)
            log.info("job store: schema migrated to v%d", step + 1)
        # PRAGMA takes no parameters; SCHEMA_VERSION is our own int.
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")


def _user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolls back on any exception (including a failed COMMIT)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _set_clause(assignments: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} = ?" for name in assignments)


def _row_to_job(row: Any) -> Job:
    """A job from a row read by column name (a ``sqlite3.Row``, or an asyncpg ``Record``)."""
    return Job(
        id=row["id"],
        kind=JobKind(row["kind"]),
        state=JobState(row["state"]),
        guild_id=row["guild_id"],
        channel_id=row["channel_id"],
        user_id=row["user_id"],
        locale=row["locale"],
        params=json.loads(row["params"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        task_id=row["task_id"],
        started_at=row["started_at"],
        progress=row["progress"],
        result_url=row["result_url"],
        result_local=bool(row["result_local"]),
        error_code=row["error_code"],
        error_detail=row["error_detail"],
        retry_of=row["retry_of"],
        key_owner=row["key_owner"],
        discord=json.loads(row["discord"]),
    )


# ---------------------------------------------------------------------- helpers (caller side)


def _dumps(value: Mapping[str, Any]) -> str:
    """JSON text for a params/discord dict: compact, non-ASCII kept as is, NaN/inf refused."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (json.loads produces them from "\ud800"-style escapes in Discord payloads)
        # cannot be stored as UTF-8; escaping them keeps the round trip exact, as json.loads turns the
        # escapes back into the same code points.
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


def _encode(name: str, value: Any) -> Any:
    """Validate one field value and convert it to what SQLite stores."""
    kind, nullable = _FIELD_TYPES[name]
    if value is None:
        if nullable:
            return None
        raise TypeError(f"job field {name!r} cannot be None")
    if kind is JobKind:
        return JobKind(value).value
    if kind is bool:
        if not isinstance(value, bool):
            raise TypeError(f"job field {name!r} must be bool, not {type(value).__name__}")
        return int(value)
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"job field {name!r} must be int, not {type(value).__name__}")
        return int(value)  # plain int: IntEnum and friends are stored as their number
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"job field {name!r} must be a number, not {type(value).__name__}")
        number = float(value)
        if not math.isfinite(number):
            # SQLite would silently store NaN as NULL.
            raise ValueError(f"job field {name!r} must be finite")
        return number
    if kind is str:
        if not isinstance(value, str):
            raise TypeError(f"job field {name!r} must be str, not {type(value).__name__}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate: SQLite cannot store it. Refused here, on the caller's side, with a
            # clear error; text from outside goes through framecast.safetext.clean_text first.
            raise ValueError(f"job field {name!r} is not valid Unicode text (lone surrogate)") from None
        return str(value)  # plain str: a StrEnum is stored as its value
    # dict
    if not isinstance(value, Mapping):
        raise TypeError(f"job field {name!r} must be a dict, not {type(value).__name__}")
    return _dumps(value)


def _check_quota(quota: tuple[int, float] | None) -> tuple[int, float] | None:
    """Validate add()'s ``quota`` = ``(limit, since)`` on the caller's side."""
    if quota is None:
        return None
    limit, since = quota
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError("quota limit must be an int >= 0")
    return int(limit), _encode("created_at", since)


def _encode_duration(row: DurationRow) -> tuple[str, float, float, int, float]:
    """Validate a duration row and convert it to what SQLite stores (caller side, like _encode)."""
    if not isinstance(row.key, str):
        raise TypeError(f"duration key must be str, not {type(row.key).__name__}")
    try:
        row.key.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("duration key is not valid Unicode text (lone surrogate)") from None
    figures = []
    for name in ("mean", "spread", "updated_at"):
        value = getattr(row, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"duration {name} must be a number, not {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"duration {name} must be finite")  # SQLite would store NaN as NULL
        figures.append(float(value))
    if isinstance(row.count, bool) or not isinstance(row.count, int):
        raise TypeError(f"duration count must be int, not {type(row.count).__name__}")
    if row.count < 0:
        raise ValueError("duration count must not be negative")
    mean, spread, updated_at = figures
    return row.key, mean, spread, int(row.count), updated_at


def _encode_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    for name in fields:
        if name in ("id", "state"):
            raise ValueError(f"job field {name!r} cannot be updated (state changes only via transition())")
        if name == "updated_at":
            raise ValueError("job field 'updated_at' is maintained by the store")
        if name not in _FIELD_TYPES:
            raise ValueError(f"unknown job field {name!r}")
    return {name: _encode(name, value) for name, value in fields.items()}


def _expect_set(expect: JobState | Collection[JobState] | None) -> frozenset[JobState] | None:
    if expect is None:
        return None
    if isinstance(expect, str):  # JobState is a str: check before treating it as a collection
        return frozenset({JobState(expect)})
    return frozenset(JobState(e) for e in expect)
