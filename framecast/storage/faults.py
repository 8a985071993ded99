"""Which errors mean "the store cannot answer now" (an outage) and which are bugs: decided here only.

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
"""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import asyncpg
from sqlalchemy import exc as sa_exc

__all__ = ["describe_outage", "is_store_outage", "unusable_file"]

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


def is_store_outage(exc: BaseException, *, bare: bool = True) -> bool:
    """Whether `exc` says the store (or a file beside it) cannot answer now, rather than a bug.

    `bare`: whether a bare ``TimeoutError`` or ``OSError`` counts (a driver's connect raises them
    unwrapped). True where the caller knows the error came from a store call (or a file write);
    False where it may come from anything (Discord, the network): then only a driver's own error,
    or one a driver's error wraps, is an outage.
    """
    seen: BaseException | None = exc
    for depth in range(_DEPTH):
        if seen is None:
            return False
        if (bare or depth > 0 or not isinstance(seen, OSError)) and _is_outage_itself(seen):
            return True
        if isinstance(seen, sa_exc.DBAPIError):
            if seen.connection_invalidated:
                return True
            orig = seen.orig
            seen = orig if isinstance(orig, BaseException) else seen.__cause__
        else:
            seen = seen.__cause__
    return False


def describe_outage(exc: BaseException) -> str:
    """A short name for an outage, fit for a log line: the driver's class and, for SQLite and the
    filesystem, what it said (never a PostgreSQL message: it may quote the address or the DSN)."""
    seen: BaseException | None = exc
    for _ in range(_DEPTH):
        if seen is None:
            break
        if isinstance(seen, sqlite3.OperationalError):
            return f"sqlite3: {str(seen)[:80]}"
        if isinstance(seen, OSError) and seen.errno in _OS_ERRNOS:
            return f"{type(seen).__name__}: {errno.errorcode.get(seen.errno or 0, '?')}"
        if isinstance(seen, _PG_OUTAGES):
            return f"asyncpg: {type(seen).__name__}"
        orig = seen.orig if isinstance(seen, sa_exc.DBAPIError) else None
        seen = orig if isinstance(orig, BaseException) else seen.__cause__
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
