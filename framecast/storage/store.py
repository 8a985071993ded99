"""The job store: one implementation for SQLite and PostgreSQL, on SQLAlchemy Core (async).

Timestamps come from the injected clock, never from the database. A cancelled call may or may not
have written.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from sqlalchemy import BigInteger, Executable, Update, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from framecast.config import Secret
from framecast.guilds.settings import GuildSettings, KeyStatus, Setting
from framecast.storage import migrate, values
from framecast.storage.dialects import Postgres, Sqlite, StoreError
from framecast.storage.faults import StoreTimeouts, unusable_file
from framecast.storage.schema import (
    OPEN,
    QUOTA_COUNTS,
    durations,
    guild_keys,
    guild_settings,
    jobs,
    settings_log,
    state_in,
)
from framecast.storage.styles import GuildStyles, log_changes
from framecast.storage.values import JOB_COLUMNS, MemberJobs, SettingsChange, StoredKey, job_from_row
from framecast.storage.web import WebStore
from framecast.values import (
    TRANSITIONS,
    AlreadyRetried,
    DailyQuotaReached,
    GuildQueueFull,
    InvalidTransition,
    Job,
    JobNotFound,
    JobState,
    MemberLimitReached,
    NewJob,
    check_transition,
)
from framecast.values.durations import DurationRow

if TYPE_CHECKING:
    from framecast.clock import Clock

__all__ = ["SettingsChange", "Store", "StoredKey"]

log = logging.getLogger(__name__)


# Statements built once (SQLAlchemy caches their compiled form); values are bound per call.
_GET = select(*JOB_COLUMNS).where(jobs.c.id == bindparam("id"))
_LOCKED = _GET.with_for_update()
_ACTIVE = select(*JOB_COLUMNS).where(OPEN).order_by(jobs.c.id)
# "IS NOT NULL" repeats the partial index's own term, so SQLite uses it even for a NULL parameter.
_RETRY = select(jobs.c.id).where(jobs.c.retry_of == bindparam("retry_of"), jobs.c.retry_of.is_not(None))
_COUNT = select(func.count()).select_from(jobs)
_G, _U = jobs.c.guild_id == bindparam("guild_id"), jobs.c.user_id == bindparam("user_id")
_QUOTA = _COUNT.where(
    _G, _U, jobs.c.kind == bindparam("kind"), jobs.c.created_at >= bindparam("since"), QUOTA_COUNTS
)
_MEMBER = _COUNT.where(_G, _U, OPEN)
# /history's pages: keyset paging on jobs_member (an OFFSET would walk every job before the page, and
# shift when a job arrives between two clicks); ids only grow, so newest first is highest id first.
_NEWER = select(*JOB_COLUMNS).where(_G, _U, jobs.c.id > bindparam("id")).order_by(jobs.c.id.asc())
_OLDER = select(*JOB_COLUMNS).where(_G, _U, jobs.c.id < bindparam("id")).order_by(jobs.c.id.desc())
# Where a page sits, in one round trip: all the member's jobs, those newer than its first, older than its last.
_ALL_OF_MEMBER = _COUNT.where(_G, _U)
_PAGE_COUNTS = select(
    _ALL_OF_MEMBER.scalar_subquery(),
    _ALL_OF_MEMBER.where(jobs.c.id > bindparam("first")).scalar_subquery(),
    _ALL_OF_MEMBER.where(jobs.c.id < bindparam("last")).scalar_subquery(),
)
_QUEUED = _COUNT.where(_G, jobs.c.state == JobState.QUEUED.value, OPEN)  # OPEN: the small partial index
# add()'s four checks in one statement (one round trip): the existing retry, then the three counts.
_CHECKS = select(
    _RETRY.limit(1).scalar_subquery(), *(q.scalar_subquery() for q in (_QUOTA, _MEMBER, _QUEUED))
)
# add() in ONE statement, inserted only if every check passes (atomic: SQLite locks at its start).
_NEW = [c for c in jobs.c if c.name in (*values.NEW_JOB_FIELDS, "state", "created_at", "updated_at")]
_ADD = (
    insert(jobs)
    .from_select(
        [c.name for c in _NEW],
        select(*(bindparam(c.name, type_=c.type) for c in _NEW)).where(
            ~_RETRY.exists(),
            _QUOTA.scalar_subquery() < bindparam("quota_limit", type_=BigInteger),
            _MEMBER.scalar_subquery() < bindparam("member_limit", type_=BigInteger),
            _QUEUED.scalar_subquery() < bindparam("guild_cap", type_=BigInteger),
        ),
    )
    .returning(*JOB_COLUMNS)
)
#: For each target state, the states a job may move to it from (framecast.jobs.TRANSITIONS).
_SOURCES = {
    to: tuple(sorted(old for old, targets in TRANSITIONS.items() if to in targets)) for to in JobState
}
# UPDATEs whose SET clause comes from the parameters' keys (column names), built once: building a
# statement per call cost more than the database's own work. "job_id": "id" would name the column.
_BY_ID = jobs.c.id == bindparam("job_id")
_UPDATE = update(jobs).where(_BY_ID).returning(*JOB_COLUMNS)


@functools.cache
def _compare_and_set(sources: tuple[JobState, ...]) -> Update:
    """UPDATE of one job if its state is one of ``sources``."""
    return update(jobs).where(_BY_ID, state_in(sources)).returning(*JOB_COLUMNS)


_FREE = or_(
    jobs.c.lease_owner.is_(None), jobs.c.lease_until.is_(None), jobs.c.lease_until <= bindparam("now")
)
_CLAIMABLE = select(*JOB_COLUMNS).where(OPEN, _FREE).order_by(jobs.c.id)
_CLAIM = (
    update(jobs)
    .where(_BY_ID, OPEN, or_(_FREE, jobs.c.lease_owner == bindparam("owner")))
    .values(lease_owner=bindparam("owner"), lease_until=bindparam("until"))
    .returning(jobs.c.id)
)
_KEYS = select(guild_keys).order_by(guild_keys.c.guild_id)
_SETTINGS = select(guild_settings.c.guild_id, guild_settings.c.data).order_by(guild_settings.c.guild_id)
_LOG = select(settings_log.c.guild_id, settings_log.c.user_id, settings_log.c.setting, settings_log.c.at)


#: Where a store lives: a ``postgresql://`` URL (possibly a Secret), else a SQLite file path.
Where = Path | str | os.PathLike[str] | Secret


class Store:
    """Durable job storage on SQLite or PostgreSQL, made by :meth:`open`. Every write is committed
    before its coroutine returns; a :class:`Job` returned is read back in the writing transaction."""

    def __init__(self, db: Sqlite | Postgres, now: Callable[[], float]) -> None:
        # Private: use Store.open().
        self._db = db
        self._now = now
        self._listeners: list[Callable[[Job], None]] = []
        self._close_task: asyncio.Future[None] | None = None
        #: The servers' named prompt styles.
        self.styles = GuildStyles(db, self._timestamp)
        #: What the web pages read and keep (gallery pages, usage, sessions).
        self.web = WebStore(db, self.get)

    @classmethod
    async def open(
        cls, where: Where, *, clock: Clock | None = None, timeouts: StoreTimeouts | None = None
    ) -> Self:
        """Open the store at ``where`` (:data:`Where`), migrated; calls past `timeouts` raise
        ``StoreUnavailable``, `clock` stamps timestamps. ``StoreError`` (one line, never the password)
        when the database cannot be reached, was written by a newer Framecast, or is too old to upgrade."""
        url, timeouts = (where.reveal() if isinstance(where, Secret) else where), timeouts or StoreTimeouts()
        pg = isinstance(url, str) and url.startswith(("postgresql:", "postgres:"))
        db: Sqlite | Postgres = Postgres(str(url), timeouts) if pg else Sqlite(Path(url), timeouts)
        try:
            await db.start()
            await db.migrate(migrate.upgrade)
        except BaseException as exc:
            await db.close()
            if isinstance(db, Sqlite) and isinstance(exc, OSError | DBAPIError):
                # A directory, a file that is not SQLite, no permission: one line, not a traceback.
                raise StoreError(unusable_file(db.path, exc)) from None
            raise
        log.info("job store open: %s", db.target)
        return cls(db, clock.time if clock is not None else time.time)

    async def close(self) -> None:
        """Finish the operations in flight, then release the database (SQLite: WAL checkpointed). Idempotent."""
        if self._close_task is None:
            self._db.closed = True  # refuse new operations at once
            self._close_task = asyncio.ensure_future(self._db.close())
        # Shielded: a cancelled caller must not leave the database half-closed.
        await asyncio.shield(self._close_task)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def subscribe(self, listener: Callable[[Job], None]) -> None:
        """Call ``listener(job)`` after every committed add and state change made through this object
        (in-memory views keep in step); it must be quick, and one that raises is logged."""
        self._listeners.append(listener)

    def _notify(self, job: Job) -> Job:
        for listener in self._listeners:
            try:
                listener(job)
            except Exception:
                log.exception("job store listener failed")
        return job

    def _timestamp(self) -> float:
        return float(values.check("clock time", self._now(), float))

    async def add(
        self,
        job: NewJob,
        *,
        member_limit: int | None,
        guild_cap: int | None,
        quota: tuple[int, float] | None = None,
    ) -> Job:
        """Store a new QUEUED job and return it, committed. Checked atomically with the insert, for
        every process, in this order (nothing is stored when one raises): :class:`AlreadyRetried`;
        :class:`DailyQuotaReached` at ``quota = (limit, since)``'s limit of the member's jobs of this
        kind here since ``since`` that count (:data:`~.schema.QUOTA_COUNTS`); :class:`MemberLimitReached`
        at ``member_limit`` active jobs; :class:`GuildQueueFull` at ``guild_cap`` QUEUED jobs."""
        row = {name: values.encode(name, getattr(job, name)) for name in values.NEW_JOB_FIELDS}
        unlimited = values.INT_MAX  # "no limit": a count is always below it
        limit, since = unlimited, math.inf
        if quota is not None:
            limit = values.check("quota limit", quota[0], int)
            since = values.check("quota start", quota[1], float)
            if limit < 0:
                raise ValueError("quota limit must be an int >= 0")
        now = self._timestamp()
        row.update(state=JobState.QUEUED.value, created_at=now, updated_at=now)
        args = {**row, "since": since, "quota_limit": limit}
        args.update(member_limit=unlimited if member_limit is None else min(member_limit, unlimited))
        args.update(guild_cap=unlimited if guild_cap is None else min(guild_cap, unlimited))
        retry_of = row["retry_of"]
        while True:
            try:
                async with self._db.locked(row["guild_id"], one_statement=True) as conn:
                    if (inserted := (await conn.execute(_ADD, args)).first()) is not None:
                        created = job_from_row(inserted)
                        break
                    # Refused: say why (in the same transaction on PostgreSQL; on SQLite the next
                    # statement, so if nothing refuses any more the insert is simply tried again).
                    existing, used, active, queued = (await conn.execute(_CHECKS, args)).one()
            except IntegrityError:
                # A retry of the same job from another guild (not under our lock) committed first.
                found = await self._db.rows(_RETRY, {"retry_of": retry_of}) if retry_of is not None else []
                if not found:
                    raise
                existing = found[0][0]
            if existing is not None:
                raise AlreadyRetried(retry_of, int(existing)) from None
            if used >= limit:
                raise DailyQuotaReached(limit)
            if member_limit is not None and active >= member_limit:
                raise MemberLimitReached(member_limit)
            if guild_cap is not None and queued >= guild_cap:
                raise GuildQueueFull(guild_cap)
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
        """Move the job to state ``to`` with ``fields`` in one transaction (THE only place a state
        changes); the new job. :class:`InvalidTransition` when ``old -> to`` is not in ``TRANSITIONS``
        or the state is not ``expect``('s); :class:`JobNotFound`; ``ValueError``/``TypeError``."""
        to = JobState(to)
        if isinstance(expect, str):  # a JobState is a str: one state, not a collection of them
            expect = (expect,)
        expected = None if expect is None else frozenset(map(JobState, expect))
        assignments = {**values.encode_fields(fields), "state": to.value, "updated_at": self._timestamp()}
        assignments["job_id"] = job_id
        # The common case in one statement (one round trip): compare-and-set from every state that may
        # move to `to` (and is expected). Atomic on its own: the UPDATE takes the write/row lock.
        sources = tuple(state for state in _SOURCES[to] if expected is None or state in expected)
        found = await self._db.rows(_compare_and_set(sources), assignments) if sources else ()
        if found:
            changed = found[0]
        else:
            # Refused: why, under the lock; written after all if the job reached a valid state meanwhile.
            async with self._db.write() as conn:
                if (current := (await conn.execute(_LOCKED, {"id": job_id})).first()) is None:
                    raise JobNotFound(job_id)
                old = JobState(current.state)
                if expected is not None and old not in expected:
                    raise InvalidTransition(old, to, job_id=job_id, expected=expected)
                check_transition(old, to, job_id=job_id)
                changed = (await conn.execute(_compare_and_set((old,)), assignments)).one()
        log.debug("job %d: -> %s", job_id, to)
        return self._notify(job_from_row(changed))

    async def update(self, job_id: int, **fields: Any) -> Job:
        """Write ``fields`` (not ``id``, ``state``, ``updated_at``), terminal jobs too; the job after."""
        assignments = {**values.encode_fields(fields), "updated_at": self._timestamp()}
        if not (changed := await self._db.rows(_UPDATE, {**assignments, "job_id": job_id})):
            raise JobNotFound(job_id)
        return job_from_row(changed[0])

    async def patch_discord(self, job_id: int, changes: Mapping[str, Any]) -> Job:
        """Merge ``changes`` into the job's ``discord`` dict (shallow), under the row's lock; the job."""
        return (await self.patch_discord_once(job_id, changes, unless=None))[0]

    async def patch_discord_once(
        self, job_id: int, changes: Mapping[str, Any], *, unless: str | None
    ) -> tuple[Job, bool]:
        """:meth:`patch_discord` while the ``discord`` dict's ``unless`` key is unset: of writers racing
        from any processes, exactly one lands. The job, and whether this wrote."""
        patch = dict(changes)
        values.dumps(patch)  # fail here, before any I/O, if it is not serialisable
        now = self._timestamp()
        async with self._db.write() as conn:
            if (current := (await conn.execute(_LOCKED, {"id": job_id})).first()) is None:
                raise JobNotFound(job_id)
            job = job_from_row(current)
            if unless is not None and job.discord.get(unless) is not None:
                return job, False
            merged = values.dumps({**job.discord, **patch})
            changed = (
                await conn.execute(_UPDATE, {"discord": merged, "updated_at": now, "job_id": job_id})
            ).one()
        return job_from_row(changed), True

    async def get(self, job_id: int) -> Job | None:
        """The job with this id, or None (also for an id no column holds)."""
        if not values.fits(job_id):
            return None
        found = await self._db.rows(_GET, {"id": job_id})
        return job_from_row(found[0]) if found else None

    async def active(self) -> list[Job]:
        """Every non-terminal job, ordered by id (acceptance order: the FIFO order after a restart)."""
        return [job_from_row(r) for r in await self._db.rows(_ACTIVE)]

    async def member_jobs(
        self,
        guild_id: int,
        user_id: int,
        *,
        before: int | None = None,
        after: int | None = None,
        limit: int = 10,
    ) -> MemberJobs:
        """The page of `user_id`'s jobs in `guild_id` just older than job `before` (None: the newest),
        or, with `after`, just newer than job `after` (the newest page when fewer are left)."""
        if limit < 1:
            raise ValueError(f"limit must be positive, not {limit}")
        if not values.fits(user_id):
            return MemberJobs((), has_older=False, has_newer=False, total=0, newer=0)  # no such member
        # A cursor beyond every id (a forged one) is the newest page, as one past the newest job is.
        before, after = (
            None if c is None else max(-values.INT_MAX, min(c, values.INT_MAX)) for c in (before, after)
        )
        member = {"guild_id": guild_id, "user_id": user_id}
        rows: Sequence[Any] = ()
        if after is not None:
            # Fewer than a page is newer: the newest page is shown whole instead (a member never sees
            # a short first page because jobs were added since the page they clicked on).
            if len(page := await self._db.rows(_NEWER.limit(limit), {**member, "id": after})) == limit:
                rows = page[::-1]
        elif before is not None:
            rows = await self._db.rows(_OLDER.limit(limit), {**member, "id": before})
        if not rows:  # the newest page (also for a cursor past the member's oldest job)
            rows = await self._db.rows(_OLDER.limit(limit), {**member, "id": values.INT_MAX})
        found = tuple(map(job_from_row, rows))
        first, last = (found[0].id, found[-1].id) if found else (0, 0)
        [(total, newer, older)] = await self._db.rows(_PAGE_COUNTS, {**member, "first": first, "last": last})
        return MemberJobs(found, has_older=older > 0, has_newer=newer > 0, total=int(total), newer=int(newer))

    async def ping(self) -> bool:
        """Whether the database answers (a readiness check)."""
        return (await self._db.rows(select(1)))[0][0] == 1

    async def hold_owner(self, owner: str) -> bool:
        """Hold the lease owner name ``owner`` for this process's life; False while a live process has it
        (PostgreSQL: a session advisory lock, gone with a crashed process's connection; SQLite: True)."""
        return await self._db.hold_owner(values.check_owner(owner))

    async def load_durations(self) -> list[DurationRow]:
        """Every stored duration row, in code point order of their keys (the same on both databases)."""
        return sorted((DurationRow(*r) for r in await self._db.rows(select(durations))), key=lambda r: r.key)

    async def save_duration(self, row: DurationRow) -> None:
        """Insert or replace the row with ``row.key``. ``TypeError``/``ValueError`` for bad values."""
        data = {
            c.name: values.check(f"duration {c.name}", getattr(row, c.name), c.type.python_type)
            for c in durations.c
        }
        if data["count"] < 0:
            raise ValueError("duration count must not be negative")
        await self._db.rows(self._db.upsert(durations, data))

    async def all_guild_settings(self) -> dict[int, GuildSettings]:
        """Every server's own settings, by guild id (servers without any are left out)."""
        return {gid: _settings_from(data, gid) for gid, data in await self._db.rows(_SETTINGS)}

    async def save_guild_settings(
        self, guild_id: int, settings: GuildSettings, *, by: int, changed: Sequence[Setting]
    ) -> None:
        """Store ``settings`` and one audit row per ``changed`` setting, in one transaction."""
        gid, who, now = values.discord_id(guild_id), values.discord_id(by), self._timestamp()
        data = {"guild_id": gid, "data": values.dumps(settings.to_json()), "updated_at": now}
        stmt = self._db.upsert(guild_settings, {**data, "updated_by": who})
        await self._write_logged(stmt, gid, who, [Setting(s).value for s in changed], now)

    async def settings_log(self, guild_id: int, limit: int = 20) -> list[SettingsChange]:
        """The server's latest ``limit`` settings changes, newest first (who, what, when: no values)."""
        stmt = _LOG.where(settings_log.c.guild_id == values.discord_id(guild_id))
        rows = await self._db.rows(stmt.order_by(settings_log.c.id.desc()).limit(max(0, int(limit))))
        known = {s.value for s in Setting}  # a setting of a newer Framecast is not ours to show
        return [SettingsChange(g, u, Setting(s), float(at)) for g, u, s, at in rows if s in known]

    async def guild_key(self, guild_id: int) -> StoredKey | None:
        """The server's stored key, or None."""
        found = await self._db.rows(_KEYS.where(guild_keys.c.guild_id == values.discord_id(guild_id)))
        return _key(found[0]) if found else None

    async def all_guild_keys(self) -> list[StoredKey]:
        """Every stored server key, by guild id."""
        return [_key(r) for r in await self._db.rows(_KEYS)]

    async def set_guild_key(self, guild_id: int, token: bytes, last4: str, *, by: int) -> None:
        """Store (or replace) the server's key token, status OK, and log an API_KEY change."""
        values.check_token(token)
        if len(values.check("last4", last4, str)) > 4:
            raise ValueError("last4 must be at most four characters")
        gid, who, now = values.discord_id(guild_id), values.discord_id(by), self._timestamp()
        row = {"guild_id": gid, "token": token, "last4": last4}
        row.update(status=KeyStatus.OK.value, set_by=who, set_at=now)
        await self._write_logged(self._db.upsert(guild_keys, row), gid, who, [Setting.API_KEY.value], now)

    async def delete_guild_key(self, guild_id: int, *, by: int) -> bool:
        """Forget the server's key (logged as an API_KEY change); False if it had none."""
        gid, who, now = values.discord_id(guild_id), values.discord_id(by), self._timestamp()
        stmt = delete(guild_keys).where(guild_keys.c.guild_id == gid).returning(guild_keys.c.guild_id)
        return await self._write_logged(stmt, gid, who, [Setting.API_KEY.value], now)

    async def _write_logged(
        self, stmt: Executable, gid: int, by: int, changed: list[str], now: float
    ) -> bool:
        # The change and its audit rows in one transaction; False (nothing logged) if RETURNING found no row.
        async with self._db.write() as conn:
            result = await conn.execute(stmt)
            if result.returns_rows and result.first() is None:
                return False
            await log_changes(conn, gid, by, changed, now)
        return True

    async def replace_guild_key_token(self, guild_id: int, old: bytes, new: bytes) -> bool:
        """Swap the key's ciphertext for `new` if it is still `old` (a compare-and-set, so a key an
        admin set meanwhile is kept); False if it was not. Not a settings change: nothing is logged."""
        values.check_token(new)
        stmt = (
            update(guild_keys)
            .where(guild_keys.c.guild_id == values.discord_id(guild_id), guild_keys.c.token == bytes(old))
            .values(token=new)
            .returning(guild_keys.c.guild_id)
        )
        return bool(await self._db.rows(stmt))

    async def mark_guild_key(self, guild_id: int, status: KeyStatus, *, last4: str) -> bool:
        """Record the service's verdict on the server's key ending in `last4`; whether this changed it."""
        key, value = guild_keys.c, KeyStatus(status).value
        mine = (key.guild_id == values.discord_id(guild_id), key.last4 == last4, key.status != value)
        stmt = update(guild_keys).where(*mine).values(status=value).returning(key.guild_id)
        return bool(await self._db.rows(stmt))

    async def claim(self, job_id: int, owner: str, until: float) -> bool:
        """Take or renew an active job's lease for ``owner`` until ``until`` (epoch seconds): whether
        ``owner`` holds it now (it was free, expired or its own). ``updated_at`` and listeners untouched."""
        owner, until = values.check_owner(owner), values.check("lease time", until, float)
        args = {"job_id": job_id, "owner": owner, "until": until, "now": self._timestamp()}
        # One UPDATE under the write/row lock: take-if-free is atomic across processes.
        return bool(await self._db.rows(_CLAIM, args))

    async def claimable(self, now: float) -> list[Job]:
        """Active jobs, in id order, whose lease is free or expired at ``now`` (none is claimed)."""
        found = await self._db.rows(_CLAIMABLE, {"now": values.check("lease time", now, float)})
        return [job_from_row(r) for r in found]


def _key(row: Any) -> StoredKey:
    gid, token, last4, status, set_by, set_at = row
    return StoredKey(gid, bytes(token), str(last4), KeyStatus(status), int(set_by), float(set_at))


def _settings_from(data: str, guild_id: int) -> GuildSettings:
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        log.warning("guild %d: stored settings are not readable; using the operator's defaults", guild_id)
        return GuildSettings()
    return GuildSettings.from_json(parsed)
