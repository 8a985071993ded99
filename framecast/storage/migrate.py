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
* nothing at all: created through the chain.

The legacy marker is then set past what the pre-Alembic code knows, so that code refuses the file.
"""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect

from framecast.storage.dialects import PG_LEGACY, SQLITE_LEGACY, Postgres, Sqlite, StoreError

__all__ = ["BASELINE", "alembic_config", "upgrade"]

log = logging.getLogger(__name__)

BASELINE = "0001_baseline"
_SCRIPTS = Path(__file__).with_name("migrations")


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, made in code (no alembic.ini); ``connection`` is used as is."""
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = connection
    return config


def upgrade(db: Sqlite | Postgres, conn: Connection) -> None:
    """Bring the database on ``conn`` to head, or raise :class:`StoreError` with one line."""
    config = alembic_config(conn)
    script = ScriptDirectory.from_config(config)
    head = script.get_current_head()
    current = MigrationContext.configure(conn).get_current_revision()
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
