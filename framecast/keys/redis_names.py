"""How the processes reach one Redis (:func:`connect`), and name each key's shared state there
without revealing the key.

A key's budget (:mod:`framecast.keys.shared_budget`) and plan (:mod:`framecast.keys.shared_plan`) are
named by :func:`budget_key_id`: an HMAC of the key under ``REDIS_KEY_SECRET``, a secret every process
on that Redis shares. A plain hash would let anyone who reads Redis confirm a guessed key; without
the secret the names say nothing. :func:`check_secret` stops a process whose secret differs from
the others' (their budgets would never meet, and the key would be overspent).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import TYPE_CHECKING

from framecast.config import ConfigError, Secret

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.exceptions import RedisError

__all__ = [
    "SECRET_MARK",
    "SECRET_MARK_TTL",
    "SecretMismatch",
    "budget_key_id",
    "check_secret",
    "connect",
    "redis_error",
]

log = logging.getLogger(__name__)


def connect(url: Secret | str) -> aioredis.Redis:
    """A Redis client for budgets (``REDIS_URL``); redis-py's own retries off, the budget retries itself.

    Connecting is lazy: nothing is sent before the first grant. Close it with ``await client.aclose()``.
    """
    # Imported here: only a process given REDIS_URL pays for redis-py (see redis_error).
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    raw = url.reveal() if isinstance(url, Secret) else url
    return aioredis.Redis.from_url(
        raw, socket_timeout=5.0, socket_connect_timeout=5.0, retry=Retry(NoBackoff(), 0)
    )


def budget_key_id(api_key: Secret | str, secret: Secret | str) -> str:
    """The name of a key's budget in Redis: an HMAC-SHA-256 of the key under ``REDIS_KEY_SECRET``.

    Never the key, and never a plain hash of it: whoever reads Redis without the secret cannot
    test a guessed key against the names. Every process on one Redis must share the secret (see
    :func:`check_secret`), or their budgets would not meet.
    """
    raw = api_key.reveal() if isinstance(api_key, Secret) else api_key
    return hmac.new(_secret_bytes(secret), raw.encode(), hashlib.sha256).hexdigest()[:32]


def _secret_bytes(secret: Secret | str) -> bytes:
    return (secret.reveal() if isinstance(secret, Secret) else secret).encode()


def redis_error() -> type[RedisError]:
    """redis-py's base error, for ``except redis_error():`` around a call to a Redis client.

    An ``except`` clause's class is looked up only when an exception reaches it, and a Redis call
    fails only where a client exists: so redis-py is imported only by a process given ``REDIS_URL``
    (importing it costs every start a few hundredths of a second of CPU).
    """
    from redis.exceptions import RedisError

    return RedisError


#: Where the processes on one Redis leave a mark of their ``REDIS_KEY_SECRET`` (an HMAC of a fixed
#: text under it, which says nothing of the secret), so a process with another secret is stopped.
SECRET_MARK = "framecast:budget-secret-mark"
#: How long a mark lasts without a process starting: a secret changed on every process at once
#: is accepted after this, or at once when the mark is deleted.
SECRET_MARK_TTL = 7 * 86400


class SecretMismatch(ConfigError):
    """Another process on this Redis names budgets under a different ``REDIS_KEY_SECRET``."""

    def __init__(self) -> None:
        super().__init__(
            "REDIS_KEY_SECRET",
            "another process on this Redis uses a different one: set the same in every process "
            f"(to change it everywhere, stop them all and delete the Redis key {SECRET_MARK})",
        )


async def check_secret(redis: aioredis.Redis, secret: Secret | str) -> bool:
    """Leave this process's secret mark on `redis`, or raise :class:`SecretMismatch` when the
    processes already there use another secret (their budgets and ours would never meet).

    False when Redis does not answer (the check is skipped, with one WARNING; the budgets wait for
    Redis anyway). True when the mark is ours.
    """
    mark = hmac.new(_secret_bytes(secret), b"framecast budget names", hashlib.sha256).hexdigest()
    try:
        await redis.set(SECRET_MARK, mark, nx=True, ex=SECRET_MARK_TTL)
        raw = await redis.get(SECRET_MARK)
        found = raw.decode() if isinstance(raw, bytes) else raw
        if found == mark:
            await redis.expire(SECRET_MARK, SECRET_MARK_TTL)  # ours: it lasts while processes start
    except (redis_error(), OSError) as exc:
        log.warning("Redis did not answer the REDIS_KEY_SECRET check (%s): skipped", type(exc).__name__)
        return False
    if found is not None and found != mark:
        raise SecretMismatch()
    return True
