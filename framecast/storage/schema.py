"""The store's tables, written once for SQLite and PostgreSQL (SQLAlchemy Core ``MetaData``).

What the queries are written against: it must describe the head of ``migrations/versions/``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

from framecast.guilds.settings import KeyStatus
from framecast.guilds.styles import StyleKind
from framecast.values import ACTIVE, JobKind, JobState


def sql_list(values: object) -> str:
    """``'a', 'b'`` for an IN (...) or CHECK term: our own enum values, never a caller's text."""
    return ", ".join(f"'{v.value}'" for v in values)  # type: ignore[attr-defined]


def state_in(states: object) -> sa.TextClause:
    """``state IN (...)``, inlined (not bound): SQLite uses a partial index only when the query repeats
    the index's WHERE term literally, and an inlined list needs no expansion per call."""
    return sa.text(f"state IN ({sql_list(states)})")


#: The unfinished states (the partial indexes' term).
OPEN = state_in(sorted(ACTIVE))
#: Delivered jobs (the gallery's partial index).
DELIVERED = state_in([JobState.DELIVERED])
RETRIES = sa.text("retry_of IS NOT NULL")


def _where(term: sa.TextClause) -> dict[str, Any]:
    # A partial index's WHERE, on both databases.
    return {"sqlite_where": term, "postgresql_where": term}


# Ids: INTEGER on SQLite (only "INTEGER PRIMARY KEY" is the rowid, AUTOINCREMENT: never reused),
# BIGINT everywhere else (Discord snowflakes are 64-bit).
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

metadata = sa.MetaData()

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", Id, sa.Identity(always=True), primary_key=True),
    sa.Column("kind", sa.Text, sa.CheckConstraint(f"kind IN ({sql_list(JobKind)})"), nullable=False),
    sa.Column("state", sa.Text, sa.CheckConstraint(f"state IN ({sql_list(JobState)})"), nullable=False),
    sa.Column("guild_id", sa.BigInteger, nullable=False),
    sa.Column("channel_id", sa.BigInteger, nullable=False),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("locale", sa.Text, nullable=False),
    sa.Column("params", sa.Text, nullable=False),  # JSON text: round-trips exactly, unlike jsonb
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("task_id", sa.Text),
    sa.Column("started_at", sa.Double),
    sa.Column("progress", sa.Double),
    sa.Column("result_url", sa.Text),
    sa.Column(
        "result_local", sa.Boolean(create_constraint=True), nullable=False, server_default=sa.text("false")
    ),
    sa.Column("error_code", sa.Text),
    sa.Column("error_detail", sa.Text),
    sa.Column("retry_of", sa.BigInteger),
    sa.Column("key_owner", sa.BigInteger),
    sa.Column("discord", sa.Text, nullable=False, server_default=sa.text("'{}'")),
    sa.Column("lease_owner", sa.Text),
    sa.Column("lease_until", sa.Double),
    sa.Column("key_last4", sa.Text),  # the last four characters of the key that created the task
    sa.Index("jobs_member", "guild_id", "user_id", "id"),
    sa.Index("jobs_open", "guild_id", "state", "user_id", **_where(OPEN)),
    sa.Index("jobs_open_fifo", "id", **_where(OPEN)),
    sa.Index("jobs_retry_of", "retry_of", unique=True, **_where(RETRIES)),
    sa.Index("jobs_quota", "guild_id", "user_id", "kind", "created_at"),
    # The web gallery: a server's delivered jobs, newest first (keyset paging on the id).
    sa.Index("jobs_delivered", "guild_id", "id", **_where(DELIVERED)),
    # /me: a person's jobs in every server and their own queue, newest first.
    sa.Index("jobs_user", "user_id", "id"),
    sqlite_autoincrement=True,
)

durations = sa.Table(
    "durations",
    metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("mean", sa.Double, nullable=False),
    sa.Column("spread", sa.Double, nullable=False),
    sa.Column("count", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
)

guild_settings = sa.Table(
    "guild_settings",
    metadata,
    sa.Column("guild_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("data", sa.Text, nullable=False),  # GuildSettings.to_json() text: the overridden fields only
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("updated_by", sa.BigInteger, nullable=False),
)

guild_keys = sa.Table(
    "guild_keys",
    metadata,
    sa.Column("guild_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("token", sa.LargeBinary, nullable=False),  # Fernet ciphertext only, never the key
    sa.Column("last4", sa.Text, nullable=False),
    sa.Column("status", sa.Text, sa.CheckConstraint(f"status IN ({sql_list(KeyStatus)})"), nullable=False),
    sa.Column("set_by", sa.BigInteger, nullable=False),
    sa.Column("set_at", sa.Double, nullable=False),
)

# Who changed which setting when; never the values (one of them is the API key).
settings_log = sa.Table(
    "settings_log",
    metadata,
    sa.Column("id", Id, sa.Identity(always=True), primary_key=True),
    sa.Column("guild_id", sa.BigInteger, nullable=False),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("setting", sa.Text, nullable=False),
    sa.Column("at", sa.Double, nullable=False),
    sa.Index("settings_log_guild", "guild_id", "id"),
    sqlite_autoincrement=True,
)

# A server's named prompt styles: unique per server ignoring case, checked under the server's lock (no
# SQL collation folds case alike on both databases); the primary key keeps the exact name unique.
guild_styles = sa.Table(
    "guild_styles",
    metadata,
    sa.Column("guild_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("template", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, sa.CheckConstraint(f"kind IN ({sql_list(StyleKind)})"), nullable=False),
    sa.Column("created_by", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
)

# Web sessions (Login with Discord): the row is the session; the browser's cookie holds a random
# token whose SHA-256 is the key here, so a copy of the table opens no session.
web_sessions = sa.Table(
    "web_sessions",
    metadata,
    sa.Column("token_hash", sa.Text, primary_key=True),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Index("web_sessions_expiry", "expires_at"),
)

#: The jobs that use up a member's daily quota: not failed jobs (they gave the member nothing), nor
#: jobs cancelled before the service started them (they cost nothing); everything else does.
QUOTA_COUNTS: ColumnElement[bool] = sa.and_(
    jobs.c.state != JobState.FAILED.value,
    sa.not_(sa.and_(jobs.c.state == JobState.CANCELLED.value, jobs.c.task_id.is_(None))),
)
