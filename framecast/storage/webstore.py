"""What the web pages read and keep, on the store's database (:attr:`framecast.storage.Store.web`):
the gallery's batches (:mod:`.gallery`), a server's usage rows (:mod:`.usage`) and the web
sessions (:mod:`.sessions`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.sql.elements import ColumnElement

from framecast.storage import gallery, usage
from framecast.storage.dialects import Postgres, Sqlite
from framecast.storage.gallery import GalleryFilter
from framecast.storage.schema import jobs
from framecast.storage.sessions import WebSessionRows
from framecast.storage.usage import UsageRow
from framecast.values import Job

__all__ = ["WebStore"]


class WebStore:
    """The web pages' queries (build through :attr:`Store.web`)."""

    def __init__(
        self,
        db: Sqlite | Postgres,
        columns: Sequence[ColumnElement[Any]],
        decode: Callable[[Sequence[Any]], Job],
    ) -> None:
        self._db = db
        self._columns = columns
        self._decode = decode
        #: The web sessions (Login with Discord).
        self.sessions = WebSessionRows(db)

    def __repr__(self) -> str:
        return f"<WebStore {self._db.name}>"

    async def gallery_jobs(self, where: GalleryFilter, *, before: int | None, limit: int) -> tuple[Job, ...]:
        """A batch of a server's delivered jobs, newest first (see :func:`gallery.gallery_jobs`)."""
        return await gallery.gallery_jobs(
            self._db, self._columns, self._decode, where, before=before, limit=limit
        )

    async def job(self, job_id: int) -> Job | None:
        """The job with this id, or None."""
        if not 0 < job_id < 2**63:
            return None
        found = await self._db.rows(select(*self._columns).where(jobs.c.id == job_id))
        return self._decode(found[0]) if found else None

    async def user_jobs(self, user_id: int, *, before: int | None, limit: int) -> tuple[Job, ...]:
        """Up to `limit` of `user_id`'s jobs anywhere (every server, their own queue) older than job
        `before` (None: the newest), newest first, on the ``jobs_user`` index."""
        stmt = select(*self._columns).where(jobs.c.user_id == user_id)
        if before is not None:
            stmt = stmt.where(jobs.c.id < before)
        rows = await self._db.rows(stmt.order_by(jobs.c.id.desc()).limit(max(1, limit)))
        return tuple(self._decode(row) for row in rows)

    async def usage(self, guild_id: int, *, since: float) -> list[UsageRow]:
        """A server's jobs created since `since` (see :func:`usage.usage_rows`)."""
        return await usage.usage_rows(self._db, guild_id, since=since)
