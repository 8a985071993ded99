"""Web: the sessions of Login with Discord, the gallery's index of delivered jobs, and /me's index of
a person's jobs.

Revision ID: 0003_web
Revises: 0002_styles
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_web"
down_revision = "0002_styles"
branch_labels = None
depends_on = None

# Written out, not imported: a revision keeps the shape it had when it was written.
_DELIVERED = "state = 'delivered'"


def upgrade() -> None:
    """Create ``web_sessions``, the partial index ``jobs_delivered`` (guild_id, id) and ``jobs_user``
    (user_id, id)."""
    op.create_table(
        "web_sessions",
        sa.Column("token_hash", sa.Text, primary_key=True),
        sa.Column("user_id", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
    )
    op.create_index("web_sessions_expiry", "web_sessions", ["expires_at"])
    op.create_index(
        "jobs_delivered",
        "jobs",
        ["guild_id", "id"],
        sqlite_where=sa.text(_DELIVERED),
        postgresql_where=sa.text(_DELIVERED),
    )
    op.create_index("jobs_user", "jobs", ["user_id", "id"])
