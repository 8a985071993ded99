"""/video and /image end to end: delivery, every response shape, failures, buttons, bad keys, 429s."""

from __future__ import annotations

import re
from typing import Literal

import pytest

from framecast.media import probe_video, sniff
from tests.e2e.harness import World, answer_to, button_ids, status_of, statuses_seen
from tests.fakes.gen_service import IMAGE_MODEL, POLL_PATH, VIDEO_MODEL, ImageShape, ProgressShape, TaskPlan

IdField = Literal["video_id", "task_id"]  # how the fake service names a created task's id


def creates(world: World, prompt: str | None = None) -> list[dict]:
    """JSON bodies of the create requests the service received (optionally for one prompt)."""
    return [
        r.json
        for r in world.service.requests
        if r.method == "POST"
        and r.path in ("/v1/videos", "/v1/images/generations")
        and (prompt is None or (r.json or {}).get("prompt") == prompt)
    ]


async def test_video_goes_queued_generating_done_with_the_file_attached(world: World) -> None:
    world.service.default_plan = TaskPlan(polls=3)
    it = await world.video("a red fox running through snow")
    # Acknowledged at once, publicly (a deferred "thinking" reply, completed by edits).
    assert it.ack_latency < 3
    assert it.callbacks[0][0] == 5
    msg = await world.delivered(it)
    assert msg.id == it.original.id  # the job's own message carries the file, no extra post
    assert not msg.ephemeral
    [attachment] = msg.attachments
    assert attachment.data == world.service.video_bytes()
    info = sniff(attachment.data)
    assert info is not None
    assert info.kind == "video"
    assert probe_video(attachment.data).frames > 0
    seen = statuses_seen(msg)
    # "Queued: #1" first, unless the job left the queue before its message was first drawn: each
    # draw shows the job as it is then (a job that waits: tests/e2e/test_resilience.py).
    assert (seen[0].startswith("⏳") and "#1" in seen[0]) or seen[0].startswith("🚀"), seen
    assert any("%" in s and "▰" in s for s in seen), seen
    assert seen[-1].startswith("✅")
    embed = msg.embeds[0]
    assert embed["description"] == "a red fox running through snow"
    fields = {f["name"]: f["value"] for f in embed["fields"]}
    assert fields["Requested by"] == f"<@{world.alice.id}>"
    assert fields["Settings"] == f"1152×768 · 5 s · 24 fps · {VIDEO_MODEL}"
    # Nothing left to cancel; any member may make it again, or remix it; its requester may delete it.
    assert [c.split(":")[1] for c in button_ids(msg)] == ["again", "remix", "delete"]
    [body] = creates(world)
    assert body == {
        "model": VIDEO_MODEL,
        "prompt": "a red fox running through snow",
        "width": 1152,
        "height": 768,
        "num_frames": 121,
        "frame_rate": 24,
    }


async def test_video_options_reach_the_service(world: World) -> None:
    it = await world.video("tall waterfall", opts={"size": "vertical", "length": 3, "fps": 30})
    await world.delivered(it)
    [body] = creates(world)
    assert (body["width"], body["height"], body["num_frames"], body["frame_rate"]) == (720, 1280, 91, 30)
    assert body["width"] * body["height"] <= 1280 * 720


@pytest.mark.parametrize("shape", ["data_url", "data_b64", "url", "image_url", "task"])
async def test_image_is_delivered_for_every_response_shape(world: World, shape: ImageShape) -> None:
    world.service.image_shape = shape
    it = await world.image("a lighthouse at dusk", opts={"size": "landscape"})
    msg = await world.delivered(it)
    [attachment] = msg.attachments
    assert attachment.data == world.service.image_bytes()
    assert attachment.filename.endswith(".png")
    assert status_of(msg).startswith("✅")
    [body] = creates(world)
    assert body == {"model": IMAGE_MODEL, "prompt": "a lighthouse at dusk", "size": "1152x768"}


@pytest.mark.parametrize("id_field", ["video_id", "task_id"])
@pytest.mark.parametrize("shape", ["int", "float", "percent_str", "fraction_str", "int_str", "float_percent"])
async def test_every_id_name_and_progress_shape_shows_a_real_percentage(
    world: World, id_field: IdField, shape: ProgressShape
) -> None:
    world.service.id_field = id_field
    world.service.progress_shape = shape
    world.service.default_plan = TaskPlan(polls=3)
    it = await world.video("clouds over mountains")
    msg = await world.delivered(it)
    shown = [s for s in statuses_seen(msg) if "%" in s]
    # Polls answer 25%, 50%, 75% in whatever shape: the member sees real percentages (the
    # service's own, or estimates between polls built on them), rising, never made up from nothing.
    percents = [int(m) for s in shown for m in re.findall(r"(\d+)%", s)]
    assert any(25 <= p <= 95 for p in percents), statuses_seen(msg)
    assert percents == sorted(percents), statuses_seen(msg)
    assert all("Generating" in s for s in shown)


@pytest.mark.parametrize("shape", ["missing", "null", "garbage"])
async def test_unknown_progress_shows_elapsed_time_not_a_made_up_percentage(
    world: World, shape: ProgressShape
) -> None:
    world.service.progress_shape = shape
    world.service.default_plan = TaskPlan(polls=3)
    it = await world.video("a quiet library")
    msg = await world.delivered(it)
    generating = [s for s in statuses_seen(msg) if "Generating" in s]
    assert generating and all("elapsed" in s and "%" not in s for s in generating), statuses_seen(msg)


@pytest.mark.parametrize("error", ["content policy violation: weapons", None])
async def test_failed_task_shows_the_reason_and_retry_delivers(world: World, error: str | None) -> None:
    world.service.plans = [("doomed", TaskPlan(outcome="failed", error=error))]
    it = await world.video("doomed attempt")
    job_id = await world.job_id(it)
    msg = await world.wait_message(lambda m: status_of(m).startswith("❌"), what="failure shown")
    status = status_of(msg)
    if error:
        assert error in status
    else:
        assert "gave no reason" in status
    [retry] = button_ids(msg)
    assert retry.startswith(f"framecast:retry:{job_id}:")
    # The service recovers; the requester presses Retry: a new job, in a new message, delivered.
    world.service.plans = []
    click = await world.discord.click(msg, retry, world.alice)
    await click.wait_response()
    new_id = await world.job_id(click)
    assert new_id != job_id
    await world.delivered(click)
    assert len(creates(world, "doomed attempt")) == 2


async def test_retry_is_refused_to_other_members(world: World) -> None:
    world.service.plans = [("doomed", TaskPlan(outcome="failed", error="nope"))]
    it = await world.video("doomed again")
    msg = await world.wait_message(lambda m: status_of(m).startswith("❌"), what="failure shown")
    click = await world.discord.click(msg, button_ids(msg)[0], world.bob)
    kind, data = await click.wait_response()
    assert data is not None
    assert kind == 4 and data["flags"] & 64
    assert "Manage Server" in data["content"]
    assert len(creates(world, "doomed again")) == 1
    assert it.original is not None


async def test_a_managers_retry_refused_at_the_members_limit_names_the_member_and_pings_nobody(
    world: World,
) -> None:
    # The limit is the member's (the retry is their job), not the manager's, who has no job at all.
    world.service.plans = [("doomed", TaskPlan(outcome="failed", error="nope"))]
    it = await world.video("doomed at the limit")
    msg = await world.wait_message(lambda m: status_of(m).startswith("❌"), what="failure shown")
    world.service.plans = []
    world.service.default_plan = TaskPlan(polls=10**9)
    for prompt in ("alice's first", "alice's second"):  # alice at MEMBER_JOB_LIMIT (2)
        await world.job_id(await world.video(prompt))
    click = await world.discord.click(msg, button_ids(msg)[0], world.admins[0])
    kind, data = await click.wait_response()
    assert data is not None and kind == 4 and data["flags"] & 64
    assert data["content"] == (
        f"<@{world.alice.id}> already has 2 jobs queued or running. Wait for one to finish, or cancel one."
    )
    assert data["allowed_mentions"] == {"parse": []} and click.original is not None
    assert not click.original.pinged_user_ids
    # Alice's own Retry still reads "you".
    mine = await world.discord.click(msg, button_ids(msg)[0], world.alice)
    kind, data = await mine.wait_response()
    assert data is not None and data["content"].startswith("You already have 2 jobs queued or running.")
    assert len(creates(world, "doomed at the limit")) == 1
    assert it.original is not None


async def test_cancel_queued_and_running_jobs(tmp_path) -> None:
    from tests.e2e.harness import close_world, make_world

    world = await make_world(tmp_path, extra_env={"GEN_MAX_RUNNING": "1"})
    try:
        await world.start_bot()
        world.service.plans = [("slow", TaskPlan(duration=60))]
        running = await world.video("slow one", member=world.alice)
        queued = await world.video("waiting one", member=world.bob)
        qmsg = await queued.wait_original(lambda m: "#1" in status_of(m) and bool(button_ids(m)))
        # Someone else may not cancel it...
        carol = world.members[0][2]
        click = await world.discord.click(qmsg, button_ids(qmsg)[0], carol)
        kind, data = await click.wait_response()
        assert data is not None
        assert kind == 4 and data["flags"] & 64
        # ...its requester may.
        click = await world.discord.click(qmsg, button_ids(qmsg)[0], world.bob)
        await click.wait_response()
        await queued.wait_original(lambda m: status_of(m).startswith("🚫") and not button_ids(m))
        # An admin (Manage Server) may cancel someone else's running job; polling stops.
        rmsg = await running.wait_original(lambda m: "Generating" in status_of(m))
        slow_task = next(iter(world.service.tasks))

        def slow_polls() -> int:
            return sum(
                1
                for r in world.service.requests
                if r.path == POLL_PATH and r.query.get("video_id") == slow_task
            )

        click = await world.discord.click(rmsg, button_ids(rmsg)[0], world.admins[0])
        await click.wait_response()
        await running.wait_original(lambda m: status_of(m).startswith("🚫") and not button_ids(m))
        polls_at_cancel = slow_polls()
        # The freed slot goes to the next job, which is delivered while the slow task is left alone.
        after = await world.video("after cancel", member=world.members[0][2])
        await world.delivered(after)
        assert creates(world, "waiting one") == []
        assert slow_polls() <= polls_at_cancel + 1  # at most one poll was already in flight
        assert world.service.count(path=POLL_PATH) > polls_at_cancel  # polling itself went on
    finally:
        await close_world(world)


async def test_bad_api_key_tells_members_to_call_an_admin(world: World) -> None:
    world.service.api_key = "a-different-key"
    it = await world.video("anything")
    msg = await it.wait_original(lambda m: status_of(m).startswith("❌"))
    assert "misconfigured" in status_of(msg) and "admin" in status_of(msg)
    await world.discord.wait_for(lambda: "GEN_API_KEY" in world.bot.log_text(), what="operator log line")
    assert world.service.api_key not in world.bot.log_text()
    # 401 is not retried
    assert world.service.count(status=401) == 1


@pytest.mark.parametrize("retry_after", [0.3, None])
async def test_429_storm_from_a_shared_key_slows_down_but_delivers(
    world: World, retry_after: float | None
) -> None:
    # Another client shares the key: the service allows only 5 per second to us.
    world.service.rate_limit = (5, 1.0)
    world.service.retry_after = retry_after
    its = [await world.video(f"storm {i}", member=world.members[0][i % 3]) for i in range(2)]
    its += [await world.image(f"storm image {i}", member=world.members[0][2]) for i in range(1)]
    for it in its:
        await world.delivered(it, timeout=60)
    rejected = world.service.count(status=429)
    assert rejected >= 1
    # Backing off means no hammering: our own budget still holds (16 per second here), and most
    # requests got through instead of bouncing.
    assert world.service.max_in_window(1.0) <= 16
    assert rejected < len(world.service.requests) / 2, (rejected, len(world.service.requests))


async def test_progress_edits_are_coalesced(tmp_path) -> None:
    from tests.e2e.harness import close_world, make_world

    # Polled every interval (the fake's task ends only after forty polls): the planner's longer
    # waits for tasks far from done are not what this test is about.
    world = await make_world(tmp_path, extra_env={"EDIT_INTERVAL": "0.5", "GEN_POLL_MAX_INTERVAL": "0.05"})
    try:
        await world.start_bot()
        # About forty polls, each reporting a new percentage, over two seconds.
        world.service.default_plan = TaskPlan(duration=2.0, polls=40)
        it = await world.video("a slow sunrise")
        msg = await world.delivered(it)
        edits = [h for h in msg.history if h["action"] in ("edit", "complete")]
        polls = world.service.count(path=POLL_PATH)
        assert polls >= 30
        # one edit per half second at most, plus the state changes (queued, starting, uploading, done)
        assert len(edits) <= 2.0 / 0.5 + 6, len(edits)
        # and never the same visible text twice in a row
        payloads = [h["payload"] for h in edits if not h.get("files")]
        assert all(a != b for a, b in zip(payloads, payloads[1:], strict=False))
    finally:
        await close_world(world)


async def test_transient_service_trouble_is_retried_and_the_job_delivered(world: World) -> None:
    world.service.fail_next = 3
    it = await world.video("weather the storm")
    msg = await world.delivered(it)
    assert status_of(msg).startswith("✅")
    assert len(creates(world, "weather the storm")) >= 2  # the first tries really failed


async def test_malformed_polls_below_the_limit_are_polled_again_and_the_job_delivered(world: World) -> None:
    # Two unreadable poll answers (GEN_MALFORMED_POLLS is 3): counted, polled again, delivered.
    world.service.path_scripted[POLL_PATH] = [(200, b'{"status": "pend', None)] * 2
    it = await world.video("weather the storm")
    msg = await world.delivered(it)
    assert status_of(msg).startswith("✅")
    assert len(creates(world, "weather the storm")) == 1
    assert not world.service.path_scripted[POLL_PATH]  # both bad answers were really served


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        (
            TaskPlan(reject_status=400, reject_message="prompt violates the content policy"),
            "prompt violates the content policy",
        ),
        (TaskPlan(omit_url=True), "does not understand"),
        (TaskPlan(status="exploded"), "does not understand"),
    ],
    ids=["rejected-create", "completed-without-url", "unknown-status"],
)
async def test_service_answers_we_cannot_use_fail_clearly_with_retry(
    world: World, plan: TaskPlan, expected: str
) -> None:
    world.service.default_plan = plan
    it = await world.video("edge case")
    msg = await it.wait_original(lambda m: status_of(m).startswith("❌"))
    assert expected in status_of(msg)
    assert [c for c in button_ids(msg) if c.startswith("framecast:retry:")]


async def test_a_task_that_never_finishes_times_out(tmp_path) -> None:
    from tests.e2e.harness import close_world, make_world

    world = await make_world(tmp_path, extra_env={"GEN_POLL_TIMEOUT": "1.5"})
    try:
        await world.start_bot()
        world.service.default_plan = TaskPlan(duration=3600)
        it = await world.video("forever")
        msg = await it.wait_original(lambda m: status_of(m).startswith("❌"))
        assert "did not finish within" in status_of(msg)
        assert button_ids(msg) and button_ids(msg)[0].startswith("framecast:retry:")
    finally:
        await close_world(world)


async def test_forged_clicks_naming_a_job_beyond_64_bits_are_answered_as_no_such_job(world: World) -> None:
    """A custom id's numbers are the clicker's to choose (a modified client sends any custom id on
    any message): a job id past what a database column holds names no job. Each button answers as
    for any job not in the server, privately, and nothing fails in the bot."""
    world.service.default_plan = TaskPlan(polls=10**9)
    running = await world.video("long running", member=world.bob)
    rmsg = await running.wait_original(lambda m: "Generating" in status_of(m) and bool(button_ids(m)))
    huge = 10**20 - 1  # the most a job button's custom id holds (20 digits), beyond 2**64
    for action in ("cancel", "retry", "again", "remix", "delete", "delete-confirm"):
        click = await world.discord.click(rmsg, f"framecast:{action}:{huge}", world.alice, crafted=True)
        assert await answer_to(world, click) == (f"There is no job #{huge} in this server.", True), action
    assert "Generating" in status_of(rmsg)
    assert world.bot is not None and "Traceback" not in world.bot.log_text()


async def test_a_forged_keep_on_a_job_message_is_answered_privately_and_changes_nothing(world: World) -> None:
    """Keep answers the private delete question by editing it. Sent on bob's job message instead (a
    forged custom id), it would have overwritten that message for everyone with "Kept" and taken
    its buttons away: it is answered privately, and the message stays as it was."""
    world.service.default_plan = TaskPlan(polls=10**9)
    running = await world.video("long running", member=world.bob)
    rmsg = await running.wait_original(lambda m: "Generating" in status_of(m) and bool(button_ids(m)))
    job_id = await world.job_id(running)
    buttons = button_ids(rmsg)
    click = await world.discord.click(rmsg, f"framecast:delete-keep:{job_id}", world.alice, crafted=True)
    assert await answer_to(world, click) == (f"Kept: the result of job #{job_id} stays.", True)
    assert "Generating" in status_of(rmsg) and button_ids(rmsg) == buttons


async def test_a_forged_confirm_on_a_job_message_answers_privately_and_leaves_that_message(
    world: World,
) -> None:
    """Confirm answers the private delete question in its place. Alice sends it, for her own
    delivered image, on bob's job message instead (a forged custom id): her result goes (she may
    delete it), the answer is private, and bob's message is not overwritten."""
    done = await world.image("alice's kite")
    image_id = await world.job_id(done)
    result = await world.delivered(done)
    world.service.default_plan = TaskPlan(polls=10**9)
    running = await world.video("long running", member=world.bob)
    rmsg = await running.wait_original(lambda m: "Generating" in status_of(m) and bool(button_ids(m)))
    buttons = button_ids(rmsg)
    click = await world.discord.click(rmsg, f"framecast:delete-confirm:{image_id}", world.alice, crafted=True)
    kind, data = await click.wait_response()
    assert kind == 5 and data is not None and data["flags"] & 64, (kind, data)  # a new private answer
    answer = await click.wait_original(lambda m: not m.loading)
    assert answer.ephemeral and answer.content == f"🗑️ The result of job #{image_id} is deleted."
    assert result.deleted
    assert "Generating" in status_of(rmsg) and button_ids(rmsg) == buttons


async def test_forged_cancel_and_retry_naming_the_clicker_as_owner_are_refused(world: World) -> None:
    """The custom id's requester decides nothing: who may act comes from the stored job. Carol
    sends clicks whose custom ids name HER as the owner of other members' jobs (a modified client
    can send any custom id on any message); she is refused, the running job goes on and the failed
    one is not retried."""
    carol = world.members[0][2]
    world.service.plans = [
        ("doomed", TaskPlan(outcome="failed", error="nope")),
        ("long", TaskPlan(polls=10**9)),
    ]
    running = await world.video("long running", member=world.bob)
    running_id = await world.job_id(running)
    rmsg = await running.wait_original(lambda m: "Generating" in status_of(m) and bool(button_ids(m)))
    forged = f"framecast:cancel:{running_id}:{carol.id}"
    assert forged not in button_ids(rmsg)
    click = await world.discord.click(rmsg, forged, carol, crafted=True)
    kind, data = await click.wait_response()
    assert data is not None and kind == 4 and data["flags"] & 64, (kind, data)
    assert "Manage Server" in data["content"]

    failed = await world.video("doomed forever", member=world.alice)
    failed_id = await world.job_id(failed)
    fmsg = await world.wait_message(lambda m: status_of(m).startswith("❌"), what="failure shown")
    click = await world.discord.click(fmsg, f"framecast:retry:{failed_id}:{carol.id}", carol, crafted=True)
    kind, data = await click.wait_response()
    assert data is not None and kind == 4 and data["flags"] & 64, (kind, data)
    assert "Manage Server" in data["content"]
    assert len(creates(world, "doomed forever")) == 1  # not retried

    # The running job went on: still generating, still cancellable by its requester.
    assert "Generating" in status_of(rmsg) and world.service.tasks
    click = await world.discord.click(rmsg, button_ids(rmsg)[0], world.bob)
    await click.wait_response()
    await running.wait_original(lambda m: status_of(m).startswith("🚫"))
