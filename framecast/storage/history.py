"""One member's jobs in one server, a page at a time, newest first (for /history).

Keyset paging on the ``jobs_member`` index (guild_id, user_id, id): a page is the jobs just older
than one job id (or the newest), or just newer than one; an OFFSET would make the database walk
every job before the page, and would shift when a new job arrives between two clicks. Job ids only
grow, so "newest first" is "highest id first" on both databases.

:meth:`framecast.storage.Store.member_jobs` runs :func:`member_jobs` with the store's database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.sql.elements import ColumnElement

from framecast.storage import values
from framecast.storage.dialects import Postgres, Sqlite
from framecast.storage.schema import jobs
from framecast.values import Job

__all__ = ["MemberJobs", "member_jobs"]

_MEMBER = (jobs.c.guild_id == bindparam("guild_id"), jobs.c.user_id == bindparam("user_id"))
_COUNT = select(func.count()).select_from(jobs).where(*_MEMBER)
# Where a page sits, in one round trip: all the member's jobs, those newer than its first, those
# older than its last.
_COUNTS = select(
    _COUNT.scalar_subquery(),
    _COUNT.where(jobs.c.id > bindparam("first")).scalar_subquery(),
    _COUNT.where(jobs.c.id < bindparam("last")).scalar_subquery(),
)


@dataclass(frozen=True)
class MemberJobs:
    """A page of a member's jobs, newest first, and where it sits among all of them."""

    jobs: tuple[Job, ...]
    #: There are older jobs than the page's last.
    has_older: bool
    #: There are newer jobs than the page's first.
    has_newer: bool
    #: How many jobs the member has in the server.
    total: int
    #: How many of them are newer than the page's first job.
    newer: int


def _page(columns: Sequence[ColumnElement[Any]], *, newer: bool) -> Any:
    if newer:
        return select(*columns).where(*_MEMBER, jobs.c.id > bindparam("id")).order_by(jobs.c.id.asc())
    return select(*columns).where(*_MEMBER, jobs.c.id < bindparam("id")).order_by(jobs.c.id.desc())


async def member_jobs(
    db: Sqlite | Postgres,
    columns: Sequence[ColumnElement[Any]],
    decode: Callable[[Sequence[Any]], Job],
    guild_id: int,
    user_id: int,
    *,
    before: int | None,
    after: int | None,
    limit: int,
) -> MemberJobs:
    """The page of `user_id`'s jobs in `guild_id` just older than job `before` (None: the newest),
    or, with `after`, just newer than job `after` (the newest page when fewer are left).

    `columns` and `decode` are the store's: the job's columns and how a row becomes a :class:`Job`.
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, not {limit}")
    member = {"guild_id": guild_id, "user_id": user_id}
    rows: Sequence[Any] = ()
    if after is not None:
        newer_page = await db.rows(_page(columns, newer=True).limit(limit), {**member, "id": after})
        # Fewer than a page is newer: the newest page is shown whole instead (a member never sees
        # a short first page because jobs were added since the page they clicked on).
        if len(newer_page) == limit:
            rows = newer_page[::-1]
    elif before is not None:
        rows = await db.rows(_page(columns, newer=False).limit(limit), {**member, "id": before})
    if not rows:
        # The newest page (also for a cursor past the member's oldest job: an outdated message).
        rows = await db.rows(_page(columns, newer=False).limit(limit), {**member, "id": values.INT_MAX})
    found = tuple(decode(row) for row in rows)
    first, last = (found[0].id, found[-1].id) if found else (0, 0)
    total, newer, older = (await db.rows(_COUNTS, {**member, "first": first, "last": last}))[0]
    if not found:
        return MemberJobs((), has_older=False, has_newer=False, total=int(total), newer=0)
    return MemberJobs(found, has_older=older > 0, has_newer=newer > 0, total=int(total), newer=int(newer))
