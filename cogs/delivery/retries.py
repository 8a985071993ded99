"""When a failed delivery to Discord is worth another attempt, and after how long.

Discord's transient trouble (a long rate limit, a 5xx, a lost connection) is ridden out; anything
else (a 413, another 4xx) goes straight back to the runner. A failed attempt may still have
reached Discord: the runner looks at the job's messages before the next one (it alone owns
"delivered exactly once"), so this module only decides whether and when.
"""

from __future__ import annotations

import aiohttp
import discord

__all__ = ["ATTEMPTS", "retry_delay"]

#: Delivery attempts of one result before Discord's trouble is given up on.
ATTEMPTS = 5
_BASE = 1.0
_CAP = 30.0


def retry_delay(exc: BaseException, attempt: int) -> float | None:
    """Seconds to wait before retrying a delivery whose attempt number `attempt` failed with `exc`.

    None: do not retry (not transient, or the last attempt).
    """
    if attempt >= ATTEMPTS:
        return None
    if isinstance(exc, discord.RateLimited):
        return exc.retry_after
    if isinstance(exc, discord.HTTPException):
        return _backoff(attempt) if exc.status >= 500 else None
    if isinstance(exc, aiohttp.ClientError | TimeoutError):
        return _backoff(attempt)
    return None


def _backoff(attempt: int) -> float:
    # 1, 2, 4, 8 s: no jitter, a job's deliveries are already spread by their jobs' timing.
    return float(min(_CAP, _BASE * 2 ** (attempt - 1)))
