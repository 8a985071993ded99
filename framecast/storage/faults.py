"""Store outages: which errors are one (decided here only), how long a wait may last, the log lines.

A store outage is a dependency's fault, not a job's: PostgreSQL gone, cut off or silent (a
connection refused, reset or timed out, the server shutting down or out of connections, a
statement cancelled by its timeout), or an SQLite file that cannot be written for now (the disk
full, an I/O error, a read-only filesystem, another process's lock held past the busy timeout), and
the same faults met by a file the bot writes beside the store (an inline result: ``ENOSPC``,
``EROFS``). Whoever meets one waits and tries again (:mod:`framecast.jobs.pause`); anything else
(a constraint, a syntax error, a corrupt file, a value the code got wrong) is a bug and is raised
as before.

The driver's message is never needed to decide, except SQLite's, whose one ``OperationalError``
class carries both outages and bugs ("no such table"): its message says which.

:class:`StoreTimeouts` carries the bounds (the settings' ``DATABASE_*_TIMEOUT``), :class:`Outage`
logs an outage once as it starts and once as it ends (never a traceback per call), and
:func:`dropped_when_cut_short` drops a PostgreSQL connection whose call was cut short.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from framecast.config import (
    DATABASE_CALL_TIMEOUT,
    DATABASE_CONNECT_TIMEOUT,
    DATABASE_POOL_TIMEOUT,
    DATABASE_STATEMENT_TIMEOUT,
)

__all__ = [
    "Outage",
    "StoreTimeouts",
    "describe_outage",
    "dropped_when_cut_short",
    "is_store_outage",
    "unusable_file",
]

log = logging.getLogger("framecast.storage")

#: ``OSError`` numbers of a filesystem or network that may answer again (a full or read-only disk, a
#: failing device, a connection that went away).
_OS_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EIO,
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
    }
)

#: SQLite's words for a file it cannot write now (its ``OperationalError`` also carries bugs).
_SQLITE_OUTAGES = (
    "database or disk is full",
    "disk i/o error",
    "attempt to write a readonly database",
    "database is locked",
    "unable to open database file",
)

#: asyncpg's classes for a server that cannot answer now: SQLSTATE classes 08 (connection), 53
#: (insufficient resources: disk full, too many connections), 57 (operator intervention: shutdown,
#: a statement cancelled by its timeout), 58 (system error: I/O), a transaction that must be tried
#: again (40: serialization, deadlock), a read-only standby (25006), and a connection the client
#: lost (asyncpg's InterfaceError: "connection is closed").
_PG_OUTAGES: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.PostgresSystemError,
    asyncpg.exceptions.TransactionRollbackError,
    asyncpg.exceptions.ReadOnlySQLTransactionError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
)

#: How deep the chain of causes is followed (SQLAlchemy wraps the adapter, which wraps the driver).
_DEPTH = 6


def _causes(exc: BaseException) -> Iterator[tuple[int, BaseException]]:
    # SQLAlchemy wraps the adapter's error, which wraps the driver's: follow `orig`, else the cause.
    seen: BaseException | None = exc
    for depth in range(_DEPTH):
        if seen is None:
            return
        yield depth, seen
        orig = seen.orig if isinstance(seen, sa_exc.DBAPIError) else None
        seen = orig if isinstance(orig, BaseException) else seen.__cause__


def is_store_outage(exc: BaseException, *, bare: bool = True) -> bool:
    """Whether `exc` says the store (or a file beside it) cannot answer now, rather than a bug.

    `bare`: whether a bare ``TimeoutError`` or ``OSError`` counts (a driver's connect raises them
    unwrapped). True where the caller knows the error came from a store call (or a file write);
    False where it may come from anything (Discord, the network): then only a driver's own error,
    or one a driver's error wraps, is an outage.
    """
    for depth, seen in _causes(exc):
        if (bare or depth > 0 or not isinstance(seen, OSError)) and _is_outage_itself(seen):
            return True
        if isinstance(seen, sa_exc.DBAPIError) and seen.connection_invalidated:
            return True
    return False


def describe_outage(exc: BaseException) -> str:
    """A short name for an outage, fit for a log line: the driver's class and, for SQLite and the
    filesystem, what it said (never a PostgreSQL message: it may quote the address or the DSN)."""
    for _, seen in _causes(exc):
        if isinstance(seen, sqlite3.OperationalError):
            return f"sqlite3: {str(seen)[:80]}"
        if isinstance(seen, OSError) and seen.errno in _OS_ERRNOS:
            return f"{type(seen).__name__}: {errno.errorcode.get(seen.errno or 0, '?')}"
        if isinstance(seen, _PG_OUTAGES):
            return f"asyncpg: {type(seen).__name__}"
    return type(exc).__name__


def _is_outage_itself(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError | sa_exc.TimeoutError | ConnectionError):
        return True  # the pool's checkout, a connect or a statement that did not answer in time
    if isinstance(exc, OSError):
        return exc.errno in _OS_ERRNOS
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        return any(words in text for words in _SQLITE_OUTAGES)
    return isinstance(exc, _PG_OUTAGES)


def unusable_file(path: Path, exc: BaseException) -> str:
    """Why the SQLite file at `path` cannot be the job store, in one line."""
    if path.is_dir():
        return f"{path} is a directory, not a database file"
    if isinstance(exc, sa_exc.DBAPIError):
        reason = " ".join(str(exc.orig).split())[:120]
        return f"{path} is not a usable SQLite database ({reason})"
    assert isinstance(exc, OSError)
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
    return f"cannot open {path}: {exc.strerror or type(exc).__name__}{where}"


@dataclass(frozen=True)
class StoreTimeouts:
    """Seconds each kind of database wait may last (what each trades: :mod:`framecast.config`)."""

    connect: float = DATABASE_CONNECT_TIMEOUT
    statement: float = DATABASE_STATEMENT_TIMEOUT
    pool: float = DATABASE_POOL_TIMEOUT
    call: float = DATABASE_CALL_TIMEOUT


class Outage:
    """One dependency's outage state: a WARNING when it starts, an INFO when it ends."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._since: float | None = None  # monotonic time the current outage began

    @property
    def down(self) -> bool:
        """True from a call that met the outage until the next call that did not."""
        return self._since is not None

    def began(self, exc: BaseException, where: str) -> str:
        """A call met the outage: log it if it is new; the reason in a few words."""
        why = describe_outage(exc)
        if self._since is None:
            self._since = time.monotonic()
            log.warning(
                "%s unavailable (%s): %s; what needs it waits or is refused until it answers",
                self.what,
                where,
                why,
            )
        return why

    def ended(self, where: str) -> None:
        """A call went through: the outage, if there was one, is over."""
        if self._since is not None:
            took, self._since = time.monotonic() - self._since, None
            log.info("%s answers again (%s), after %.1f s", self.what, where, took)


@asynccontextmanager
async def dropped_when_cut_short(conn: AsyncConnection) -> AsyncIterator[None]:
    """Drop the connection (no rollback) when the call is cut short or the network fails under it.

    A rollback on a silent network waits for the driver's cancel of the query first, which waits
    for an answer that never comes; dropping the connection ends both at once, and the server rolls
    back what the connection left open.
    """
    try:
        yield
    except (asyncio.CancelledError, TimeoutError, OSError):
        await conn.invalidate()
        raise
