"""One database, SQLite or PostgreSQL, and the stores ("processes") a test opens on it.

A pytest plugin (registered in ``tests/conftest.py``): a test that asks for ``backend`` runs once on
a SQLite file and once on a fresh PostgreSQL database (skipped without a server). The stores share
``store_clock`` (a :class:`ManualClock` from 0; a module overrides the fixture for another start).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from framecast.storage import Store
from tests.fakes.clock import ManualClock
from tests.pg import fresh_database

__all__ = ["Backend", "backend", "store_clock"]


@dataclass
class Backend:
    """One database and the stores opened on it (closed by the fixture)."""

    name: str  #: "sqlite" or "postgres"
    clock: ManualClock
    opener: Callable[[], Awaitable[Store]]
    opened: list[Store] = field(default_factory=list)

    async def open(self) -> Store:
        """Another store object on the same database (another "process")."""
        store = await self.opener()
        self.opened.append(store)
        return store


@pytest.fixture
def store_clock() -> ManualClock:
    """The clock of every store a test opens on its ``backend``."""
    return ManualClock()


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, store_clock: ManualClock
) -> AsyncIterator[Backend]:
    """The test's database: a SQLite file, then a fresh PostgreSQL database."""
    clock = store_clock
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "sqlite":
            path = tmp_path / "jobs.sqlite3"
            b = Backend("sqlite", clock, lambda: Store.open(path, clock=clock))
        else:
            dsn = await stack.enter_async_context(fresh_database())  # dropped after the stores close
            b = Backend("postgres", clock, lambda: Store.open(dsn, clock=clock))
        try:
            yield b
        finally:
            for s in b.opened:
                await s.close()
