"""Web sessions (framecast.app.web_sessions) on a real store: opened, found, ended, expired."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framecast.app import WebSessions
from framecast.storage import Store
from tests.fakes.clock import ManualClock
from tests.pg import fresh_database


@pytest.fixture
async def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> AsyncIterator[Store]:
    """A store on either database (the queries are written once for both)."""
    async with contextlib.AsyncExitStack() as stack:
        where = str(tmp_path / "jobs.sqlite3")
        if request.param == "postgres":
            where = await stack.enter_async_context(fresh_database())
        opened = await Store.open(where, clock=clock)
        try:
            yield opened
        finally:
            await opened.close()


async def test_a_session_names_its_user_until_it_expires(store: Store, clock: ManualClock) -> None:
    sessions = WebSessions(store.web.sessions, clock, lifetime=100.0)
    token = await sessions.open(42)
    assert await sessions.user(token) == 42
    await clock.advance(99.0)
    assert await sessions.user(token) == 42
    await clock.advance(2.0)
    assert await sessions.user(token) is None


async def test_logout_ends_the_session_and_other_tokens_are_nobody(store: Store, clock: ManualClock) -> None:
    sessions = WebSessions(store.web.sessions, clock)
    mine, theirs = await sessions.open(1), await sessions.open(2)
    await sessions.close(mine)
    assert await sessions.user(mine) is None and await sessions.user(theirs) == 2
    assert await sessions.user("") is None and await sessions.user("x" * 10_000) is None


async def test_the_store_keeps_only_a_hash_of_the_token(store: Store, clock: ManualClock) -> None:
    sessions = WebSessions(store.web.sessions, clock)
    token = await sessions.open(7)
    # The row's key is the token's SHA-256: the token itself opens it, its hash does not.
    hashed = hashlib.sha256(token.encode()).hexdigest()
    assert await store.web.sessions.user_of(hashed, now=clock.time()) == 7
    assert await sessions.user(hashed) is None
