"""Which store errors are outages (a pause) and which are bugs, on the real drivers' own errors.

Each error is produced by the real driver (sqlite3 through SQLAlchemy, asyncpg against the test
PostgreSQL, which is skipped, saying why, without a server), except the filesystem's ``OSError``
values, which are only numbers.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy import exc as sa_exc

from framecast.storage.faults import describe_outage, is_store_outage
from tests.e2e.endpoints import free_port


def raised(action: Callable[[], object]) -> BaseException:
    try:
        action()
    except Exception as exc:
        return exc
    raise AssertionError("nothing was raised")


def sqlite_file(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO jobs VALUES (1)")
    return path


def test_a_read_only_sqlite_file_is_an_outage(tmp_path: Path) -> None:
    path = sqlite_file(tmp_path)
    engine = create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    try:
        with engine.connect() as conn:
            exc = raised(lambda: conn.execute(text("INSERT INTO jobs VALUES (2)")))
    finally:
        engine.dispose()
    assert isinstance(exc, sa_exc.OperationalError)
    assert is_store_outage(exc)
    assert describe_outage(exc) == "sqlite3: attempt to write a readonly database"


def test_an_sqlite_file_locked_by_another_process_is_an_outage(tmp_path: Path) -> None:
    path = sqlite_file(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # a backup, an admin's sqlite3 shell
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    try:
        with engine.connect() as conn:
            exc = raised(lambda: conn.execute(text("INSERT INTO jobs VALUES (2)")))
    finally:
        engine.dispose()
        holder.close()
    assert is_store_outage(exc) and "database is locked" in describe_outage(exc)


def test_sqlite_errors_that_are_bugs_are_not_outages(tmp_path: Path) -> None:
    path = sqlite_file(tmp_path)
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            missing = raised(lambda: conn.execute(text("SELECT * FROM no_such_table")))
            conn.rollback()
            twice = raised(lambda: conn.execute(text("INSERT INTO jobs VALUES (1)")))
    finally:
        engine.dispose()
    assert isinstance(missing, sa_exc.OperationalError) and not is_store_outage(missing)
    assert isinstance(twice, sa_exc.IntegrityError) and not is_store_outage(twice)
    assert not is_store_outage(ValueError("a bad value")) and not is_store_outage(KeyError("x"))


@pytest.mark.parametrize(
    ("number", "outage"),
    [
        (errno.ENOSPC, True),
        (errno.EROFS, True),
        (errno.EIO, True),
        (errno.EDQUOT, True),
        (errno.ENOENT, False),
    ],
)
def test_a_full_or_read_only_disk_beside_the_store_is_an_outage(number: int, outage: bool) -> None:
    assert is_store_outage(OSError(number, "a file the bot writes")) is outage


async def test_a_postgresql_server_that_is_gone_is_an_outage() -> None:
    exc = None
    try:
        await asyncpg.connect(f"postgresql://framecast:pw@127.0.0.1:{free_port()}/none", timeout=5)
    except Exception as caught:
        exc = caught
    assert exc is not None and is_store_outage(exc)
    assert "pw" not in describe_outage(exc)


async def test_a_cancelled_postgresql_statement_is_an_outage_and_a_syntax_error_is_not(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn, timeout=5)
    try:
        await conn.execute("SET statement_timeout = 50")
        with pytest.raises(asyncpg.exceptions.QueryCanceledError) as timed_out:
            await conn.execute("SELECT pg_sleep(5)")
        with pytest.raises(asyncpg.exceptions.PostgresSyntaxError) as typo:
            await conn.execute("SELEC 1")
    finally:
        await conn.close()
    assert is_store_outage(timed_out.value)
    assert describe_outage(timed_out.value) == "asyncpg: QueryCanceledError"
    assert not is_store_outage(typo.value)


def test_a_bare_timeout_counts_only_where_the_caller_knows_it_called_the_store() -> None:
    # A driver's connect raises TimeoutError unwrapped; so does a Discord request.
    assert is_store_outage(TimeoutError())
    assert not is_store_outage(TimeoutError(), bare=False)
    assert not is_store_outage(ConnectionResetError(errno.ECONNRESET, "reset"), bare=False)
    wrapped = sa_exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError("disk I/O error"))
    assert is_store_outage(wrapped, bare=False)
