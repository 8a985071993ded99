"""Styles: a server's named prompt styles (``/settings styles``), one table.

Revision ID: 0002_styles
Revises: 0001_baseline
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_styles"
down_revision = "0001_baseline"
branch_labels = None
depends_on = None

# Written out, not imported: a revision keeps the shape it had when it was written.
_KINDS = "kind IN ('video', 'image', 'both')"


def upgrade() -> None:
    """Create ``guild_styles``: one row per style, keyed by server and exact name."""
    op.create_table(
        "guild_styles",
        sa.Column("guild_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("template", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, sa.CheckConstraint(_KINDS), nullable=False),
        sa.Column("created_by", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )
