"""Web sessions (Login with Discord) in the store's database (table ``web_sessions``).

Reached through :attr:`framecast.storage.Store.web_sessions`. A row is keyed by the SHA-256 of the
browser's session token, never the token itself; what a session may do is the application's rule
(``framecast.app.web_sessions``).
"""

from __future__ import annotations

from sqlalchemy import bindparam, delete, insert, select

from framecast.storage import values
from framecast.storage.dialects import Postgres, Sqlite
from framecast.storage.schema import web_sessions

__all__ = ["WebSessionRows"]

_FIND = select(web_sessions.c.user_id).where(
    web_sessions.c.token_hash == bindparam("token_hash"), web_sessions.c.expires_at > bindparam("now")
)
_REMOVE = delete(web_sessions).where(web_sessions.c.token_hash == bindparam("token_hash"))
_PURGE = delete(web_sessions).where(web_sessions.c.expires_at <= bindparam("now"))


class WebSessionRows:
    """The sessions on one database (build through :attr:`Store.web_sessions`)."""

    def __init__(self, db: Sqlite | Postgres) -> None:
        self._db = db

    def __repr__(self) -> str:
        return f"<WebSessionRows {self._db.name}>"

    async def add(self, token_hash: str, user_id: int, *, created_at: float, expires_at: float) -> None:
        """Store a new session of `user_id` until `expires_at` (epoch seconds)."""
        row = {
            "token_hash": values.check_text("token_hash", token_hash),
            "user_id": values.discord_id(user_id),
            "created_at": float(created_at),
            "expires_at": float(expires_at),
        }
        await self._db.rows(insert(web_sessions).values(row))

    async def user_of(self, token_hash: str, *, now: float) -> int | None:
        """The user of the unexpired session keyed `token_hash`, or None."""
        found = await self._db.first(_FIND, {"token_hash": token_hash, "now": float(now)})
        return int(found[0]) if found is not None else None

    async def remove(self, token_hash: str) -> None:
        """End the session keyed `token_hash` (none: nothing happens)."""
        await self._db.rows(_REMOVE, {"token_hash": token_hash})

    async def purge(self, *, now: float) -> None:
        """Forget every session expired at `now`."""
        await self._db.rows(_PURGE, {"now": float(now)})
