"""The service renames a model while the bot runs.

Before, every job failed with the service's 400 until the next periodic refresh of the model list
(ten minutes). Now the refused create reads the list again at once: a /video on the default model is
delivered on the family's newest model after one refresh, and a member who picked the old name is
told the names the service offers now.
"""

from __future__ import annotations

from tests.e2e.commands import refused, text_of
from tests.e2e.harness import StartWorld, World, service_creates, wait_log
from tests.fakes.gen_service import VIDEO_MODEL

OLD, NEW = VIDEO_MODEL, "svc-video-v2.1"


def list_calls(world: World, since: int) -> int:
    return sum(1 for r in world.service.requests[since:] if r.path == "/v1/models")


async def test_a_video_on_the_renamed_default_is_delivered_on_the_new_model_after_one_refresh(
    start_synced: StartWorld,
) -> None:
    world = await start_synced()
    await wait_log(world, "model list:")
    mark = len(world.service.requests)
    world.service.rename_model(OLD, NEW)
    it = await world.video("a river after the rename")
    message = await world.delivered(it)
    assert [r.json["model"] for r in service_creates(world, "a river after the rename")] == [OLD, NEW]
    assert list_calls(world, mark) == 1
    assert NEW in text_of(message)  # the settings line shows the model the video was made on
    # The next one goes straight to the new model: no refusal, no second refresh.
    await world.delivered(await world.video("a second river"))
    assert [r.json["model"] for r in service_creates(world, "a second river")] == [NEW]
    assert list_calls(world, mark) == 1
    # A member who types the old name now is told the current names before any job exists.
    answer = await refused(await world.discord.slash(
        world.guild, world.channel, world.bob, "video", {"prompt": "an old river", "model": OLD}
    ))  # fmt: skip
    assert OLD in answer and NEW in answer, answer
    assert not service_creates(world, "an old river")


async def test_a_video_that_picked_the_old_name_is_told_the_models_offered_now(
    start_synced: StartWorld,
) -> None:
    world = await start_synced()
    await wait_log(world, "model list:")
    mark = len(world.service.requests)
    world.service.rename_model(OLD, NEW)  # the bot's list still has the old name: the pick is accepted
    it = await world.video("a picked river", member=world.bob, opts={"model": OLD})
    job_id = await world.job_id(it)
    failed = await world.wait_message(
        lambda m: "no longer offers" in text_of(m), what="the job failing for its model"
    )
    text = text_of(failed)
    assert f"#{job_id}" in text
    assert f"“{OLD}”" in text and f"Models offered now: {NEW}." in text, text
    assert [r.json["model"] for r in service_creates(world, "a picked river")] == [OLD]  # never swapped
    assert list_calls(world, mark) == 1
