"""Interaction tokens die after 15 minutes and messages age: the job's message moves, nothing is lost.

The harness runs the bot with TOKEN_MARGIN=2: a job leaves its interaction token 2 s before the
token expires. ``age=`` makes an interaction that old when it arrives; ``it.expire()`` kills a
token early (the bot's own ``expires_at`` does not know). Once a job has left its token, no request
may carry that token again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.e2e.harness import (
    StartWorld,
    World,
    bot_posts,
    button_ids,
    footer_of,
    notes_seen,
    status_of,
    task_for,
)
from tests.fakes.discord_api import FakeMessage
from tests.fakes.gen_service import TaskPlan

FOREVER = 10**9
MOVED = "This job continues in a new message"
TOKEN_TTL = 900.0
TOKEN_MARGIN = 2.0


def token_requests(world: World, it: Any) -> list[Any]:
    """Every request the bot made with the interaction's token."""
    return [r for r in world.discord.requests if it.token in r.path]


def job_posts(world: World, job_id: int) -> list[FakeMessage]:
    """Status messages of the job the bot posted in the channel (bot token), oldest first."""
    return sorted(
        (m for m in bot_posts(world) if m.embeds and (m.embeds[0].get("title") or "").endswith(f"#{job_id}")),
        key=lambda m: m.id,
    )


def pings(world: World) -> list[FakeMessage]:
    """Messages that notified somebody."""
    return [
        m
        for m in world.discord.messages.values()
        if m.pinged_user_ids or m.pinged_role_ids or m.pinged_everyone
    ]


def replied_to(message: FakeMessage) -> str | None:
    payload = message.history[0]["payload"] or {}
    return str((payload.get("message_reference") or {}).get("message_id") or "") or None


async def assert_delivered_on_channel_message_with_one_ping(
    world: World, it: Any, job_id: int
) -> FakeMessage:
    delivered = await world.delivered(it)
    assert delivered.interaction is None, "expected the file on a channel message"
    assert delivered.id == job_posts(world, job_id)[-1].id  # the job's current message
    assert len(world.files_for(job_id)) == 1
    assert status_of(delivered).startswith("✅")
    # Edits notify nobody: the requester is mentioned in one short reply to the delivered message.
    ping = await world.wait_message(lambda m: bool(m.pinged_user_ids), what="the requester's ping")
    assert pings(world) == [ping]
    assert ping.pinged_user_ids == {it.user.id}
    assert replied_to(ping) == str(delivered.id)
    assert not ping.attachments
    return delivered


async def test_a_job_outliving_its_token_moves_to_a_channel_message(start: StartWorld) -> None:
    # A wider margin than the harness's: the old message stays reachable for a while after the move
    # (the bot stops using a token min(2 s, margin / 2) before it really expires).
    world = await start(extra_env={"TOKEN_MARGIN": "4"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    # 6 s of token left: the job must leave it after 2 s, long before it is done.
    it = await world.video("a sundial through the seasons", age=TOKEN_TTL - 6)
    job_id = await world.job_id(it)
    moved = await world.wait_message(lambda m: m in job_posts(world, job_id), timeout=10, what="the move")
    assert moved.author.id == world.discord.bot_user.id and moved.webhook_id is None
    assert [c.split(":")[1] for c in button_ids(moved)] == ["cancel"]  # the job stays controllable there
    # The interaction's message points to the new one and has no buttons left.
    original = await it.wait_original(lambda m: MOVED in footer_of(m), timeout=5)
    assert str(moved.id) in footer_of(original)
    assert button_ids(original) == []

    task_for(world, "a sundial through the seasons").plan = TaskPlan(polls=0)
    await assert_delivered_on_channel_message_with_one_ping(world, it, job_id)
    # The token was used only while it was valid, and never refused.
    assert it.errors == []
    expiry = it.created_at + TOKEN_TTL
    assert all(r.time < expiry for r in token_requests(world, it))
    assert world.discord.rejected() == []


@pytest.mark.parametrize("how", ["expired", "unknown"])
async def test_a_dead_token_answer_switches_to_the_channel_at_once(start: StartWorld, how: str) -> None:
    world = await start()
    world.service.default_plan = TaskPlan(duration=3.0, polls=0)  # progress edits all along
    it = await world.video("a river seen from above")
    job_id = await world.job_id(it)
    await it.wait_original(lambda m: "%" in status_of(m))
    if how == "expired":
        it.expire()  # Discord: 401, code 50027
    else:
        world.discord.fail_next("/webhooks/", status=404, code=10015)

    await world.wait_message(lambda m: m in job_posts(world, job_id), timeout=10, what="the move")
    await assert_delivered_on_channel_message_with_one_ping(world, it, job_id)
    # Exactly one refused request with the token, and none after it: the answer was final.
    [refused] = it.errors
    assert refused.code == (50027 if how == "expired" else 10015)
    assert token_requests(world, it)[-1] is refused
    assert len(job_posts(world, job_id)) == 1


async def test_a_delivered_message_stays_as_it_is_when_its_token_expires(start: StartWorld) -> None:
    world = await start()
    left = 4.0
    it = await world.video("a moth near a lamp", age=TOKEN_TTL - TOKEN_MARGIN - left)
    job_id = await world.job_id(it)
    msg = await world.delivered(it)
    assert msg.id == it.original.id  # delivered through the token, in time
    edits = len(msg.history)
    # Past the moment the job would have had to leave its token: a finished job has nothing to move.
    await asyncio.sleep(max(0.0, it.created_at + TOKEN_TTL - TOKEN_MARGIN + 1.0 - time.time()))
    assert job_posts(world, job_id) == [] and bot_posts(world) == []
    assert len(msg.history) == edits
    assert status_of(msg).startswith("✅") and len(world.files_for(job_id)) == 1
    assert it.errors == []


async def test_a_refused_edit_of_an_old_message_30046_gets_a_fresh_one(start: StartWorld) -> None:
    world = await start()
    prompt = "a lighthouse keeper's year"
    world.service.default_plan = TaskPlan(polls=FOREVER)
    it = await world.video(prompt, age=TOKEN_TTL - 3)
    job_id = await world.job_id(it)
    first = await world.wait_message(lambda m: m in job_posts(world, job_id), timeout=10, what="the move")
    first.backdate(3700)  # Discord now refuses edits of it (30046); the bot's own age check can't know
    task = task_for(world, prompt)
    task.plan = TaskPlan(polls=0)  # the next poll completes: the bot must edit the old message

    delivered = await assert_delivered_on_channel_message_with_one_ping(world, it, job_id)
    assert delivered.id != first.id
    refused = world.discord.rejected(30046)
    assert len(refused) == 1, refused  # one refusal, then a fresh message: no hammering
    assert [m.id for m in job_posts(world, job_id)] == [first.id, delivered.id]


async def test_status_messages_are_replaced_before_they_get_too_old_to_edit(start: StartWorld) -> None:
    max_age = 1.0
    # Discord would refuse edits of a message older than 3 s; the bot replaces its status after 1 s.
    world = await start(extra_env={"STATUS_MESSAGE_MAX_AGE": str(max_age)}, message_edit_max_age=3 * max_age)
    world.service.default_plan = TaskPlan(duration=3.5, polls=0)  # progress edits all along
    it = await world.video("a glacier calving", age=TOKEN_TTL - 3)
    job_id = await world.job_id(it)
    await assert_delivered_on_channel_message_with_one_ping(world, it, job_id)

    posts = job_posts(world, job_id)
    assert len(posts) >= 2, posts  # the status moved on while the job ran (2.5 s past the first post)...
    assert world.discord.rejected(30046) == []  # never an edit Discord would refuse
    for older, newer in zip(posts, posts[1:], strict=False):
        # ...never before its message was STATUS_MESSAGE_MAX_AGE old (by the ids' own times, to the
        # millisecond: how many moves a run makes depends on how long a loaded machine takes).
        assert newer.created_at - older.created_at > max_age - 0.002
        assert str(newer.id) in footer_of(older)  # each old message points to the next one
        assert button_ids(older) == []
        assert all(h["time"] - older.created_at <= 3 * max_age for h in older.history)
    assert all(MOVED not in n for n in notes_seen(posts[-1]))


async def test_a_failure_on_a_channel_message_mentions_the_requester_once(start: StartWorld) -> None:
    world = await start()
    world.service.default_plan = TaskPlan(duration=1.5, outcome="failed", error="the model gave up")
    it = await world.video("an impossible staircase", age=TOKEN_TTL - 3)
    job_id = await world.job_id(it)
    failed = await world.wait_message(
        lambda m: m in job_posts(world, job_id) and status_of(m).startswith("❌"),
        timeout=15,
        what="the failure",
    )
    assert "the model gave up" in status_of(failed)
    assert [c.split(":")[1] for c in button_ids(failed)] == ["retry"]
    ping = await world.wait_message(lambda m: bool(m.pinged_user_ids), what="the requester's ping")
    assert pings(world) == [ping]
    assert ping.pinged_user_ids == {world.alice.id}
    assert replied_to(ping) == str(failed.id)
    assert f"#{job_id}" in ping.content
    assert it.errors == []
