"""Every database call is bounded: a silent network, a lock held by another process or a store that
waits for its own connection ends in :class:`StoreUnavailable` within the store's bounds, and the
outage is logged once as it starts and once as it ends.

PostgreSQL is the real server on 127.0.0.1:5432, reached through a relay the test silences
(``tests/e2e/servers.py``: accepted connections, nothing forwarded); SQLite is locked by a second
connection's ``BEGIN EXCLUSIVE``, as an admin's ``sqlite3`` shell or a backup would.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path

import pytest

from framecast.jobs import JobKind, JobState, NewJob
from framecast.storage import Store, StoreTimeouts, StoreUnavailable
from tests.e2e.servers import Relay

GUILD, CHANNEL, USER = 111_111_111_111_111_111, 222_222_222_222_222_222, 333_333_333_333_333_333
#: Short bounds, so that the tests are quick; the assertions read them back.
SHORT = StoreTimeouts(connect=0.5, statement=0.5, pool=0.5, call=1.5)
#: What a bound may be overrun by (the loop's and the driver's own turns), nowhere near a bound.
SLACK = 0.5


def new_job() -> NewJob:
    return NewJob(JobKind.VIDEO, GUILD, CHANNEL, USER, "en-US", {"prompt": "a quiet lake"})


async def timed_refusal(call: asyncio.Future[object] | object) -> float:
    """Seconds until `call` (an awaitable) raised StoreUnavailable."""
    began = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await call  # type: ignore[misc]
    return time.monotonic() - began


async def test_reads_and_writes_on_a_silent_network_are_refused_within_their_bound(
    pg_relay: tuple[str, Relay], caplog: pytest.LogCaptureFixture
) -> None:
    dsn, relay = pg_relay
    caplog.set_level(logging.INFO, logger="framecast.storage")
    async with await Store.open(dsn, timeouts=SHORT) as store:
        job = await store.add(new_job(), member_limit=None, guild_cap=None)
        relay.blackhole()
        # A read on a pooled connection, a transaction, and a new connection: each one bounded.
        assert await timed_refusal(store.get(job.id)) < SHORT.call + SLACK
        assert (
            await timed_refusal(store.add(new_job(), member_limit=None, guild_cap=None)) < SHORT.call + SLACK
        )
        assert await timed_refusal(store.patch_discord(job.id, {"a": 1})) < SHORT.call + SLACK
        assert await timed_refusal(store.ping()) < SHORT.call + SLACK
        await relay.restore()
        # The cut-short connections were dropped, not left stuck: the store works at once.
        assert (await store.transition(job.id, JobState.CANCELLED)).state is JobState.CANCELLED
        assert await store.active() == []  # the refused add wrote nothing
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "job store unavailable" in warnings[0].getMessage()
    assert not any(r.exc_info for r in caplog.records), "an outage is no traceback"
    assert sum("job store answers again" in r.getMessage() for r in caplog.records) == 1


async def test_a_store_opened_during_a_silent_network_is_refused_within_the_connect_bound(
    pg_relay: tuple[str, Relay],
) -> None:
    dsn, relay = pg_relay
    async with await Store.open(dsn, timeouts=SHORT) as store:
        relay.blackhole()
        # Ten calls at once: the pooled connection is stuck, the others must be opened.
        took = await asyncio.gather(*(timed_refusal(store.active()) for _ in range(10)))
        assert max(took) < SHORT.call + SLACK
        await relay.restore()
        assert await store.ping()


async def test_a_write_while_another_process_holds_the_sqlite_lock_waits_busy_timeout_then_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "framecast.sqlite3"
    timeouts = StoreTimeouts(statement=0.5, call=5.0)
    async with await Store.open(path, timeouts=timeouts) as store:
        job = await store.add(new_job(), member_limit=None, guild_cap=None)
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN EXCLUSIVE")
            took = await timed_refusal(store.update(job.id, progress=0.5))
            assert timeouts.statement - 0.1 < took < timeouts.statement + SLACK
            assert (await store.get(job.id)) is not None  # reads go on (WAL)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert (await store.update(job.id, progress=0.5)).progress == 0.5


async def test_calls_queued_behind_a_waiting_sqlite_write_are_refused_within_the_call_bound(
    tmp_path: Path,
) -> None:
    path = tmp_path / "framecast.sqlite3"
    timeouts = StoreTimeouts(statement=3.0, call=0.5)
    async with await Store.open(path, timeouts=timeouts) as store:
        job = await store.add(new_job(), member_limit=None, guild_cap=None)
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN EXCLUSIVE")
            # The first write holds the store's one connection while SQLite waits for the lock...
            first = asyncio.ensure_future(store.update(job.id, progress=0.1))
            await asyncio.sleep(0)
            # ...so a read queued behind it gives up at the call bound, not after the statement bound.
            assert await timed_refusal(store.get(job.id)) < timeouts.call + SLACK
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert (await first).progress == 0.1  # the lock went before busy_timeout: the write landed
