"""Results of every size reach the member: fitted to the destination's limit, or linked, never lost.

Payloads are real media made with PyAV (tests/fakes/media.py). Limits come from the places Discord
puts them: the interaction's ``attachment_size_limit`` for replies through the token, the guild's
boost tier for channel messages; the fake refuses anything larger with 413 (code 40005).
"""

from __future__ import annotations

from typing import Any

import pytest

from framecast.media import probe_video, sniff
from tests.e2e.commands import answer
from tests.e2e.harness import (
    StartWorld,
    World,
    bot_posts,
    button_ids,
    footer_of,
    job_rows,
    service_creates,
    status_of,
    wait_state,
)
from tests.fakes.discord_api import ATTACH_FILES, SEND_MESSAGES, SEND_MESSAGES_IN_THREADS, TEXT_PERMISSIONS
from tests.fakes.gen_service import TaskPlan
from tests.fakes.media import make_large_mp4, make_large_png

MiB = 1024 * 1024
REENCODED = "re-encoded to fit"
TOO_LARGE = "too large for this server's upload limit"
MOVE_SOON = 897.0  # token age: TOKEN_MARGIN is 2 s, so the job moves to a channel message ~1 s later


def assert_same_clip(original: bytes, delivered: bytes) -> None:
    """A valid MP4 with the original's duration (within one frame)."""
    before, after = probe_video(original), probe_video(delivered)
    info = sniff(delivered)
    assert info is not None
    assert info.ext == "mp4"
    assert abs(after.duration - before.duration) <= 1 / before.fps + 1e-6, (before, after)
    assert after.frames >= before.frames - 1


def no_crash(world: World) -> None:
    log = world.bot.log_text()
    assert world.bot.running
    assert "runner crashed" not in log and "unexpected error" not in log and "Traceback" not in log


# -- too large for the destination: re-encode --------------------------------------------------


async def test_video_and_image_over_the_default_10_mib_are_fitted(start: StartWorld) -> None:
    world = await start(extra_env={"MEMBER_JOB_LIMIT": "5"})
    video, image = make_large_mp4(12 * MiB), make_large_png(12 * MiB)
    world.service.video_payload = video
    world.service.image_payload = image
    world.service.default_plan = TaskPlan(duration=1.5)
    # One reply through the interaction (its attachment_size_limit), one after moving to a channel
    # message (the guild's limit): both are the tier-0 default of 10 MiB.
    replied = await world.video("static on an old television")
    moved = await world.video("snow on an old television", age=MOVE_SOON)
    still = await world.image("a field of static", member=world.bob)
    for it in (replied, moved):
        msg = await world.delivered(it)
        [attachment] = world.files_for(await world.job_id(it))
        assert attachment.size <= 10 * MiB
        assert_same_clip(video, attachment.data)
        assert REENCODED in footer_of(msg)
        assert status_of(msg).startswith("✅")
    assert (await world.delivered(replied)).id == replied.original.id
    assert (await world.delivered(moved)).interaction is None  # the channel message

    msg = await world.delivered(still)
    [attachment] = world.files_for(await world.job_id(still))
    assert attachment.size <= 10 * MiB
    info = sniff(attachment.data)
    assert info is not None
    assert info.kind == "image" and attachment.filename.endswith("." + info.ext)
    assert REENCODED in footer_of(msg)
    assert world.discord.rejected(40005) == []  # fitted before uploading: Discord never refused
    no_crash(world)


async def test_boosted_server_gets_the_same_files_unchanged(start: StartWorld) -> None:
    def boost(world: World) -> None:
        world.guild.premium_tier = 2  # 50 MiB uploads, for replies and channel messages alike

    world = await start(setup=boost, extra_env={"MEMBER_JOB_LIMIT": "5"})
    payload, image = make_large_mp4(12 * MiB), make_large_png(12 * MiB)
    world.service.video_payload = payload
    world.service.image_payload = image
    world.service.default_plan = TaskPlan(duration=1.5)
    replied = await world.video("static on a big television")
    moved = await world.video("snow on a big television", age=MOVE_SOON)
    still = await world.image("a big field of static", member=world.bob)
    for it, data in ((replied, payload), (moved, payload), (still, image)):
        msg = await world.delivered(it)
        [attachment] = world.files_for(await world.job_id(it))
        assert attachment.data == data  # fits under 50 MiB: not touched
        assert REENCODED not in footer_of(msg)
    assert (await world.delivered(moved)).interaction is None


async def test_tiny_limits_fit_a_video_and_an_image(start: StartWorld) -> None:
    limit = 300_000

    def tiny(world: World) -> None:
        world.guild.upload_limit = limit

    world = await start(setup=tiny)
    video = make_large_mp4(1_000_000, seconds=2.0)
    image = make_large_png(600_000)
    assert len(video) > limit and len(image) > limit
    world.service.video_payload = video
    world.service.image_payload = image
    v = await world.video("a flag in a storm", attachment_size_limit=limit)
    i = await world.image("a mosaic of tiny tiles", attachment_size_limit=limit)

    vmsg = await world.delivered(v)
    [vfile] = world.files_for(await world.job_id(v))
    assert vfile.size <= limit
    assert_same_clip(video, vfile.data)
    assert REENCODED in footer_of(vmsg)

    imsg = await world.delivered(i)
    [ifile] = world.files_for(await world.job_id(i))
    assert ifile.size <= limit
    kind = sniff(ifile.data)
    assert kind is not None and kind.kind == "image"
    assert ifile.filename.endswith("." + kind.ext)
    assert REENCODED in footer_of(imsg)
    assert world.discord.rejected(40005) == []
    no_crash(world)


async def test_a_video_that_cannot_fit_is_linked_and_the_member_is_told_why(start: StartWorld) -> None:
    world = await start()
    world.service.video_payload = make_large_mp4(1_000_000, seconds=2.0)
    it = await world.video("a cathedral of light", attachment_size_limit=4_000)
    job_id = await world.job_id(it)
    msg = await it.wait_original(lambda m: status_of(m).startswith(("✅", "❌")), timeout=30)
    assert status_of(msg).startswith("✅")
    [task] = world.service.tasks.values()
    link = f"{world.service.base_url}/files/{task.id}.mp4"
    assert link in msg.content
    assert TOO_LARGE in footer_of(msg)
    assert world.files_for(job_id) == []
    await wait_state(world, job_id, "delivered")
    no_crash(world)


# -- Discord says 413 anyway ---------------------------------------------------------------------


async def test_a_413_from_discord_makes_the_bot_fit_the_file_again(start: StartWorld) -> None:
    def lower_real_limit(world: World) -> None:
        # The bot reads 10 MiB from the guild's tier; this channel really takes less.
        world.guild.upload_limit = 900_000

    world = await start(setup=lower_real_limit, extra_env={"MEMBER_JOB_LIMIT": "5"})
    video = make_large_mp4(1_000_000, seconds=2.0)
    world.service.video_payload = video
    world.service.default_plan = TaskPlan(duration=1.5)
    replied = await world.video("a train crossing a viaduct", attachment_size_limit=2 * MiB)
    replied.attachment_size_limit = 600_000  # Discord changed its mind after the command was accepted
    moved = await world.video("a ferry crossing a bay", age=MOVE_SOON)

    for it, real_limit in ((replied, 600_000), (moved, 900_000)):
        msg = await world.delivered(it)
        job_id = await world.job_id(it)
        [attachment] = world.files_for(job_id)
        assert attachment.size <= real_limit
        assert_same_clip(video, attachment.data)
        assert REENCODED in footer_of(msg)
        assert status_of(msg).startswith("✅")
    refused = world.discord.rejected(40005)
    assert refused, "Discord never refused an upload: the test did not exercise a 413"
    assert all(r.status == 413 for r in refused)
    no_crash(world)


# -- downloads -----------------------------------------------------------------------------------


async def test_dead_oversized_or_stalled_downloads_fail_clearly_with_retry(start: StartWorld) -> None:
    world = await start(
        extra_env={"GEN_DOWNLOAD_MAX_BYTES": "1000000", "GEN_DOWNLOAD_TIMEOUT": "1", "MEMBER_JOB_LIMIT": "5"}
    )
    world.service.file_status = 410  # the result link has expired
    expired = await world.video("an expired sunset")
    msg = await expired.wait_original(lambda m: status_of(m).startswith("❌"), timeout=20)
    assert "could not be downloaded" in status_of(msg)
    assert [c.split(":")[1] for c in button_ids(msg)] == ["retry"]

    world.service.file_status = None
    world.service.video_payload = make_large_mp4(1_000_000, seconds=2.0)  # 1.7 MB: over the 1 MB cap
    big = await world.video("an enormous sunset")
    msg = await big.wait_original(lambda m: status_of(m).startswith("❌"), timeout=20)
    assert "larger than Framecast accepts" in status_of(msg)
    assert [c.split(":")[1] for c in button_ids(msg)] == ["retry"]

    # Under the cap, but the server stalls after the first 64 kB for longer than GEN_DOWNLOAD_TIMEOUT.
    world.service.video_payload = make_large_mp4(200_000, seconds=1.0)  # ~550 kB
    world.service.file_stall = 3.0
    slow = await world.video("a slow sunset")
    msg = await slow.wait_original(lambda m: status_of(m).startswith("❌"), timeout=20)
    assert "could not be downloaded" in status_of(msg)
    world.service.file_stall = 0.0
    world.service.video_payload = None  # a small, healthy file again

    # Retry works once the link is good again.
    retry = next(c for c in button_ids(expired.original) if c.startswith("framecast:retry:"))
    click = await world.discord.click(expired.original, retry, world.alice)
    await click.wait_response()
    delivered = await world.delivered(click)
    assert status_of(delivered).startswith("✅")
    for it in (expired, big, slow):
        assert world.files_for(await world.job_id(it)) == []
    no_crash(world)


# -- missing permissions are caught when the command is accepted --------------------------------


@pytest.mark.parametrize(
    ("missing", "named"), [(ATTACH_FILES, "Attach Files"), (SEND_MESSAGES, "Send Messages")]
)
async def test_missing_channel_permissions_are_refused_at_once(
    start: StartWorld, missing: int, named: str
) -> None:
    world = await start()
    channel = world.discord.add_channel(world.guild, "locked", bot_permissions=TEXT_PERMISSIONS & ~missing)
    for command in ("video", "image"):
        it = await world.discord.slash(
            world.guild, channel, world.alice, command, {"prompt": "a locked door"}
        )
        kind, data = await it.wait_response()
        assert data is not None
        assert kind == 4  # answered directly, privately: nothing was deferred or queued
        assert data["flags"] & 64
        assert named in data["content"]
    assert service_creates(world) == []
    assert job_rows(world) == {}
    assert [m for m in world.discord.messages_in(channel) if not m.ephemeral] == []
    assert bot_posts(world, channel) == []


async def test_in_a_thread_the_bot_needs_send_messages_in_threads_not_send_messages(
    start: StartWorld,
) -> None:
    """Discord lets the bot post in a thread with Send Messages in Threads, and Send Messages does not
    cover threads: a thread without the first is refused at once, naming it (not parked once the
    token is spent); one with it and without Send Messages gets its file on a fresh message."""

    def threads(w: World) -> None:
        for name in ("no threads", "threads only"):
            w.discord.add_thread(w.channel, name)

    world = await start(setup=threads)
    refused, allowed = world.guild.threads
    refused.bot_permissions = TEXT_PERMISSIONS & ~SEND_MESSAGES_IN_THREADS
    allowed.bot_permissions = TEXT_PERMISSIONS & ~SEND_MESSAGES
    it = await world.discord.slash(world.guild, refused, world.alice, "video", {"prompt": "a quiet thread"})
    kind, data = await it.wait_response()
    assert kind == 4 and data is not None and data["flags"] & 64
    assert "Send Messages in Threads" in data["content"]
    assert job_rows(world) == {}

    world.service.default_plan = TaskPlan(duration=2.0)
    it = await world.discord.slash(
        world.guild, allowed, world.alice, "video", {"prompt": "a busy thread"}, age=MOVE_SOON
    )
    job_id = await world.job_id(it)
    delivered = await world.delivered(it)
    assert delivered.channel_id == allowed.id and delivered.interaction is None  # the bot's own post
    await wait_state(world, job_id, "delivered")


async def moved_to_a_channel_message(world: World, prompt: str) -> tuple[Any, int, Any]:
    """A video job old enough to move to a channel message (bot token) about a second after it is
    asked, with a 2 s task: its interaction, its id and that message, once it is there."""
    world.service.default_plan = TaskPlan(duration=2.0)
    it = await world.video(prompt, age=MOVE_SOON)
    job_id = await world.job_id(it)
    moved = await world.wait_message(
        lambda m: (
            not m.ephemeral
            and m.interaction is None
            and bool(m.embeds)
            and f"#{job_id}" in (m.embeds[0].get("title") or "")
        ),
        what="moved to a channel message",
    )
    return it, job_id, moved


async def test_attach_files_taken_away_while_a_job_runs_leaves_its_file_waiting_in_job(world: World) -> None:
    """An admin takes Attach Files from the bot after Alice's job moved to a channel message (its
    token spent): the upload is refused, so the message shows the job finished, saying where the
    file waits, Alice is pinged, and /job (an interaction: no channel permission) hands her the file."""
    it, job_id, moved = await moved_to_a_channel_message(world, "attach taken away")
    await world.discord.set_bot_permissions(world.channel, TEXT_PERMISSIONS & ~ATTACH_FILES)
    await wait_state(world, job_id, "delivered")
    finished = await world.discord.wait_for(
        lambda: f"/job id:{job_id}" in footer_of(moved) and status_of(moved).startswith("✅"),
        timeout=10,
        what="the message saying where the file waits",
    )
    assert finished and world.files_for(job_id) == []
    await world.discord.wait_for(
        lambda: any(world.alice.id in m.pinged_user_ids for m in world.discord.messages_in(world.channel)),
        timeout=10,
        what="Alice's ping",
    )
    look = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
    shown = await answer(look)
    assert [a.filename for a in shown.attachments] == [f"framecast-{job_id}.mp4"]
    assert "unexpected error" not in world.bot.log_text()


async def test_discord_5xx_during_delivery_is_retried_and_delivers_once(world: World) -> None:
    # A job old enough to have moved to a channel message (bot token): there discord.py raises a 503
    # at once (webhook edits it retries itself), so the reporter's own retry is what saves the file.
    it, job_id, _ = await moved_to_a_channel_message(world, "through a flaky Discord")
    # As soon as the bot fetches the result, Discord fails its next channel edits with 503.
    await world.service.wait_for(lambda: any(r.path.startswith("/files/") for r in world.service.requests))
    world.discord.fail_next("PATCH /api/v10/channels", status=503, count=2)
    msg = await world.delivered(it, timeout=60)
    assert status_of(msg).startswith("✅")
    assert len(world.files_for(job_id)) == 1
    refused = [r for r in world.discord.requests if r.status == 503]
    assert any(r.files for r in refused), ("no delivery attempt met a 503", refused)
