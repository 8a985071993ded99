"""What a server's jobs were over a period: one row per job, the few columns usage is made of.

The dashboard's usage (``framecast.app.usage``) adds them up; this module only reads them, on the
``jobs_quota`` index's leading column (guild_id) and the creation time.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam, select

from framecast.storage.dialects import Postgres, Sqlite
from framecast.storage.schema import jobs
from framecast.values import JobKind, JobState

__all__ = ["UsageRow", "usage_rows"]

#: The most rows read for one server's usage (a bound on what one dashboard view costs).
MAX_ROWS = 200_000

_ROWS = (
    select(jobs.c.kind, jobs.c.state, jobs.c.error_code, jobs.c.user_id, jobs.c.created_at, jobs.c.started_at)
    .where(jobs.c.guild_id == bindparam("guild_id"), jobs.c.created_at >= bindparam("since"))
    .limit(MAX_ROWS)
)


@dataclass(frozen=True)
class UsageRow:
    """One job's part in the usage."""

    kind: JobKind
    state: JobState
    error_code: str | None
    user_id: int
    created_at: float
    started_at: float | None


async def usage_rows(db: Sqlite | Postgres, guild_id: int, *, since: float) -> list[UsageRow]:
    """Every job of `guild_id` created at or after `since` (epoch seconds), at most :data:`MAX_ROWS`."""
    rows = await db.rows(_ROWS, {"guild_id": guild_id, "since": float(since)})
    return [
        UsageRow(
            JobKind(r[0]), JobState(r[1]), r[2], int(r[3]), float(r[4]), None if r[5] is None else float(r[5])
        )
        for r in rows
    ]
