"""A server's delivered jobs, newest first, a batch at a time (the web gallery's one query).

Keyset paging on the partial index ``jobs_delivered`` (guild_id, id) WHERE state = 'delivered': a
batch is the delivered jobs just older than one job id; an OFFSET would walk every job before the
page. Who may see which job is not decided here: the caller passes the channels whose results may
show (and the viewer, whose own results show from anywhere) so the database skips the rest, then
decides each row itself (``framecast.app.gallery``). Text filters are substrings of the job's
parameters as stored (JSON), compared after ``lower()``: a coarse cut the caller confirms.

:meth:`framecast.storage.Store.gallery_jobs` runs :func:`gallery_jobs` with the store's database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, literal, or_, select, text
from sqlalchemy.sql.elements import ColumnElement, TextClause

from framecast.storage.dialects import Postgres, Sqlite
from framecast.storage.schema import DELIVERED_SQL, jobs
from framecast.values import Job, JobKind

__all__ = ["GalleryFilter", "gallery_jobs"]

#: Above every job id (64-bit on both databases): "older than this" is every job.
_NO_JOB_ABOVE = 2**63 - 1
#: The LIKE escape character (the caller's text is matched literally).
_ESCAPE = "\\"


@dataclass(frozen=True)
class GalleryFilter:
    """Which delivered jobs of `guild_id` a batch may hold.

    `channels`: the channels whose jobs may show; `own`: a user whose jobs show from any channel.
    `member`, `kind`: exact. `contains`: substrings the job's stored parameters must all contain,
    ignoring case (lower-cased by the database).
    """

    guild_id: int
    channels: frozenset[int]
    own: int | None = None
    member: int | None = None
    kind: JobKind | None = None
    contains: tuple[str, ...] = ()


def _like(fragment: str) -> str:
    escaped = fragment.replace(_ESCAPE, _ESCAPE * 2).replace("%", _ESCAPE + "%").replace("_", _ESCAPE + "_")
    return f"%{escaped.lower()}%"


def _where(f: GalleryFilter, before: int) -> list[ColumnElement[bool] | TextClause]:
    visible: list[ColumnElement[bool]] = []
    if f.channels:
        visible.append(jobs.c.channel_id.in_(sorted(f.channels)))
    if f.own is not None:
        visible.append(jobs.c.user_id == f.own)
    terms: list[ColumnElement[bool] | TextClause] = [
        jobs.c.guild_id == f.guild_id,
        text(DELIVERED_SQL),  # literal: the partial index is used only when its WHERE is repeated
        jobs.c.id < before,
        or_(*visible) if visible else literal(False),
    ]
    if f.member is not None:
        terms.append(jobs.c.user_id == f.member)
    if f.kind is not None:
        terms.append(jobs.c.kind == f.kind.value)
    terms.extend(func.lower(jobs.c.params).like(_like(part), escape=_ESCAPE) for part in f.contains)
    return terms


async def gallery_jobs(
    db: Sqlite | Postgres,
    columns: Sequence[ColumnElement[Any]],
    decode: Callable[[Sequence[Any]], Job],
    where: GalleryFilter,
    *,
    before: int | None,
    limit: int,
) -> tuple[Job, ...]:
    """Up to `limit` delivered jobs `where` allows, just older than job `before` (None: the newest),
    newest first. `columns` and `decode` are the store's."""
    if limit < 1:
        raise ValueError(f"limit must be positive, not {limit}")
    cursor = _NO_JOB_ABOVE if before is None else before
    stmt = select(*columns).where(and_(*_where(where, cursor))).order_by(jobs.c.id.desc()).limit(limit)
    return tuple(decode(row) for row in await db.rows(stmt))
