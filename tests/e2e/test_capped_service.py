"""A service that runs at most K of the key's tasks at once, end to end (the fake's ``max_running``).

The production ratio scaled 30x (16 requests per 2 s, polls every 1 s), as in test_planner.py.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from tests.e2e.harness import close_world, make_world
from tests.fakes.gen_service import TaskPlan

PLANNED = {
    "GEN_MAX_RUNNING": "",  # automatic: the planner decides
    "GEN_RATE_LIMIT": "16/2",
    "GEN_POLL_INTERVAL": "1",
    "GEN_POLL_TIMEOUT": "60",
    "MEMBER_JOB_LIMIT": "3",
}


async def test_a_capped_service_delivers_every_job_with_few_refused_creates(tmp_path: Path) -> None:
    world = await make_world(tmp_path, guilds=2, members=2, extra_env=PLANNED)
    try:
        await world.start_bot()
        service = world.service
        service.rate_limit = (16, 2.0)
        service.max_running = 2
        rng = random.Random(3)
        service.plans = [
            (f"g{g} m{m} j{j} ", TaskPlan(duration=rng.uniform(1.5, 3.0), polls=0))
            for g in range(2)
            for m in range(2)
            for j in range(2)
        ]
        its = await asyncio.gather(
            *[
                world.video(f"g{g} m{m} j{j} ", member=world.members[g][m], guild=g)
                for j in range(2)
                for m in range(2)
                for g in range(2)
            ]
        )
        await asyncio.gather(*[world.delivered(it, timeout=90) for it in its])
        for it in its:
            assert len(world.files_for(await world.job_id(it))) == 1  # delivered once
        creates = [r for r in service.requests if r.path == "/v1/videos" and r.auth_ok]
        refused = [r for r in creates if r.status == 429]
        # The cap is learned from one refusal and held: not one refusal per task above it.
        assert len(creates) - len(refused) == 8
        assert len(refused) <= 2, [r.received for r in refused]
        # The refusals paused nothing: no poll was refused, the key's window was never exceeded.
        assert service.count(status=429) == len(refused)
        assert service.max_in_window(2.0) <= 16
    finally:
        await close_world(world)
