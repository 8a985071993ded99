"""PostgreSQL persistence of jobs: the same contract as :class:`framecast.store.JobStore`, for many processes.

Selected by ``DATABASE_URL=postgresql://...`` (see :func:`framecast.stores.open_store`). Several bot
processes (shards) share one database; everything that SQLite gets from its single write lock is done
here with PostgreSQL's own tools:

* :meth:`PgStore.add` takes ``pg_advisory_xact_lock(guild_id)`` before counting: every add in a guild,
  from any process, runs its check-then-insert alone, so no limit (member, queue, daily quota) can be
  overshot and two retries of one job cannot both be stored (the unique index ``jobs_retry_of`` backs
  this up across guilds).
* :meth:`PgStore.transition` and :meth:`PgStore.patch_discord` lock the job's row (``FOR UPDATE``)
  and then compare-and-set, so a cancel and a completion racing in two processes cannot both win.
* Job leases (:meth:`PgStore.claim`, :meth:`PgStore.claimable`, :meth:`PgStore.release`) say which
  process runs a job; a lease that is not renewed expires and another process takes the job over.

Timestamps come from the injected clock (``clock.time()``), never from the server's ``now()``, so tests
with a scaled or manual clock see the same values as with SQLite. ``params``/``discord``/settings are
JSON *text*, not ``jsonb``: ``jsonb`` refuses ``\\u0000`` and reorders keys, text round-trips exactly.
PostgreSQL ``text`` cannot hold NUL characters: a string field containing one is refused with
``ValueError`` (SQLite would store it; text from outside goes through ``framecast.safetext`` first).

The DSN carries a password: it is never logged nor put into an error; :attr:`PgStore.target` is the
redacted form (``postgresql://user@host:port/db``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import asyncpg

from framecast.config import Secret
from framecast.guilds.settings import GuildSettings, KeyStatus, Setting
from framecast.guildstore import SettingsChange, StoredKey, _id, _settings_from
from framecast.jobs import (
    ACTIVE,
    AlreadyRetried,
    DailyQuotaReached,
    GuildQueueFull,
    InvalidTransition,
    Job,
    JobKind,
    JobNotFound,
    JobState,
    MemberLimitReached,
    NewJob,
    check_transition,
)
from framecast.planner.predict import DurationRow

# The job row's columns and field types are the SQLite store's: one list, one contract.
from framecast.store import (
    _COLUMNS,
    _FIELD_TYPES,
    _NEW_JOB_FIELDS,
    QUOTA_COUNTS,
    StoreClosed,
    StoreError,
    _dumps,
    _expect_set,
    _row_to_job,
)

if TYPE_CHECKING:
    from framecast.clock import Clock

__all__ = ["PG_SCHEMA_VERSION", "PgStore", "redact_dsn"]

log = logging.getLogger(__name__)

#: Current schema version of the PostgreSQL store (its own numbering, in table ``schema_version``).
PG_SCHEMA_VERSION = 1

# Advisory lock held while migrating. Negative: the guild locks of add() use guild ids, which are
# positive Discord snowflakes, so the two can never collide.
_MIGRATION_LOCK = -0x6672616D65636173  # "framecas"

_ACTIVE_SQL = ", ".join(f"'{s.value}'" for s in sorted(ACTIVE))
_STATES_SQL = ", ".join(f"'{s.value}'" for s in JobState)
_KINDS_SQL = ", ".join(f"'{k.value}'" for k in JobKind)
_KEY_STATUS_SQL = ", ".join(f"'{s.value}'" for s in KeyStatus)
_OPEN = f"state IN ({_ACTIVE_SQL})"

# _MIGRATIONS[n] upgrades version n to n + 1; never edit a released step, append a new one. Version 1
# is SQLite's schema v4 plus the lease columns, in PostgreSQL types: BIGINT for Discord ids (64-bit
# snowflakes), DOUBLE PRECISION for epoch seconds (REAL would be float4: a second's resolution lost).
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        # IDENTITY: ids come from a sequence and are never reused, so an id kept in a Discord button
        # or in retry_of never points at a different job.
        f"""
        CREATE TABLE jobs (
            id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            kind         TEXT NOT NULL CHECK (kind IN ({_KINDS_SQL})),
            state        TEXT NOT NULL CHECK (state IN ({_STATES_SQL})),
            guild_id     BIGINT NOT NULL,
            channel_id   BIGINT NOT NULL,
            user_id      BIGINT NOT NULL,
            locale       TEXT NOT NULL,
            params       TEXT NOT NULL,
            created_at   DOUBLE PRECISION NOT NULL,
            updated_at   DOUBLE PRECISION NOT NULL,
            task_id      TEXT,
            started_at   DOUBLE PRECISION,
            progress     DOUBLE PRECISION,
            result_url   TEXT,
            result_local BOOLEAN NOT NULL DEFAULT FALSE,
            error_code   TEXT,
            error_detail TEXT,
            retry_of     BIGINT,
            key_owner    BIGINT,
            discord      TEXT NOT NULL DEFAULT '{{}}',
            lease_owner  TEXT,
            lease_until  DOUBLE PRECISION
        )
        """,
        "CREATE INDEX jobs_member ON jobs (guild_id, user_id, id)",
        # Partial indexes over unfinished jobs only (queries repeat the exact _OPEN term).
        f"CREATE INDEX jobs_open ON jobs (guild_id, state, user_id) WHERE {_OPEN}",
        f"CREATE INDEX jobs_open_fifo ON jobs (id) WHERE {_OPEN}",
        "CREATE UNIQUE INDEX jobs_retry_of ON jobs (retry_of) WHERE retry_of IS NOT NULL",
        # The daily quota count of add().
        "CREATE INDEX jobs_quota ON jobs (guild_id, user_id, kind, created_at)",
        """
        CREATE TABLE durations (
            key        TEXT PRIMARY KEY,
            mean       DOUBLE PRECISION NOT NULL,
            spread     DOUBLE PRECISION NOT NULL,
            count      BIGINT NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL
        )
        """,
        """
        CREATE TABLE guild_settings (
            guild_id   BIGINT PRIMARY KEY,
            data       TEXT NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            updated_by BIGINT NOT NULL
        )
        """,
        f"""
        CREATE TABLE guild_keys (
            guild_id BIGINT PRIMARY KEY,
            token    BYTEA NOT NULL,
            last4    TEXT NOT NULL,
            status   TEXT NOT NULL CHECK (status IN ({_KEY_STATUS_SQL})),
            set_by   BIGINT NOT NULL,
            set_at   DOUBLE PRECISION NOT NULL
        )
        """,
        """
        CREATE TABLE settings_log (
            id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            guild_id BIGINT NOT NULL,
            user_id  BIGINT NOT NULL,
            setting  TEXT NOT NULL,
            at       DOUBLE PRECISION NOT NULL
        )
        """,
        "CREATE INDEX settings_log_guild ON settings_log (guild_id, id)",
    ),
)

_RETURNING = ", ".join(_COLUMNS)
_SELECT = f"SELECT {_RETURNING} FROM jobs"
_SELECT_KEY = "SELECT guild_id, token, last4, status, set_by, set_at FROM guild_keys"

# BIGINT's range: a larger int would fail inside the transaction with a less helpful error.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1

# Pool size: add() holds one connection per waiting guild lock; a few are plenty for one process.
_POOL_MAX = 10
_CONNECT_TIMEOUT = 10.0


class PgStore:
    """Durable job storage in PostgreSQL. Create with :meth:`open`, release with :meth:`close`.

    Same methods, arguments, results and exceptions as :class:`framecast.store.JobStore`, plus job
    leases. Every write is committed before the coroutine returns; returned :class:`Job` objects are
    fresh snapshots read back in the writing transaction.
    """

    def __init__(self, pool: Any, now: Callable[[], float], target: str) -> None:
        # Private: use PgStore.open().
        self._pool = pool
        self._now = now
        self._target = target
        self._closing = False
        self._close_task: asyncio.Future[None] | None = None
        self._listeners: list[Callable[[Job], None]] = []
        # The connection holding this process's owner lock (hold_owner), released at close.
        self._owner_conn: asyncpg.pool.PoolConnectionProxy[asyncpg.Record] | None = None

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    async def open(
        cls, dsn: Secret | str, *, clock: Clock | None = None, max_connections: int = _POOL_MAX
    ) -> PgStore:
        """Connect to ``dsn`` (a ``postgresql://`` URL), create or migrate the schema, return the store.

        ``clock.time()`` stamps every timestamp; without a clock, ``time.time()``. Raises
        :class:`StoreError` (the message names the redacted target, never the password) when the
        server cannot be reached or its schema is newer than this code knows.
        """
        text = dsn.reveal() if isinstance(dsn, Secret) else dsn
        target = redact_dsn(text)
        try:
            pool = await asyncpg.create_pool(
                text, min_size=1, max_size=max_connections, timeout=_CONNECT_TIMEOUT
            )
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
            # `from None`: the driver's own exception may quote the DSN.
            raise StoreError(
                f"cannot open the PostgreSQL job store at {target}: {_safe(exc, text)}"
            ) from None
        try:
            async with pool.acquire() as conn:
                await _migrate(conn)
        except BaseException:
            await pool.close()
            raise
        now = clock.time if clock is not None else time.time
        log.info("job store open: %s (PostgreSQL schema v%d)", target, PG_SCHEMA_VERSION)
        return cls(pool, now, target)

    @property
    def target(self) -> str:
        """The database, for logs: ``postgresql://user@host:port/db`` (no password)."""
        return self._target

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closing

    async def close(self) -> None:
        """Wait for the operations in flight, then close every connection. Idempotent."""
        if self._close_task is None:
            self._closing = True
            self._close_task = asyncio.ensure_future(self._close())
        # Shielded: a cancelled caller must not leave the pool half-closed.
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        if self._owner_conn is not None:
            conn, self._owner_conn = self._owner_conn, None
            # Released to the pool, whose reset drops the session's advisory locks.
            await self._pool.release(conn)
        await self._pool.close()
        log.info("job store closed: %s", self._target)

    def subscribe(self, listener: Callable[[Job], None]) -> None:
        """Call ``listener(job)`` after every committed add and state change (on the event loop).

        Only changes made through THIS store object are seen (not another process's): listeners keep
        this process's in-memory views in step.
        """
        self._listeners.append(listener)

    def _notify(self, job: Job) -> Job:
        for listener in self._listeners:
            try:
                listener(job)
            except Exception:
                log.exception("job store listener failed")
        return job

    async def __aenter__(self) -> PgStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        if self._closing:
            raise StoreClosed("job store is closed")
        async with self._pool.acquire() as conn:
            yield conn

    def _timestamp(self) -> float:
        return float(_encode("created_at", self._now()))

    # ------------------------------------------------------------------ writes

    async def add(
        self,
        job: NewJob,
        *,
        member_limit: int | None,
        guild_cap: int | None,
        quota: tuple[int, float] | None = None,
    ) -> Job:
        """Store a new QUEUED job and return it, committed.

        In one transaction holding the guild's advisory lock, in this order: :class:`AlreadyRetried`
        if ``job.retry_of`` already has a retry; :class:`DailyQuotaReached` if ``quota = (limit, since)``
        and the member has ``limit`` jobs of this kind in this guild created at or after ``since`` that
        did not fail; :class:`MemberLimitReached` if the member has ``member_limit`` active jobs in the
        guild; :class:`GuildQueueFull` if the guild has ``guild_cap`` QUEUED jobs. Nothing is stored
        when it raises.
        """
        values = {name: _encode(name, getattr(job, name)) for name in _NEW_JOB_FIELDS}
        quota = _check_quota(quota)
        now = self._timestamp()
        guild_id, user_id, retry_of = values["guild_id"], values["user_id"], values["retry_of"]
        async with self._connection() as conn:
            try:
                async with conn.transaction():
                    # Serialises every add of this guild, in every process, until commit.
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", guild_id)
                    if retry_of is not None:
                        existing = await conn.fetchval("SELECT id FROM jobs WHERE retry_of = $1", retry_of)
                        if existing is not None:
                            raise AlreadyRetried(retry_of, int(existing))
                    if quota is not None:
                        limit, since = quota
                        count = await conn.fetchval(
                            "SELECT COUNT(*) FROM jobs WHERE guild_id = $1 AND user_id = $2 AND kind = $3"
                            f" AND created_at >= $4 AND {QUOTA_COUNTS}",
                            guild_id,
                            user_id,
                            values["kind"],
                            since,
                        )
                        if count >= limit:
                            raise DailyQuotaReached(limit)
                    if member_limit is not None:
                        count = await conn.fetchval(
                            f"SELECT COUNT(*) FROM jobs WHERE guild_id = $1 AND user_id = $2 AND {_OPEN}",
                            guild_id,
                            user_id,
                        )
                        if count >= member_limit:
                            raise MemberLimitReached(member_limit)
                    if guild_cap is not None:
                        count = await conn.fetchval(
                            f"SELECT COUNT(*) FROM jobs WHERE guild_id = $1 AND state = $2 AND {_OPEN}",
                            guild_id,
                            JobState.QUEUED.value,
                        )
                        if count >= guild_cap:
                            raise GuildQueueFull(guild_cap)
                    row = {**values, "state": JobState.QUEUED.value, "created_at": now, "updated_at": now}
                    placeholders = ", ".join(f"${i}" for i in range(1, len(row) + 1))
                    record = await conn.fetchrow(
                        f"INSERT INTO jobs ({', '.join(row)}) VALUES ({placeholders}) RETURNING {_RETURNING}",
                        *row.values(),
                    )
            except asyncpg.UniqueViolationError as exc:
                # A retry of a job of ANOTHER guild (not under our lock) committed first.
                if getattr(exc, "constraint_name", None) != "jobs_retry_of":
                    raise
                existing = await conn.fetchval("SELECT id FROM jobs WHERE retry_of = $1", retry_of)
                raise AlreadyRetried(retry_of, int(existing)) from None
        created = _row_to_job(record)
        log.debug("job %d: added (%s, guild %d)", created.id, created.kind, created.guild_id)
        return self._notify(created)

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
        :class:`JobNotFound` for an unknown id; ``ValueError``/``TypeError`` for bad ``fields``.
        """
        to = JobState(to)
        expected = _expect_set(expect)
        values = _encode_fields(fields)
        now = self._timestamp()
        async with self._connection() as conn, conn.transaction():
            # The row lock makes the check and the write one step against every other process.
            state = await conn.fetchval("SELECT state FROM jobs WHERE id = $1 FOR UPDATE", job_id)
            if state is None:
                raise JobNotFound(job_id)
            old = JobState(state)
            if expected is not None and old not in expected:
                raise InvalidTransition(old, to, job_id=job_id, expected=expected)
            check_transition(old, to, job_id=job_id)
            assignments = {**values, "state": to.value, "updated_at": now}
            record = await conn.fetchrow(
                f"UPDATE jobs SET {_set_clause(assignments)} WHERE id = ${len(assignments) + 1}"
                f" RETURNING {_RETURNING}",
                *assignments.values(),
                job_id,
            )
        log.debug("job %d: %s -> %s", job_id, old, to)
        return self._notify(_row_to_job(record))

    async def update(self, job_id: int, **fields: Any) -> Job:
        """Write ``fields`` (any job field except ``id``, ``state`` and ``updated_at``) and return the job.

        Raises ``ValueError``/``TypeError`` for a bad field or value, :class:`JobNotFound` for an
        unknown id. Terminal jobs may be updated too.
        """
        values = _encode_fields(fields)
        assignments = {**values, "updated_at": self._timestamp()}
        async with self._connection() as conn:
            record = await conn.fetchrow(
                f"UPDATE jobs SET {_set_clause(assignments)} WHERE id = ${len(assignments) + 1}"
                f" RETURNING {_RETURNING}",
                *assignments.values(),
                job_id,
            )
        if record is None:
            raise JobNotFound(job_id)
        return _row_to_job(record)

    async def patch_discord(self, job_id: int, changes: Mapping[str, Any]) -> Job:
        """Merge ``changes`` into the job's ``discord`` dict (shallow) and return the job.

        Read-modify-write under the row lock, so two patches of different keys (from any process)
        never lose each other's change. Raises :class:`JobNotFound` for an unknown id.
        """
        patch = dict(changes)
        _dumps(patch)  # fail here, before any I/O, if it is not serialisable
        now = self._timestamp()
        async with self._connection() as conn, conn.transaction():
            current = await conn.fetchval("SELECT discord FROM jobs WHERE id = $1 FOR UPDATE", job_id)
            if current is None:
                raise JobNotFound(job_id)
            merged = {**json.loads(current), **patch}
            record = await conn.fetchrow(
                f"UPDATE jobs SET discord = $1, updated_at = $2 WHERE id = $3 RETURNING {_RETURNING}",
                _dumps(merged),
                now,
                job_id,
            )
        return _row_to_job(record)

    # ------------------------------------------------------------------ reads

    async def hold_owner(self, owner: str) -> bool:
        """Hold the name `owner` for this process's life; False when another live process holds it.

        A PostgreSQL session lock on a dedicated connection: it goes with the process (a crash
        drops the connection), so a restarted process gets its name, and its jobs, back at once,
        while a second process started with the same shards by mistake is refused.
        """
        if self._owner_conn is not None:
            return True
        conn = await self._pool.acquire()
        try:
            held = bool(
                await conn.fetchval("SELECT pg_try_advisory_lock(hashtext('framecast-owner:' || $1))", owner)
            )
        except BaseException:
            await self._pool.release(conn)
            raise
        if not held:
            await self._pool.release(conn)
            return False
        self._owner_conn = conn
        return True

    async def ping(self) -> bool:
        """Whether the database answers (a readiness check)."""
        async with self._connection() as conn:
            return bool(await conn.fetchval("SELECT 1") == 1)

    async def get(self, job_id: int) -> Job | None:
        """The job with this id, or None."""
        async with self._connection() as conn:
            record = await conn.fetchrow(f"{_SELECT} WHERE id = $1", job_id)
        return _row_to_job(record) if record is not None else None

    async def active(self) -> list[Job]:
        """Every non-terminal job, ordered by id (acceptance order)."""
        async with self._connection() as conn:
            records = await conn.fetch(f"{_SELECT} WHERE {_OPEN} ORDER BY id")
        return [_row_to_job(r) for r in records]

    # ------------------------------------------------------------------ learned durations

    async def load_durations(self) -> list[DurationRow]:
        """Every stored duration row, ordered by key."""
        async with self._connection() as conn:
            records = await conn.fetch(
                'SELECT key, mean, spread, count, updated_at FROM durations ORDER BY key COLLATE "C"'
            )
        return [DurationRow(r["key"], r["mean"], r["spread"], r["count"], r["updated_at"]) for r in records]

    async def save_duration(self, row: DurationRow) -> None:
        """Insert or replace the row with ``row.key``. ``TypeError``/``ValueError`` for bad values."""
        values = _encode_duration(row)
        async with self._connection() as conn:
            await conn.execute(
                "INSERT INTO durations (key, mean, spread, count, updated_at) VALUES ($1, $2, $3, $4, $5)"
                " ON CONFLICT (key) DO UPDATE SET mean = EXCLUDED.mean, spread = EXCLUDED.spread,"
                " count = EXCLUDED.count, updated_at = EXCLUDED.updated_at",
                *values,
            )

    # ------------------------------------------------------------------ guild settings and keys

    async def guild_settings(self, guild_id: int) -> GuildSettings:
        """The server's own settings (``GuildSettings()`` if it never changed any)."""
        guild_id = _id(guild_id)
        async with self._connection() as conn:
            data = await conn.fetchval("SELECT data FROM guild_settings WHERE guild_id = $1", guild_id)
        return _settings_from(data, guild_id) if data is not None else GuildSettings()

    async def all_guild_settings(self) -> dict[int, GuildSettings]:
        """Every server's own settings, by guild id (servers without any are left out)."""
        async with self._connection() as conn:
            records = await conn.fetch("SELECT guild_id, data FROM guild_settings ORDER BY guild_id")
        return {r["guild_id"]: _settings_from(r["data"], r["guild_id"]) for r in records}

    async def save_guild_settings(
        self, guild_id: int, settings: GuildSettings, *, by: int, changed: Sequence[Setting]
    ) -> None:
        """Store ``settings`` and one audit row per ``changed`` setting, in one transaction."""
        guild_id, by = _id(guild_id), _id(by)
        data = _dumps(settings.to_json())
        changes = [Setting(s) for s in changed]
        now = self._timestamp()
        async with self._connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO guild_settings (guild_id, data, updated_at, updated_by) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (guild_id) DO UPDATE SET data = EXCLUDED.data,"
                " updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by",
                guild_id,
                data,
                now,
                by,
            )
            await _log_changes(conn, guild_id, by, changes, now)

    async def settings_log(self, guild_id: int, limit: int = 20) -> list[SettingsChange]:
        """The server's latest ``limit`` settings changes, newest first (who, what, when: no values)."""
        guild_id = _id(guild_id)
        async with self._connection() as conn:
            records = await conn.fetch(
                "SELECT guild_id, user_id, setting, at FROM settings_log WHERE guild_id = $1"
                " ORDER BY id DESC LIMIT $2",
                guild_id,
                max(0, int(limit)),
            )
        out = []
        for r in records:
            try:
                setting = Setting(r["setting"])
            except ValueError:
                continue  # written by a newer Framecast: not ours to show
            out.append(SettingsChange(r["guild_id"], r["user_id"], setting, r["at"]))
        return out

    async def guild_key(self, guild_id: int) -> StoredKey | None:
        """The server's stored key, or None."""
        guild_id = _id(guild_id)
        async with self._connection() as conn:
            record = await conn.fetchrow(f"{_SELECT_KEY} WHERE guild_id = $1", guild_id)
        return _record_to_key(record) if record is not None else None

    async def all_guild_keys(self) -> list[StoredKey]:
        """Every stored server key, by guild id."""
        async with self._connection() as conn:
            records = await conn.fetch(f"{_SELECT_KEY} ORDER BY guild_id")
        return [_record_to_key(r) for r in records]

    async def set_guild_key(self, guild_id: int, token: bytes, last4: str, *, by: int) -> None:
        """Store (or replace) the server's key token, status OK, and log an API_KEY change."""
        if not isinstance(token, bytes) or not token:
            raise TypeError("a guild key token must be non-empty bytes (the Fernet ciphertext)")
        if not isinstance(last4, str) or len(last4) > 4:
            raise ValueError("last4 must be at most four characters")
        guild_id, by, last4 = _id(guild_id), _id(by), _check_text("last4", last4)
        now = self._timestamp()
        async with self._connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO guild_keys (guild_id, token, last4, status, set_by, set_at)"
                " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (guild_id) DO UPDATE SET token = EXCLUDED.token,"
                " last4 = EXCLUDED.last4, status = EXCLUDED.status, set_by = EXCLUDED.set_by,"
                " set_at = EXCLUDED.set_at",
                guild_id,
                token,
                last4,
                KeyStatus.OK.value,
                by,
                now,
            )
            await _log_changes(conn, guild_id, by, [Setting.API_KEY], now)

    async def delete_guild_key(self, guild_id: int, *, by: int) -> bool:
        """Forget the server's key (logged as an API_KEY change); False if it had none."""
        guild_id, by = _id(guild_id), _id(by)
        now = self._timestamp()
        async with self._connection() as conn, conn.transaction():
            gone = await conn.fetchval(
                "DELETE FROM guild_keys WHERE guild_id = $1 RETURNING guild_id", guild_id
            )
            if gone is None:
                return False
            await _log_changes(conn, guild_id, by, [Setting.API_KEY], now)
        return True

    async def mark_guild_key(self, guild_id: int, status: KeyStatus) -> None:
        """Record the service's verdict on the server's key (e.g. REJECTED after a 401)."""
        guild_id, value = _id(guild_id), KeyStatus(status).value
        async with self._connection() as conn:
            await conn.execute("UPDATE guild_keys SET status = $1 WHERE guild_id = $2", value, guild_id)

    # ------------------------------------------------------------------ job leases

    async def claim(self, job_id: int, owner: str, until: float) -> bool:
        """Take or renew the lease of an active job for ``owner`` until ``until`` (clock epoch seconds).

        True if ``owner`` now holds it: it was free, expired (``lease_until <= clock.time()``) or
        already ``owner``'s. False if another owner's lease is still running or the job is finished.
        Raises :class:`JobNotFound` for an unknown id. Does not change ``updated_at``.
        """
        owner = _check_owner(owner)
        until = float(_encode("created_at", until))
        now = self._timestamp()
        async with self._connection() as conn:
            # One statement: the row lock of the UPDATE makes take-if-free atomic across processes.
            taken = await conn.fetchval(
                "UPDATE jobs SET lease_owner = $2, lease_until = $3"
                f" WHERE id = $1 AND {_OPEN}"
                " AND (lease_owner IS NULL OR lease_owner = $2 OR lease_until IS NULL OR lease_until <= $4)"
                " RETURNING id",
                job_id,
                owner,
                until,
                now,
            )
            if taken is None and await conn.fetchval("SELECT id FROM jobs WHERE id = $1", job_id) is None:
                raise JobNotFound(job_id)
        return taken is not None

    async def claimable(
        self, owner: str, now: float, guilds: Callable[[int], bool] | None = None
    ) -> list[Job]:
        """Active jobs, in id order, whose lease is free or expired at ``now`` (not ``owner``'s live ones).

        ``guilds``, when given, keeps only the jobs of the guilds it accepts (e.g. this process's shards).
        Nothing is claimed: call :meth:`claim` for each job taken.
        """
        owner = _check_owner(owner)
        now = float(_encode("created_at", now))
        async with self._connection() as conn:
            records = await conn.fetch(
                f"{_SELECT} WHERE {_OPEN} AND (lease_owner IS NULL OR lease_until IS NULL OR lease_until <= $1)"
                " ORDER BY id",
                now,
            )
        jobs = [_row_to_job(r) for r in records]
        return [job for job in jobs if guilds is None or guilds(job.guild_id)]

    async def release(self, job_id: int, owner: str) -> bool:
        """Give up ``owner``'s lease of the job; False if ``owner`` did not hold it."""
        owner = _check_owner(owner)
        async with self._connection() as conn:
            released = await conn.fetchval(
                "UPDATE jobs SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2"
                " RETURNING id",
                job_id,
                owner,
            )
        return released is not None


# ---------------------------------------------------------------------- helpers


def redact_dsn(dsn: str) -> str:
    """``postgresql://user@host:port/db`` without the password or query (which may carry one)."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
        user = f"{parts.username}@" if parts.username else ""
    except ValueError:
        return "postgresql://(unparsable URL)"
    return f"{parts.scheme}://{user}{host}{port}{parts.path}"


def _safe(exc: BaseException, dsn: str) -> str:
    """The exception's text with the DSN and its password blanked out (drivers may quote either)."""
    text = f"{type(exc).__name__}: {exc}"
    try:
        password = urlsplit(dsn).password
    except ValueError:
        password = None
    for secret in (dsn, password):
        if secret:
            text = text.replace(secret, "***")
    return text


async def _migrate(conn: Any) -> None:
    """Bring the schema to :data:`PG_SCHEMA_VERSION` (one transaction, under an advisory lock)."""
    async with conn.transaction():
        # Two processes starting together: the second waits here and then finds the work done.
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        version = await conn.fetchval("SELECT MAX(version) FROM schema_version")
        version = int(version) if version is not None else 0
        if version > PG_SCHEMA_VERSION:
            raise StoreError(
                f"database schema v{version} is newer than this Framecast supports (v{PG_SCHEMA_VERSION})"
            )
        for step in range(version, PG_SCHEMA_VERSION):
            for statement in _MIGRATIONS[step]:
                await conn.execute(statement)
            log.info("job store: PostgreSQL schema migrated to v%d", step + 1)
        if version != PG_SCHEMA_VERSION:
            await conn.execute("DELETE FROM schema_version")
            await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", PG_SCHEMA_VERSION)


async def _log_changes(conn: Any, guild_id: int, by: int, changed: Sequence[Setting], now: float) -> None:
    # Who, what and when only: values (an API key above all) never enter the log.
    await conn.executemany(
        "INSERT INTO settings_log (guild_id, user_id, setting, at) VALUES ($1, $2, $3, $4)",
        [(guild_id, by, setting.value, now) for setting in changed],
    )


def _set_clause(assignments: Mapping[str, Any]) -> str:
    # Column names come from the _FIELD_TYPES whitelist, never from a caller's string.
    return ", ".join(f"{name} = ${i}" for i, name in enumerate(assignments, start=1))


def _record_to_key(record: Any) -> StoredKey:
    return StoredKey(
        guild_id=record["guild_id"],
        token=bytes(record["token"]),
        last4=record["last4"],
        status=KeyStatus(record["status"]),
        set_by=record["set_by"],
        set_at=record["set_at"],
    )


def _check_text(what: str, value: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character (PostgreSQL text cannot hold it)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode text (lone surrogate)") from None
    return str(value)  # plain str: a StrEnum is stored as its value


def _check_owner(owner: str) -> str:
    if not isinstance(owner, str) or not owner:
        raise TypeError("lease owner must be a non-empty str")
    return _check_text("lease owner", owner)


def _encode(name: str, value: Any) -> Any:
    """Validate one job field value and convert it to what asyncpg sends (mirrors store._encode)."""
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
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"job field {name!r} must be int, not {type(value).__name__}")
        if not _INT_MIN <= value <= _INT_MAX:
            raise ValueError(f"job field {name!r} is out of the 64-bit range")
        return int(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"job field {name!r} must be a number, not {type(value).__name__}")
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"job field {name!r} must be finite")  # as SQLite: no NaN/inf stored
        return number
    if kind is str:
        if not isinstance(value, str):
            raise TypeError(f"job field {name!r} must be str, not {type(value).__name__}")
        return _check_text(f"job field {name!r}", value)
    if not isinstance(value, Mapping):
        raise TypeError(f"job field {name!r} must be a dict, not {type(value).__name__}")
    return _dumps(value)  # JSON escapes NUL as \u0000: the text itself never holds one


def _check_quota(quota: tuple[int, float] | None) -> tuple[int, float] | None:
    """Validate add()'s ``quota`` = ``(limit, since)`` before any I/O (as store.py does)."""
    if quota is None:
        return None
    limit, since = quota
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError("quota limit must be an int >= 0")
    return int(limit), float(_encode("created_at", since))


def _encode_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    for name in fields:
        if name in ("id", "state"):
            raise ValueError(f"job field {name!r} cannot be updated (state changes only via transition())")
        if name == "updated_at":
            raise ValueError("job field 'updated_at' is maintained by the store")
        if name not in _FIELD_TYPES:
            raise ValueError(f"unknown job field {name!r}")
    return {name: _encode(name, value) for name, value in fields.items()}


def _encode_duration(row: DurationRow) -> tuple[str, float, float, int, float]:
    """Validate a duration row (as store.py does) and convert it for asyncpg."""
    if not isinstance(row.key, str):
        raise TypeError(f"duration key must be str, not {type(row.key).__name__}")
    key = _check_text("duration key", row.key)
    figures = []
    for name in ("mean", "spread", "updated_at"):
        value = getattr(row, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"duration {name} must be a number, not {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"duration {name} must be finite")
        figures.append(float(value))
    if isinstance(row.count, bool) or not isinstance(row.count, int):
        raise TypeError(f"duration count must be int, not {type(row.count).__name__}")
    if not 0 <= row.count <= _INT_MAX:
        raise ValueError("duration count must not be negative")
    mean, spread, updated_at = figures
    return key, mean, spread, int(row.count), updated_at
