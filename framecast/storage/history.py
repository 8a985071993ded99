"""One member's jobs in one server, a page at a time, newest first (for /history).

Keyset paging on the ``jobs_member`` index (guild_id, user_id, id): an OFFSET would make the database
walk every job before the page, and would shift when a job arrives between two clicks. Job ids only
grow, so "newest first" is "highest id first" on both databases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, bindparam, func, select

from framecast.storage.dialects import Postgres, Sqlite
from framecast.storage.schema import jobs
from framecast.storage.values import INT_MAX, JOB_COLUMNS, job_from_row
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
_NEWER = select(*JOB_COLUMNS).where(*_MEMBER, jobs.c.id > bindparam("id")).order_by(jobs.c.id.asc())
_OLDER = select(*JOB_COLUMNS).where(*_MEMBER, jobs.c.id < bindparam("id")).order_by(jobs.c.id.desc())


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


async def member_jobs(
    db: Sqlite | Postgres, guild_id: int, user_id: int, *, before: int | None, after: int | None, limit: int
) -> MemberJobs:
    """The page of `user_id`'s jobs in `guild_id` just older than job `before` (None: the newest),
    or, with `after`, just newer than job `after` (the newest page when fewer are left)."""
    if limit < 1:
        raise ValueError(f"limit must be positive, not {limit}")
    member: dict[str, Any] = {"guild_id": guild_id, "user_id": user_id}

    async def page(stmt: Select[Any], job_id: int) -> Sequence[Any]:
        return await db.rows(stmt.limit(limit), {**member, "id": job_id})

    rows: Sequence[Any] = ()
    if after is not None:
        # Fewer than a page is newer: the newest page is shown whole instead (a member never sees
        # a short first page because jobs were added since the page they clicked on).
        if len(newer_page := await page(_NEWER, after)) == limit:
            rows = newer_page[::-1]
    elif before is not None:
        rows = await page(_OLDER, before)
    if not rows:
        # The newest page (also for a cursor past the member's oldest job: an outdated message).
        rows = await page(_OLDER, INT_MAX)
    found = tuple(map(job_from_row, rows))
    first, last = (found[0].id, found[-1].id) if found else (0, 0)
    total, newer, older = (await db.rows(_COUNTS, {**member, "first": first, "last": last}))[0]
    return MemberJobs(found, has_older=older > 0, has_newer=newer > 0, total=int(total), newer=int(newer))
