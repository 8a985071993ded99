"""Job storage: one store for SQLite (one process) and PostgreSQL (shared by several processes) on
SQLAlchemy Core (async), migrated by Alembic."""

from __future__ import annotations

from typing import TYPE_CHECKING

from framecast.storage.dialects import StoreClosed, StoreError, StoreUnavailable, redact_dsn
from framecast.storage.faults import StoreTimeouts
from framecast.storage.store import Store
from framecast.storage.values import MemberJobs, SettingsChange, StoredKey
from framecast.storage.web import GalleryFilter, UsageRow

if TYPE_CHECKING:
    from framecast.clock import Clock
    from framecast.config import Settings

__all__ = [
    "GalleryFilter",
    "MemberJobs",
    "SettingsChange",
    "Store",
    "StoreClosed",
    "StoreError",
    "StoreTimeouts",
    "StoreUnavailable",
    "StoredKey",
    "UsageRow",
    "open_store",
    "redact_dsn",
]


async def open_store(settings: Settings, *, clock: Clock) -> Store:
    """Open the job store the settings select: PostgreSQL if ``database_url`` is set, else SQLite."""
    url = settings.database_url
    timeouts = StoreTimeouts(
        connect=settings.database_connect_timeout,
        statement=settings.database_statement_timeout,
        pool=settings.database_pool_timeout,
        call=settings.database_call_timeout,
    )
    return await Store.open(
        url if url is not None else settings.database_path, clock=clock, timeouts=timeouts
    )
