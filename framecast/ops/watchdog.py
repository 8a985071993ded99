"""The loop watchdog: a process whose event loop stays blocked past a bound exits, for a restart.

``/healthz`` answers 503 once the loop was blocked for 10 s, but only an orchestrator's probe acts
on that: Docker and compose never restart an unhealthy container. A loop blocked for good (a
synchronous call that never returns) cannot even run its own shutdown, so a thread watches it: the
loop beats every `tick` seconds, and when no beat came for `limit` seconds the thread writes one
line and ends the process with :data:`EXIT_GAVE_UP`, so a restart policy (``--restart``,
``restart:``) starts it afresh. Every accepted job is in the database already; the restart resumes it.
A pause of the whole process (``SIGSTOP``) is not a blocked loop: the thread, late itself, lets it
pass.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable

__all__ = ["EXIT_GAVE_UP", "LoopWatchdog"]

#: The exit code of a process that gave up on something it cannot recover from by itself (its loop
#: blocked past ``LOOP_STALL_EXIT``, Discord unreachable past ``DISCORD_OUTAGE_EXIT``).
EXIT_GAVE_UP = 3


def _exit_stalled(lag: float) -> None:
    # Straight to the file descriptor: the blocked loop may hold a logging lock.
    os.write(
        2,
        f"framecast: the event loop has been blocked for {lag:.0f} s (LOOP_STALL_EXIT): "
        f"exiting with code {EXIT_GAVE_UP} for a restart\n".encode(),
    )
    os._exit(EXIT_GAVE_UP)


class LoopWatchdog:
    """Calls `on_stall(lag)` from a thread once the loop has not run for `limit` seconds.

    `on_stall` defaults to ending the process with :data:`EXIT_GAVE_UP`; it is called at most once.
    """

    def __init__(
        self,
        limit: float,
        *,
        tick: float | None = None,
        on_stall: Callable[[float], None] = _exit_stalled,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit <= 0:
            raise ValueError("limit must be > 0")
        self._limit = limit
        self._tick = tick if tick is not None else min(1.0, limit / 4)
        self._on_stall = on_stall
        self._monotonic = monotonic
        self._last = monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"<LoopWatchdog limit={self._limit:g}s running={self._thread is not None}>"

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start beating on `loop` (call from the loop's thread) and watching from a daemon thread."""
        if self._thread is not None:
            raise RuntimeError("LoopWatchdog already started")
        self._loop = loop
        self._last = self._monotonic()
        self._schedule()
        self._thread = threading.Thread(target=self._watch, name="framecast-loop-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (before a clean exit). Safe to call twice, or without :meth:`start`."""
        self._stop.set()
        if self._beat is not None:
            self._beat.cancel()
            self._beat = None
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _schedule(self) -> None:
        assert self._loop is not None
        self._beat = self._loop.call_later(self._tick, self._beat_once)

    def _beat_once(self) -> None:
        self._last = self._monotonic()
        if not self._stop.is_set():
            self._schedule()

    def _watch(self) -> None:
        before = self._monotonic()
        while not self._stop.wait(self._tick):
            now = self._monotonic()
            if now - before > self._tick + max(1.0, self._limit / 2):
                # This thread woke late too: the whole process was paused (SIGSTOP, a suspended
                # machine), not its loop. The loop gets its time to beat again from now.
                self._last = now
            before = now
            lag = now - self._last
            if lag > self._limit:
                self._on_stall(lag)
                return
