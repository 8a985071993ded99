"""A service that runs at most K of the key's tasks at once, end to end (the fake's ``max_running``).

The production ratio scaled 30x (16 requests per 2 s, polls every 1 s), as in test_planner.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path

from tests.e2e.harness import World, button_ids, close_world, make_world, wait_state
from tests.fakes.gen_service import TaskPlan

PLANNED = {
    "GEN_MAX_RUNNING": "",  # automatic: the planner decides
    "GEN_RATE_LIMIT": "16/2",
    "GEN_POLL_INTERVAL": "1",
    "GEN_POLL_TIMEOUT": "60",
    "MEMBER_JOB_LIMIT": "3",
}


@contextlib.asynccontextmanager
async def capped(tmp_path: Path) -> AsyncIterator[World]:
    """The bot on a service running at most two of the key's tasks, 16 requests a 2 s window."""
    world = await make_world(tmp_path, guilds=2, members=2, extra_env=PLANNED)
    try:
        await world.start_bot()
        world.service.rate_limit = (16, 2.0)
        world.service.max_running = 2
        yield world
    finally:
        await close_world(world)


async def test_a_capped_service_delivers_every_job_with_few_refused_creates(tmp_path: Path) -> None:
    async with capped(tmp_path) as world:
        service = world.service
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


async def test_cancelled_tasks_the_service_still_runs_cost_no_refused_creates(tmp_path: Path) -> None:
    # The service has no cancel call: a job cancelled while its task runs leaves the task running
    # there, and the next creates, sent as if its place were free, were refused one after another.
    async with capped(tmp_path) as world:
        service = world.service
        service.default_plan = TaskPlan(duration=4.0, polls=0)
        prompts = [f"g{g} m{m} j{j} " for j in range(2) for m in range(2) for g in range(2)]
        its = {
            p: await world.video(p, member=world.members[int(p[1])][int(p[4])], guild=int(p[1]))
            for p in prompts
        }
        cancelled: list[str] = []
        for _ in range(3):  # each of the first three tasks the service runs, cancelled at once
            await service.wait_for(lambda: len(service.tasks) > len(cancelled), timeout=60)
            prompt = next(t.prompt for t in service.tasks.values() if t.prompt not in cancelled)
            msg = await its[prompt].wait_original(
                lambda m: any(c.startswith("framecast:cancel:") for c in button_ids(m)), timeout=30
            )
            [cancel] = [c for c in button_ids(msg) if c.startswith("framecast:cancel:")]
            g, m = int(prompt[1]), int(prompt[4])
            await (await world.discord.click(msg, cancel, world.members[g][m])).wait_response(timeout=10)
            await wait_state(world, await world.job_id(its[prompt]), "cancelled")
            cancelled.append(prompt)
        rest = [p for p in prompts if p not in cancelled]
        await asyncio.gather(*[world.delivered(its[p], timeout=90) for p in rest])
        creates = [r for r in service.requests if r.path == "/v1/videos" and r.auth_ok]
        refused = [r for r in creates if r.status == 429]
        # The cancelled tasks count against the cap until they likely ended: about the one refusal
        # that teaches the cap (before: one every backoff while each cancelled task ran).
        assert len(refused) <= 2, [r.received for r in refused]
        assert service.max_in_window(2.0) <= 16
