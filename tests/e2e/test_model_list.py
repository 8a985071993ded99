"""Models follow the generation service's list, across restarts.

When the service drops the model a server picked, new jobs and Again fall back to the service's
default without a refusal, and ``/settings show`` says so; ``/models`` shows the list read at the
latest start. (Again after the server's model left the list was a product defect once.)
"""

from __future__ import annotations

import asyncio

from tests.e2e.commands import button, settings, text_of, video, with_buttons
from tests.e2e.harness import StartWorld, World, service_creates, wait_log
from tests.fakes.gen_service import VIDEO_MODEL


async def test_again_after_the_services_list_drops_the_servers_default_model(
    start_synced: StartWorld,
) -> None:
    def more(world: World) -> None:
        world.service.models.append(("svc-video-v9", "video"))

    world = await start_synced(setup=more)
    await wait_log(world, "model list:")
    msg = await settings(world, "video", {"model": "svc-video-v9"})
    assert "Saved" in msg.content, msg.content
    it = await world.video("a slow river")
    message = await with_buttons(world, it)
    assert service_creates(world, "a slow river")[0].json["model"] == "svc-video-v9"
    await world.bot.terminate()
    world.service.models = [m for m in world.service.models if m[0] != "svc-video-v9"]
    mark = len(world.bot.log_text())
    await world.restart_bot()
    await wait_log(world, "model list:", start=mark)
    # /video with no model falls back to the service's default...
    await world.job_id(await video(world, "a fresh river", member=world.bob))
    # ...and so does Again for a member who never picked a model.
    again = await world.discord.click(message, button(message, "again"), world.members[0][2])
    kind, _ = await again.wait_response()
    assert kind == 5
    await asyncio.sleep(1)
    refusals = [m.content for m in again.messages() if m.ephemeral and m.content]
    assert not refusals, refusals  # once: "“svc-video-v9” is not a model the generation service offers."
    await world.delivered(again)
    models = [r.json["model"] for r in service_creates(world, "a slow river")]
    assert models == ["svc-video-v9", VIDEO_MODEL]
    # /settings show tells the admin what jobs get now, not only the stale pick.
    show = text_of(await settings(world, "show"))
    assert f"svc-video-v9 (no longer offered: jobs use {VIDEO_MODEL})" in show, show


async def test_models_follow_the_services_list_after_a_restart(start_synced: StartWorld) -> None:
    world = await start_synced()
    await wait_log(world, "model list:")
    await world.bot.terminate()
    world.service.models = [("svc-video-v3", "video"), ("svc-image-9", "image")]
    mark = len(world.bot.log_text())
    await world.restart_bot()
    await wait_log(world, "model list:", start=mark)
    it = await world.discord.slash(world.guild, world.channel, world.alice, "models", locale="ja")
    kind, data = await it.wait_response()
    assert kind == 4 and data is not None
    text = "\n".join(f"{f['name']}: {f['value']}" for f in data["embeds"][0]["fields"])
    assert "svc-video-v3" in text and "svc-image-9" in text and VIDEO_MODEL not in text
