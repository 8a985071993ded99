"""framecast.ops.http: the operating endpoints, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from framecast.ops import BudgetReading, CheckOutcome, Metrics, OpsServer, ReencodeOutcome, key_label
from framecast.values import JobKind, JobState
from framecast.values.reasons import ErrorCode
from framecast.values.service_requests import RequestKind


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def started(metrics: Metrics | None = None, **kwargs: Any) -> OpsServer:
    server = OpsServer(metrics or Metrics(), host="127.0.0.1", port=0, **kwargs)
    await server.start()
    return server


def url(server: OpsServer, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


async def test_healthz_answers_ok_on_an_ephemeral_port(http: aiohttp.ClientSession) -> None:
    server = await started()
    try:
        assert server.port > 0
        async with http.get(url(server, "/healthz")) as resp:
            assert resp.status == 200
            body = await resp.text()
        assert body.splitlines()[0] == "ok"
        assert "loop lag" in body
    finally:
        await server.close()
    with pytest.raises(aiohttp.ClientConnectionError):
        async with http.get(url(server, "/healthz")):
            pass


async def test_healthz_fails_after_the_loop_was_blocked_then_recovers(http: aiohttp.ClientSession) -> None:
    metrics = Metrics()
    server = await started(metrics, stall_after=0.3, tick=0.05)
    try:
        await asyncio.sleep(0.2)  # a few monitor ticks
        async with http.get(url(server, "/healthz")) as resp:
            assert resp.status == 200
        time.sleep(0.6)  # noqa: ASYNC251 -- the point: a synchronous call blocks the event loop
        async with http.get(url(server, "/healthz")) as resp:
            assert resp.status == 503
            assert (await resp.text()).startswith("stalled")
        # The lag is also a metric, measured by the monitor.
        async with http.get(url(server, "/metrics")) as resp:
            text = await resp.text()
        lag = {
            s.labels.get("le"): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "framecast_event_loop_lag_seconds_bucket"
        }
        assert lag["+Inf"] - lag["0.25"] >= 1  # the blocked tick was over 0.25 s late
        await asyncio.sleep(0.3)  # the loop runs freely again: the next ticks are on time
        async with http.get(url(server, "/healthz")) as resp:
            assert resp.status == 200
    finally:
        await server.close()


async def test_readyz_without_checks_is_ready(http: aiohttp.ClientSession) -> None:
    server = await started()
    try:
        async with http.get(url(server, "/readyz")) as resp:
            assert resp.status == 200
            assert await resp.json() == {"ready": True, "checks": {}}
    finally:
        await server.close()


async def test_readyz_runs_sync_and_async_checks(http: aiohttp.ClientSession) -> None:
    server = await started()
    state = {"gateway": True, "models": True}

    async def database() -> bool:
        await asyncio.sleep(0)
        return True

    server.add_check("gateway", lambda: state["gateway"])
    server.add_check("database", database)
    server.add_check("models", lambda: state["models"])
    try:
        async with http.get(url(server, "/readyz")) as resp:
            assert resp.status == 200
            assert await resp.json() == {
                "ready": True,
                "checks": {"gateway": "ok", "database": "ok", "models": "ok"},
            }
        state["gateway"] = False
        async with http.get(url(server, "/readyz")) as resp:
            assert resp.status == 503
            assert await resp.json() == {
                "ready": False,
                "checks": {"gateway": "failed", "database": "ok", "models": "ok"},
            }
        state["gateway"] = True
        async with http.get(url(server, "/readyz")) as resp:
            assert resp.status == 200
    finally:
        await server.close()


async def test_a_check_that_cannot_run_yet_is_pending_and_not_ready(http: aiohttp.ClientSession) -> None:
    server = await started()
    logged_in = {"done": False}
    server.add_check("login", lambda: logged_in["done"])
    server.add_check("gateway", lambda: True if logged_in["done"] else CheckOutcome.PENDING)
    try:
        async with http.get(url(server, "/readyz")) as resp:
            assert resp.status == 503
            assert await resp.json() == {"ready": False, "checks": {"login": "failed", "gateway": "pending"}}
        logged_in["done"] = True
        async with http.get(url(server, "/readyz")) as resp:
            assert resp.status == 200
            assert await resp.json() == {"ready": True, "checks": {"login": "ok", "gateway": "ok"}}
    finally:
        await server.close()


async def test_requests_arriving_while_the_checks_run_share_one_run_of_them(
    http: aiohttp.ClientSession,
) -> None:
    # A flood of /readyz and /metrics costs the database one check at a time, not one per request.
    server = await started()
    runs = 0
    release = asyncio.Event()

    async def database() -> bool:
        nonlocal runs
        runs += 1
        await release.wait()
        return True

    server.add_check("database", database)

    async def ask(path: str) -> int:
        async with http.get(url(server, path)) as resp:
            await resp.read()
            return resp.status

    try:
        asking = [asyncio.ensure_future(ask("/readyz" if n % 2 else "/metrics")) for n in range(40)]
        async with asyncio.timeout(5):
            while server.connections < 40 or runs < 1:  # noqa: ASYNC110 -- no event for it
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # every request's head read: each is now waiting on the checks
        assert runs == 1
        release.set()
        assert await asyncio.gather(*asking) == [200] * 40
        assert runs == 1
        async with http.get(url(server, "/readyz")) as resp:  # a later request runs them again
            assert resp.status == 200
        assert runs == 2
    finally:
        await server.close()


async def test_scrapes_sharing_a_run_of_the_checks_share_one_rendering_of_the_page(
    http: aiohttp.ClientSession,
) -> None:
    # Each rendering holds the event loop: 128 scrapes at once held it for seconds, and members'
    # commands went unacknowledged. A scrape after them renders a fresh page.
    metrics = Metrics()
    renders = 0

    class Counted(Collector):
        def describe(self) -> list[Metric]:
            return []  # else registering it would collect once

        def collect(self) -> Iterator[Metric]:
            nonlocal renders
            renders += 1
            yield GaugeMetricFamily("framecast_test_renders", "Renders of the page.", value=renders)

    metrics.registry.register(Counted())
    server = await started(metrics)
    release = asyncio.Event()

    async def database() -> bool:
        await release.wait()
        return True

    server.add_check("database", database)

    async def scrape() -> str:
        async with http.get(url(server, "/metrics")) as resp:
            return await resp.text()

    try:
        scraping = [asyncio.ensure_future(scrape()) for _ in range(40)]
        async with asyncio.timeout(5):
            while server.answering < 40:  # noqa: ASYNC110 -- no event for it
                await asyncio.sleep(0.01)
        release.set()  # every request is read: each waits on the one run of the checks
        pages = await asyncio.gather(*scraping)
        assert renders == 1 and len(set(pages)) == 1
        assert "framecast_test_renders 2.0" in await scrape()  # a later scrape: a fresh page
    finally:
        await server.close()


async def test_readyz_slow_and_raising_checks_fail_within_the_timeout(http: aiohttp.ClientSession) -> None:
    server = await started(check_timeout=0.3)
    database_waiting = asyncio.Event()
    seen: list[str] = []

    async def hangs() -> bool:
        database_waiting.set()
        try:
            await asyncio.Event().wait()  # never answers
        except asyncio.CancelledError:
            seen.append("database cancelled")
            raise
        return True

    async def raises() -> bool:
        # Side by side: the hanging check is still waiting (not yet timed out) when this one runs.
        await database_waiting.wait()
        seen.append("gateway ran")
        raise RuntimeError("password=hunter2 in the message")

    server.add_check("database", hangs)
    server.add_check("gateway", raises)
    server.add_check("models", lambda: True)
    try:
        async with http.get(url(server, "/readyz")) as resp:
            assert resp.status == 503
            body = await resp.text()
        # The checks run side by side, each bounded: the slow one is cancelled at its timeout.
        assert seen == ["gateway ran", "database cancelled"]
        assert "hunter2" not in body
        assert await resp.json() == {
            "ready": False,
            "checks": {"database": "timeout", "gateway": "error", "models": "ok"},
        }
    finally:
        await server.close()


async def test_readyz_answers_within_its_bound_while_a_timed_out_check_is_still_unwinding(
    http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    # A database call on a silent network: cancelled at the bound, its clean-up waits again.
    caplog.set_level("INFO", logger="framecast.ops.http")
    server = await started(check_timeout=0.3)
    unwound = asyncio.Event()

    async def stuck() -> bool:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(3)  # e.g. a rollback waiting for the driver's cancel of the query
            unwound.set()
            raise
        return True

    server.add_check("database", lambda: True)
    try:
        async with http.get(url(server, "/readyz")) as resp:
            assert resp.status == 200
        server.add_check("database", stuck)  # the database's network goes silent
        for _ in range(3):
            began = time.monotonic()
            async with http.get(url(server, "/readyz")) as resp:
                assert resp.status == 503
                assert (await resp.json())["checks"] == {"database": "timeout"}
            assert time.monotonic() - began < 1.0
        assert not unwound.is_set()  # answered while the first check was still unwinding
        # One warning for the failing check, not one per probe.
        assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
            "readiness check database: timeout"
        ]
        server.add_check("database", lambda: True)
        async with http.get(url(server, "/readyz")) as resp:
            assert resp.status == 200
        assert "readiness check database passes again" in caplog.text
    finally:
        await server.close()


async def test_metrics_parse_and_show_recorded_and_live_values(http: aiohttp.ClientSession) -> None:
    metrics = Metrics()
    guild_key = "sk-guild-do-not-show-1234"
    label = key_label(guild_key)
    metrics.service_request(RequestKind.CREATE_VIDEO, 200)
    metrics.service_request(RequestKind.POLL, 429, key=label)
    metrics.job_failed(JobKind.VIDEO, ErrorCode.TASK_FAILED)
    metrics.reencode(JobKind.VIDEO, 1.5, ReencodeOutcome.FITTED)
    running = [2]
    metrics.track_jobs(lambda: {(JobState.RUNNING, JobKind.VIDEO): running[0]})
    metrics.track_queue(lambda: 4)
    metrics.track_budget(label, lambda: BudgetReading(used=3, limit=5, allowed=5))
    metrics.track_planner(label, lambda: 2)
    server = await started(metrics)
    try:
        async with http.get(url(server, "/metrics")) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = await resp.text()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
        }
        for name in (
            "framecast_jobs",
            "framecast_queue_depth",
            "framecast_service_requests",
            "framecast_service_429",
            "framecast_budget_used",
            "framecast_budget_limit",
            "framecast_planner_concurrency",
            "framecast_completion_to_file_seconds",
            "framecast_discord_errors",
            "framecast_reencodes",
            "framecast_reencode_seconds",
            "framecast_jobs_delivered",
            "framecast_jobs_failed",
        ):
            assert name in families, name
        assert families["framecast_service_requests"].type == "counter"
        assert families["framecast_completion_to_file_seconds"].type == "histogram"
        assert (
            samples[("framecast_service_requests_total", (("kind", "create_video"), ("status", "200")))] == 1
        )
        assert samples[("framecast_service_429_total", (("key", label),))] == 1
        assert samples[("framecast_jobs_failed_total", (("code", "task_failed"), ("kind", "video")))] == 1
        assert samples[("framecast_jobs", (("kind", "video"), ("state", "running")))] == 2
        assert samples[("framecast_queue_depth", ())] == 4
        assert samples[("framecast_budget_used", (("key", label),))] == 3
        assert samples[("framecast_planner_concurrency", (("key", label),))] == 2
        assert guild_key not in text

        # Live values are read per scrape; events accumulate.
        running[0] = 0
        metrics.service_request(RequestKind.CREATE_VIDEO, 200)
        async with http.get(url(server, "/metrics")) as resp:
            text = await resp.text()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }
        assert samples[("framecast_jobs", (("kind", "video"), ("state", "running")))] == 0
        assert (
            samples[("framecast_service_requests_total", (("kind", "create_video"), ("status", "200")))] == 2
        )
    finally:
        await server.close()


async def test_a_scrape_runs_the_readiness_checks_and_shows_each_as_framecast_ready(
    http: aiohttp.ClientSession,
) -> None:
    # Prometheus never asks /readyz: the alert on readiness reads framecast_ready from /metrics.
    database_up = [True]

    async def database() -> bool:
        return database_up[0]

    def broken() -> bool:
        raise RuntimeError("secret-in-message")

    server = await started(check_timeout=0.5)
    server.add_check("database", database)
    server.add_check("gateway", broken)
    server.add_check("models", lambda: True)

    async def ready() -> dict[str, float]:
        async with http.get(url(server, "/metrics")) as resp:
            text = await resp.text()
        return {
            s.labels["check"]: s.value
            for f in text_string_to_metric_families(text)
            if f.name == "framecast_ready"
            for s in f.samples
        }

    try:
        assert await ready() == {"database": 1.0, "gateway": 0.0, "models": 1.0}
        database_up[0] = False
        assert (await ready())["database"] == 0.0
        database_up[0] = True
        async with http.get(url(server, "/readyz")) as resp:
            assert resp.status == 503  # the gateway check still raises
        assert (await ready())["database"] == 1.0
    finally:
        await server.close()


async def test_nothing_else_is_served(http: aiohttp.ClientSession) -> None:
    server = await started()
    try:
        for path in ("/", "/metrics/x", "/debug", "/healthz/../admin", "/.env"):
            async with http.get(url(server, path)) as resp:
                assert resp.status == 404, path
        async with http.post(url(server, "/readyz")) as resp:
            assert resp.status in (404, 405)  # no state-changing endpoint exists
    finally:
        await server.close()


async def test_a_taken_port_raises_and_close_is_idempotent() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = OpsServer(Metrics(), host="127.0.0.1", port=taken.getsockname()[1])
        with pytest.raises(OSError):
            await server.start()
        await server.close()
    server = await started()
    await server.close()
    await server.close()
    never_started = OpsServer(Metrics(), port=0)
    await never_started.close()
    assert never_started.port == 0
