"""The test Redis on 127.0.0.1:6379: whether it answers, once, and a skip mark that says why not.

Tests that share a budget through Redis use the real server on this machine (CI has one too); where
none answers they skip with :data:`REDIS_MISSING` as the reason. Key names carry a random part, so
tests never step on each other; the two-process tests that flush a database take their worker's own
(:func:`tests.workers.redis_url`).
"""

from __future__ import annotations

import functools
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = [
    "REDIS_HOST",
    "REDIS_MISSING",
    "REDIS_PORT",
    "own_connection",
    "plan_key_id",
    "redis_answers",
    "requires_redis",
]

REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
REDIS_MISSING = f"no Redis answering PING on {REDIS_HOST}:{REDIS_PORT}"


@functools.cache
def redis_answers() -> bool:
    """True when a Redis server answers PING on the test address (asked once per process)."""
    try:
        with socket.create_connection((REDIS_HOST, REDIS_PORT), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


#: Skips the test (or, as ``pytestmark``, the module) when no Redis answers.
requires_redis = pytest.mark.skipif(not redis_answers(), reason=REDIS_MISSING)


def own_connection(port: int = REDIS_PORT) -> aioredis.Redis:
    """A connection of its own, as each process has (redis-py's retries off, as in the bot)."""
    return aioredis.Redis(
        host=REDIS_HOST,
        port=port,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
    )


@pytest.fixture
async def plan_key_id() -> AsyncIterator[str]:
    """A key id of its own for a shared planning state (its Redis hash deleted after the test)."""
    from framecast.keys.shared_plan import KEY_PREFIX

    kid = f"test-{uuid.uuid4().hex[:12]}"
    yield kid
    client = own_connection()
    await client.delete(f"{KEY_PREFIX}{kid}")
    await client.aclose()


async def refresh_all(*states: Any) -> None:
    """Each shared planning state publishes, then reads, twice round: everyone sees everyone's latest."""
    for _ in range(2):
        for state in states:
            assert await state.refresh()
