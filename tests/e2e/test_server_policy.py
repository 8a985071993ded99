"""A server's limits and channel rules against the operator's ceilings, end to end.

A ceiling the operator lowers caps a server's stored value; every setting can be reset to the
operator's default (and stays reset across a restart); Again and Remix respect the daily quota
per member; "NSFW channels only" follows the channel as it is toggled.
"""

from __future__ import annotations

import asyncio

from tests.e2e.commands import (
    FOREVER,
    button,
    image,
    modal_values,
    refused,
    settings,
    text_of,
    video,
    with_buttons,
)
from tests.e2e.harness import StartWorld, service_creates
from tests.fakes.gen_service import TaskPlan


async def test_a_ceiling_lowered_by_the_operator_caps_the_servers_value(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env={"MEMBER_JOB_LIMIT": "3", "DAILY_IMAGE_QUOTA": "10"})
    await settings(world, "limits", {"member_jobs": 3, "daily_images": 8})
    await world.bot.terminate()
    world.env["MEMBER_JOB_LIMIT"] = "1"
    world.env["DAILY_IMAGE_QUOTA"] = "1"
    await world.restart_bot()
    show = text_of(await settings(world, "show"))
    assert "Jobs per member**: 1 (set by this server; ceiling: 1)" in show, show
    assert "Daily images per member**: 1 (set by this server; ceiling: 1)" in show, show
    world.service.default_plan = TaskPlan(polls=FOREVER)
    await world.job_id(await image(world, "first"))
    assert "1 job" in await refused(await image(world, "second"))
    # Changing another limit does not trip over the stored value above the new ceiling.
    msg = await settings(world, "limits", {"queue_cap": 5})
    assert "Saved" in msg.content, msg.content


async def test_every_setting_can_be_reset_to_the_operators_default(start_synced: StartWorld) -> None:
    world = await start_synced(
        extra_env={"MEMBER_JOB_LIMIT": "3", "DAILY_VIDEO_QUOTA": "4", "DAILY_IMAGE_QUOTA": "4"}
    )
    await settings(world, "limits", {"member_jobs": 1, "daily_videos": 0, "daily_images": 0, "queue_cap": 2})
    await settings(world, "video", {"size": "small", "length": 3, "fps": 16})
    await settings(world, "image", {"size": "landscape"})
    await settings(world, "channels add", {"channel": world.channel})
    await settings(world, "nsfw", {"only": True})
    await settings(world, "blocklist add", {"terms": "x1, x2"})
    show = text_of(await settings(world, "show"))
    assert show.count("set by this server") == 11, show
    for setting in (
        "member_jobs",
        "daily_videos",
        "daily_images",
        "queue_cap",
        "video_size",
        "video_seconds",
        "video_fps",
        "image_size",
        "channels",
        "nsfw_only",
        "blocklist",
    ):
        msg = await settings(world, "reset", {"setting": setting})
        assert "Saved" in msg.content or "Nothing" in msg.content, (setting, msg.content)
    await world.bot.terminate()
    await world.restart_bot()
    show = text_of(await settings(world, "show"))
    assert "set by this server" not in show, show
    # A quota of 0 is gone: a video and an image go through.
    await world.job_id(await video(world, "video after reset"))
    await world.job_id(await image(world, "image after reset"))


async def test_again_and_remix_at_the_daily_quota(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env={"DAILY_IMAGE_QUOTA": "1", "QUOTA_PERIOD": "3600"})
    message = await with_buttons(world, await image(world, "a red kite"))
    text = await refused(await world.discord.click(message, button(message, "again"), world.alice))
    assert "daily limit of 1 image" in text and "<t:" in text
    click = await world.discord.click(message, button(message, "remix"), world.alice)
    kind, _ = await click.wait_response()
    if kind == 9:  # the form opens: its submit is refused
        text = await refused(await world.discord.submit_modal(click, modal_values(click)))
    else:
        text = await refused(click)
    assert "daily limit of 1 image" in text
    # Bob has his own quota.
    again = await world.discord.click(message, button(message, "again"), world.bob)
    await again.wait_response()
    await world.delivered(again)
    assert len(service_creates(world, "a red kite")) == 2
    # A quota of 0 for videos refuses /video at once.
    await settings(world, "limits", {"daily_videos": 0})
    text = await refused(await video(world, "no videos here", member=world.members[0][2]))
    assert "daily limit of 0 videos" in text


async def test_nsfw_only_follows_the_channel_being_toggled(start_synced: StartWorld) -> None:
    world = await start_synced()
    await settings(world, "nsfw", {"only": True})
    assert "age-restricted" in await refused(await image(world, "one"))
    await world.discord.update_channel(world.channel, nsfw=True)
    await asyncio.sleep(0.3)  # the CHANNEL_UPDATE reaches the bot's cache
    await world.job_id(await image(world, "two"))
    await world.discord.update_channel(world.channel, nsfw=False)
    await asyncio.sleep(0.3)
    assert "age-restricted" in await refused(await image(world, "three", member=world.bob))
