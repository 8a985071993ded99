"""What a database outage is, how long each database wait may last, and the outage's log lines.

:class:`StoreTimeouts` carries the bounds (the settings' ``DATABASE_*_TIMEOUT``), :class:`Outage`
logs an outage once as it starts and once as it ends (never a traceback per call), and
:func:`dropped_when_cut_short` drops a PostgreSQL connection whose call was cut short. Which errors
are an outage is :mod:`framecast.storage.faults`' call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from framecast.config import (
    DATABASE_CALL_TIMEOUT,
    DATABASE_CONNECT_TIMEOUT,
    DATABASE_POOL_TIMEOUT,
    DATABASE_STATEMENT_TIMEOUT,
)
from framecast.storage.faults import describe_outage

__all__ = ["Outage", "StoreTimeouts", "dropped_when_cut_short"]

log = logging.getLogger("framecast.storage")


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
