"""Crashes, stops and restarts: every accepted job is delivered exactly once.

The real bot is killed (SIGKILL) or stopped (SIGTERM) at a chosen point of a job's life, then started
again on the same database. Each test first checks that the crash really happened at the intended
point (the fakes' records and the database on disk), then what the member sees afterwards.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.harness import (
    StartWorld,
    World,
    bot_posts,
    button_ids,
    hold_route,
    job_rows,
    notes_seen,
    service_creates,
    service_polls,
    status_of,
    task_for,
    wait_log,
    wait_spent,
    wait_state,
)
from tests.fakes.gen_service import POLL_PATH, TaskPlan
from tests.fakes.media import make_large_mp4

MiB = 1024 * 1024
RESUMED = "Framecast restarted"
SHUTDOWN_TIMEOUT = 3.0  # the harness's SHUTDOWN_TIMEOUT
FOREVER = 10**9  # a TaskPlan that stays pending until the test lets it finish
WEBHOOK_EDIT = "/webhooks/{app_id}/{token}/messages/{message_id}"
CHANNEL_EDIT = "/channels/{channel_id}/messages/{message_id}"
TOKEN_TTL = 900.0


def answered(requests: list[Any]) -> list[Any]:
    return [r for r in requests if r.status is not None]


def finish_task(world: World, prompt: str) -> None:
    """Let the fake task of `prompt` complete at its next poll."""
    task_for(world, prompt).plan = TaskPlan(polls=0)


async def wait_created(world: World, prompt: str) -> None:
    await world.service.wait_for(
        lambda: any(r.status == 200 for r in service_creates(world, prompt)), timeout=10
    )


def seen_after(message: Any, since: float) -> list[dict[str, Any]]:
    return [h for h in message.history if h["time"] >= since]


# -- SIGKILL ------------------------------------------------------------------------------------


async def test_sigkill_with_queued_jobs_keeps_them_queued_in_order(start: StartWorld) -> None:
    world = await start(extra_env={"GEN_MAX_RUNNING": "1", "MEMBER_JOB_LIMIT": "5"})
    first, second, third = "first: a slow harbour", "second: a quiet forest", "third: a busy market"
    world.service.plans = [("first:", TaskPlan(polls=FOREVER))]
    a = await world.video(first)
    await wait_created(world, first)
    b = await world.video(second, member=world.bob)
    c = await world.video(third, member=world.members[0][2])
    ids = [await world.job_id(x) for x in (a, b, c)]
    await b.wait_original(lambda m: status_of(m).startswith("⏳") and "#1" in status_of(m))
    await c.wait_original(lambda m: status_of(m).startswith("⏳") and "#2" in status_of(m))

    await world.bot.kill()
    rows = job_rows(world)
    assert [rows[i]["state"] for i in ids] == ["running", "queued", "queued"]
    assert len(service_creates(world)) == 1  # only the first job reached the service

    restarted = time.time()
    await world.restart_bot()
    task = task_for(world, first)
    polls_before = len(service_polls(world, task.id))
    # The running job is re-attached by its task id; the queue still waits behind it (1 at a time).
    await world.service.wait_for(lambda: len(answered(service_polls(world, task.id))) > polls_before + 1)
    await b.wait_original(lambda m: RESUMED in "".join(notes_seen(m)) and "#1" in status_of(m))
    await c.wait_original(lambda m: RESUMED in "".join(notes_seen(m)) and "#2" in status_of(m))
    assert len(service_creates(world)) == 1
    finish_task(world, first)

    for it, job_id in zip((a, b, c), ids, strict=True):
        msg = await world.delivered(it)
        assert msg.id == it.original.id
        assert len(world.files_for(job_id)) == 1
        assert RESUMED in "".join(notes_seen(msg))
    # One create per job, in acceptance (FIFO) order.
    assert [r.json["prompt"] for r in service_creates(world)] == [first, second, third]
    # The note was an edit of each job's own message: nothing was posted in the channel.
    assert bot_posts(world) == []
    for it in (a, b, c):
        await it.wait_original(lambda m: status_of(m).startswith("✅"))
        assert all(h["action"] != "create" for h in seen_after(it.original, restarted))


async def test_sigkill_just_after_create_reattaches_without_a_second_create(start: StartWorld) -> None:
    world = await start()
    prompt = "a lantern drifting on a lake"
    it = await world.video(prompt)
    job_id = await world.job_id(it)
    await wait_created(world, prompt)
    world.service.delay = 30.0  # the first poll is received but never answered
    task = task_for(world, prompt)
    await world.service.wait_for(lambda: len(service_polls(world, task.id)) >= 1)
    await world.bot.kill()
    world.service.delay = 0.0

    # The crash point: the task id was committed, no poll had been answered yet.
    assert answered(service_polls(world, task.id)) == []
    row = job_rows(world)[job_id]
    assert (row["state"], row["task_id"]) == ("running", task.id)

    await world.restart_bot()
    msg = await world.delivered(it)
    assert msg.id == it.original.id
    assert len(service_creates(world, prompt)) == 1
    assert len(answered(service_polls(world, task.id))) >= 1  # polled on the same task after the restart
    assert len(world.files_for(job_id)) == 1
    assert RESUMED in "".join(notes_seen(msg))
    assert bot_posts(world) == []


async def test_sigkill_mid_poll_keeps_polling_the_same_task(start: StartWorld) -> None:
    world = await start()
    prompt = "a comet over the desert"
    world.service.default_plan = TaskPlan(polls=FOREVER)
    it = await world.video(prompt)
    job_id = await world.job_id(it)
    await wait_created(world, prompt)
    task = task_for(world, prompt)
    await world.service.wait_for(lambda: len(answered(service_polls(world, task.id))) >= 2)
    await it.wait_original(lambda m: "%" in status_of(m))  # the member saw progress
    await world.bot.kill()
    row = job_rows(world)[job_id]
    assert (row["state"], row["task_id"]) == ("running", task.id)

    polls_before = len(service_polls(world, task.id))
    await world.restart_bot()
    await world.service.wait_for(lambda: len(answered(service_polls(world, task.id))) > polls_before)
    await it.wait_original(lambda m: RESUMED in "".join(notes_seen(m)))
    finish_task(world, prompt)

    msg = await world.delivered(it)
    assert msg.id == it.original.id
    assert len(service_creates(world, prompt)) == 1
    assert len(world.files_for(job_id)) == 1
    assert bot_posts(world) == []
    assert status_of(msg).startswith("✅")


@pytest.mark.parametrize("where", ["interaction", "channel"])
async def test_sigkill_mid_upload_delivers_exactly_once(start: StartWorld, where: str) -> None:
    world = await start()
    prompt = "a paper boat in the rain"
    if where == "interaction":
        route, age = WEBHOOK_EDIT, 0.0
    else:  # the token expires first: the job moves to a channel message, the file goes there
        route, age = CHANNEL_EDIT, TOKEN_TTL - 3
        world.service.default_plan = TaskPlan(duration=2.0)
    release, held = hold_route(world.discord, "PATCH", route, when=lambda call: bool(call.uploads))
    it = await world.video(prompt, age=age)
    job_id = await world.job_id(it)
    await world.discord.wait_for(lambda: held, timeout=15, what="the upload to be stored")
    # Discord stored the file; the bot never heard back and dies before it can record the delivery.
    assert len(world.files_for(job_id)) == 1
    await world.bot.kill()
    release.set()
    assert job_rows(world)[job_id]["state"] == "delivering"

    restarted = time.time()
    await world.restart_bot()
    await wait_log(world, f"job {job_id} was already delivered before a restart")
    # /job answers only after the restart's own edits were sent: a barrier for the checks below.
    look = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
    await look.wait_original(lambda m: not m.loading, timeout=10)

    msg = await world.delivered(it)
    assert len(world.files_for(job_id)) == 1
    assert [a.filename for a in msg.attachments] == [f"framecast-{job_id}.mp4"]
    assert status_of(msg).startswith("✅")
    # The finished message was left alone: no edit after the restart made it look unfinished.
    assert all(h["files"] == [] for h in seen_after(msg, restarted))
    assert all(s.startswith("✅") for s in _statuses(seen_after(msg, restarted)))
    assert job_rows(world)[job_id]["state"] == "delivered"
    assert look.original is not None
    assert f"framecast-{job_id}.mp4" in look.original.content  # /job shows the file
    if where == "interaction":
        assert msg.id == it.original.id
        assert bot_posts(world) == []
    else:
        # The requester, whose ping the crash cut off, is mentioned once after the restart.
        pings = [m for m in world.discord.messages.values() if m.pinged_user_ids]
        assert [p.pinged_user_ids for p in pings] == [{world.alice.id}]
        assert msg.interaction is None
        assert bot_posts(world) == [msg, pings[0]]


def _statuses(history: list[dict[str, Any]]) -> list[str]:
    out = []
    for h in history:
        for embed in (h.get("payload") or {}).get("embeds") or []:
            for f in embed.get("fields", []):
                if f.get("name") == "Status":
                    out.append(str(f.get("value")))
    return out


# -- SIGTERM ------------------------------------------------------------------------------------


async def test_sigterm_mid_poll_exits_cleanly_and_the_jobs_resume(start: StartWorld) -> None:
    world = await start(extra_env={"GEN_MAX_RUNNING": "1", "MEMBER_JOB_LIMIT": "5"})
    first, second = "first: fog over a bridge", "second: sunrise on ice"
    world.service.plans = [("first:", TaskPlan(polls=FOREVER))]
    a = await world.video(first)
    await wait_created(world, first)
    b = await world.video(second, member=world.bob)
    ids = [await world.job_id(a), await world.job_id(b)]
    task = task_for(world, first)
    await world.service.wait_for(lambda: len(answered(service_polls(world, task.id))) >= 2)

    began = time.monotonic()
    code = await world.bot.terminate(timeout=SHUTDOWN_TIMEOUT + 10)
    took = time.monotonic() - began
    assert code == 0
    assert took < SHUTDOWN_TIMEOUT + 3, f"shutdown took {took:.1f}s"
    log = world.bot.log_text()
    assert log.index("stop requested") < log.rindex("INFO    framecast: stopped")
    rows = job_rows(world)
    assert [rows[i]["state"] for i in ids] == ["running", "queued"]  # state kept, nothing failed

    await world.restart_bot()
    finish_task(world, first)
    for it, job_id in zip((a, b), ids, strict=True):
        await world.delivered(it)
        assert len(world.files_for(job_id)) == 1
    assert [r.json["prompt"] for r in service_creates(world)] == [first, second]
    assert bot_posts(world) == []


@pytest.mark.parametrize("stop", ["kill", "terminate"])
async def test_a_restart_starts_the_key_with_what_it_spent_so_its_window_never_overflows(
    start: StartWorld, stop: str
) -> None:
    # A window of 4 s: longer than a restart takes, so a new process that forgot what the one before
    # it spent sent its burst (a poll of each running task, the queued creates) on top of it.
    window = 4.0
    world = await start(
        guilds=3,
        extra_env={"GEN_RATE_LIMIT": f"16/{window:g}", "GEN_MAX_RUNNING": "20", "GEN_POLL_INTERVAL": "0.2"},
    )
    world.service.rate_limit = (16, window)
    world.service.default_plan = TaskPlan(duration=3.0, polls=0)
    its = [
        await world.video(f"g{g} m{m}", guild=g, member=world.members[g][m])
        for g in range(3)
        for m in range(3)
    ]
    await world.service.wait_for(lambda: len(world.service.requests) >= 16)
    await wait_spent(world, "g", 16)  # (the bot's writer thread takes microseconds; a kill may beat it)
    await getattr(world.bot, stop)()
    await world.start_bot()
    for it in its:
        await world.delivered(it, timeout=60)
    assert world.service.count(status=429) == 0
    assert world.service.max_in_window(window) <= 16


async def test_a_pause_the_service_asked_for_is_waited_out_by_the_restarted_bot_too(
    start: StartWorld,
) -> None:
    world = await start(extra_env={"GEN_BACKOFF_MAX": "30"})
    retry_after = 4.0
    # A poll refused for the key's rate (a create's 429 may be the key's tasks at once, which pauses nothing).
    world.service.path_scripted[POLL_PATH] = [
        (429, {"error": "slow down"}, {"Retry-After": f"{retry_after:g}"})
    ]
    it = await world.video("after a pause")
    await world.service.wait_for(lambda: world.service.count(status=429) == 1)
    refused = next(r.received for r in world.service.requests if r.status == 429)
    await wait_spent(world, "p", 1)
    await world.bot.kill()
    await world.start_bot()
    await world.delivered(it, timeout=30)
    after = [r.received for r in world.service.requests if r.received > refused]
    assert min(after) >= refused + retry_after


async def test_sigkill_after_a_link_without_its_credentials_was_posted_posts_it_once(
    start: StartWorld,
) -> None:
    """A result too large to upload goes out as the service's link, posted without the
    ``user:password@`` it came with; the bot dies before it hears that Discord took the edit. The
    restarted bot finds that link on the message and records the delivery: nothing is sent again."""
    world = await start()
    base = world.service.base_url
    world.service.video_payload = make_large_mp4(1_000_000, seconds=2.0)  # fits no 4 kB limit: linked
    world.service.result_url = base.replace("://", "://user:pass@") + "/files/linked.mp4"
    linked = f"{base}/files/linked.mp4"

    def posts_link(call: Any) -> bool:
        return linked in str((call.body or {}).get("content"))

    release, held = hold_route(world.discord, "PATCH", WEBHOOK_EDIT, when=posts_link)
    it = await world.video("a clip too large to upload", attachment_size_limit=4_000)
    job_id = await world.job_id(it)
    await world.discord.wait_for(lambda: held, timeout=15, what="the link's edit to be stored")
    await world.bot.kill()
    release.set()
    assert job_rows(world)[job_id]["state"] == "delivering"

    await world.restart_bot()
    await wait_log(world, f"job {job_id} was already delivered before a restart")
    await wait_state(world, job_id, "delivered")  # recorded a moment after the log line
    edits = world.discord.requests_to("PATCH", "/messages/")
    assert [e for e in edits if linked in str((e.body or {}).get("content"))] == [held[0]]


async def test_sigterm_during_an_upload_lets_it_finish_and_records_it(start: StartWorld) -> None:
    world = await start()
    prompt = "a kite above the dunes"
    release, held = hold_route(world.discord, "PATCH", WEBHOOK_EDIT, when=lambda call: bool(call.uploads))
    it = await world.video(prompt)
    job_id = await world.job_id(it)
    await world.discord.wait_for(lambda: held, timeout=15, what="the upload to be in flight")

    began = time.monotonic()
    assert world.bot.proc is not None
    world.bot.proc.terminate()
    await wait_log(world, "stop requested")
    assert world.bot.running  # it waits for the upload in flight...
    release.set()  # ...which then succeeds
    code = await world.bot.wait(SHUTDOWN_TIMEOUT + 10)
    took = time.monotonic() - began
    assert code == 0
    assert took < SHUTDOWN_TIMEOUT + 3, f"shutdown took {took:.1f}s"
    # The finished upload was recorded before the bot exited.
    assert job_rows(world)[job_id]["state"] == "delivered"

    await world.restart_bot()
    look = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
    await look.wait_original(lambda m: not m.loading, timeout=10)
    assert len(world.files_for(job_id)) == 1
    assert status_of(it.original).startswith("✅")
    assert len(service_creates(world, prompt)) == 1


async def test_sigterm_during_a_long_reencode_does_not_wait_for_it(start: StartWorld) -> None:
    world = await start()
    clip = make_large_mp4(30 * MiB, width=640, height=480)  # ~0.5 s per encode, several encodes
    world.service.video_payload = clip
    it = await world.video("a crowded stadium", attachment_size_limit=2 * MiB)
    job_id = await world.job_id(it)
    await wait_log(world, "fit_video attempt 1:", timeout=30)  # re-encoding, more attempts to come

    began = time.monotonic()
    code = await world.bot.terminate(timeout=SHUTDOWN_TIMEOUT + 10)
    took = time.monotonic() - began
    assert code == 0
    assert took < SHUTDOWN_TIMEOUT + 3, f"shutdown took {took:.1f}s"
    first_run = world.bot.log_text()
    assert job_rows(world)[job_id]["state"] == "delivering"  # checkpointed: fitted again after a restart
    assert world.files_for(job_id) == []

    await world.restart_bot()
    msg = await world.delivered(it, timeout=60)
    [attachment] = world.files_for(job_id)
    assert attachment.size <= 2 * MiB and msg.id == it.original.id
    # The same re-encode, run to its end after the restart, took more encodes than the stopping bot
    # did: the stop did not sit waiting for it.
    needed = world.bot.log_text()[len(first_run) :].count("fit_video attempt")
    assert first_run.count("fit_video attempt") < needed


# -- buttons and /job after a restart ------------------------------------------------------------


async def test_cancel_button_works_after_a_restart(start: StartWorld) -> None:
    world = await start()
    prompt = "an endless staircase"
    world.service.default_plan = TaskPlan(polls=FOREVER)
    it = await world.video(prompt)
    job_id = await world.job_id(it)
    await wait_created(world, prompt)
    task = task_for(world, prompt)
    await world.service.wait_for(lambda: len(answered(service_polls(world, task.id))) >= 1)
    await world.bot.kill()

    await world.restart_bot()
    msg = await it.wait_original(lambda m: RESUMED in "".join(notes_seen(m)))
    [cancel] = [c for c in button_ids(msg) if c.startswith("framecast:cancel:")]
    assert cancel == f"framecast:cancel:{job_id}:{world.alice.id}"

    # Someone else may not cancel it...
    other = await world.discord.click(msg, cancel, world.bob)
    await other.wait_response()
    denied = await other.wait_original(lambda m: bool(m.content))
    assert denied.ephemeral and "Only the member who asked" in denied.content
    assert job_rows(world)[job_id]["state"] == "running"
    # ...the requester may.
    click = await world.discord.click(msg, cancel, world.alice)
    await click.wait_response()
    await it.wait_original(lambda m: status_of(m).startswith("🚫"))
    assert job_rows(world)[job_id]["state"] == "cancelled"
    assert button_ids(it.original) == []
    assert world.files_for(job_id) == []
    assert len(service_creates(world, prompt)) == 1
    polls = len(service_polls(world, task.id))
    look = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
    await look.wait_original(lambda m: not m.loading, timeout=10)
    assert len(service_polls(world, task.id)) <= polls + 1  # polling stopped


async def test_retry_button_works_after_a_restart(start: StartWorld) -> None:
    world = await start()
    prompt = "a glass whale"
    world.service.plans = [("glass whale", TaskPlan(outcome="failed", error="content policy"))]
    it = await world.video(prompt)
    job_id = await world.job_id(it)
    msg = await it.wait_original(lambda m: status_of(m).startswith("❌") and bool(button_ids(m)))
    assert "content policy" in status_of(msg)
    await world.bot.kill()

    world.service.plans = []
    await world.restart_bot()
    [retry] = button_ids(msg)
    assert retry == f"framecast:retry:{job_id}:{world.alice.id}"
    click = await world.discord.click(msg, retry, world.alice)
    await click.wait_response()
    new_id = await world.job_id(click)
    assert new_id != job_id
    delivered = await world.delivered(click)
    assert click.original is not None
    assert delivered.id == click.original.id
    assert len(world.files_for(new_id)) == 1
    assert [r.json["prompt"] for r in service_creates(world)] == [prompt, prompt]
    assert job_rows(world)[new_id]["retry_of"] == job_id


async def test_job_command_shows_state_and_file_after_a_restart(start: StartWorld) -> None:
    world = await start()
    it = await world.video("a clock made of sand")
    msg = await world.delivered(it)
    job_id = await world.job_id(it)
    [attachment] = msg.attachments
    await world.bot.kill()
    await world.restart_bot()

    async def job_command(member: Any) -> Any:
        look = await world.discord.slash(world.guild, world.channel, member, "job", {"id": job_id})
        await look.wait_response()
        return await look.wait_original(lambda m: not m.loading, timeout=10)

    mine = await job_command(world.alice)
    assert mine.ephemeral
    assert f"File: {attachment.url}" in mine.content
    assert mine.embeds and status_of(mine).startswith("✅")
    assert f"#{job_id}" in mine.embeds[0]["title"]

    refused = await job_command(world.bob)
    assert refused.ephemeral
    assert "Only the member who asked" in refused.content
    assert not refused.embeds and attachment.url not in refused.content

    admin = await job_command(world.admins[0])
    assert admin.ephemeral and f"File: {attachment.url}" in admin.content
    assert status_of(admin).startswith("✅")
