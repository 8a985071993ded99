"""Bringing a database to the code's schema at start-up, with Alembic (one chain for both databases).

Runs in ``Database.migrate``'s transaction, under the lock a second process would take; what is
upgraded, adopted or refused: ``docs/ARCHITECTURE.md``, "Storage". After any change the legacy marker
is set past what the pre-Alembic code knows, so that code refuses the database.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Column, Connection, MetaData, String, Table, inspect, select

from framecast.storage import schema
from framecast.storage.dialects import StoreError

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["BASELINE", "HEAD", "alembic_config", "upgrade"]

log = logging.getLogger(__name__)

BASELINE = "0001_baseline"
#: The revision ``schema.py`` describes: the chain's head (``tests/storage/test_migrations.py`` checks).
HEAD = "0004_key_last4"
#: Legacy markers (SQLite ``user_version``, PostgreSQL ``schema_version``): the baseline's number
#: before Alembic, and what is written there afterwards.
SQLITE_LEGACY, SQLITE_FENCE = 4, 5
PG_LEGACY, PG_FENCE = 1, 2
_SCRIPTS = Path(__file__).with_name("migrations")

# Alembic's own bookkeeping table, as Alembic creates it (a primary key is NOT NULL).
_versions = Table("alembic_version", MetaData(), Column("version_num", String(32), primary_key=True))


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, made in code (no alembic.ini); ``connection`` is used as is."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = connection
    return config


def upgrade(conn: Connection) -> None:
    """Bring the database on ``conn`` to head, or raise :class:`StoreError` with one line."""
    tables = inspect(conn)
    current = None
    if tables.has_table("alembic_version"):
        current = conn.execute(select(_versions.c.version_num)).scalar()
    if current == HEAD:
        return
    legacy = _legacy_version(conn) if current is None else None
    if current is None and legacy is None and not tables.has_table("jobs"):
        # New: Alembic's recipe, without importing Alembic (a quarter second of every such start-up).
        schema.metadata.create_all(conn)
        _versions.create(conn)
        conn.execute(_versions.insert().values(version_num=HEAD))
        _fence(conn)
        log.info("job store: new database created at schema revision %s", HEAD)
        return
    from alembic import command
    from alembic.script import ScriptDirectory

    config = alembic_config(conn)
    script = ScriptDirectory.from_config(config)
    head = script.get_current_head()
    if legacy is not None:
        expected = SQLITE_LEGACY if conn.dialect.name == "sqlite" else PG_LEGACY
        if legacy > expected or not tables.has_table("jobs"):
            raise StoreError(f"database schema v{legacy} is newer than this Framecast supports ({head})")
        if legacy < expected:
            raise StoreError(
                f"database schema v{legacy} is too old to upgrade here: start the previous Framecast"
                f" release (schema v{expected}) on it once first"
            )
        command.stamp(config, BASELINE)
        log.info("job store: legacy schema v%d adopted as revision %s", legacy, BASELINE)
        current = BASELINE
        _fence(conn)
    if current is not None and current not in {s.revision for s in script.walk_revisions()}:
        raise StoreError(f"database schema revision {current} is newer than this Framecast supports ({head})")
    if current != head:
        command.upgrade(config, "head")
        log.info("job store: schema migrated from %s to %s", current or "nothing", head)
        _fence(conn)


def _legacy_version(conn: Connection) -> int | None:
    if conn.dialect.name == "sqlite":
        return int(conn.exec_driver_sql("PRAGMA user_version").scalar_one()) or None
    if conn.exec_driver_sql("SELECT to_regclass('schema_version')").scalar() is None:
        return None
    version = conn.exec_driver_sql("SELECT MAX(version) FROM schema_version").scalar()
    return int(version) if version is not None else None


def _fence(conn: Connection) -> None:
    # Neither statement takes parameters: the numbers are ours, formatted in.
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(f"PRAGMA user_version = {SQLITE_FENCE:d}")
        return
    conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    conn.exec_driver_sql("DELETE FROM schema_version")
    conn.exec_driver_sql(f"INSERT INTO schema_version (version) VALUES ({PG_FENCE:d})")
