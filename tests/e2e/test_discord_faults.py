"""Discord misbehaving while a result is handed over: rate limits and errors never fail a job.

The real bot.py against the fake Discord, whose injections answer the delivery (the request that
carries the file) with 429s or errors. A job whose result is ready is never failed because Discord
was briefly unwilling: it is delivered once Discord takes it, exactly once.
"""

from __future__ import annotations

from tests.e2e.harness import World, job_rows, status_of, wait_state
from tests.fakes.gen_service import TaskPlan

#: Token age at which a job moves to a channel message at once (TOKEN_MARGIN is 2 s).
MOVE_SOON = 897.0


def assert_quiet(world: World) -> None:
    """No job failed on the bot's side, and no traceback reached the log."""
    log = world.bot.log_text()
    assert "unexpected error" not in log and "Traceback" not in log, log[-4000:]


async def fetched(world: World) -> None:
    """Until the bot has started downloading a result (the delivery comes next)."""
    await world.service.wait_for(
        lambda: any(r.path.startswith("/files/") for r in world.service.requests), timeout=20
    )


async def test_a_burst_of_429s_on_the_delivery_is_waited_out_and_delivers_once(world: World) -> None:
    # discord.py retries a 429 (with Via) itself, five times; the sixth answer of a busy route is
    # raised as an HTTP 429. The job must not fail for it: the bucket empties, the file lands.
    world.service.default_plan = TaskPlan(duration=0.5)
    world.discord.rate_limit_next("PATCH /api/v10/webhooks", count=7, retry_after=0.05, uploads_only=True)
    it = await world.video("through a busy route")
    job_id = await world.job_id(it)
    msg = await world.delivered(it, timeout=60)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert status_of(msg).startswith("✅")
    assert len(world.files_for(job_id)) == 1
    assert_quiet(world)


async def test_a_429_without_via_on_the_delivery_is_retried_not_a_failure(world: World) -> None:
    # A 429 that discord.py does not retry (no Via header: a proxy's or Cloudflare's) is raised at
    # once. It says "later", never "never": the delivery is tried again.
    world.service.default_plan = TaskPlan(duration=0.5)
    world.discord.rate_limit_next(
        "PATCH /api/v10/webhooks", count=1, retry_after=0.05, via=False, uploads_only=True
    )
    it = await world.video("through a proxy's rate limit")
    job_id = await world.job_id(it)
    msg = await world.delivered(it, timeout=60)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert status_of(msg).startswith("✅")
    assert len(world.files_for(job_id)) == 1
    assert job_rows(world)[job_id]["error_code"] is None
    assert_quiet(world)


async def test_discord_503s_for_a_while_on_a_channel_message_do_not_fail_the_job(world: World) -> None:
    # A job old enough to have moved to a channel message (bot token): there discord.py raises a
    # 503 at once, so each delivery attempt meets one. Five in a row (some fifteen seconds of a
    # Discord outage) must not fail a result that is ready: it lands when Discord is back.
    world.service.default_plan = TaskPlan(duration=1.0)
    world.discord.fail_next("PATCH /api/v10/channels", status=503, count=5, uploads_only=True)
    it = await world.video("through a Discord outage", age=MOVE_SOON)
    job_id = await world.job_id(it)
    msg = await world.delivered(it, timeout=90)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert status_of(msg).startswith("✅")
    assert len(world.files_for(job_id)) == 1
    assert len([r for r in world.discord.requests if r.status == 503 and r.files]) == 5
    assert_quiet(world)
