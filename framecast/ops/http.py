"""The operating endpoints: ``/healthz``, ``/readyz`` and ``/metrics`` on an optional HTTP port.

* ``GET /healthz``: the process and its event loop answer. The handler running proves the loop
  runs; a monitor task also measures how late the loop wakes it, so a loop that was blocked
  longer than ``stall_after`` seconds (a synchronous call gone wrong) answers 503 even though it
  got around to this request. For the container's ``HEALTHCHECK``.
* ``GET /readyz``: every registered readiness check (gateway connected, database reachable, Redis
  reachable, model list loaded...), each within ``check_timeout`` seconds; 200 when all pass, else
  503. The JSON body names each check and its :class:`CheckOutcome`, nothing else. The bound holds
  whatever the check does: a check still cleaning up after its timeout (a database call on a silent
  network) is left to finish on its own, not waited for. A check that fails after it passed is logged
  once, and once when it passes again.
* ``GET /metrics``: the :class:`~framecast.ops.metrics.Metrics` registry in Prometheus' text format,
  after running the readiness checks (``framecast_ready``), since a scraper never asks ``/readyz``.
  Requests that share a run of the checks share its page: a flood of them renders it once per run,
  not once each (each rendering holds the event loop, and 128 at once held it for seconds).

Nothing else is served, and no answer carries a secret, a guild or a user: the port may be
reachable by anyone who can reach the container.

The server is a small HTTP/1.1 one of its own, because it must never be the way to stop the bot
(idle clients that each hold a file descriptor until none is left for Discord, the service or
the database). It binds ``HTTP_HOST`` (loopback unless told otherwise), reads a request's head
within ``header_timeout`` seconds and its body within ``body_timeout``, refuses a request larger
than ``max_request_bytes``, answers one request per connection, and holds at most
``max_connections``: past that, the oldest connection still sending its head is dropped to make
room (a health probe sends its head at once, an idle client never does).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from framecast.ops.metrics import Metrics

__all__ = ["Check", "CheckOutcome", "OpsServer"]

log = logging.getLogger(__name__)

#: A readiness check: true when the part it checks is ready, or a :class:`CheckOutcome` (``PENDING``:
#: it cannot be checked yet). Sync checks must not block.
Check = Callable[[], "Awaitable[bool | CheckOutcome] | bool | CheckOutcome"]


class CheckOutcome(StrEnum):
    """How one readiness check ended (the values are what ``/readyz`` shows)."""

    OK = "ok"
    FAILED = "failed"  # the check answered false
    TIMEOUT = "timeout"  # no answer within the check timeout
    ERROR = "error"  # the check raised (logged by type only: its message may hold anything)
    PENDING = "pending"  # not checkable yet: it waits on an earlier step (Discord's login, say)


class OpsServer:
    """The operating endpoints on ``host:port`` (port 0: an ephemeral port, see :attr:`port`)."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        port: int,
        host: str = "127.0.0.1",  # HTTP_HOST; the image sets 0.0.0.0 for its probes and scrapers
        check_timeout: float = 2.0,  # noqa: ASYNC109 -- real seconds per readiness check
        stall_after: float = 10.0,
        tick: float = 1.0,
        header_timeout: float = 5.0,
        body_timeout: float = 5.0,
        max_connections: int = 128,
        max_request_bytes: int = 8192,
    ) -> None:
        """`stall_after`: loop lag (seconds) above which ``/healthz`` fails; `tick`: the monitor's period.

        `header_timeout` / `body_timeout`: seconds a client has to send its request's head, then
        its body (and to take the answer); `max_connections`: connections held at once;
        `max_request_bytes`: the largest request head, and the largest body.
        """
        if min(check_timeout, stall_after, tick, header_timeout, body_timeout) <= 0:
            raise ValueError("check_timeout, stall_after, tick and the timeouts must be > 0")
        if max_connections < 1 or max_request_bytes < 256:
            raise ValueError("max_connections must be >= 1 and max_request_bytes >= 256")
        self._metrics = metrics
        self._host = host
        self._port = port
        self._check_timeout = check_timeout
        self._stall_after = stall_after
        self._tick = tick
        self._header_timeout = header_timeout
        self._body_timeout = body_timeout
        self._max_connections = max_connections
        self._max_request_bytes = max_request_bytes
        self._checks: dict[str, Check] = {}
        self._server: asyncio.Server | None = None
        # Open connections, oldest first: True while the client is still sending its head (so it
        # may be dropped to make room), False once its request is being answered.
        self._connections: dict[asyncio.StreamWriter, bool] = {}
        self._monitor: asyncio.Task[None] | None = None
        # The run of the readiness checks in flight: every request arriving meanwhile shares it.
        self._checking: asyncio.Future[dict[str, CheckOutcome]] | None = None
        # The last /metrics page, and the run of the checks it was rendered after.
        self._page: tuple[asyncio.Future[dict[str, CheckOutcome]] | None, bytes] | None = None
        # Checks that timed out and are still unwinding (kept so that they are not collected mid-way).
        self._abandoned: set[asyncio.Task[object]] = set()
        self._passed: set[str] = set()  # checks that passed once: failing after that is an outage
        self._failing: set[str] = set()  # checks whose failure was logged, until they pass again
        self._last_tick = time.monotonic()
        self._last_lag = 0.0

    def __repr__(self) -> str:
        return f"<OpsServer {self._host}:{self.port} checks={sorted(self._checks)}>"

    @property
    def port(self) -> int:
        """The bound port once started (the real one when asked for port 0), else the configured one."""
        if self._server is not None and self._server.sockets:
            return int(self._server.sockets[0].getsockname()[1])
        return self._port

    @property
    def host(self) -> str:
        """The address listened on (``HTTP_HOST``)."""
        return self._host

    @property
    def connections(self) -> int:
        """Connections open now (at most ``max_connections``)."""
        return len(self._connections)

    @property
    def answering(self) -> int:
        """Connections whose request is read and being answered (the rest still send theirs)."""
        return sum(1 for waiting in self._connections.values() if not waiting)

    def add_check(self, name: str, check: Check) -> None:
        """Make ``/readyz`` depend on `check`, shown as `name` (replaces a check of that name)."""
        self._checks[name] = check

    async def start(self) -> None:
        """Bind the port and serve; starts the loop monitor. Raises :class:`OSError` if the port is taken."""
        if self._server is not None:
            raise RuntimeError("OpsServer already started")
        # No access log: a scraper and a health check every few seconds would drown the real log.
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, limit=self._max_request_bytes, backlog=512
        )
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
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
            for writer in list(self._connections):
                writer.transport.abort()
            self._connections.clear()
            await server.wait_closed()
        if self._checking is not None:
            checking, self._checking = self._checking, None
            checking.cancel()
            await asyncio.gather(checking, return_exceptions=True)
        for task in list(self._abandoned):
            task.cancel()

    # -- connections --------------------------------------------------------------------------------
    def _make_room(self) -> bool:
        """Room for one more connection: drops the oldest one still sending its head if need be."""
        if len(self._connections) < self._max_connections:
            return True
        victim = next((w for w, waiting in self._connections.items() if waiting), None)
        if victim is None:
            return False  # every connection is being answered: they end soon on their own
        del self._connections[victim]
        victim.transport.abort()
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._make_room():
            writer.transport.abort()
            return
        self._connections[writer] = True
        try:
            answer = await self._read_request(reader, writer)
            if answer is None:
                return
            status, content_type, payload, head_only = answer
            async with asyncio.timeout(self._body_timeout):  # a client that never reads its answer
                writer.write(_response(status, content_type, payload, head_only))
                writer.close()  # one request per connection; close() still sends what is buffered
                await writer.wait_closed()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass  # the client was too slow or went away: nothing to answer
        finally:
            self._connections.pop(writer, None)
            writer.transport.abort()  # a no-op once closed; frees a stuck connection at once

    async def _read_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[int, str, bytes, bool] | None:
        """The answer to the request on `reader`: (status, content type, body, HEAD?), or None to hang up."""
        try:
            async with asyncio.timeout(self._header_timeout):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return _plain(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
        except asyncio.IncompleteReadError:
            return None  # closed before finishing its head
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _plain(HTTPStatus.BAD_REQUEST)
        method, target, _ = parts
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                digits = value.strip()
                if not (digits.isascii() and digits.isdigit()):  # "²" is a digit to Python, not to int()
                    return _plain(HTTPStatus.BAD_REQUEST)
                length = int(digits)
            elif name == "transfer-encoding":
                return _plain(HTTPStatus.LENGTH_REQUIRED)  # no chunked bodies: nothing here takes one
        if length > self._max_request_bytes:
            return _plain(HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        if length:
            async with asyncio.timeout(self._body_timeout):
                await reader.readexactly(length)  # read and ignored: no endpoint takes a body
        if writer in self._connections:
            self._connections[writer] = False  # read: being answered, no longer one to drop for room
        path = target.partition("?")[0]
        handler = self._routes().get(path)
        if handler is None:
            return _plain(HTTPStatus.NOT_FOUND)
        if method not in ("GET", "HEAD"):
            return _plain(HTTPStatus.METHOD_NOT_ALLOWED)
        status, content_type, payload = await handler()
        return status, content_type, payload, method == "HEAD"

    def _routes(self) -> dict[str, Callable[[], Awaitable[tuple[int, str, bytes]]]]:
        return {"/healthz": self._healthz, "/readyz": self._readyz, "/metrics": self._metrics_text}

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
    async def _healthz(self) -> tuple[int, str, bytes]:
        lag = self.loop_lag()
        if lag > self._stall_after:
            log.warning("health check failing: the event loop was blocked for %.1fs", lag)
            return 503, _TEXT, f"stalled\nloop lag: {lag:.3f} s\n".encode()
        return 200, _TEXT, f"ok\nloop lag: {lag:.3f} s\n".encode()

    async def _readyz(self) -> tuple[int, str, bytes]:
        checks = await self._run_checks()
        ready = all(outcome is CheckOutcome.OK for outcome in checks.values())
        body = json.dumps({"ready": ready, "checks": {n: o.value for n, o in checks.items()}}).encode()
        return (200 if ready else 503), "application/json; charset=utf-8", body

    async def _run_checks(self) -> dict[str, CheckOutcome]:
        """Every readiness check at once, each recorded in ``framecast_ready``.

        One run at a time: requests arriving while one is in flight get its outcome, so requests
        at once cost the database and the gateway one check between them, not one each.
        """
        if self._checking is None or self._checking.done():
            self._checking = asyncio.ensure_future(self._check_all())
        # Shielded: one client hanging up (its handler cancelled) must not cancel the others' run.
        return await asyncio.shield(self._checking)

    async def _check_all(self) -> dict[str, CheckOutcome]:
        names = list(self._checks)
        outcomes = await asyncio.gather(*(self._run_check(name, self._checks[name]) for name in names))
        for name, outcome in zip(names, outcomes, strict=True):
            self._metrics.readiness(name, outcome is CheckOutcome.OK)
            self._note(name, outcome)
        return dict(zip(names, outcomes, strict=True))

    def _note(self, name: str, outcome: CheckOutcome) -> None:
        # An outage is one line as it starts and one as it ends, not a line per probe; a check that
        # never passed yet (the gateway still connecting at start-up) is no outage.
        if outcome is CheckOutcome.OK:
            self._passed.add(name)
            if name in self._failing:
                self._failing.discard(name)
                log.info("readiness check %s passes again", name)
        elif name in self._passed and name not in self._failing:
            self._failing.add(name)
            log.warning("readiness check %s: %s", name, outcome.value)

    async def _run_check(self, name: str, check: Check) -> CheckOutcome:
        try:
            result = await self._bounded(check)
        except TimeoutError:
            return CheckOutcome.TIMEOUT
        except Exception as exc:
            log.debug("readiness check %s raised %s", name, type(exc).__name__)
            return CheckOutcome.ERROR
        if isinstance(result, CheckOutcome):
            return result
        return CheckOutcome.OK if result else CheckOutcome.FAILED

    async def _bounded(self, check: Check) -> object:
        """The check's answer within ``check_timeout``, else :class:`TimeoutError` at once.

        A task of its own, so that the bound is ours: ``asyncio.timeout()`` would wait for the
        cancelled check to unwind, and a database call's unwinding may itself wait.
        """
        result = check()
        if not inspect.isawaitable(result):
            return result
        task = asyncio.ensure_future(result)
        try:
            done, _ = await asyncio.wait({task}, timeout=self._check_timeout)
        except asyncio.CancelledError:
            task.cancel()  # the server is closing
            raise
        if not done:
            task.cancel()
            self._abandoned.add(task)
            task.add_done_callback(self._forget)
            raise TimeoutError
        return task.result()

    def _forget(self, task: asyncio.Task[object]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("an abandoned readiness check ended with %s", type(task.exception()).__name__)

    async def _metrics_text(self) -> tuple[int, str, bytes]:
        # A scraper asks /metrics, never /readyz: run the checks here too so ``framecast_ready``
        # is current and an alert can name the failing check (each is bounded by check_timeout).
        await self._run_checks()
        run = self._checking  # the run this request waited for, unless a newer one started since
        if self._page is None or self._page[0] is not run:
            self._page = (run, generate_latest(self._metrics.registry))
        return 200, CONTENT_TYPE_LATEST, self._page[1]


_TEXT = "text/plain; charset=utf-8"


def _plain(status: HTTPStatus) -> tuple[int, str, bytes, bool]:
    return int(status), _TEXT, f"{status.phrase}\n".encode(), False


def _response(status: int, content_type: str, payload: bytes, head_only: bool) -> bytes:
    reason = HTTPStatus(status).phrase
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else payload)
