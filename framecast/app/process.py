"""What the process's entry point (``bot.py``) needs of the core besides the use cases.

``bot.py`` starts one process: it reads the settings, sets up the logs, raises the descriptor
limit, serves the operator endpoints, watches the event loop, keeps the heap frozen, and builds the
chat side when :class:`~framecast.app.core.Core` asks for it. Those parts live in the machinery
(``config``, ``logsetup``, ``ops``, ``clock``, ``backoff``, ``storage``, ``jobs``, ``planner``);
this module is the one door through which the entry point reaches them, so that, like the cogs,
it imports nothing of the core but :mod:`framecast.app` (``tests/test_layers.py`` checks).
"""

from __future__ import annotations

from framecast.backoff import Backoff
from framecast.clock import Clock, SystemClock
from framecast.config import ConfigError, Settings, load_settings
from framecast.jobs.queues import QueuePositions
from framecast.logsetup import setup_logging
from framecast.ops.fdlimit import raise_fd_limit
from framecast.ops.heap import HeapFreezer, track_heap
from framecast.ops.http import CheckOutcome, OpsServer
from framecast.ops.metrics import Metrics
from framecast.ops.watchdog import EXIT_GAVE_UP, LoopWatchdog
from framecast.planner.estimate import Estimates
from framecast.storage import Store, StoreError

__all__ = [
    "EXIT_GAVE_UP",
    "Backoff",
    "CheckOutcome",
    "Clock",
    "ConfigError",
    "Estimates",
    "HeapFreezer",
    "LoopWatchdog",
    "Metrics",
    "OpsServer",
    "QueuePositions",
    "Settings",
    "Store",
    "StoreError",
    "SystemClock",
    "load_settings",
    "raise_fd_limit",
    "setup_logging",
    "track_heap",
]
