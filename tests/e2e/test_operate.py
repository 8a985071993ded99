"""Operating Framecast: ``/healthz``, ``/readyz`` and ``/metrics`` of the real bot.py, over HTTP.

The bot runs with ``HTTP_PORT`` set against the fakes; the endpoints are asked what an operator's
health check and Prometheus would ask, and the answers are read the way they would read them (the
exposition format parsed by ``prometheus_client``'s own parser). No answer may carry a secret.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.e2e.endpoints import Ops, free_port, parse, value
from tests.e2e.harness import StartWorld, World


def assert_no_secrets(world: World, ops: Ops) -> None:
    secrets = [world.env["DISCORD_TOKEN"], world.env["GEN_API_KEY"]]
    secrets += [it.token for it in world.discord.interactions if getattr(it, "token", "")]
    for body in ops.bodies:
        for secret in secrets:
            assert secret not in body, "a secret reached an operating endpoint"


@pytest.fixture
async def operated(start: StartWorld) -> AsyncIterator[tuple[World, Ops]]:
    """The bot with its operating endpoints on a free port, connected to the fake Discord."""
    port = free_port()
    world = await start(extra_env={"HTTP_PORT": str(port), "DISCORD_RETRY_MAX_DELAY": "0.2"})
    async with aiohttp.ClientSession() as session:
        ops = Ops(session, port)
        yield world, ops
        assert_no_secrets(world, ops)


async def test_health_and_readiness_once_started(operated: tuple[World, Ops]) -> None:
    world, ops = operated
    _, text = await ops.until("/healthz", lambda s, _: s == 200, what="healthy")
    assert text.startswith("ok")
    _, text = await ops.until("/readyz", lambda s, _: s == 200, what="ready")
    body = json.loads(text)
    assert body == {
        "ready": True,
        "checks": {"login": "ok", "gateway": "ok", "database": "ok", "models": "ok"},
    }
    # Nothing else is served.
    assert (await ops.get("/"))[0] == 404
    assert (await ops.get("/.env"))[0] == 404


async def test_not_ready_while_the_gateway_is_lost_and_ready_again_after(operated: tuple[World, Ops]) -> None:
    world, ops = operated
    await ops.until("/readyz", lambda s, _: s == 200, what="ready")
    # Discord drops the connection and refuses the next reconnections for a few seconds.
    world.discord.gateway_failures = 3
    await world.discord.disconnect(code=4000)
    _, text = await ops.until("/readyz", lambda s, _: s == 503, timeout=10, what="not ready")
    checks = json.loads(text)["checks"]
    assert checks["gateway"] != "ok" and checks["database"] == "ok" and checks["models"] == "ok"
    # Still alive: a lost gateway is no reason for the container to be restarted.
    assert (await ops.get("/healthz"))[0] == 200
    await ops.until("/readyz", lambda s, _: s == 200, timeout=60, what="ready again")
    assert world.discord.gateway_refused == 3


async def test_metrics_after_one_delivered_video(operated: tuple[World, Ops]) -> None:
    world, ops = operated
    await ops.until("/readyz", lambda s, _: s == 200, what="ready")
    it = await world.video("a lighthouse in the fog")
    await world.delivered(it)
    # The file is in Discord a moment before the job is recorded DELIVERED (and counted).
    await ops.until(
        "/metrics",
        lambda s, text: value(parse(text), "framecast_jobs_delivered_total", kind="video") == 1,
        what="counting the delivery",
    )
    samples = await ops.samples()

    def requests(kind: str) -> float:
        return value(samples, "framecast_service_requests_total", kind=kind, status="200") or 0.0

    assert requests("create_video") == 1
    assert requests("poll") >= 1
    assert requests("download") == 1
    assert requests("models") >= 1  # the model list, read at start
    assert value(samples, "framecast_jobs_delivered_total", kind="video") == 1
    assert value(samples, "framecast_jobs_delivered_total", kind="image") == 0
    assert value(samples, "framecast_completion_to_file_seconds_count", kind="video") == 1
    delay = value(samples, "framecast_completion_to_file_seconds_sum", kind="video")
    assert delay is not None and 0 < delay < 20
    # The operator's key is shown by its label: GEN_RATE_LIMIT=16/1 in the scaled world.
    assert value(samples, "framecast_budget_limit", key="operator") == 16
    assert value(samples, "framecast_budget_allowed", key="operator") == 16
    assert value(samples, "framecast_budget_used", key="operator") is not None
    assert value(samples, "framecast_budget_waiting", key="operator") is not None
    # The video is delivered: the operator's planner runs no task now.
    assert value(samples, "framecast_planner_concurrency", key="operator") == 0
    # No job is left active, and nothing waits.
    assert value(samples, "framecast_queue_depth") == 0
    assert value(samples, "framecast_jobs", state="running", kind="video") == 0
    # Every key label is the operator's or a hash: never a key, a guild or a user.
    keys = {dict(labels).get("key") for (_, labels) in samples if "key" in dict(labels)}
    assert keys == {"operator"}
    assert not any(str(world.guild.id) in v for (_, labels) in samples for _, v in labels)
