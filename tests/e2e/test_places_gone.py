"""A job's message or channel gone while jobs are queued and running, end to end against the fakes:
the jobs still end (delivered where they can be, else failed), and the rest of the queue goes on."""

from __future__ import annotations

from tests.e2e.commands import FOREVER
from tests.e2e.harness import StartWorld, task_for, wait_state
from tests.fakes.gen_service import TaskPlan


async def test_job_messages_a_moderator_deletes_are_posted_afresh_and_get_their_results(
    start: StartWorld,
) -> None:
    """A moderator deletes the messages of a running and a queued job (the interactions' answers,
    their tokens still live): each result comes once, on a fresh channel message, with its ping."""
    world = await start(extra_env={"GEN_MAX_RUNNING": "1"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    running = await world.video("a slow tide", member=world.alice)
    queued = await world.video("a quick gull", member=world.bob)
    first, second = await world.job_id(running), await world.job_id(queued)
    await wait_state(world, first, "running")
    for it in (running, queued):
        assert it.original is not None
        await world.discord.delete_message(it.original)
    world.service.default_plan = TaskPlan(polls=0)
    task_for(world, "a slow tide").plan = TaskPlan(polls=0)
    for it, job_id, member in ((running, first, world.alice), (queued, second, world.bob)):
        message = await world.delivered(it)
        assert message.interaction is None and message.channel_id == world.channel.id
        assert len(world.files_for(job_id)) == 1
        await wait_state(world, job_id, "delivered")
        await world.discord.wait_for(
            lambda member=member: any(
                member.id in m.pinged_user_ids for m in world.discord.messages_in(world.channel)
            ),
            timeout=10,
            what="the requester's ping",
        )
    assert "unexpected error" not in world.bot.log_text()
