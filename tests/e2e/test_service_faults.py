"""The generation service failing while a result is fetched: a ready result is never lost to it.

The real bot.py against the fake service. A download whose connection breaks off half-way, or a
result host that answers 503 for longer than one round of the client's retries, is waited out
(as a poll or a create is), and the file is delivered once the service is back, exactly once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.e2e.harness import World, job_rows, status_of, wait_state
from tests.fakes.gen_service import TaskPlan


def file_requests(world: World) -> list[Any]:
    """Every request the fake service got for a result file."""
    return [r for r in world.service.requests if r.path.startswith("/files/")]


def assert_quiet(world: World) -> None:
    """No job failed on the bot's side, and no traceback reached the log."""
    log = world.bot.log_text()
    assert "unexpected error" not in log and "Traceback" not in log, log[-4000:]


async def test_a_download_reset_half_way_is_fetched_again_and_delivered_once(world: World) -> None:
    world.service.default_plan = TaskPlan(duration=0.3)
    world.service.file_resets = 1
    it = await world.video("over a flaky link")
    job_id = await world.job_id(it)
    msg = await world.delivered(it, timeout=30)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert status_of(msg).startswith("✅")
    assert len(world.files_for(job_id)) == 1
    assert world.files_for(job_id)[0].data == world.service.video_bytes()
    assert len(file_requests(world)) == 2
    assert_quiet(world)


async def test_a_result_host_down_past_one_round_of_retries_is_waited_out(world: World) -> None:
    # GEN_RETRY_MAX is 6 (backoff 0.05 s doubling to 0.5 s): the host answers 503 to more
    # requests than one round of the client's retries makes, then comes back.
    world.service.default_plan = TaskPlan(duration=0.3)
    world.service.file_status = 503
    it = await world.video("while the file host is down")
    job_id = await world.job_id(it)

    while len(file_requests(world)) < 9:  # more than one round of the client's retries
        assert job_rows(world)[job_id]["state"] != "failed", job_rows(world)[job_id]
        await asyncio.sleep(0.05)
    assert job_rows(world)[job_id]["state"] == "delivering", job_rows(world)[job_id]
    world.service.file_status = None
    msg = await world.delivered(it, timeout=30)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert status_of(msg).startswith("✅")
    assert len(world.files_for(job_id)) == 1
    assert_quiet(world)
