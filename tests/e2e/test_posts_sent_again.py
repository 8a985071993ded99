"""A job's post sent again is no second message: Discord stored it, the bot never heard so.

The real bot.py against the fake Discord, which deduplicates a create with ``enforce_nonce`` as
Discord does. The job's move to a channel message (its token about to die) and its mention of the
requester are each posted with their own nonce: when the answer is lost (the connection dropped
after Discord stored the message) or the bot is killed before it records the message, the post
sent again is answered with the stored message, and the channel ends with one of each.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.commands import FOREVER
from tests.e2e.harness import (
    StartWorld,
    World,
    bot_posts,
    button_ids,
    hold_route,
    status_of,
    task_for,
    wait_log,
    wait_state,
)
from tests.fakes.discord_api import FakeMessage
from tests.fakes.gen_service import TaskPlan

#: Token age at which a job moves to a channel message at once (TOKEN_MARGIN is 2 s).
MOVE_SOON = 897.0
CHANNEL_SEND = "/channels/{channel_id}/messages"


def status_posts(world: World, job_id: int) -> list[FakeMessage]:
    """The job's status messages the bot posted in the channel, deleted ones too (its mention aside)."""
    return [m for m in bot_posts(world) if m.embeds and f"#{job_id}" in str(m.embeds[0].get("title"))]


def is_move(request: Any) -> bool:
    """A channel message carrying a job's status (the move), not a mention."""
    return bool((request.body or {}).get("embeds"))


def mentions_of(world: World, user_id: int) -> list[FakeMessage]:
    """Messages that notified `user_id`."""
    return [m for m in world.discord.messages.values() if user_id in m.pinged_user_ids]


def assert_quiet(world: World) -> None:
    log = world.bot.log_text()
    assert "unexpected error" not in log and "Traceback" not in log, log[-4000:]


async def test_a_move_whose_answer_is_lost_leaves_one_status_message(world: World) -> None:
    # The token about to die, the job moves to a channel message. Discord stores it, and the
    # connection drops before its answer (discord.py does not send it again itself): the job's
    # worker moves again, and Discord answers with the message it stored. One status message, the
    # file on it; no second one left at "Generating… 20%" with a live Cancel button.
    world.service.default_plan = TaskPlan(duration=4.0)
    world.discord.lose_answer_next("POST /api/v10/channels", when=is_move)
    it = await world.video("a move whose answer is lost", age=MOVE_SOON)
    job_id = await world.job_id(it)
    msg = await world.delivered(it, timeout=60)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert len(world.discord.lost_answers) == 1
    assert [m.id for m in status_posts(world, job_id)] == [msg.id]
    assert status_of(msg).startswith("✅") and len(world.files_for(job_id)) == 1
    await world.discord.wait_for(lambda: mentions_of(world, world.alice.id), timeout=10, what="the mention")
    assert len(mentions_of(world, world.alice.id)) == 1
    assert_quiet(world)


async def test_a_move_the_bot_was_killed_before_recording_is_not_posted_twice(start: StartWorld) -> None:
    # Discord stored the job's new channel message, and the bot was killed before it heard back
    # (so before it saved the message's id). The restarted bot moves the job again: the same
    # nonce, the same message, which gets the result; nothing is left behind that Delete misses.
    world = await start()
    world.service.default_plan = TaskPlan(duration=4.0)
    release, held = hold_route(world.discord, "POST", CHANNEL_SEND, when=is_move)
    it = await world.video("a move, then the bot dies", age=MOVE_SOON)
    job_id = await world.job_id(it)
    await world.discord.wait_for(lambda: held, timeout=30, what="the move to be stored")
    await world.bot.kill()
    release.set()
    await world.restart_bot()
    msg = await world.delivered(it, timeout=60)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert [m.id for m in status_posts(world, job_id)] == [msg.id]
    assert status_of(msg).startswith("✅") and "framecast:cancel" not in str(button_ids(msg))
    assert len(world.files_for(job_id)) == 1
    assert_quiet(world)


async def test_a_mention_the_bot_was_killed_before_recording_is_not_sent_twice(start: StartWorld) -> None:
    # The result is on the job's channel message; Discord stores the reply that mentions the
    # requester, and the bot is killed before it hears back (so before it saves that it did). The
    # restarted bot finds the result there and mentions the requester again: the same nonce, so
    # Discord answers with the stored reply. One mention.
    world = await start()
    world.service.default_plan = TaskPlan(duration=2.0)
    mention = f"<@{world.alice.id}>"

    def is_mention(request: Any) -> bool:
        return mention in str((request.body or {}).get("content"))

    release, held = hold_route(world.discord, "POST", CHANNEL_SEND, when=is_mention)
    it = await world.video("a mention, then the bot dies", age=MOVE_SOON)
    job_id = await world.job_id(it)
    await world.discord.wait_for(lambda: held, timeout=30, what="the mention to be stored")
    await world.bot.kill()
    release.set()
    await world.restart_bot()
    await wait_log(world, f"job {job_id} was already delivered before a restart", timeout=60)
    await wait_state(world, job_id, "delivered", timeout=20)

    def mentions_answered() -> int:
        return sum(
            r.method == "POST" and r.route == f"POST {CHANNEL_SEND}" and r.status == 200 and is_mention(r)
            for r in world.discord.requests
        )

    # The restarted bot's mention, answered.
    await world.discord.wait_for(lambda: mentions_answered() >= 2, timeout=20, what="the second mention")
    assert len(mentions_of(world, world.alice.id)) == 1
    assert len(world.files_for(job_id)) == 1
    assert_quiet(world)


async def test_a_moved_message_a_moderator_deletes_is_posted_afresh_not_found_again(world: World) -> None:
    # Each move is its own message, with its own nonce: after a moderator deletes the job's
    # channel message, the next move must not be answered with the deleted one (the fake, like
    # Discord, answers a nonce it has seen with its message, deleted or not).
    world.service.default_plan = TaskPlan(polls=FOREVER)
    it = await world.video("a moved message a moderator deletes", age=MOVE_SOON)
    job_id = await world.job_id(it)
    [first] = await world.discord.wait_for(
        lambda: status_posts(world, job_id), timeout=30, what="the job's channel message"
    )
    await world.discord.delete_message(first)
    task_for(world, "a moved message a moderator deletes").plan = TaskPlan(polls=0)
    msg = await world.delivered(it, timeout=60)
    await wait_state(world, job_id, "delivered", timeout=20)
    assert msg.id != first.id and msg.interaction is None
    assert [m.id for m in status_posts(world, job_id)] == [first.id, msg.id]
    assert len(world.files_for(job_id)) == 1
    assert_quiet(world)
