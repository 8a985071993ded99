"""Jobs: which key created the task, by its last four characters, so a key replaced before a restart
is told apart from the one that created the task.

Revision ID: 0004_key_last4
Revises: 0003_web
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_key_last4"
down_revision = "0003_web"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``jobs.key_last4`` (nullable: the jobs of before are polled with their owner's key, as before)."""
    op.add_column("jobs", sa.Column("key_last4", sa.Text))
