"""The test Redis on 127.0.0.1:6379: whether it answers, once, and a skip mark that says why not.

Tests that share a budget through Redis use the real server on this machine (CI has one too); where
none answers they skip with :data:`REDIS_MISSING` as the reason. Key names carry a random part, so
tests never step on each other; the two-process tests that flush a database take their worker's own
(:func:`tests.workers.redis_url`).
"""

from __future__ import annotations

import functools
import socket

import pytest

__all__ = ["REDIS_HOST", "REDIS_MISSING", "REDIS_PORT", "redis_answers", "requires_redis"]

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
