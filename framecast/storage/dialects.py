"""Everything that differs between SQLite and PostgreSQL: :class:`Sqlite` and :class:`Postgres`.

How each locks, and bounds its calls (:class:`StoreTimeouts`): ``docs/ARCHITECTURE.md``, "Storage".
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Connection, Executable, Table, event, func, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from framecast.storage.faults import StoreTimeouts, describe_outage, is_store_outage
from framecast.values import JobError

__all__ = ["Postgres", "Sqlite", "StoreClosed", "StoreError", "StoreUnavailable", "redact_dsn"]

log = logging.getLogger(__name__)
# An outage's two lines go out under the package's name, the one operators and alerts look for.
_outage_log = logging.getLogger("framecast.storage")

#: Seconds the migration's connection waits to connect (its statements may outlast a call: unbounded).
MIGRATION_CONNECT_TIMEOUT = 10.0
_FILE_MODE, _DIR_MODE = 0o600, 0o700  # the database holds members' live interaction tokens
_COMPANIONS = ("-wal", "-shm", "-journal")  # SQLite gives them the database file's permission bits
# Advisory lock of migrations. Negative: add()'s guild locks are positive snowflakes, never equal.
_MIGRATION_LOCK = -0x6672616D65636173  # "framecas"
_POOL_SIZE = 10


class StoreError(JobError):
    """The job store cannot be used (e.g. the database was written by a newer Framecast)."""


class StoreClosed(StoreError, RuntimeError):
    """The store was closed; no further operations are accepted."""


class StoreUnavailable(StoreError):
    """The database did not answer within its bounds, or refused the call for its own sake (gone, silent,
    locked, full, read-only): try again in a moment. A call cut short at its commit may have written."""


_INSERT: dict[str, Any] = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}  # both have ON CONFLICT


class Database:
    """One database: its transactions, locks and outage bookkeeping. Subclassed once per dialect."""

    engine: AsyncEngine
    #: ``async with db.autocommit() as conn``: each statement its own transaction (reads, single writes).
    autocommit: Callable[[], AbstractAsyncContextManager[AsyncConnection]]

    def __init__(self, timeouts: StoreTimeouts, target: str) -> None:
        self.closed = False
        self.timeouts = timeouts
        #: The database, for logs (no password).
        self.target = target
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._down_since: float | None = None  # monotonic time the current outage began
        self._up_since = -math.inf  # monotonic time the last outage ended

    @asynccontextmanager
    async def _track(self) -> AsyncIterator[None]:
        # close() waits for the operations in flight; new ones are refused once it has started.
        if self.closed:
            raise StoreClosed("job store is closed")
        self._busy += 1
        self._idle.clear()
        began = time.monotonic()
        try:
            yield
        except Exception as exc:
            if not is_store_outage(exc):
                raise  # the store's own answers (not found, limits) and bugs
            why = describe_outage(exc)
            # Logged once as it starts, never a traceback per call; a call begun before the store answered
            # again opens no second one. Counted from this call's start: it errs long.
            if self._down_since is None and began >= self._up_since:
                self._down_since = began
                _outage_log.warning(
                    "job store unavailable (%s): %s; what needs it waits or is refused until it answers",
                    self.target,
                    why,
                )
            raise StoreUnavailable(f"job store unavailable: {why}") from exc
        else:
            if self._down_since is not None:
                self._up_since = time.monotonic()
                took, self._down_since = self._up_since - self._down_since, None
                _outage_log.info("job store answers again (%s), after %.1f s", self.target, took)
        finally:
            self._busy -= 1
            if not self._busy:
                self._idle.set()

    async def rows(self, stmt: Executable, params: dict[str, Any] | None = None) -> Sequence[Any]:
        """Every row of ``stmt`` (none for a statement without RETURNING), run as a statement of its own."""
        async with self.autocommit() as conn:
            result = await conn.execute(stmt, params)
            return result.all() if result.returns_rows else ()

    def upsert(self, table: Table, data: dict[str, Any]) -> Any:
        """INSERT of ``data``, or UPDATE of its other columns where its first (the table's key) exists."""
        key, *others = data
        stmt = _INSERT[self.engine.dialect.name](table).values(data)
        return stmt.on_conflict_do_update(index_elements=[key], set_={k: data[k] for k in others})

    async def close(self) -> None:
        """Wait for the operations in flight, then release every connection."""
        self.closed = True
        await self._idle.wait()
        await self._release()
        await self.engine.dispose()
        log.info("job store closed: %s", self.target)

    async def _release(self) -> None:
        pass


class Sqlite(Database):
    """One SQLite file: one connection, one asyncio lock, ``BEGIN IMMEDIATE`` for every write."""

    def __init__(self, path: Path, timeouts: StoreTimeouts) -> None:
        super().__init__(timeouts, str(path))
        self.path = path
        url = URL.create("sqlite+aiosqlite", database=str(path))
        # SQLAlchemy's own aiosqlite dialect (its cost: benchmarks/README.md); one connection, held for life.
        self.engine = create_async_engine(url, pool_size=1, max_overflow=0)
        event.listen(self.engine.sync_engine, "connect", self._connected)
        event.listen(self.engine.sync_engine, "begin", self._begin)
        self._lock = asyncio.Lock()
        self._conn: AsyncConnection | None = None
        self._immediate = True  # False inside autocommit(): no BEGIN at all

    def _connected(self, dbapi_conn: Any, record: object) -> None:
        # The recipe's "connect" hook: the driver must never emit BEGIN itself (we do, IMMEDIATE).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(self.timeouts.statement * 1000):d}")
            if (mode := _journal_mode_wal(cursor, self.timeouts.statement)).lower() != "wal":
                log.warning("job store: WAL not available (journal_mode=%s)", mode)
            # FULL: the WAL is fsynced at every commit, so an acknowledged job survives power loss too.
            cursor.execute("PRAGMA synchronous=FULL")
        finally:
            cursor.close()

    @asynccontextmanager
    async def _turn(self) -> AsyncIterator[AsyncConnection]:
        # The wait for the one connection is bounded. A statement in flight is never cancelled (its
        # thread would go on; a BEGIN IMMEDIATE could lock after we gave up): busy_timeout bounds it.
        if self._lock.locked():  # no timeout context on the hot path: a free lock is taken at once
            async with asyncio.timeout(self.timeouts.call):
                await self._lock.acquire()
        else:
            await self._lock.acquire()
        try:
            assert self._conn is not None
            yield self._conn
        finally:
            self._lock.release()

    def _begin(self, conn: Connection) -> None:
        # The recipe's "begin" hook: IMMEDIATE takes the write lock before anything is read, so
        # check-then-write (limits, compare-and-set) is atomic against every other connection.
        if self._immediate:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    async def start(self) -> None:
        """Create the file owner-only, then open the one connection (PRAGMAs run in the connect hook)."""
        await asyncio.to_thread(prepare_owner_only, self.path)
        self._conn = await self.engine.connect()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        async with self._track(), self._turn() as conn, conn.begin():
            yield conn

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[AsyncConnection]:
        async with self._track(), self._turn() as conn:
            # No BEGIN: each statement its own transaction, so a read never waits for another
            # process's write lock. The lock makes this flag ours alone.
            self._immediate = False
            try:
                yield conn
            finally:
                self._immediate = True
                await conn.rollback()  # ends SQLAlchemy's bookkeeping: SQLite has nothing open

    def locked(
        self, guild_id: int, *, one_statement: bool = False
    ) -> AbstractAsyncContextManager[AsyncConnection]:
        """A transaction no writer of the guild runs beside; `one_statement`: none (it locks as it starts)."""
        return self.autocommit() if one_statement else self.write()

    async def hold_owner(self, owner: str) -> bool:
        return True  # one process per file

    async def migrate(self, upgrade: Callable[[Connection], None]) -> None:
        # BEGIN IMMEDIATE: a second process opening the file waits here, then finds the work done.
        async with self.write() as conn:
            await conn.run_sync(upgrade)

    async def _release(self) -> None:
        if self._conn is None:
            return
        async with self._lock:
            raw = await self._conn.get_raw_connection()
            try:
                # Fold the WAL into the main file; a busy reader elsewhere leaves it for next time.
                driver: Any = raw.driver_connection
                await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except Exception as exc:  # noqa: BLE001 - closing goes on whatever the checkpoint says
                log.warning("job store: WAL checkpoint failed at close: %s", exc)
            await self._conn.close()


def _journal_mode_wal(cursor: Any, patience: float) -> str:
    # A new file opened by two at once fails "database is locked" (no busy handler here): tried again.
    deadline = time.monotonic() + patience
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return str(cursor.fetchone()[0])
        except Exception as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)  # only while two processes create one file: rare, and at start-up


def prepare_owner_only(path: Path) -> None:
    """Create the database's directory (0700) and file (0600, before SQLite would use the umask);
    tighten looser files. A directory that existed is the operator's (a volume) and is left as it is."""
    if not path.parent.exists():
        path.parent.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, _FILE_MODE))
    for candidate in (path, *(path.with_name(path.name + suffix) for suffix in _COMPANIONS)):
        try:
            current = candidate.stat().st_mode & 0o777
            if (tight := current & _FILE_MODE) != current:
                os.chmod(candidate, tight)
                log.info("job store: %s was mode %o, now %o (it holds tokens)", candidate, current, tight)
        except FileNotFoundError:
            pass  # a companion that does not exist (or another connection just removed)
        except OSError as exc:
            log.warning("job store: cannot restrict the permissions of %s: %s", candidate, exc.strerror)


class Postgres(Database):
    """A PostgreSQL database shared by several processes: a pool, advisory locks."""

    def __init__(self, dsn: str, timeouts: StoreTimeouts) -> None:
        super().__init__(timeouts, redact_dsn(dsn))
        self._dsn = dsn
        self._url = make_url(dsn).set(drivername="postgresql+asyncpg")
        self.engine = create_async_engine(
            self._url,
            pool_size=_POOL_SIZE,
            max_overflow=0,
            pool_timeout=timeouts.pool,
            async_creator=self._connect(
                timeout=timeouts.connect,
                # The driver's bound covers a silent network; the server's frees its side too.
                command_timeout=timeouts.statement,
                server_settings={
                    "statement_timeout": str(max(1, int(timeouts.statement * 1000))),
                    # A silent client's transaction (a partition) ends after half a statement bound:
                    # a statement waiting on its row locks (a takeover) still ends within its own.
                    "idle_in_transaction_session_timeout": str(max(1, int(timeouts.statement * 500))),
                },
            ),
        )
        # Reads need no transaction: one round trip instead of BEGIN, SELECT, ROLLBACK.
        self._reader = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._owner_conn: AsyncConnection | None = None
        self._owners: set[str] = set()

    def _connect(self, **args: Any) -> Callable[[], Awaitable[Any]]:
        """asyncpg's connect of the DSN, which reads libpq's ``sslmode`` (SQLAlchemy's refused it)."""
        import asyncpg  # only with a PostgreSQL store (a bot on SQLite never loads it)

        dsn = self._url.set(drivername="postgresql").render_as_string(hide_password=False)
        return lambda: asyncpg.connect(dsn, **args)

    async def start(self) -> None:
        """Check the server answers (a failure is a :class:`StoreError` without the password)."""
        try:
            async with self._reader.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except Exception as exc:
            await self.engine.dispose()
            cause = exc.__cause__ or exc  # SQLAlchemy wraps the driver's; a silent server times out
            why = f"{type(cause).__name__}: {cause}"
            if isinstance(cause, asyncio.CancelledError | TimeoutError):
                why = f"no answer within {self.timeouts.connect:g} s"
            for secret in filter(None, (self._dsn, self._url.password)):  # the driver may quote either
                why = why.replace(secret, "***")
            # `from None`: the driver's own exception may quote the DSN.
            raise StoreError(f"cannot open the PostgreSQL job store at {self.target}: {why}") from None

    def write(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._bounded(self.engine.begin)

    def autocommit(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._bounded(self._reader.connect)

    @asynccontextmanager
    async def _bounded(
        self, connect: Callable[[], AbstractAsyncContextManager[AsyncConnection]]
    ) -> AsyncIterator[AsyncConnection]:
        async with self._track(), asyncio.timeout(self.timeouts.call), connect() as conn:
            try:
                yield conn
            except (asyncio.CancelledError, TimeoutError, OSError):
                # Cut short, or the network failed: dropped, not rolled back (on a silent network a
                # rollback waits for an answer that never comes); the server rolls back what was open.
                await conn.invalidate()
                raise

    @asynccontextmanager
    async def locked(self, guild_id: int, *, one_statement: bool = False) -> AsyncIterator[AsyncConnection]:
        async with self.write() as conn:
            # Every add of this guild (jobs, styles), in every process, until the commit (no row yet to lock).
            await conn.execute(select(func.pg_advisory_xact_lock(guild_id)))
            yield conn

    async def hold_owner(self, owner: str) -> bool:
        # A session lock on its own connection, gone with a crashed process: a restart gets it back at once.
        if owner in self._owners:
            return True
        async with self._track():
            if self._owner_conn is None:
                conn = await self.engine.connect()
                self._owner_conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            key = func.hashtext("framecast-owner:" + owner)
            held = bool((await self._owner_conn.execute(select(func.pg_try_advisory_lock(key)))).scalar())
        if held:
            self._owners.add(owner)
        return held

    async def migrate(self, upgrade: Callable[[Connection], None]) -> None:
        # A second process waits here, then finds the work done; no statement bound on this connection.
        engine = create_async_engine(
            self._url, poolclass=NullPool, async_creator=self._connect(timeout=MIGRATION_CONNECT_TIMEOUT)
        )
        try:
            async with self._track(), engine.begin() as conn:
                await conn.execute(select(func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
                await conn.run_sync(upgrade)
        finally:
            await engine.dispose()

    async def _release(self) -> None:
        if self._owner_conn is not None:
            conn, self._owner_conn = self._owner_conn, None
            # Pool resets do not drop session locks: closing the connection does.
            await conn.invalidate()
            await conn.close()


def redact_dsn(dsn: str) -> str:
    """``postgresql://user@host:port/db`` without the password or query (which may carry one)."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
        user = f"{parts.username}@" if parts.username else ""
    except ValueError:
        return "postgresql://(unparsable URL)"
    return f"{parts.scheme}://{user}{host}{port}{parts.path}"
