"""Baseline: the schema both hand-written stores had last (SQLite user_version 4, PostgreSQL v1).

A database they wrote is stamped at this revision without running it (see migrate.py); an empty one
is created by it. Never edit it: append a new revision instead.

Revision ID: 0001_baseline
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from framecast.guilds.settings import KeyStatus
from framecast.storage.schema import sql_list
from framecast.values import ACTIVE, JobKind, JobState

revision = "0001_baseline"
down_revision = None
branch_labels = None
depends_on = None

# INTEGER on SQLite (the rowid, AUTOINCREMENT: ids never reused), BIGINT IDENTITY on PostgreSQL.
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_OPEN = sa.text(f"state IN ({sql_list(sorted(ACTIVE))})")
_RETRIED = sa.text("retry_of IS NOT NULL")


def upgrade() -> None:
    """Create the five tables and their indexes."""
    big, text, double = sa.BigInteger, sa.Text, sa.Double
    op.create_table(
        "jobs",
        sa.Column("id", _ID, sa.Identity(always=True), primary_key=True),
        sa.Column("kind", text, sa.CheckConstraint(f"kind IN ({sql_list(JobKind)})"), nullable=False),
        sa.Column("state", text, sa.CheckConstraint(f"state IN ({sql_list(JobState)})"), nullable=False),
        sa.Column("guild_id", big, nullable=False),
        sa.Column("channel_id", big, nullable=False),
        sa.Column("user_id", big, nullable=False),
        sa.Column("locale", text, nullable=False),
        sa.Column("params", text, nullable=False),
        sa.Column("created_at", double, nullable=False),
        sa.Column("updated_at", double, nullable=False),
        sa.Column("task_id", text),
        sa.Column("started_at", double),
        sa.Column("progress", double),
        sa.Column("result_url", text),
        sa.Column(
            "result_local", sa.Boolean(create_constraint=True), nullable=False, server_default=sa.false()
        ),
        sa.Column("error_code", text),
        sa.Column("error_detail", text),
        sa.Column("retry_of", big),
        sa.Column("key_owner", big),
        sa.Column("discord", text, nullable=False, server_default=sa.text("'{}'")),
        sa.Column("lease_owner", text),
        sa.Column("lease_until", double),
        sqlite_autoincrement=True,
    )
    op.create_index("jobs_member", "jobs", ["guild_id", "user_id", "id"])
    op.create_index(
        "jobs_open", "jobs", ["guild_id", "state", "user_id"], sqlite_where=_OPEN, postgresql_where=_OPEN
    )
    op.create_index("jobs_open_fifo", "jobs", ["id"], sqlite_where=_OPEN, postgresql_where=_OPEN)
    op.create_index(
        "jobs_retry_of", "jobs", ["retry_of"], unique=True, sqlite_where=_RETRIED, postgresql_where=_RETRIED
    )
    op.create_index("jobs_quota", "jobs", ["guild_id", "user_id", "kind", "created_at"])
    op.create_table(
        "durations",
        sa.Column("key", text, primary_key=True),
        sa.Column("mean", double, nullable=False),
        sa.Column("spread", double, nullable=False),
        sa.Column("count", big, nullable=False),
        sa.Column("updated_at", double, nullable=False),
    )
    op.create_table(
        "guild_settings",
        sa.Column("guild_id", big, primary_key=True, autoincrement=False),
        sa.Column("data", text, nullable=False),
        sa.Column("updated_at", double, nullable=False),
        sa.Column("updated_by", big, nullable=False),
    )
    op.create_table(
        "guild_keys",
        sa.Column("guild_id", big, primary_key=True, autoincrement=False),
        sa.Column("token", sa.LargeBinary, nullable=False),
        sa.Column("last4", text, nullable=False),
        sa.Column("status", text, sa.CheckConstraint(f"status IN ({sql_list(KeyStatus)})"), nullable=False),
        sa.Column("set_by", big, nullable=False),
        sa.Column("set_at", double, nullable=False),
    )
    op.create_table(
        "settings_log",
        sa.Column("id", _ID, sa.Identity(always=True), primary_key=True),
        sa.Column("guild_id", big, nullable=False),
        sa.Column("user_id", big, nullable=False),
        sa.Column("setting", text, nullable=False),
        sa.Column("at", double, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("settings_log_guild", "settings_log", ["guild_id", "id"])
