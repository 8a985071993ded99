"""Job leases for the SQLite store: which process runs a job (the same contract as PgStore's).

A lease is ``(lease_owner, lease_until)`` on the job's row. A process claims the active jobs it runs
and renews the claim while it works; when it dies, the lease runs out and another process's
:meth:`SqliteLeases.claimable` offers the job again. SQLite is one machine's file, so this matters only
when an operator runs several processes on one file, but the runner can use one code path for both
stores.

:class:`SqliteLeases` is a mixin for :class:`framecast.store.JobStore`: it uses the store's worker
thread (``_call``), connection (``_conn``), clock (``_timestamp``) and row reader (``_query_sync``).
The two columns come from :data:`LEASE_MIGRATION`, one more step of the store's schema migrations.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from framecast.jobs import ACTIVE, Job, JobNotFound

__all__ = ["LEASE_MIGRATION", "SqliteLeases"]

_T = TypeVar("_T")

#: Statements that add the lease columns (part of a schema step of framecast.store._MIGRATIONS).
LEASE_MIGRATION: tuple[str, ...] = (
    "ALTER TABLE jobs ADD COLUMN lease_owner TEXT",
    "ALTER TABLE jobs ADD COLUMN lease_until REAL",
)

# The exact term of store.py's partial indexes over unfinished jobs (repeated so SQLite uses them).
_OPEN = "state IN ({})".format(", ".join(f"'{s.value}'" for s in sorted(ACTIVE)))
_FREE = "(lease_owner IS NULL OR lease_until IS NULL OR lease_until <= ?)"


class SqliteLeases:
    """Lease methods of the SQLite job store (mixed into :class:`framecast.store.JobStore`)."""

    if TYPE_CHECKING:
        # Provided by JobStore.
        _conn: sqlite3.Connection

        def _timestamp(self) -> float: ...

        async def _call(self, fn: Callable[..., _T], /, *args: Any) -> _T: ...

        def _query_sync(self, sql: str, args: tuple[Any, ...]) -> list[Job]: ...

    async def claim(self, job_id: int, owner: str, until: float) -> bool:
        """Take or renew the lease of an active job for ``owner`` until ``until`` (clock epoch seconds).

        True if ``owner`` now holds it: it was free, expired (``lease_until <= clock.time()``) or
        already ``owner``'s. False if another owner's lease is still running or the job is finished.
        Raises :class:`JobNotFound` for an unknown id. Does not change ``updated_at``.
        """
        return await self._call(self._claim_sync, job_id, _owner(owner), _finite(until), self._timestamp())

    async def claimable(
        self, owner: str, now: float, guilds: Callable[[int], bool] | None = None
    ) -> list[Job]:
        """Active jobs, in id order, whose lease is free or expired at ``now`` (not ``owner``'s live ones).

        ``guilds``, when given, keeps only the jobs of the guilds it accepts (e.g. this process's shards).
        Nothing is claimed: call :meth:`claim` for each job taken.
        """
        _owner(owner)
        from framecast.store import _SELECT  # late: store.py imports this module

        jobs = await self._call(
            self._query_sync, f"{_SELECT} WHERE {_OPEN} AND {_FREE} ORDER BY id", (_finite(now),)
        )
        return [job for job in jobs if guilds is None or guilds(job.guild_id)]

    async def release(self, job_id: int, owner: str) -> bool:
        """Give up ``owner``'s lease of the job; False if ``owner`` did not hold it."""
        return await self._call(self._release_sync, job_id, _owner(owner))

    def _claim_sync(self, job_id: int, owner: str, until: float, now: float) -> bool:
        # One UPDATE (autocommit): SQLite's write lock makes take-if-free atomic across connections.
        cur = self._conn.execute(
            f"UPDATE jobs SET lease_owner = ?, lease_until = ? WHERE id = ? AND {_OPEN}"
            " AND (lease_owner IS NULL OR lease_owner = ? OR lease_until IS NULL OR lease_until <= ?)",
            (owner, until, job_id, owner, now),
        )
        if cur.rowcount == 1:
            return True
        if self._conn.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is None:
            raise JobNotFound(job_id)
        return False

    def _release_sync(self, job_id: int, owner: str) -> bool:
        cur = self._conn.execute(
            "UPDATE jobs SET lease_owner = NULL, lease_until = NULL WHERE id = ? AND lease_owner = ?",
            (job_id, owner),
        )
        return cur.rowcount == 1


def _owner(owner: str) -> str:
    if not isinstance(owner, str) or not owner:
        raise TypeError("lease owner must be a non-empty str")
    try:
        owner.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("lease owner is not valid Unicode text (lone surrogate)") from None
    return str(owner)


def _finite(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"lease time must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError("lease time must be finite")
    return float(value)
