"""When a failed delivery to Discord is worth another attempt, and after how long.

Discord's transient trouble (a rate limit, a 5xx, a lost connection) is ridden out for minutes, not
seconds: a result that is ready is never failed because Discord was briefly unwilling. Anything
else (a 413, another 4xx) goes straight back to the runner. A failed attempt may still have reached
Discord: the runner looks at the job's messages before the next one (it alone owns "delivered
exactly once"), so this module only decides whether and when.
"""

from __future__ import annotations

import math

import aiohttp
import discord

__all__ = ["ATTEMPTS", "draw_pause", "retry_delay"]

#: Delivery attempts of one result before Discord's trouble is given up on: the waits between them
#: (1, 2, 4 ... 32 s, then 60 s each) ride out about six minutes of a Discord outage. With five,
#: fifteen seconds of 503s on a channel message (which discord.py does not retry) failed the job.
ATTEMPTS = 12
_BASE = 1.0
_CAP = 60.0
#: The longest wait a rate limit's own word buys (an odd or huge Retry-After is not slept for hours).
_LONGEST_RATE_LIMIT = 300.0


def retry_delay(exc: BaseException, attempt: int) -> float | None:
    """Seconds to wait before retrying a delivery whose attempt number `attempt` failed with `exc`.

    None: do not retry (not transient, or the last attempt).
    """
    if attempt >= ATTEMPTS:
        return None
    if isinstance(exc, discord.RateLimited):
        return _rate_limit_wait(exc.retry_after, attempt)
    if isinstance(exc, discord.HTTPException):
        if exc.status == 429:
            # A 429 discord.py gave up on: its own retries ran out on a busy route, or it came
            # without the Via header (a proxy's, or Cloudflare's). Either way it says "later".
            return _rate_limit_wait(_retry_after_header(exc), attempt)
        return _backoff(attempt) if exc.status >= 500 else None
    if isinstance(exc, aiohttp.ClientError | TimeoutError):
        return _backoff(attempt)
    return None


def draw_pause(failures: int) -> float:
    """Seconds a job's message waits after `failures` failed draws in a row (a deadline to move
    tries again at once otherwise: a tight loop of requests to a failing Discord)."""
    return _backoff(failures)


def _retry_after_header(exc: discord.HTTPException) -> str | None:
    """The answer's Retry-After header, as sent (None when there was none)."""
    headers = getattr(exc.response, "headers", None)
    value = headers.get("Retry-After") if headers is not None else None
    return value if isinstance(value, str) else None


def _rate_limit_wait(said: float | str | None, attempt: int) -> float:
    """Discord's wait when it is a usable number of seconds (capped), else the backoff."""
    if said is None:
        return _backoff(attempt)
    try:
        seconds = float(said)
    except ValueError:
        return _backoff(attempt)
    if not math.isfinite(seconds) or seconds <= 0:
        return _backoff(attempt)
    return min(seconds, _LONGEST_RATE_LIMIT)


def _backoff(attempt: int) -> float:
    # 1, 2, 4 ... 32, then 60 s: no jitter, a job's deliveries are already spread by their jobs' timing.
    return float(min(_CAP, _BASE * 2 ** (attempt - 1)))
