"""What a database outage is, how long each database wait may last, and the outage's log lines.

:class:`StoreTimeouts` carries the bounds (the settings' ``DATABASE_*_TIMEOUT``), :data:`OUTAGE` the
errors that mean the database is gone or stuck rather than the call wrong, :class:`Outage` logs an
outage once as it starts and once as it ends (never a traceback per call), and
:func:`dropped_when_cut_short` drops a PostgreSQL connection whose call was cut short.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from framecast.config import (
    DATABASE_CALL_TIMEOUT,
    DATABASE_CONNECT_TIMEOUT,
    DATABASE_POOL_TIMEOUT,
    DATABASE_STATEMENT_TIMEOUT,
)

__all__ = ["OUTAGE", "Outage", "StoreTimeouts", "dropped_when_cut_short"]

log = logging.getLogger("framecast.storage")

#: What a database outage raises: the driver's errors about the connection or the file, and timeouts.
#: Not IntegrityError, nor the store's own refusals (JobNotFound, limits): those are answers.
OUTAGE = (
    TimeoutError,
    OSError,
    sa_exc.OperationalError,  # SQLite: locked, disk full, I/O error, read-only; PostgreSQL: shut down
    sa_exc.InterfaceError,  # the connection was closed under the driver
    sa_exc.TimeoutError,  # no pooled connection within the pool timeout
)


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
        why = reason(exc)
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


def reason(exc: BaseException) -> str:
    """What failed, in a few words, without the driver's text (it may quote a query or a URL)."""
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    if isinstance(exc, sa_exc.OperationalError) and isinstance(cause, sqlite3.Error):
        return f"{type(cause).__name__}: {cause}"  # sqlite3's words: "database is locked", "disk I/O error"
    if isinstance(exc, (TimeoutError, sa_exc.TimeoutError)):
        return "no answer in time"
    return type(cause).__name__
