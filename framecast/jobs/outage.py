"""The job store's outages as this process meets them: one WARNING, one INFO, a metric, and the wait.

PostgreSQL gone or silent, an SQLite file on a full or read-only disk, a lock held by another
process: what :func:`~framecast.storage.faults.is_store_outage` calls an outage. It is a pause, not
a job's end: whoever meets one waits, trying again with the one backoff rule
(:mod:`framecast.backoff`), until the store answers (:meth:`StoreOutage.patiently`).

:class:`StoreOutage` is the process's one view of it, shared by the runner, the scheduler and the
leases: one WARNING when the first caller meets the outage, one INFO when the last waiting caller
got through, and ``framecast_store_unavailable``, ``framecast_store_outages`` and
``framecast_store_waiting`` in the metrics, never a traceback per call. Errors that are not outages
(bugs) pass through untouched. The leases ask :meth:`StoreOutage.settled` before taking any job
over: a lease that lapsed while nobody could reach the store is no sign of a dead process.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from framecast.backoff import Backoff
from framecast.clock import Clock
from framecast.storage.faults import describe_outage, is_store_outage

if TYPE_CHECKING:
    from framecast.ops.metrics import Metrics

__all__ = ["StoreOutage"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class StoreOutage:
    """This process's view of the job store's outages (see the module docstring); one per process."""

    def __init__(
        self,
        *,
        clock: Clock,
        backoff_base: float = 0.5,
        backoff_max: float = 10.0,
        metrics: Metrics | None = None,
    ) -> None:
        """`backoff_base`/`backoff_max`: clock seconds between tries (:class:`~framecast.backoff.Backoff`)."""
        self._clock = clock
        self._base = backoff_base
        self._cap = backoff_max
        self._metrics = metrics
        self._since: float | None = None  # clock.monotonic() when the outage began; None: none now
        self._waiting = 0  # callers inside patiently() that met the outage and wait for the store
        self._ended: float | None = None  # clock.monotonic() when the last outage ended
        self._failed = 0.0  # clock.monotonic() of the last failure met

    def __repr__(self) -> str:
        return f"<StoreOutage down={self.down} waiting={self._waiting}>"

    @property
    def down(self) -> bool:
        """Whether an outage is on (met and not yet seen to end)."""
        return self._since is not None

    @property
    def waiting(self) -> int:
        """Callers waiting for the store now."""
        return self._waiting

    def settled(self, seconds: float) -> bool:
        """Whether the store has answered for at least `seconds` since this process last met an outage."""
        if self._since is not None:
            return False
        return self._ended is None or self._clock.monotonic() - self._ended >= seconds

    def met(self, exc: BaseException) -> None:
        """A call met an outage: the first one since the store last answered logs the WARNING."""
        self._failed = self._clock.monotonic()
        if self._since is not None:
            return
        self._since = self._failed
        log.warning(
            "the job store does not answer (%s); jobs wait and carry on when it is back",
            describe_outage(exc),
        )
        if self._metrics is not None:
            self._metrics.store_outage(down=True)

    def answered(self) -> None:
        """A call got through: the outage ends once no caller is waiting any more and nothing failed
        for half a backoff's longest delay (a full disk lets some writes through: that is not the
        end). The leases' upkeep calls here too, so the end is seen even when no job is left waiting."""
        quiet = self._clock.monotonic() - self._failed >= self._cap / 2
        if self._since is None or self._waiting or not quiet:
            return
        self._ended = self._clock.monotonic()
        lasted = self._ended - self._since
        self._since = None
        log.info("the job store answers again after %.1fs; waiting jobs carry on", lasted)
        if self._metrics is not None:
            self._metrics.store_outage(down=False)

    def backoff(self) -> Backoff:
        """A new retry loop's delays (the one backoff rule)."""
        return Backoff(base=self._base, cap=self._cap)

    async def patiently(
        self, call: Callable[[], Awaitable[T]], *, who: str = "a call", proof: bool = True
    ) -> T:
        """`call()` until it answers: an outage is waited out (backoff), any other error raised.

        `who` names the caller in the one DEBUG line that says it waits (``job 12``). `proof`
        False: a first try that succeeds may not have reached the store (a lease check answered
        from memory), so it says nothing of an outage's end (one outage was logged as two).
        """
        backoff: Backoff | None = None
        try:
            while True:
                try:
                    answer = await call()
                except Exception as exc:
                    if not is_store_outage(exc):
                        raise
                    self.met(exc)
                    if backoff is None:
                        backoff = self.backoff()
                        self._wait_changed(+1)
                        log.debug("%s waits for the job store (%s)", who, describe_outage(exc))
                    await self._clock.sleep(backoff.next())
                    continue
                if backoff is not None:
                    self._wait_changed(-1)
                    backoff = None
                    self.answered()  # it failed before: this answer came from the store
                elif proof:
                    self.answered()
                return answer
        finally:
            if backoff is not None:  # cancelled (a shutdown, a cancel) or raised while waiting
                self._wait_changed(-1)

    def _wait_changed(self, delta: int) -> None:
        self._waiting += delta
        if self._metrics is not None:
            self._metrics.store_waiting(self._waiting)
