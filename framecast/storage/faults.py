"""Store outages: which errors are one (decided here only), and how long a wait may last.

An outage is a dependency's fault, not a job's: PostgreSQL gone, cut off or silent, or a file of the
store (or beside it) that cannot be written for now. Whoever meets one waits and tries again
(:mod:`framecast.jobs.pause`); anything else (a constraint, a corrupt file) is a bug, raised as is."""

from __future__ import annotations

import errno
import os
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import exc as sa_exc

from framecast import config

__all__ = ["StoreTimeouts", "describe_outage", "is_store_outage", "unusable_file"]

#: ``OSError`` numbers of a filesystem or network that may answer again.
_OS_ERRNOS = frozenset(
    getattr(errno, name)
    for name in "ENOSPC EDQUOT EROFS EIO ECONNREFUSED ECONNRESET ECONNABORTED EPIPE ETIMEDOUT"
    " EHOSTUNREACH ENETUNREACH ENETDOWN".split()
)
#: SQLite's words for a file it cannot write now (its one ``OperationalError`` is also "no such table").
_SQLITE_OUTAGES = (
    "database or disk is full",
    "disk i/o error",
    "attempt to write a readonly database",
    "database is locked",
    "unable to open database file",
)


def _pg_outages() -> tuple[type[BaseException], ...]:
    # asyncpg's classes for a server that cannot answer now: SQLSTATE 08 (connection), 53 (resources),
    # 57 (shutdown, timeout), 58 (I/O), 40 (serialization, deadlock), 25006 (read-only standby), the
    # client's InterfaceError. Empty until a PostgreSQL store imports asyncpg: SQLite never pays.
    pg = sys.modules.get("asyncpg.exceptions")
    if pg is None:
        return ()
    return (
        pg.PostgresConnectionError,
        pg.InsufficientResourcesError,
        pg.OperatorInterventionError,
        pg.PostgresSystemError,
        pg.TransactionRollbackError,
        pg.ReadOnlySQLTransactionError,
        pg.InterfaceError,
    )


def _causes(exc: BaseException) -> Iterator[tuple[int, BaseException]]:
    # SQLAlchemy wraps the adapter's error, which wraps the driver's: follow `orig`, else the cause.
    seen: BaseException | None = exc
    for depth in range(6):
        if seen is None:
            return
        yield depth, seen
        orig = seen.orig if isinstance(seen, sa_exc.DBAPIError) else None
        seen = orig if isinstance(orig, BaseException) else seen.__cause__


def is_store_outage(exc: BaseException, *, bare: bool = True) -> bool:
    """Whether `exc` says the store (or a file beside it) cannot answer now, rather than a bug.
    `bare`: whether a bare ``TimeoutError`` or ``OSError`` counts (a driver's connect raises them
    unwrapped); False where the error may come from anything (Discord, the network)."""
    for depth, seen in _causes(exc):
        if (bare or depth > 0 or not isinstance(seen, OSError)) and _outage(seen) is not None:
            return True
        if isinstance(seen, sa_exc.DBAPIError) and seen.connection_invalidated:
            return True
    return False


def describe_outage(exc: BaseException) -> str:
    """A short name for an outage, fit for a log line: the driver's class and, for SQLite and the
    filesystem, what it said (never a PostgreSQL message: it may quote the address or the DSN)."""
    return next((why for _, seen in _causes(exc) if (why := _outage(seen))), type(exc).__name__)


def _outage(exc: BaseException) -> str | None:
    # What `exc` itself says of an outage, in a few words; None when it is no outage.
    if isinstance(exc, sqlite3.OperationalError):
        return f"sqlite3: {str(exc)[:80]}" if any(w in str(exc).lower() for w in _SQLITE_OUTAGES) else None
    if isinstance(exc, OSError) and exc.errno in _OS_ERRNOS:
        return f"{type(exc).__name__}: {errno.errorcode.get(exc.errno or 0, '?')}"
    if isinstance(exc, _pg_outages()):
        return f"asyncpg: {type(exc).__name__}"
    if isinstance(exc, TimeoutError | sa_exc.TimeoutError | ConnectionError):
        return type(exc).__name__  # the pool's checkout, a connect or a statement not answered in time
    return None


def unusable_file(path: Path, exc: BaseException) -> str:
    """Why the SQLite file at `path` cannot be the job store, in one line."""
    if os.path.isdir(path):  # never raises: a name too long for the system is no directory
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

    connect: float = config.DATABASE_CONNECT_TIMEOUT
    statement: float = config.DATABASE_STATEMENT_TIMEOUT
    pool: float = config.DATABASE_POOL_TIMEOUT
    call: float = config.DATABASE_CALL_TIMEOUT
