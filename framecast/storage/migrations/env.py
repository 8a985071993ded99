"""Alembic environment of the job store (the async template, plus a connection handed in).

At start-up :func:`framecast.storage.migrate.upgrade` hands Alembic the store's own connection, in a
transaction that already holds the migration lock (``config.attributes["connection"]``). From the
command line (``alembic -x url=sqlite+aiosqlite:///data/framecast.sqlite3 ...`` with a config whose
``script_location`` is this directory) an async engine is made and the same steps run through
``run_sync``.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import Connection, pool
from sqlalchemy.ext.asyncio import create_async_engine

from framecast.storage.schema import metadata

config = context.config


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Leave the legacy marker table alone (see migrate.PG_FENCE): it is not part of the schema."""
    return not (type_ == "table" and name == "schema_version")


def do_run_migrations(connection: Connection) -> None:
    """Configure Alembic on ``connection`` and run the steps (no-op transaction if one is open)."""
    context.configure(connection=connection, target_metadata=metadata, include_name=include_name)
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations() -> None:
    """The async template: one throw-away engine, the migrations through ``run_sync``."""
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    engine = create_async_engine(str(url), poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(do_run_migrations)
        await connection.commit()
    await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported: run them against a database")
connection = config.attributes.get("connection")
if connection is not None:
    do_run_migrations(connection)
else:
    asyncio.run(run_async_migrations())
