"""Throw-away PostgreSQL databases for tests.

The tests expect a server on 127.0.0.1:5432 that lets user ``postgres`` in without a password (CI and
the development machines have one); ``FRAMECAST_TEST_PG_ADMIN`` overrides that admin URL. Each use of
:func:`fresh_database` (or the :func:`pg_dsn` fixture) creates an empty database
``framecast_test_<hex>`` and drops it afterwards. When no server answers, the test is skipped with a
reason that says so; the first failed attempt is remembered so later tests skip at once.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

__all__ = ["ADMIN_DSN", "fresh_database", "pg_dsn"]

#: Where the throw-away databases are created (the ``postgres`` maintenance database of the server).
ADMIN_DSN = os.environ.get("FRAMECAST_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")

_CONNECT_TIMEOUT = 3.0
_unreachable: str | None = None  # why the server could not be used, once known


async def _admin() -> asyncpg.Connection:
    global _unreachable
    if _unreachable is not None:
        pytest.skip(_unreachable)
    try:
        return await asyncpg.connect(ADMIN_DSN, timeout=_CONNECT_TIMEOUT)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        where = urlsplit(ADMIN_DSN)
        _unreachable = (
            f"PostgreSQL is not reachable at {where.hostname}:{where.port or 5432} as {where.username} "
            f"({type(exc).__name__}); set FRAMECAST_TEST_PG_ADMIN or start a server to run these tests"
        )
        pytest.skip(_unreachable)


@asynccontextmanager
async def fresh_database() -> AsyncIterator[str]:
    """Create an empty database, yield its URL, drop it (even if connections are left open)."""
    name = f"framecast_test_{secrets.token_hex(6)}"
    admin = await _admin()
    try:
        # The name is ours (hex): safe to put in the statement, which takes no parameters.
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            parts = urlsplit(ADMIN_DSN)
            yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def pg_dsn() -> AsyncIterator[str]:
    """The URL of a fresh, empty PostgreSQL database for this test (skips without a server)."""
    async with fresh_database() as dsn:
        yield dsn
