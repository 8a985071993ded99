"""Every database call is bounded: a silent network, a lock held by another process or a store that
waits for its own connection ends in :class:`StoreUnavailable` within the store's bounds, and the
outage is logged once as it starts and once as it ends.

PostgreSQL is the real server on 127.0.0.1:5432, reached through a relay the test silences
(``tests/e2e/servers.py``: accepted connections, nothing forwarded); SQLite is locked by a second
connection's ``BEGIN EXCLUSIVE``, as an admin's ``sqlite3`` shell or a backup would.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import sqlite3
import time
from pathlib import Path

import asyncpg
import pytest

from framecast.storage import Store, StoreError, StoreTimeouts, StoreUnavailable, dialects
from framecast.values import JobKind, JobState, NewJob
from tests.e2e.servers import Relay

GUILD, CHANNEL, USER = 111_111_111_111_111_111, 222_222_222_222_222_222, 333_333_333_333_333_333
#: Short bounds, so that the tests are quick; the assertions read them back.
SHORT = StoreTimeouts(connect=0.5, statement=0.5, pool=0.5, call=1.5)
#: The advisory lock a migration holds (a second process starting waits for it).
MIGRATION_LOCK = dialects._MIGRATION_LOCK  # noqa: SLF001
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


async def test_a_call_waiting_for_a_pooled_connection_is_refused_at_the_pool_bound(pg_dsn: str) -> None:
    timeouts = StoreTimeouts(pool=0.3, call=5.0)
    async with await Store.open(pg_dsn, timeouts=timeouts) as store:
        engine = store._db.engine  # noqa: SLF001 - every pooled connection taken, as a burst would
        held = [await engine.connect() for _ in range(dialects._POOL_SIZE)]  # noqa: SLF001
        try:
            assert await timed_refusal(store.get(1)) < timeouts.pool + SLACK
        finally:
            for conn in held:
                await conn.close()
        assert await store.get(1) is None


async def test_a_server_that_never_answers_at_start_is_named_as_such() -> None:
    # It accepts the connection and says nothing: the start fails with the bound it waited, not a
    # bare "CancelledError" (the driver's timeout, as SQLAlchemy handed it on).
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(StoreError) as info:
            await Store.open(f"postgresql://u:hunter2@127.0.0.1:{port}/db", timeouts=SHORT)
    finally:
        server.close()
    assert str(info.value).endswith("no answer within 0.5 s"), info.value
    assert "hunter2" not in str(info.value)


async def test_libpq_parameters_in_the_url_are_read_and_the_stores_bounds_still_hold(pg_dsn: str) -> None:
    # A managed database's connection string carries libpq's parameters (``sslmode``,
    # ``application_name``): the store opens with them (SQLAlchemy passed them to asyncpg as
    # keywords it refused: no start), and its statement bound applies beside them.
    dsn = f"{pg_dsn}?sslmode=prefer&application_name=framecast-probe"
    async with await Store.open(dsn, timeouts=SHORT) as store:
        assert await store.ping()
        async with store._db.autocommit() as conn:  # noqa: SLF001 - the store's own connection
            name = (await conn.exec_driver_sql("SHOW application_name")).scalar()
            bound = (await conn.exec_driver_sql("SHOW statement_timeout")).scalar()
    assert (name, bound) == ("framecast-probe", "500ms")


async def test_a_migration_waits_for_another_process_s_migration_past_the_statement_bound(
    pg_dsn: str,
) -> None:
    # The first process migrates (holding the migration lock) for longer than a statement may take:
    # the second one opening the store waits for it instead of failing its start.
    other = await asyncpg.connect(pg_dsn)
    try:
        await other.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
        opening = asyncio.ensure_future(Store.open(pg_dsn, timeouts=SHORT))
        waited = (
            "SELECT max(now() - query_start) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        while (await other.fetchval(waited) or datetime.timedelta()).total_seconds() < 2 * SHORT.statement:
            assert not opening.done(), opening
            await asyncio.sleep(0.05)  # polling the server's own record of the wait
        await other.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
        async with await opening as store:
            assert await store.ping()
    finally:
        await other.close()


async def test_a_call_begun_before_the_store_answered_again_opens_no_second_outage(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="framecast.storage")
    patient = StoreTimeouts(connect=2.0, statement=30.0, pool=2.0, call=30.0)
    admin = await asyncpg.connect(pg_dsn)

    async def waiting_for_the_lock(but: int = 0) -> int:
        # The backend of an add that waits for the guild's lock (not `but`).
        while not (  # noqa: ASYNC110 - the server's view is polled: it sends no event
            pid := await admin.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database() AND pid <> $1",
                but,
            )
        ):
            await asyncio.sleep(0.02)
        return int(pid)

    try:
        async with await Store.open(pg_dsn, timeouts=patient) as store:
            job = await store.add(new_job(), member_limit=None, guild_cap=None)
            # Two adds wait for the guild's lock, which another session holds; then the server ends
            # the first one's session (the outage), and the store answers the next call (its end).
            await admin.execute("SELECT pg_advisory_lock($1)", GUILD)
            first = asyncio.create_task(store.add(new_job(), member_limit=None, guild_cap=None))
            first_pid = await waiting_for_the_lock()
            second = asyncio.create_task(store.add(new_job(), member_limit=None, guild_cap=None))
            second_pid = await waiting_for_the_lock(but=first_pid)
            await admin.execute("SELECT pg_terminate_backend($1)", first_pid)
            with pytest.raises(StoreUnavailable):
                await first
            assert (await store.get(job.id)) is not None
            # The second add, begun during the outage, fails after its end: the same outage.
            await admin.execute("SELECT pg_terminate_backend($1)", second_pid)
            with pytest.raises(StoreUnavailable):
                await second
            assert (await store.get(job.id)) is not None
    finally:
        await admin.close()
    said = [r.getMessage() for r in caplog.records if r.name == "framecast.storage"]
    assert sum("job store unavailable" in m for m in said) == 1, said
    assert sum("job store answers again" in m for m in said) == 1, said
