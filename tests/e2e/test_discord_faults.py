"""Discord misbehaving while a result is handed over: rate limits and errors never fail a job.

The real bot.py against the fake Discord, whose injections answer the delivery (the request that
carries the file) with 429s or errors. A job whose result is ready is never failed because Discord
was briefly unwilling: it is delivered once Discord takes it, exactly once.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.harness import StartWorld, World, hold_route, job_rows, status_of, wait_log, wait_state
from tests.fakes.discord_api import ApiError, FakeDiscord
from tests.fakes.gen_service import TaskPlan

#: Token age at which a job moves to a channel message at once (TOKEN_MARGIN is 2 s).
MOVE_SOON = 897.0


CALLBACK = "/interactions/{interaction_id}/{token}/callback"


def lose_answers(discord: FakeDiscord, method: str, template: str, count: int = 1) -> list[Any]:
    """Let the fake Discord do the next `count` `method template` requests, then answer each with a
    502 (a proxy in front of Discord lost the answer): done on Discord, failed for the bot.

    Returns the list of the requests whose answer was lost (their :class:`FakeRequest`)."""
    lost: list[Any] = []
    routes = discord._routes  # noqa: SLF001 - a test-side wrapper around one route of the fake
    for index, (m, pattern, handler, auth, tmpl) in enumerate(routes):
        if m == method and tmpl == template:

            async def losing(call: Any, _handler: Any = handler) -> Any:
                answer = await _handler(call)
                if len(lost) >= count:
                    return answer
                lost.append(call.record)
                raise ApiError(502, 0, "Bad Gateway")

            routes[index] = (m, pattern, losing, auth, tmpl)
            return lost
    raise ValueError(f"the fake Discord has no route {method} {template}")


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


async def test_a_video_whose_acknowledgement_answer_is_lost_is_still_queued_and_delivered(
    world: World,
) -> None:
    # Discord took the defer ("thinking..."), but its answer never reached the bot: discord.py tries
    # again and hears 40060 (already acknowledged). The member's command must still be queued and
    # answered on its message, not left "thinking" for ever.
    world.service.default_plan = TaskPlan(duration=0.3)
    lost = lose_answers(world.discord, "POST", CALLBACK)
    it = await world.discord.slash(world.guild, world.channel, world.alice, "video", {"prompt": "a lost ack"})
    await it.wait_response(timeout=10)
    assert len(lost) == 1
    msg = await world.delivered(it, timeout=30)
    job_id = await world.job_id(it)
    assert status_of(msg).startswith("✅")
    assert len(world.files_for(job_id)) == 1
    assert_quiet(world)


async def test_a_cancel_click_whose_acknowledgement_answer_is_lost_still_cancels(world: World) -> None:
    # The same on a button (a deferred update, not "thinking…"): the click is acted on.
    world.service.default_plan = TaskPlan(polls=10**9)
    it = await world.video("an endless corridor")
    job_id = await world.job_id(it)
    await wait_state(world, job_id, "running", timeout=20)
    msg = await it.wait_original(lambda m: any(c.startswith("framecast:cancel:") for c in m.custom_ids()))
    [cancel] = [c for c in msg.custom_ids() if c.startswith("framecast:cancel:")]
    lost = lose_answers(world.discord, "POST", CALLBACK)
    click = await world.discord.click(msg, cancel, world.alice)
    await click.wait_response(timeout=10)
    await it.wait_original(lambda m: status_of(m).startswith("🚫"), timeout=20)
    assert len(lost) == 1
    assert job_rows(world)[job_id]["state"] == "cancelled"
    assert_quiet(world)


async def killed_mid_upload(world: World) -> int:
    """A video whose upload Discord stored, its bot SIGKILLed before it heard so; the job's id."""
    release, held = hold_route(
        world.discord,
        "PATCH",
        "/webhooks/{app_id}/{token}/messages/{message_id}",
        when=lambda call: bool(call.uploads),
    )
    it = await world.video("a paper boat in a storm")
    job_id = await world.job_id(it)
    await world.discord.wait_for(lambda: held, timeout=15, what="the upload to be stored")
    await world.bot.kill()
    release.set()
    assert job_rows(world)[job_id]["state"] == "delivering"
    assert len(world.files_for(job_id)) == 1
    return job_id


async def test_a_restart_that_cannot_read_discord_at_first_looks_again_and_uploads_once(
    start: StartWorld,
) -> None:
    # Killed mid-upload; on the restart Discord answers the look at the job's message with 503s
    # (a round of discord.py's retries on each way in). "Could not look" is not "not there": the
    # runner looks again, finds the file, and uploads nothing.
    world = await start()
    job_id = await killed_mid_upload(world)
    world.discord.fail_next("GET /api/v10/channels", status=503, count=1)
    world.discord.fail_next("GET /api/v10/webhooks", status=503, count=5)
    await world.restart_bot()
    await wait_log(world, f"job {job_id} was already delivered before a restart", timeout=60)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert len(world.files_for(job_id)) == 1
    assert_quiet(world)


async def test_a_restart_whose_look_at_discord_is_cut_off_does_not_fail_the_job(start: StartWorld) -> None:
    # The same, the look's connection dropped without an answer: the job is not failed for it.
    world = await start()
    job_id = await killed_mid_upload(world)
    world.discord.reset_next("GET /api/v10/channels", count=3)
    await world.restart_bot()
    await wait_log(world, f"job {job_id} was already delivered before a restart", timeout=60)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert len(world.files_for(job_id)) == 1
    assert_quiet(world)


async def test_a_gateway_drop_with_a_fresh_identify_mid_job_loses_nothing(world: World) -> None:
    # The session cannot be resumed (op 9): discord.py identifies afresh while a job runs and
    # another waits. Jobs live on REST and the store, not on the socket: both are delivered once,
    # and a command after the reconnect is answered.
    world.service.default_plan = TaskPlan(duration=1.5)
    world.discord.allow_resume = False
    first = await world.video("across a reconnect")
    second = await world.video("queued across a reconnect", member=world.bob)
    identified = world.discord.identify_count
    await world.discord.disconnect(code=4000)
    await world.discord.wait_ready(timeout=30, after=identified)
    third = await world.video("after the reconnect", member=world.members[0][2])
    for it in (first, second, third):
        job_id = await world.job_id(it)
        await world.delivered(it, timeout=40)
        await wait_state(world, job_id, "delivered", timeout=20)
        assert len(world.files_for(job_id)) == 1
    assert len(world.service.tasks) == 3
    assert_quiet(world)


async def test_the_token_expiring_while_discord_fails_the_move_still_delivers_once(world: World) -> None:
    # The job must leave its interaction token (it expires), but Discord fails the new channel
    # message (503s, which discord.py raises at once with the bot token) for a while: the move is
    # tried again, and the file lands once on the channel message.
    world.service.default_plan = TaskPlan(duration=4.0)
    world.discord.fail_next("POST /api/v10/channels", status=503, count=4)
    it = await world.video("a long clip as the token dies", age=MOVE_SOON)
    job_id = await world.job_id(it)
    msg = await world.delivered(it, timeout=90)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert msg.interaction is None  # a channel message, the token being spent
    assert len(world.files_for(job_id)) == 1
    assert len([r for r in world.discord.requests if r.status == 503]) == 4
    assert_quiet(world)


async def test_a_move_discord_keeps_failing_is_paced_not_hammered(world: World) -> None:
    # Past its token's margin the job must move, and Discord fails every new channel message for
    # a while. The move is tried again with a growing pause, not in a tight loop (hundreds of
    # requests a second to a failing Discord, and a warning each), and one warning says so.
    world.service.default_plan = TaskPlan(polls=10**9)
    world.discord.fail_next("POST /api/v10/channels", status=503, count=10**6)
    it = await world.video("a clip that cannot move yet", age=MOVE_SOON)
    job_id = await world.job_id(it)
    task_id = (await wait_state(world, job_id, "running", timeout=20))["task_id"]

    def failed_moves() -> int:
        return len([r for r in world.discord.requests if r.method == "POST" and r.status == 503])

    await world.discord.wait_for(lambda: failed_moves() >= 1, timeout=20, what="a failed move")
    polled = len([r for r in world.service.requests if r.query.get("video_id") == task_id])
    # Ten more polls of the task (GEN_POLL_INTERVAL is 0.05 s) as the measure of time passing.
    await world.service.wait_for(
        lambda: len([r for r in world.service.requests if r.query.get("video_id") == task_id]) >= polled + 10,
        timeout=30,
    )
    assert failed_moves() <= 5, failed_moves()
    world.discord.clear_injections()
    await world.wait_message(
        lambda m: m.interaction is None and bool(m.embeds) and f"#{job_id}" in str(m.embeds[0].get("title")),
        timeout=90,
        what="the job's channel message",
    )
    assert world.bot.log_text().count("could not update its message") == 1
    assert_quiet(world)


async def test_an_hour_long_retry_after_on_the_token_upload_moves_the_job_before_its_token_dies(
    world: World,
) -> None:
    # discord.py sleeps a webhook's 429 for as long as Discord says. With ten seconds left on the
    # token and an hour to wait, the delivery must not sleep the hour: the wait ends as the token
    # dies, and the file goes to a channel message instead, once.
    world.service.default_plan = TaskPlan(duration=0.3)
    world.discord.rate_limit_next("PATCH /api/v10/webhooks", count=1, retry_after=3600.0, uploads_only=True)
    it = await world.video("a clip behind an hour-long rate limit", age=890.0)
    job_id = await world.job_id(it)
    msg = await world.delivered(it, timeout=60)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert msg.interaction is None  # the channel message the job moved to
    assert len(world.files_for(job_id)) == 1
    assert_quiet(world)
