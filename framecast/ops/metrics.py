"""The bot's Prometheus metrics: one :class:`Metrics` object per process, with its own registry.

Two kinds of metric live here:

* events, recorded by the code where they happen through small typed methods
  (:meth:`Metrics.service_request`, :meth:`Metrics.job_failed`, ...);
* live values (jobs by state, queue depth, each key's budget and planner), read at scrape time
  through callables registered once their owner exists (:meth:`Metrics.track_jobs`,
  :meth:`Metrics.track_budget`...). Nothing has to remember to update a gauge, and a scrape always
  sees the current value.

Labels stay bounded: never a guild, channel, user or job id, never a prompt, and never an API key:
a guild's key is named by :func:`key_label` (a keyed per-process hash), the operator's as ``operator``.

A :class:`Metrics` nobody scrapes is the null object: recording costs a dictionary lookup, so code
always holds a real one (``Metrics()`` when ``HTTP_PORT`` is unset) and never checks for ``None``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from framecast.config import Secret
from framecast.values import ACTIVE, Job, JobKind, JobState
from framecast.values.reasons import ErrorCode
from framecast.values.service_requests import RequestKind

__all__ = [
    "OPERATOR_KEY",
    "UNCHECKED_KEY",
    "ActiveJobs",
    "BudgetReading",
    "JobCounts",
    "Metrics",
    "ReencodeOutcome",
    "key_label",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The key label of the operator's own API key.
OPERATOR_KEY = "operator"

#: The one key label of every check of a key an admin typed, before the service accepted it: a key
#: that never passes its check adds no series of its own (whoever sets keys cannot grow /metrics).
UNCHECKED_KEY = "unchecked"

#: Label value for a request that got no HTTP status (timeout, connection error) or a Discord
#: failure without a JSON error code.
_NO_STATUS = "error"
_NO_CODE = "none"

# Seconds from "the service says the task completed" to "the file is in Discord": download, checks,
# re-encode and upload. Seconds are normal; minutes mean a re-encode queue or Discord trouble.
_DELIVERY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
# Event loop lag: milliseconds when healthy; a second means something blocked it.
_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# One re-encode: a few seconds for a short clip, bounded by the runner's deadline.
_REENCODE_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


class ReencodeOutcome(StrEnum):
    """How one attempt to fit a result under Discord's upload limit ended."""

    FITTED = "fitted"  # a re-encode fits: the file is delivered
    NO_FIT = "no_fit"  # nothing fits: the link is posted instead
    TIMEOUT = "timeout"  # the re-encode ran past its deadline
    ERROR = "error"  # the data could not be decoded


@dataclass(frozen=True)
class BudgetReading:
    """One key's request budget at scrape time (see :class:`framecast.keys.budget.RequestBudget`)."""

    used: int  # requests in flight or finished inside the current window
    limit: int  # the configured requests per window
    allowed: int  # what the budget allows itself now (less than `limit` after 429s)
    waiting: int = 0  # callers waiting for a slot


#: Jobs per (state, kind), as :meth:`Metrics.track_jobs` expects them.
JobCounts = Mapping[tuple[JobState, JobKind], int]


class ActiveJobs:
    """This process's active jobs by (state, kind), kept by a store listener, for :meth:`Metrics.track_jobs`.

    ``store.subscribe(active.observe)``, :meth:`observe` each restored job once at start-up, then
    ``metrics.track_jobs(active.counts)``: the scrape reads memory, never the database.
    """

    def __init__(self) -> None:
        self._jobs: dict[int, tuple[JobState, JobKind]] = {}

    def __repr__(self) -> str:
        return f"<ActiveJobs {len(self._jobs)}>"

    def observe(self, job: Job) -> None:
        """Record `job`'s current state (a terminal state forgets it)."""
        if job.state in ACTIVE:
            self._jobs[job.id] = (job.state, job.kind)
        else:
            self._jobs.pop(job.id, None)

    def counts(self) -> JobCounts:
        """Active jobs per (state, kind)."""
        out: dict[tuple[JobState, JobKind], int] = {}
        for key in self._jobs.values():
            out[key] = out.get(key, 0) + 1
        return out


#: The secret behind :func:`key_label`: random per process and never shown, so a label says
#: nothing about its key (an unsalted hash would let whoever reads ``/metrics`` confirm a guess).
_LABEL_SECRET = secrets.token_bytes(32)


def key_label(key: str | Secret | None) -> str:
    """The label naming an API key in metrics: ``operator`` for ``None``, else ``guild-`` and 8 hex digits.

    The digits are an HMAC-SHA-256 of the key under a random secret of this process: stable for
    as long as the process runs (one key, one series), distinct enough between the keys of one
    bot, and computable by no one else, so ``/metrics`` cannot confirm a guessed key. Another
    process (or a restart) names the same key differently; Prometheus' ``instance`` label tells
    the processes apart anyway.
    """
    if key is None:
        return OPERATOR_KEY
    raw = key.reveal() if isinstance(key, Secret) else key
    return "guild-" + hmac.new(_LABEL_SECRET, raw.encode("utf-8"), hashlib.sha256).hexdigest()[:8]


class Metrics:
    """Every metric of one Framecast process, in a registry of its own (tests build several)."""

    def __init__(self, *, process: bool = True) -> None:
        """Create the metrics; with `process`, also the standard ``process_*`` ones (memory, CPU, fds)."""
        # The *_created series double every counter's output and no alert or dashboard here uses
        # them. The switch is process-wide, which is what we want: one bot, one exposition format.
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._service_requests = Counter(
            "framecast_service_requests",
            "Requests to the generation service, by what they were for and the HTTP status "
            '("error": no answer: timeout or connection failure).',
            ["kind", "status"],
            registry=r,
        )
        self._service_429 = Counter(
            "framecast_service_429",
            "429 answers of the generation service, by API key.",
            ["key"],
            registry=r,
        )
        self._delivery_delay = Histogram(
            "framecast_completion_to_file_seconds",
            "Seconds from the service reporting a task completed to its file being in Discord.",
            ["kind"],
            buckets=_DELIVERY_BUCKETS,
            registry=r,
        )
        self._discord_errors = Counter(
            "framecast_discord_errors",
            'Failed requests to Discord, by HTTP status and JSON error code ("error": no answer).',
            ["status", "code"],
            registry=r,
        )
        self._reencodes = Counter(
            "framecast_reencodes",
            "Re-encodes of results too large for Discord's upload limit, by outcome.",
            ["kind", "outcome"],
            registry=r,
        )
        self._reencode_seconds = Histogram(
            "framecast_reencode_seconds",
            "Seconds one re-encode took (every outcome).",
            ["kind"],
            buckets=_REENCODE_BUCKETS,
            registry=r,
        )
        self._delivered = Counter(
            "framecast_jobs_delivered", "Jobs delivered to Discord, by kind.", ["kind"], registry=r
        )
        self._failed = Counter(
            "framecast_jobs_failed", "Jobs that failed, by kind and error code.", ["kind", "code"], registry=r
        )
        # A histogram, not a gauge of the last tick: a scrape every 15 s would miss a stall between.
        self._loop_lag = Histogram(
            "framecast_event_loop_lag_seconds",
            "How late each tick of the event loop monitor ran (seconds; /healthz fails above its limit).",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        # Set by the ops server each time it runs the readiness checks (every /readyz and every
        # scrape), so an alert can say which check fails: Prometheus scrapes /metrics, not /readyz.
        self._ready = Gauge(
            "framecast_ready",
            "1 while the named readiness check passes, else 0 (as last run for /readyz or a scrape).",
            ["check"],
            registry=r,
        )
        # The job store's outages as this process met them (framecast.jobs.pause.StoreOutage): jobs
        # wait, they do not fail, so only these say why work stopped.
        self._store_outages = Counter(
            "framecast_store_outages",
            "Outages of the job store this process met (it could not read or write; jobs waited).",
            registry=r,
        )
        self._store_down = Gauge(
            "framecast_store_unavailable",
            "1 while this process waits for the job store to answer again, else 0.",
            registry=r,
        )
        self._store_waiting = Gauge(
            "framecast_store_waiting",
            "Calls of this process (job steps, the dispatcher, the leases) waiting for the job store now.",
            registry=r,
        )
        self._store_down.set(0)
        # The generation service's outages (framecast.service.outage.ServiceOutage): jobs wait and
        # their requests retry at DEBUG, so only these (and one WARNING) say the service is out.
        self._service_outages = Counter(
            "framecast_service_outages",
            "Outages of the generation service this process met (no answer, or a 502/503/504).",
            registry=r,
        )
        self._service_down = Gauge(
            "framecast_service_unreachable",
            "1 while the generation service does not answer this process, else 0.",
            registry=r,
        )
        self._service_down.set(0)
        self._live = _LiveCollector()
        r.register(self._live)
        if process:
            ProcessCollector(registry=r)
        # Pre-create the label sets that alerts compare against, so a rate() over them has a
        # series from the first scrape (a counter that appears at its first increment hides it).
        for kind in JobKind:
            self._delivered.labels(kind=kind.value)
            self._delivery_delay.labels(kind=kind.value)
            self._reencode_seconds.labels(kind=kind.value)
            for outcome in ReencodeOutcome:
                self._reencodes.labels(kind=kind.value, outcome=outcome.value)

    def __repr__(self) -> str:
        return "<Metrics>"

    # -- events ----------------------------------------------------------------------------------
    def service_request(self, kind: RequestKind, status: int | None, *, key: str = OPERATOR_KEY) -> None:
        """One answered (or unanswered: `status` None) request to the service; a 429 also counts per `key`.

        `key` is a :func:`key_label`, never the key itself.
        """
        self._service_requests.labels(kind=kind.value, status=_status(status)).inc()
        if status == 429:
            self._service_429.labels(key=key).inc()

    def completion_to_file(self, kind: JobKind, seconds: float) -> None:
        """A job's file reached Discord `seconds` after the service reported its task completed."""
        self._delivery_delay.labels(kind=kind.value).observe(max(0.0, seconds))

    def discord_error(self, status: int | None, code: int | None) -> None:
        """A request to Discord failed: HTTP `status` (None: no answer) and its JSON error `code`."""
        self._discord_errors.labels(status=_status(status), code=str(code) if code else _NO_CODE).inc()

    def reencode(self, kind: JobKind, seconds: float, outcome: ReencodeOutcome) -> None:
        """One re-encode (or attempt at one) of a result, and how long it took."""
        self._reencodes.labels(kind=kind.value, outcome=outcome.value).inc()
        self._reencode_seconds.labels(kind=kind.value).observe(max(0.0, seconds))

    def job_delivered(self, kind: JobKind) -> None:
        """A job reached DELIVERED."""
        self._delivered.labels(kind=kind.value).inc()

    def job_failed(self, kind: JobKind, code: ErrorCode) -> None:
        """A job reached FAILED with `code`."""
        self._failed.labels(kind=kind.value, code=code.value).inc()

    def loop_lag(self, seconds: float) -> None:
        """One tick of the event loop monitor and how late it ran (recorded by the ops server)."""
        self._loop_lag.observe(max(0.0, seconds))

    def readiness(self, check: str, ready: bool) -> None:
        """The readiness check named `check` (``gateway``, ``database``, ``models``) just passed or failed."""
        self._ready.labels(check=check).set(1 if ready else 0)

    def store_outage(self, *, down: bool) -> None:
        """The job store stopped answering (`down`: counted, and the gauge set) or answers again."""
        if down:
            self._store_outages.inc()
        self._store_down.set(1 if down else 0)

    def service_outage(self, *, down: bool) -> None:
        """The generation service stopped answering (`down`: counted, and the gauge set) or answers again."""
        if down:
            self._service_outages.inc()
        self._service_down.set(1 if down else 0)

    def store_waiting(self, calls: int) -> None:
        """How many calls wait for the job store to answer again now."""
        self._store_waiting.set(max(0, calls))

    # -- live values, read at scrape time ----------------------------------------------------------
    def track_jobs(self, counts: Callable[[], JobCounts]) -> None:
        """Read ``framecast_jobs`` from `counts` at each scrape (replaces an earlier callable).

        `counts` gives the jobs of this process per (state, kind); the active states missing from it
        read 0. It runs on the event loop during a scrape: it must be quick and must not block (an
        in-memory count, not a database query).
        """
        self._live.jobs = counts

    def track_queue(
        self, total: Callable[[], int], per_shard: Callable[[], Mapping[int, int]] | None = None
    ) -> None:
        """Read ``framecast_queue_depth`` (this process's queued jobs) and, when sharded,
        ``framecast_shard_queue_depth`` (per shard id) at each scrape."""
        self._live.queue_total = total
        self._live.queue_shards = per_shard

    def track_budget(self, key: str, reading: Callable[[], BudgetReading]) -> None:
        """Read the budget gauges of the key labelled `key` (a :func:`key_label`) at each scrape."""
        with self._live.lock:
            self._live.budgets[key] = reading

    def track_planner(self, key: str, concurrency: Callable[[], int | None]) -> None:
        """Read ``framecast_planner_concurrency`` of `key` (tasks its planner runs now) at each scrape (None: not shown)."""
        with self._live.lock:
            self._live.planners[key] = concurrency

    def untrack(self, key: str) -> None:
        """Forget the budget and planner of `key` (a guild removed its key): its series disappear."""
        with self._live.lock:
            self._live.budgets.pop(key, None)
            self._live.planners.pop(key, None)


def _status(status: int | None) -> str:
    return str(status) if status is not None else _NO_STATUS


class _LiveCollector(Collector):
    """Reads the tracked callables at scrape time; one failing callable costs only its own series."""

    def __init__(self) -> None:
        # generate_latest may run in another thread (a WSGI exporter); registration from the loop.
        self.lock = threading.Lock()
        self.jobs: Callable[[], JobCounts] | None = None
        self.queue_total: Callable[[], int] | None = None
        self.queue_shards: Callable[[], Mapping[int, int]] | None = None
        self.budgets: dict[str, Callable[[], BudgetReading]] = {}
        self.planners: dict[str, Callable[[], int | None]] = {}

    def describe(self) -> Iterable[Metric]:
        # Without describe(), registering would call collect() before anything is tracked; that
        # works but describing lets the registry check for duplicate names up front.
        return [
            GaugeMetricFamily("framecast_jobs", _JOBS_HELP, labels=["state", "kind"]),
            GaugeMetricFamily("framecast_queue_depth", _QUEUE_HELP),
            GaugeMetricFamily("framecast_shard_queue_depth", _SHARD_QUEUE_HELP, labels=["shard"]),
            *_budget_families(),
            GaugeMetricFamily("framecast_planner_concurrency", _PLANNER_HELP, labels=["key"]),
        ]

    def collect(self) -> Iterable[Metric]:
        with self.lock:
            budgets = dict(self.budgets)
            planners = dict(self.planners)
        yield self._jobs()
        queue = GaugeMetricFamily("framecast_queue_depth", _QUEUE_HELP)
        total = _read("queue depth", self.queue_total)
        if total is not None:
            queue.add_metric([], total)
        yield queue
        shards = GaugeMetricFamily("framecast_shard_queue_depth", _SHARD_QUEUE_HELP, labels=["shard"])
        for shard, depth in sorted((_read("shard queue depth", self.queue_shards) or {}).items()):
            shards.add_metric([str(shard)], depth)
        yield shards
        used, limit, allowed, waiting = _budget_families()
        for key, reader in sorted(budgets.items()):
            reading = _read("budget", reader)
            if reading is None:
                continue
            used.add_metric([key], reading.used)
            limit.add_metric([key], reading.limit)
            allowed.add_metric([key], reading.allowed)
            waiting.add_metric([key], reading.waiting)
        yield from (used, limit, allowed, waiting)
        planner = GaugeMetricFamily("framecast_planner_concurrency", _PLANNER_HELP, labels=["key"])
        for key, ceiling_of in sorted(planners.items()):
            ceiling = _read("planner", ceiling_of)
            if ceiling is not None:
                planner.add_metric([key], ceiling)
        yield planner

    def _jobs(self) -> Metric:
        family = GaugeMetricFamily("framecast_jobs", _JOBS_HELP, labels=["state", "kind"])
        counts = dict(_read("jobs", self.jobs) or {})
        if self.jobs is not None:
            # Every active state shows, 0 included: "no job is RUNNING" is a value, not a gap.
            for state in JobState:
                for kind in JobKind:
                    if state in ACTIVE:
                        counts.setdefault((state, kind), 0)
        for (state, kind), n in sorted(counts.items()):
            family.add_metric([state.value, kind.value], n)
        return family


_JOBS_HELP = "Jobs of this process by state and kind (active states; terminal ones: the _total counters)."
_QUEUE_HELP = "Jobs queued in this process, waiting to start on the service."
_SHARD_QUEUE_HELP = "Jobs queued in this process per Discord shard."
_PLANNER_HELP = "Tasks the key's planner runs on the service at once now."


def _budget_families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
    return (
        GaugeMetricFamily(
            "framecast_budget_used",
            "Requests of the key in the current window (in flight or done).",
            labels=["key"],
        ),
        GaugeMetricFamily(
            "framecast_budget_limit", "The key's configured requests per window.", labels=["key"]
        ),
        GaugeMetricFamily(
            "framecast_budget_allowed",
            "Requests per window the key allows itself now (less after 429s).",
            labels=["key"],
        ),
        GaugeMetricFamily(
            "framecast_budget_waiting", "Requests waiting for a slot of the key's budget.", labels=["key"]
        ),
    )


def _read(what: str, reader: Callable[[], T] | None) -> T | None:
    """Call a tracked callable; a failure is logged and leaves its series out of this scrape."""
    if reader is None:
        return None
    try:
        return reader()
    except Exception as exc:  # a broken gauge must not break the scrape of every other metric
        log.warning("metrics: reading %s failed (%s)", what, type(exc).__name__)
        return None
