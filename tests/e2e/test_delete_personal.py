"""Delete on a person's own result (user installs), end to end: deleted where it is.

A result delivered in a group DM (where the bot is not) after its job's 15-minute token expired is
deleted through the Delete click's own token; a result that moved to the requester's DM is deleted
there, not looked for in the group DM; "gone" is never concluded from Missing Access or Unknown
Channel; what cannot be removed is said plainly and the job is not marked deleted.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.harness import StartWorld, World, button_ids, job_rows, task_for, wait_state
from tests.fakes.discord_api import FakeInteraction, FakeMessage
from tests.fakes.gen_service import TaskPlan

ON = {"USER_INSTALL": "on"}
TOKEN_TTL = 900.0
FOREVER = 10**9


async def personal_image(world: World, channel: Any, user: Any, prompt: str) -> tuple[int, FakeMessage, Any]:
    """/image from `user`'s own install in `channel`, delivered; (job id, its message, the interaction)."""
    it = await world.discord.slash_personal(channel, user, "image", {"prompt": prompt})
    await it.wait_response(timeout=5)
    job_id = await world.job_id(it)
    message = await world.delivered(it)
    await world.discord.wait_for(lambda: len(button_ids(message)) == 3, timeout=5, what="the buttons")
    await wait_state(world, job_id, "delivered")  # Delete waits for it (tests/e2e/test_delete.py)
    return job_id, message, it


async def ask(
    world: World, message: FakeMessage, job_id: int, user: Any
) -> tuple[FakeInteraction, FakeMessage]:
    """Click Delete on `message`: answered with a deferred update, then the private question."""
    click = await world.discord.click(message, f"framecast:delete:{job_id}", user)
    kind, _ = await click.wait_response()
    assert kind == 6, kind  # a deferred update: this click's @original is the result message
    question = await click.wait_followup(lambda m: "Delete the result" in m.content)
    assert question.ephemeral and button_ids(question) == [
        f"framecast:delete-confirm:{job_id}",
        f"framecast:delete-keep:{job_id}",
    ]
    return click, question


async def confirm(world: World, question: FakeMessage, job_id: int, user: Any) -> str:
    before = question.edit_count
    await world.discord.click(question, f"framecast:delete-confirm:{job_id}", user)
    await world.discord.wait_for(lambda: question.edit_count > before, timeout=10, what="confirm answered")
    return question.content


def mark(world: World, job_id: int) -> tuple[Any, Any]:
    record = job_rows(world)[job_id]["discord"]
    return record.get("deleted_at"), record.get("deleted_by")


async def test_a_group_dm_result_past_its_token_is_deleted_through_the_delete_clicks_token(
    start_synced: StartWorld,
) -> None:
    world = await start_synced(extra_env=ON)
    dora = world.discord.add_user("dora")
    group = world.discord.group_dm()
    job_id, message, it = await personal_image(world, group, dora, "a paper lantern")
    it.expire()  # the job's own token is spent: only a fresh one reaches the group DM

    click, question = await ask(world, message, job_id, dora)
    assert await confirm(world, question, job_id, dora) == f"🗑️ The result of job #{job_id} is deleted."
    assert message.deleted
    at, by = mark(world, job_id)
    assert isinstance(at, float) and by == dora.id
    app = world.discord.application_id
    assert world.discord.requests_to("DELETE", f"/webhooks/{app}/{click.token}/messages/@original")
    # The bot's token was never tried where the bot is not.
    assert not world.discord.requests_to(contains=f"/channels/{group.id}")


async def test_a_result_no_token_reaches_stays_unmarked_and_the_member_is_told_why(
    start_synced: StartWorld,
) -> None:
    world = await start_synced(extra_env=ON)
    dora = world.discord.add_user("dora")
    group = world.discord.group_dm()
    job_id, message, it = await personal_image(world, group, dora, "a glass harbour")
    it.expire()
    click, question = await ask(world, message, job_id, dora)
    click.expire()  # the question waited past the click's 15 minutes too

    text = await confirm(world, question, job_id, dora)
    assert text.startswith(f"The result of job #{job_id} could not be removed: it is in a conversation"), text
    assert not message.deleted and mark(world, job_id) == (None, None)  # never "deleted" while it shows
    # Asked again with a fresh click, it goes.
    _, question = await ask(world, message, job_id, dora)
    assert await confirm(world, question, job_id, dora) == f"🗑️ The result of job #{job_id} is deleted."
    assert message.deleted and mark(world, job_id)[1] == dora.id


async def test_a_result_moved_to_the_dm_is_deleted_there_and_the_pointer_left_behind_is_named(
    start_synced: StartWorld,
) -> None:
    world = await start_synced(extra_env={**ON, "TOKEN_MARGIN": "4"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    dora = world.discord.add_user("dora")
    group = world.discord.group_dm()
    it = await world.discord.slash_personal(
        group, dora, "image", {"prompt": "a slow tide"}, age=TOKEN_TTL - 6
    )
    job_id = await world.job_id(it)
    dm = world.discord.dm_channel(dora)
    await world.wait_message(lambda m: m.channel_id == dm.id and bool(m.embeds), timeout=10, what="the move")
    task_for(world, "a slow tide").plan = TaskPlan(polls=0)
    await wait_state(world, job_id, "delivered", timeout=20)
    copy = await world.delivered(it)
    assert copy.channel_id == dm.id
    await world.discord.wait_for(lambda: len(button_ids(copy)) == 3, timeout=5, what="the buttons")
    pointer = it.original
    assert pointer is not None and pointer.channel_id == group.id
    it.expire()

    _, question = await ask(world, copy, job_id, dora)
    text = await confirm(world, question, job_id, dora)
    assert text.startswith(f"🗑️ The result of job #{job_id} is deleted.\nA note that pointed to it stays"), (
        text
    )
    assert copy.deleted  # deleted in the DM where it is
    assert world.discord.requests_to("DELETE", f"/channels/{dm.id}/messages/{copy.id}")
    assert not world.discord.requests_to(contains=f"/channels/{group.id}")  # never looked for there
    assert not pointer.deleted and mark(world, job_id)[1] == dora.id
