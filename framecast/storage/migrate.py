"""Bringing a database to the code's schema at start-up, with Alembic (one chain for both databases).

Runs inside ``Sqlite/Postgres.migrate``'s transaction, which holds the lock a second process would take
(SQLite ``BEGIN IMMEDIATE``, a PostgreSQL advisory lock), so two processes starting together migrate
once. Cases:

* ``alembic_version`` names a revision of ours: upgrade to head (nothing to do when there already).
* it names a revision we do not know: a newer Framecast wrote it; refused with one line.
* no ``alembic_version``, the legacy marker says schema v4 (PostgreSQL v1): the database is exactly
  the baseline revision; stamped there, then upgraded.
* no ``alembic_version``, an older legacy marker (SQLite v1-v3): refused with one line (start the
  previous release once, which upgrades it to v4; those steps are not carried here).
* nothing at all: created from ``schema.py`` and stamped at head, Alembic's recipe for a new
  database ("Building an Up to Date Database from Scratch"); ``tests/storage/test_migrations.py``
  proves the chain builds the same schema on both databases.

The two common cases (at head already, and a new database) need no Alembic at all: it is imported
only when there is something to upgrade, which keeps every start-up about a quarter second shorter.

The legacy marker is then set past what the pre-Alembic code knows, so that code refuses the file.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Column, Connection, MetaData, String, Table, inspect, select

from framecast.storage import schema
from framecast.storage.dialects import PG_LEGACY, SQLITE_LEGACY, Postgres, Sqlite, StoreError

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["BASELINE", "HEAD", "alembic_config", "upgrade"]

log = logging.getLogger(__name__)

BASELINE = "0001_baseline"
#: The revision ``schema.py`` describes: the chain's head (``tests/storage/test_migrations.py`` checks).
HEAD = "0003_web"
_SCRIPTS = Path(__file__).with_name("migrations")

# Alembic's own bookkeeping table, as Alembic creates it.
_versions = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), primary_key=True, nullable=False),
)


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, made in code (no alembic.ini); ``connection`` is used as is."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = connection
    return config


def upgrade(db: Sqlite | Postgres, conn: Connection) -> None:
    """Bring the database on ``conn`` to head, or raise :class:`StoreError` with one line."""
    tables = inspect(conn)
    current = (
        conn.execute(select(_versions.c.version_num)).scalar()
        if tables.has_table("alembic_version")
        else None
    )
    if current == HEAD:
        return
    if current is None and db.legacy_version(conn) is None and not tables.has_table("jobs"):
        schema.metadata.create_all(conn)
        _versions.create(conn)
        conn.execute(_versions.insert().values(version_num=HEAD))
        db.fence(conn)
        log.info("job store: new database created at schema revision %s", HEAD)
        return
    _upgrade_with_alembic(db, conn, current)


def _upgrade_with_alembic(db: Sqlite | Postgres, conn: Connection, current: str | None) -> None:
    from alembic import command
    from alembic.script import ScriptDirectory

    config = alembic_config(conn)
    script = ScriptDirectory.from_config(config)
    head = script.get_current_head()
    legacy = db.legacy_version(conn) if current is None else None
    if legacy is not None:
        expected = SQLITE_LEGACY if db.name == "sqlite" else PG_LEGACY
        if legacy > expected or not inspect(conn).has_table("jobs"):
            raise StoreError(f"database schema v{legacy} is newer than this Framecast supports ({head})")
        if legacy < expected:
            raise StoreError(
                f"database schema v{legacy} is too old to upgrade here: start the previous Framecast"
                f" release (schema v{expected}) on it once first"
            )
        command.stamp(config, BASELINE)
        log.info("job store: legacy schema v%d adopted as revision %s", legacy, BASELINE)
        current = BASELINE
        db.fence(conn)
    if current is not None and current not in {s.revision for s in script.walk_revisions()}:
        raise StoreError(f"database schema revision {current} is newer than this Framecast supports ({head})")
    if current != head:
        command.upgrade(config, "head")
        log.info("job store: schema migrated from %s to %s", current or "nothing", head)
        db.fence(conn)
