"""What the web pages read and keep, on the store's database (:attr:`framecast.storage.Store.web`).

Who may see which job is decided by the gallery's caller (``framecast.app.gallery``): it passes the
channels whose results may show, so the database skips the rest, then decides each row itself."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, literal, or_, select
from sqlalchemy.sql.elements import ColumnElement, TextClause

from framecast.storage import values
from framecast.storage.dialects import Postgres, Sqlite
from framecast.storage.schema import DELIVERED, jobs, web_sessions
from framecast.storage.values import JOB_COLUMNS, job_from_row
from framecast.values import Job, JobKind, JobState

__all__ = ["MAX_USAGE_ROWS", "GalleryFilter", "UsageRow", "WebSessionRows", "WebStore"]

#: The most rows read for one server's usage (a bound on what one dashboard view costs).
MAX_USAGE_ROWS = 200_000
#: The LIKE escape character (the caller's text is matched literally).
_ESCAPE = "\\"

_USAGE = (
    select(jobs.c.kind, jobs.c.state, jobs.c.error_code, jobs.c.user_id, jobs.c.created_at, jobs.c.started_at)
    .where(jobs.c.guild_id == bindparam("guild_id"), jobs.c.created_at >= bindparam("since"))
    .limit(MAX_USAGE_ROWS)
)
_SESSION = select(web_sessions.c.user_id).where(
    web_sessions.c.token_hash == bindparam("token_hash"), web_sessions.c.expires_at > bindparam("now")
)
_END_SESSION = delete(web_sessions).where(web_sessions.c.token_hash == bindparam("token_hash"))
_PURGE = delete(web_sessions).where(web_sessions.c.expires_at <= bindparam("now"))


@dataclass(frozen=True)
class GalleryFilter:
    """Which delivered jobs of `guild_id` a batch may hold: from `channels`, or `own`'s from any
    channel; `member`, `kind`: exact; `contains`: substrings the stored parameters all contain, any
    case (coarsely: a character that is not ASCII stands for any one character)."""

    guild_id: int
    channels: frozenset[int]
    own: int | None = None
    member: int | None = None
    kind: JobKind | None = None
    contains: tuple[str, ...] = ()


@dataclass(frozen=True)
class UsageRow:
    """One job's part in the usage."""

    kind: JobKind
    state: JobState
    error_code: str | None
    user_id: int
    created_at: float
    started_at: float | None


class WebStore:
    """The web pages' queries (reached through :attr:`Store.web`)."""

    def __init__(self, db: Sqlite | Postgres, job: Callable[[int], Coroutine[Any, Any, Job | None]]) -> None:
        self._db = db
        #: The job with this id, or None (the store's :meth:`~framecast.storage.Store.get`).
        self.job = job
        self.sessions = WebSessionRows(db)

    async def gallery_jobs(self, where: GalleryFilter, *, before: int | None, limit: int) -> tuple[Job, ...]:
        """Up to `limit` delivered jobs `where` allows, older than job `before` (None: newest), newest
        first (keyset paging on the partial index ``jobs_delivered``)."""
        if limit < 1:
            raise ValueError(f"limit must be positive, not {limit}")
        return await self._newest_first(_gallery_terms(where), before, limit)

    async def user_jobs(self, user_id: int, *, before: int | None, limit: int) -> tuple[Job, ...]:
        """Up to `limit` of `user_id`'s jobs anywhere older than job `before` (None: newest), newest first."""
        return await self._newest_first([jobs.c.user_id == user_id], before, max(1, limit))

    async def _newest_first(
        self, terms: list[ColumnElement[bool] | TextClause], before: int | None, limit: int
    ) -> tuple[Job, ...]:
        # Keyset paging, on an index that ends in the id: `limit` jobs older than job `before`.
        stmt = select(*JOB_COLUMNS).where(*terms, jobs.c.id < (values.INT_MAX if before is None else before))
        return tuple(map(job_from_row, await self._db.rows(stmt.order_by(jobs.c.id.desc()).limit(limit))))

    async def usage(self, guild_id: int, *, since: float) -> list[UsageRow]:
        """Every job of `guild_id` created since `since` (epoch seconds), at most :data:`MAX_USAGE_ROWS`."""
        rows = await self._db.rows(_USAGE, {"guild_id": guild_id, "since": float(since)})
        # The other columns are read as they are: a SELECT hands back a stored double as a float.
        return [UsageRow(JobKind(kind), JobState(state), *rest) for kind, state, *rest in rows]


def _like(fragment: str) -> str:
    # The pattern matches `fragment` in any case, on both databases: ASCII letters are lowered (and
    # matched against lower(params)), and any other character matches any one character. SQLite's
    # lower() and LIKE fold ASCII only, so "ärger" searched as such never met "Ärger" stored; what
    # this lets through besides, the gallery's own match (GalleryQuery.matches) drops.
    pattern = "".join(
        (_ESCAPE + ch if ch in (_ESCAPE, "%", "_") else ch.lower()) if ch.isascii() else "_"
        for ch in fragment
    )
    return f"%{pattern}%"


def _gallery_terms(f: GalleryFilter) -> list[ColumnElement[bool] | TextClause]:
    visible: list[ColumnElement[bool]] = []
    if f.channels:
        visible.append(jobs.c.channel_id.in_(sorted(f.channels)))
    if f.own is not None:
        visible.append(jobs.c.user_id == f.own)
    terms: list[ColumnElement[bool] | TextClause] = [
        jobs.c.guild_id == f.guild_id,
        DELIVERED,
        or_(*visible) if visible else literal(False),
    ]
    if f.member is not None:
        terms.append(jobs.c.user_id == f.member)
    if f.kind is not None:
        terms.append(jobs.c.kind == f.kind.value)
    terms.extend(func.lower(jobs.c.params).like(_like(part), escape=_ESCAPE) for part in f.contains)
    return terms


class WebSessionRows:
    """The web sessions (Login with Discord), keyed by the SHA-256 of the browser's token."""

    def __init__(self, db: Sqlite | Postgres) -> None:
        self._db = db

    async def add(self, token_hash: str, user_id: int, *, created_at: float, expires_at: float) -> None:
        """Store a new session of `user_id` until `expires_at` (epoch seconds)."""
        row = {
            "token_hash": values.check("token_hash", token_hash, str),
            "user_id": values.discord_id(user_id),
            "created_at": float(created_at),
            "expires_at": float(expires_at),
        }
        await self._db.rows(insert(web_sessions).values(row))

    async def user_of(self, token_hash: str, *, now: float) -> int | None:
        """The user of the unexpired session keyed `token_hash`, or None."""
        found = await self._db.rows(_SESSION, {"token_hash": token_hash, "now": float(now)})
        return int(found[0][0]) if found else None

    async def remove(self, token_hash: str) -> None:
        """End the session keyed `token_hash` (none: nothing happens)."""
        await self._db.rows(_END_SESSION, {"token_hash": token_hash})

    async def purge(self, *, now: float) -> None:
        """Forget every session expired at `now`."""
        await self._db.rows(_PURGE, {"now": float(now)})
