"""The request budget shared through Redis (``REDIS_URL``) when Redis goes away mid-run.

The budget fails closed (no grant, so nothing reaches the service) while ``/healthz`` stays alive,
and the waiting job goes through once Redis is back, without a 429. Skipped, saying why, without
Redis on 127.0.0.1:6379. (Two processes sharing one budget: tests/e2e/test_scale_out.py.)
"""

from __future__ import annotations

import asyncio

from tests.e2e.endpoints import free_port, ops_of, value
from tests.e2e.harness import StartWorld, service_creates
from tests.e2e.servers import Relay
from tests.fakes.keys import TEST_REDIS_KEY_SECRET


async def test_redis_going_away_mid_run_fails_closed_then_recovers(
    redis_relay: tuple[str, Relay], start: StartWorld
) -> None:
    url, relay = redis_relay
    world = await start(
        extra_env={"REDIS_URL": url, "REDIS_KEY_SECRET": TEST_REDIS_KEY_SECRET, "HTTP_PORT": str(free_port())}
    )
    first = await world.video("before the outage")
    await world.delivered(first)
    async with ops_of(world) as ops:
        samples = await ops.samples()  # the shared budget is shown like the local one
    assert value(samples, "framecast_budget_limit", key="operator") == 16
    assert value(samples, "framecast_budget_used", key="operator") is not None
    await relay.cut()
    before = len(world.service.requests)
    it = await world.video("during the outage")
    await asyncio.sleep(2.0)  # two scaled budget windows
    # Fail closed: without Redis no grant, so nothing reaches the service.
    assert service_creates(world, "during the outage") == []
    assert len(world.service.requests) == before
    async with ops_of(world) as ops:
        assert (await ops.get("/healthz"))[0] == 200
    await relay.start()
    await world.delivered(it, timeout=30)
    assert len(service_creates(world, "during the outage")) == 1
    assert world.service.count(status=429) == 0
