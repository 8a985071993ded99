"""A real Prometheus (Debian's) scraping the real bot: every dashboard query returns data, and the
alert rules evaluate without errors.

The bot runs against the fakes with its operator port open; a Prometheus of its own (a free port,
a temporary data directory, a 1 s scrape) scrapes it while the bot delivers a video, an image and a
video re-encoded to fit, meets two 429s, a failed task and a Discord error. Then each query of
deploy/grafana/dashboards/framecast.json, as Grafana would send it, must return a series with a
number, and every rule of deploy/prometheus/alerts.yml must have evaluated cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.deploy.promstack import ALERTS, load_dashboard, panel_queries, prometheus_tool
from tests.e2e.endpoints import free_port, ops_of
from tests.e2e.harness import StartWorld
from tests.fakes.gen_service import TaskPlan
from tests.fakes.media import make_large_mp4

MiB = 1024 * 1024


@dataclass
class Prometheus:
    """A running Prometheus and its HTTP API."""

    session: aiohttp.ClientSession
    base: str
    log_path: Path

    async def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>``; the ``data`` of a successful answer."""
        async with self.session.get(f"{self.base}/api/v1/{path}", params=params) as resp:
            body = await resp.json()
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    async def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's series."""
        data = await self.api("query", query=promql)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    async def until(self, promql: str, what: str, timeout: float = 30) -> list[dict[str, Any]]:
        """Query until the answer has a series (the bot scraped since the thing happened)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            result = await self.query(promql)
            if result:
                return result
            await asyncio.sleep(0.25)
        raise AssertionError(f"Prometheus never saw {what} ({promql}) in {timeout:g} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""


@contextlib.asynccontextmanager
async def prometheus_scraping(bot_port: int, tmp: Path) -> AsyncIterator[Prometheus]:
    """Debian's prometheus on a free port, scraping 127.0.0.1:`bot_port` every second with the
    alert rules loaded; killed on the way out."""
    binary = prometheus_tool("prometheus")
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(ALERTS)],
        # The job name the dashboard and the alerts select on (deploy/prometheus/prometheus.yml).
        "scrape_configs": [
            {"job_name": "framecast", "static_configs": [{"targets": [f"127.0.0.1:{bot_port}"]}]}
        ],
    }
    (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    log_path = tmp / "prometheus.log"
    with log_path.open("ab") as log_file:
        proc = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            prom = Prometheus(session, f"http://127.0.0.1:{port}", log_path)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while True:
                assert proc.returncode is None, f"prometheus exited with {proc.returncode}:\n{prom.log()}"
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{prom.base}/-/ready") as resp:
                        if resp.status == 200:
                            break
                assert loop.time() < deadline, f"prometheus never got ready:\n{prom.log()}"
                await asyncio.sleep(0.1)
            yield prom
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_every_dashboard_query_returns_data_and_the_alerts_evaluate(
    start: StartWorld, tmp_path: Path
) -> None:
    prometheus_tool("prometheus")  # skip (or fail in CI) before starting anything
    bot_port = free_port()
    world = await start(extra_env={"HTTP_PORT": str(bot_port), "REENCODE_TIMEOUT": "60"})
    async with ops_of(world) as ops, prometheus_scraping(bot_port, tmp_path) as prom:
        await ops.until("/readyz", lambda s, _: s == 200, what="ready")
        # Scraped once before anything happens, so rates see the counters grow.
        await prom.until('framecast_ready{job="framecast"} == 1', "the bot ready")

        # A video that meets two 429s and is too large for the channel: re-encoded to fit.
        world.service.path_scripted["/v1/videos"] = [
            (429, {"error": {"message": "slow down", "type": "rate_limit_error"}}, {"Retry-After": "0.1"})
        ] * 2
        world.service.video_payload = make_large_mp4(3 * MiB, width=320, height=240)
        large = await world.video("too large a lighthouse", attachment_size_limit=1 * MiB)
        # An image, a task the service fails, and an edit of a job message Discord refuses.
        # (Each by another member: a member's own limit on active jobs is not what this tests.)
        picture = await world.image("a red fox in the snow", member=world.bob)
        world.service.plans.append(("doomed", TaskPlan(outcome="failed", error="content_policy")))
        await world.video("doomed prompt", member=world.members[0][2])
        world.discord.fail_next("PATCH /webhooks", status=403, code=50013, count=1)
        await world.delivered(picture, timeout=30)
        await world.delivered(large, timeout=60)

        for promql, what in (
            ('framecast_jobs_delivered_total{kind="video"} >= 1', "the video delivered"),
            ('framecast_jobs_delivered_total{kind="image"} >= 1', "the image delivered"),
            ('framecast_reencodes_total{outcome="fitted"} >= 1', "the re-encode"),
            ("framecast_service_429_total >= 2", "the 429s"),
            ("framecast_jobs_failed_total >= 1", "the failed job"),
            ('framecast_discord_errors_total{status="403"} >= 1', "the Discord error"),
        ):
            await prom.until(promql, what)

        # Every panel's every query, as Grafana sends it ("All" processes, $__rate_interval = 1m).
        async def without_data() -> list[str]:
            empty = []
            for query in panel_queries(load_dashboard()):
                assert "$" not in query.promql, query.promql
                result = await prom.query(query.promql)
                values = [float(series["value"][1]) for series in result]
                if not any(math.isfinite(v) for v in values):
                    empty.append(f"{query.panel} [{query.ref_id}]: {query.promql} -> {values}")
            return empty

        # A rate needs two scrapes after the events: asked again until each query has data, not a
        # fixed wait for "two more scrapes", which a loaded machine can slip past.
        deadline = asyncio.get_running_loop().time() + 30
        while (empty := await without_data()) and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110 - Prometheus is polled: it sends no event
            await asyncio.sleep(0.25)
        assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
        # The dashboard's process picker finds the bot.
        instances = await prom.api("label/instance/values", **{"match[]": 'up{job="framecast"}'})
        assert instances == [f"127.0.0.1:{bot_port}"]

        # Every alert rule loaded and evaluated without an error (none may fire: each waits a minute+).
        names = set(re.findall(r"^\s*- alert: (\w+)$", ALERTS.read_text(), flags=re.MULTILINE))
        rules = await rules_evaluated(prom, len(names))
        assert {r["name"] for r in rules} == names
        for rule in rules:
            assert rule["health"] == "ok" and not rule.get("lastError"), rule
            assert rule["state"] != "firing", rule


async def rules_evaluated(prom: Prometheus, count: int, timeout: float = 15) -> list[dict[str, Any]]:
    """The alerting rules once Prometheus has evaluated each of them at least once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        data = await prom.api("rules", type="alert")
        rules = [rule for group in data["groups"] for rule in group["rules"]]
        if len(rules) == count and all(r["health"] != "unknown" for r in rules):
            return rules
        if loop.time() > deadline:
            pytest.fail(f"the alert rules were not all evaluated in {timeout:g} s: {rules}\n{prom.log()}")
        await asyncio.sleep(0.25)
