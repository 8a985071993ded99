"""What each pytest-xdist worker owns alone: its ports and its Redis database.

The suite runs in parallel (``-n 4`` in pyproject.toml). Two workers must never pick the same port
or flush each other's Redis database:

* :func:`free_port` hands out ports from a block of its own per worker, below the kernel's ephemeral
  range (32768 and up on Linux), so neither another worker nor an outgoing connection's ephemeral
  port can take a port between the moment it is picked and the moment a server binds it.
* :func:`redis_url` names a Redis database per worker.

Outside xdist (``-p no:xdist``, or ``-n 0``) the process counts as worker 0.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading

__all__ = ["free_port", "redis_url", "worker_index"]

#: Ports per worker, from PORT_BASE up: a test run binds a few hundred at most.
PORT_BLOCK = 1500
#: Below the ephemeral range (32768-60999 on Linux) and above the usual services.
#: ``FRAMECAST_TEST_PORT_BASE`` moves it, so that two suites on one machine keep apart.
PORT_BASE = int(os.environ.get("FRAMECAST_TEST_PORT_BASE", "20000"))
#: Redis databases per worker, counting down from the one the suite has always used (db 9).
REDIS_BASE_DB = 9

_lock = threading.Lock()
_counter = itertools.count()


def worker_index() -> int:
    """0 for pytest-xdist's ``gw0`` (or no xdist), 1 for ``gw1``, and so on."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


def free_port() -> int:
    """A port of this worker's block that nothing listens on now (a server binds it a moment later)."""
    start = PORT_BASE + worker_index() * PORT_BLOCK
    for _ in range(PORT_BLOCK):
        with _lock:
            port = start + next(_counter) % PORT_BLOCK
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # still held (TIME_WAIT, or a server of an earlier test): the next one
            return port
    raise RuntimeError(f"no free port in {start}-{start + PORT_BLOCK - 1}")


def redis_url() -> str:
    """This worker's Redis database: ``FRAMECAST_TEST_REDIS_URL`` for worker 0, the databases below it next.

    The URL's database (default 9) is worker 0's; worker n takes that number minus n (Redis has 16).
    """
    base = os.environ.get("FRAMECAST_TEST_REDIS_URL", f"redis://127.0.0.1:6379/{REDIS_BASE_DB}")
    head, _, db = base.rpartition("/")
    if not head.startswith("redis") or not db.isdigit():
        return base  # an unusual URL: used as given (one worker)
    return f"{head}/{(int(db) - worker_index()) % 16}"
