"""The operating endpoints: ``/healthz``, ``/readyz`` and ``/metrics`` on an optional HTTP port.

* ``GET /healthz``: the process and its event loop answer. The handler running proves the loop
  runs; a monitor task also measures how late the loop wakes it, so a loop that was blocked
  longer than ``stall_after`` seconds (a synchronous call gone wrong) answers 503 even though it
  got around to this request. For the container's ``HEALTHCHECK``.
* ``GET /readyz``: every registered readiness check (gateway connected, database reachable, model
  list loaded...), each within ``check_timeout`` seconds; 200 when all pass, else 503. The JSON
  body names each check and its :class:`CheckOutcome`, nothing else.
* ``GET /metrics``: the :class:`~framecast.ops.metrics.Metrics` registry in Prometheus' text format.

Nothing else is served, and no answer carries a secret, a guild or a user: the port may be
reachable by anyone who can reach the container.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from framecast.ops.metrics import Metrics

__all__ = ["Check", "CheckOutcome", "OpsServer"]

log = logging.getLogger(__name__)

#: A readiness check: true when the part it checks is ready. Sync checks must not block.
Check = Callable[[], Awaitable[bool] | bool]


class CheckOutcome(StrEnum):
    """How one readiness check ended (the values are what ``/readyz`` shows)."""

    OK = "ok"
    FAILED = "failed"  # the check answered false
    TIMEOUT = "timeout"  # no answer within the check timeout
    ERROR = "error"  # the check raised (logged by type only: its message may hold anything)


class OpsServer:
    """The operating endpoints on ``host:port`` (port 0: an ephemeral port, see :attr:`port`)."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        port: int,
        host: str = "0.0.0.0",  # in a container the health check and the scraper come from outside
        check_timeout: float = 2.0,  # noqa: ASYNC109 -- real seconds per readiness check
        stall_after: float = 10.0,
        tick: float = 1.0,
    ) -> None:
        """`stall_after`: loop lag (seconds) above which ``/healthz`` fails; `tick`: the monitor's period."""
        if check_timeout <= 0 or stall_after <= 0 or tick <= 0:
            raise ValueError("check_timeout, stall_after and tick must be > 0")
        self._metrics = metrics
        self._host = host
        self._port = port
        self._check_timeout = check_timeout
        self._stall_after = stall_after
        self._tick = tick
        self._checks: dict[str, Check] = {}
        self._runner: web.AppRunner | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._last_tick = time.monotonic()
        self._last_lag = 0.0

    def __repr__(self) -> str:
        return f"<OpsServer {self._host}:{self.port} checks={sorted(self._checks)}>"

    @property
    def port(self) -> int:
        """The bound port once started (the real one when asked for port 0), else the configured one."""
        if self._runner is not None and self._runner.addresses:
            return int(self._runner.addresses[0][1])
        return self._port

    def add_check(self, name: str, check: Check) -> None:
        """Make ``/readyz`` depend on `check`, shown as `name` (replaces a check of that name)."""
        self._checks[name] = check

    async def start(self) -> None:
        """Bind the port and serve; starts the loop monitor. Raises :class:`OSError` if the port is taken."""
        if self._runner is not None:
            raise RuntimeError("OpsServer already started")
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_text)
        # No access log: a scraper and a health check every few seconds would drown the real log.
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._last_tick = time.monotonic()
        self._monitor = asyncio.create_task(self._watch_loop(), name="ops-loop-monitor")
        log.info("operating endpoints on %s:%d (/healthz, /readyz, /metrics)", self._host, self.port)

    async def close(self) -> None:
        """Stop serving and the monitor. Safe to call twice, or without :meth:`start`."""
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
            self._monitor = None
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    # -- the loop monitor ---------------------------------------------------------------------------
    async def _watch_loop(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self._tick)
            now = time.monotonic()
            self._last_lag = max(0.0, now - before - self._tick)
            self._last_tick = now
            self._metrics.loop_lag(self._last_lag)

    def loop_lag(self) -> float:
        """Seconds the loop was late lately: the monitor's last measure, or how overdue its next tick is.

        The second covers a request handled right after a long block, before the monitor woke.
        """
        overdue = time.monotonic() - self._last_tick - self._tick
        return max(0.0, self._last_lag, overdue)

    # -- handlers -----------------------------------------------------------------------------------
    async def _healthz(self, request: web.Request) -> web.Response:
        lag = self.loop_lag()
        if lag > self._stall_after:
            log.warning("health check failing: the event loop was blocked for %.1fs", lag)
            return web.Response(status=503, text=f"stalled\nloop lag: {lag:.3f} s\n")
        return web.Response(text=f"ok\nloop lag: {lag:.3f} s\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        names = list(self._checks)
        outcomes = await asyncio.gather(*(self._run_check(name, self._checks[name]) for name in names))
        checks = {name: outcome.value for name, outcome in zip(names, outcomes, strict=True)}
        ready = all(outcome is CheckOutcome.OK for outcome in outcomes)
        return web.json_response({"ready": ready, "checks": checks}, status=200 if ready else 503)

    async def _run_check(self, name: str, check: Check) -> CheckOutcome:
        try:
            async with asyncio.timeout(self._check_timeout):
                result = check()
                if inspect.isawaitable(result):
                    result = await result
        except TimeoutError:
            log.warning("readiness check %s: no answer within %gs", name, self._check_timeout)
            return CheckOutcome.TIMEOUT
        except Exception as exc:
            log.warning("readiness check %s raised %s", name, type(exc).__name__)
            return CheckOutcome.ERROR
        return CheckOutcome.OK if result else CheckOutcome.FAILED

    async def _metrics_text(self, request: web.Request) -> web.Response:
        body = generate_latest(self._metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
