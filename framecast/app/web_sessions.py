"""Web sessions: who is logged in to the web pages (Login with Discord), and for how long.

A session is a row in the store; the browser holds a random token (in a signed cookie, the web
edge's business) whose SHA-256 keys the row, so the table alone opens no session. Sessions end at
logout or after :data:`SESSION_SECONDS`, whichever comes first.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Protocol

from framecast.clock import Clock

__all__ = ["SESSION_SECONDS", "WebSessions"]

#: How long a web session lasts (then the person logs in with Discord again).
SESSION_SECONDS = 7 * 86400.0


class SessionRows(Protocol):
    """What sessions need of the store (see ``framecast.storage.web.WebSessionRows``)."""

    async def add(self, token_hash: str, user_id: int, *, created_at: float, expires_at: float) -> None:
        """Store a new session."""
        ...

    async def user_of(self, token_hash: str, *, now: float) -> int | None:
        """The user of an unexpired session."""
        ...

    async def remove(self, token_hash: str) -> None:
        """End a session."""
        ...

    async def purge(self, *, now: float) -> None:
        """Forget expired sessions."""
        ...


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class WebSessions:
    """Open, find and end web sessions."""

    def __init__(self, rows: SessionRows, clock: Clock, *, lifetime: float = SESSION_SECONDS) -> None:
        self._rows = rows
        self._clock = clock
        self.lifetime = lifetime

    def __repr__(self) -> str:
        return f"<WebSessions lifetime={self.lifetime:g}s>"

    async def open(self, user_id: int) -> str:
        """A new session for `user_id` (Discord confirmed who they are): its token, for the cookie.

        Expired sessions are forgotten on the way (logins are rare next to page views).
        """
        now = self._clock.time()
        await self._rows.purge(now=now)
        token = secrets.token_urlsafe(32)
        await self._rows.add(_hash(token), user_id, created_at=now, expires_at=now + self.lifetime)
        return token

    async def user(self, token: str) -> int | None:
        """Whose session `token` is, while it lasts; None: unknown, ended or expired."""
        if not token or len(token) > 128:
            return None
        return await self._rows.user_of(_hash(token), now=self._clock.time())

    async def close(self, token: str) -> None:
        """End the session `token` (logout)."""
        if token and len(token) <= 128:
            await self._rows.remove(_hash(token))
