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


async def test_the_service_down_for_a_while_loses_no_job_and_keeps_the_budget(world: World) -> None:
    # Every API request (creates and polls) answered 503 for well over one round of the client's
    # retries, while one job runs and another waits for its create; then the service is back.
    world.service.default_plan = TaskPlan(duration=1.5)
    first = await world.video("running when the service went down")
    first_id = await world.job_id(first)
    await world.service.wait_for(lambda: len(world.service.tasks) == 1)
    world.service.fail_next = 40
    second = await world.video("created while the service is down")
    second_id = await world.job_id(second)
    await world.service.wait_for(lambda: world.service.fail_next == 0, timeout=30)
    for it in (first, second):
        await world.delivered(it, timeout=40)
    for job_id in (first_id, second_id):
        await wait_state(world, job_id, "delivered", timeout=20)
        assert len(world.files_for(job_id)) == 1
    assert len(world.service.tasks) == 2  # each job created once
    # GEN_RATE_LIMIT is 16/1 in the tests: the outage's retries stayed within the key's budget.
    assert world.service.max_in_window(1.0) <= 16
    assert_quiet(world)


async def test_a_create_whose_answer_is_lost_is_tried_again_and_the_job_delivered_once(world: World) -> None:
    # The service creates the task but answers after GEN_REQUEST_TIMEOUT (5 s): the bot cannot know
    # the task exists (the service has no idempotency key nor a list of tasks) and creates again.
    # The job is not failed, its file is delivered once, and every create went through the budget.
    world.service.default_plan = TaskPlan(duration=0.3)
    world.service.delays = [6.0]
    it = await world.video("a create answered too late")
    job_id = await world.job_id(it)
    await world.delivered(it, timeout=40)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert len(world.files_for(job_id)) == 1
    creates = [r for r in world.service.requests if r.path == "/v1/videos"]
    assert 1 <= len(creates) <= 2
    assert world.service.max_in_window(1.0) <= 16
    assert_quiet(world)
