"""Counting the delivery code's failed requests to Discord (``framecast_discord_errors_total``).

Each failed request is counted once, where it is made (an edit, a post, a fetch, a ping), by HTTP
status and Discord's JSON error code; the code that later decides what a failure means (move the
message, retry, give up) counts nothing again. discord.py's own retries of 429s and 5xx happen
below this and are not seen: what is counted is what reached Framecast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import aiohttp
import discord

from framecast.app import ChatMetrics

__all__ = ["COUNTED", "DiscordErrors"]

#: The failures of one request to Discord that are counted: refusals, a rate limit discord.py
#: would not wait out (``max_ratelimit_timeout``), and no answer at all.
COUNTED = (discord.HTTPException, discord.RateLimited, aiohttp.ClientError, TimeoutError)


class DiscordErrors:
    """Records failed requests to Discord in `metrics` (None: nothing is recorded)."""

    def __init__(self, metrics: ChatMetrics | None = None) -> None:
        self._metrics = metrics

    def __repr__(self) -> str:
        return f"<DiscordErrors recording={self._metrics is not None}>"

    def record(self, exc: BaseException) -> None:
        """Count `exc` if it is a failed request (see :data:`COUNTED`); anything else is ignored."""
        if self._metrics is None:
            return
        if isinstance(exc, discord.HTTPException):
            # code 0: Discord sent no JSON error code (a bare 5xx from a proxy, say).
            self._metrics.discord_error(exc.status, exc.code or None)
        elif isinstance(exc, discord.RateLimited):
            self._metrics.discord_error(429, None)
        elif isinstance(exc, aiohttp.ClientError | TimeoutError):
            self._metrics.discord_error(None, None)

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        """Around one request: a failure in :data:`COUNTED` is recorded, then raised as it was."""
        try:
            yield
        except COUNTED as exc:
            self.record(exc)
            raise
