"""Many jobs at once: every one acknowledged in time, shared fairly, delivered once, no 429 of our own."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.e2e.harness import World, ack_latency, close_world, make_world
from tests.fakes.gen_service import TaskPlan


def create_log(world: World) -> list[tuple[float, str]]:
    """(receive time, prompt) of every create the service got, in order."""
    return [
        (r.received, r.json["prompt"])
        for r in world.service.requests
        if r.method == "POST" and r.json and "prompt" in r.json
    ]


async def test_burst_of_40_jobs_across_4_guilds(tmp_path: Path) -> None:
    world = await make_world(tmp_path, guilds=4, members=5)
    try:
        await world.start_bot()
        world.service.rate_limit = (16, 1.0)  # the service enforces exactly our configured budget
        world.service.default_plan = TaskPlan(duration=0.2)
        requests = [(g, m, j) for j in range(2) for m in range(5) for g in range(4)]
        its = await asyncio.gather(
            *[
                world.discord.slash(
                    world.guilds[g],
                    world.channels[g],
                    world.members[g][m],
                    "video",
                    {"prompt": f"guild {g} member {m} job {j}"},
                )
                for g, m, j in requests
            ]
        )
        await asyncio.gather(*[it.wait_response(timeout=10) for it in its])
        assert max(ack_latency(it) for it in its) < 3
        assert all(it.callbacks[0][0] == 5 for it in its)
        messages = await asyncio.gather(*[world.delivered(it, timeout=120) for it in its])
        job_ids = [await world.job_id(it) for it in its]
        assert sorted(job_ids) == list(range(1, 41))
        for job_id in job_ids:
            assert len(world.files_for(job_id)) == 1  # delivered exactly once
        assert len({m.id for m in messages}) == 40
        # Never a 429 provoked by ourselves; the service's own log agrees with the budget.
        assert world.service.count(status=429) == 0
        assert world.service.max_in_window(1.0) <= 16
        # Fairness: every guild got its share early, none waited behind another's backlog.
        first_20 = [p for _, p in create_log(world)[:20]]
        for g in range(4):
            assert sum(p.startswith(f"guild {g} ") for p in first_20) >= 3, first_20
    finally:
        await close_world(world)


async def test_a_guild_with_one_job_does_not_wait_behind_a_guild_with_many(tmp_path: Path) -> None:
    world = await make_world(tmp_path, guilds=2, members=10, extra_env={"GEN_MAX_RUNNING": "2"})
    try:
        await world.start_bot()
        world.service.default_plan = TaskPlan(duration=0.5)
        big = await asyncio.gather(
            *[
                world.discord.slash(
                    world.guilds[0],
                    world.channels[0],
                    world.members[0][i // 2],
                    "video",
                    {"prompt": f"big {i}"},
                )
                for i in range(16)
            ]
        )
        for it in big:
            await world.job_id(it)  # all sixteen accepted and queued
        small = await world.video("small one", member=world.members[1][0], guild=1)
        await world.delivered(small, timeout=60)
        order = [p for _, p in create_log(world)]
        # Strict FIFO over all guilds would start it 17th. Round-robin starts it as soon as a slot
        # frees: after the two running jobs and at most one more of the big guild's.
        assert order.index("small one") <= 3, order
        for it in big:
            await world.delivered(it, timeout=60)
        order = [p for _, p in create_log(world)]
        assert len(order) - order.index("small one") - 1 >= 12  # it really jumped a long queue
    finally:
        await close_world(world)
