"""Delete on a delivered result, end to end against the fakes: it asks once, privately, then removes
the result message; the job stays, marked deleted. For its requester and for Manage Server only,
decided from the stored job; after a restart too; through the channel when the token is dead."""

from __future__ import annotations

from typing import Any

from tests.e2e.harness import World, bot_posts, button_ids, job_rows, wait_state
from tests.fakes.discord_api import FakeInteraction, FakeMessage
from tests.fakes.gen_service import TaskPlan

EPHEMERAL = 64


async def delivered_image(world: World, prompt: str, member: Any = None) -> tuple[int, FakeMessage, Any]:
    """/image by `member` (alice), delivered and recorded so; (job id, its message, the interaction).

    The file shows a moment before DELIVERED is stored, and Delete waits for it (a delivery still
    going on would post the file again): the tests click once it is stored."""
    it = await world.image(prompt, member=member)
    job_id = await world.job_id(it)
    message = await world.delivered(it)
    await world.discord.wait_for(lambda: len(button_ids(message)) == 3, timeout=5, what="the buttons")
    await wait_state(world, job_id, "delivered")
    return job_id, message, it


async def private_answer(click: FakeInteraction) -> tuple[str, list[str]]:
    """The private message a click was answered with: its text and its buttons' custom ids."""
    kind, data = await click.wait_response()
    assert kind == 4 and data is not None and data["flags"] & EPHEMERAL, (kind, data)
    message = await click.wait_original()
    return message.content, button_ids(message)


async def ask(world: World, message: FakeMessage, job_id: int, member: Any) -> FakeMessage:
    """Click Delete as `member`; the private question (with Confirm and Keep)."""
    click = await world.discord.click(message, f"framecast:delete:{job_id}", member)
    text, buttons = await private_answer(click)
    assert (
        text
        == f"Delete the result of job #{job_id}? The message is removed for everyone; the job stays in /history."
    )
    assert buttons == [f"framecast:delete-confirm:{job_id}", f"framecast:delete-keep:{job_id}"]
    assert click.original is not None and click.original.ephemeral
    return click.original


async def answer(world: World, question: FakeMessage, action: str, job_id: int, member: Any) -> str:
    """Click Confirm or Keep on the question; the question's text afterwards (no buttons left)."""
    before = question.edit_count
    await world.discord.click(question, f"framecast:delete-{action}:{job_id}", member)
    await world.discord.wait_for(lambda: question.edit_count > before, timeout=10, what=f"{action} answered")
    assert button_ids(question) == []
    return question.content


def deleted_mark(world: World, job_id: int) -> tuple[Any, Any]:
    record = job_rows(world)[job_id]
    assert record["state"] == "delivered"  # the job stays, in the history
    return record["discord"].get("deleted_at"), record["discord"].get("deleted_by")


async def test_the_requester_is_asked_once_then_the_result_is_removed(world: World) -> None:
    job_id, message, _ = await delivered_image(world, "a fox in the snow")
    assert f"framecast:delete:{job_id}" in button_ids(message)

    # Keep: nothing changes.
    question = await ask(world, message, job_id, world.alice)
    assert (
        await answer(world, question, "keep", job_id, world.alice)
        == f"Kept: the result of job #{job_id} stays."
    )
    assert not message.deleted and deleted_mark(world, job_id) == (None, None)

    # Confirm: the message goes, the job is marked, and the member is told privately.
    question = await ask(world, message, job_id, world.alice)
    assert (
        await answer(world, question, "confirm", job_id, world.alice)
        == f"🗑️ The result of job #{job_id} is deleted."
    )
    assert message.deleted
    at, by = deleted_mark(world, job_id)
    assert isinstance(at, float) and by == world.alice.id
    assert world.discord.requests_to("DELETE", "/webhooks/")  # through its interaction token
    # /job still knows the job, says it was deleted, and gives no way back to the file.
    job = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
    shown = await job.wait_original(lambda m: bool(m.embeds) and not m.loading)
    assert shown.content == "🗑️ deleted" and "framecast-" not in str(shown.to_payload())

    # A stale question's Confirm is harmless: nothing more is removed, the first deleter stays.
    deletes = len(world.discord.requests_to("DELETE"))
    # (The question has no buttons left: an outdated copy of it would still offer Confirm.)
    stale = await world.discord.click(
        question, f"framecast:delete-confirm:{job_id}", world.admins[0], crafted=True
    )
    await world.discord.wait_for(lambda: "already" in question.content, timeout=10, what="the stale confirm")
    assert stale.callbacks and question.content == f"The result of job #{job_id} was already deleted."
    assert len(world.discord.requests_to("DELETE")) == deletes
    assert deleted_mark(world, job_id)[1] == world.alice.id
    assert not world.discord.unknown_routes and not world.discord.rejected(50035)


async def test_another_member_is_refused_a_manager_may_delete(world: World) -> None:
    job_id, message, _ = await delivered_image(world, "a lighthouse")
    # Bob is neither the requester nor a manager: refused privately, before any question.
    click = await world.discord.click(message, f"framecast:delete:{job_id}", world.bob)
    text, buttons = await private_answer(click)
    assert text == "Only the member who asked for this job, or someone with Manage Server, can do that."
    assert buttons == []
    # A forged Confirm is checked again: refused, nothing removed.
    forged = await world.discord.click(message, f"framecast:delete-confirm:{job_id}", world.bob, crafted=True)
    await world.discord.wait_for(
        lambda: bool(forged.followups), timeout=10, what="the forged confirm refused"
    )
    assert forged.followups[0].ephemeral and "Manage Server" in forged.followups[0].content
    assert not message.deleted and deleted_mark(world, job_id) == (None, None)

    admin = world.admins[0]
    question = await ask(world, message, job_id, admin)
    assert "is deleted" in await answer(world, question, "confirm", job_id, admin)
    assert message.deleted and deleted_mark(world, job_id)[1] == admin.id


async def test_delete_after_a_restart_with_a_dead_token_goes_through_the_channel(world: World) -> None:
    job_id, message, it = await delivered_image(world, "a paper crane")
    await world.bot.terminate()
    await world.restart_bot()
    it.expire()  # Discord says the token is dead; the bot's stored expiry still says it lives

    question = await ask(world, message, job_id, world.alice)  # the button works after the restart
    assert "is deleted" in await answer(world, question, "confirm", job_id, world.alice)
    assert message.deleted and deleted_mark(world, job_id)[1] == world.alice.id
    assert world.discord.requests_to("DELETE", f"/channels/{world.channel.id}/messages/{message.id}")


async def test_a_message_already_gone_counts_as_deleted(world: World) -> None:
    job_id, message, _ = await delivered_image(world, "a kite")
    question = await ask(world, message, job_id, world.alice)
    message.deleted = True  # a moderator removed it meanwhile
    assert "is deleted" in await answer(world, question, "confirm", job_id, world.alice)
    assert deleted_mark(world, job_id)[1] == world.alice.id


async def test_delete_of_a_result_on_a_channel_message_removes_the_mention_too(world: World) -> None:
    """A job whose token died ends on a channel message, with a reply mentioning its requester:
    Delete removes that reply too (it pointed to a message no longer there)."""
    world.service.default_plan = TaskPlan(duration=1.0)
    it = await world.image("a moved kite", age=897.0)  # moves to a channel message at once
    job_id = await world.job_id(it)
    await wait_state(world, job_id, "delivered", timeout=20)
    mention = f"<@{world.alice.id}>"

    def mentions() -> list[FakeMessage]:
        return [m for m in bot_posts(world) if mention in m.content]

    [reply] = await world.discord.wait_for(mentions, timeout=10, what="the mention")
    [result] = [m for m in bot_posts(world) if m.attachments and not m.deleted]
    question = await ask(world, result, job_id, world.alice)
    assert "is deleted" in await answer(world, question, "confirm", job_id, world.alice)
    assert result.deleted and reply.deleted
