"""A click whose message is deleted (or its channel) between the click and the bot's
acknowledgement, end to end against the fakes: what the member asked is still done, and answered.

Discord refuses a deferred update (callback type 6) on a message that is gone with 404 Unknown
Message (10008), and a refused callback acknowledges nothing; the bot then answers the click
privately instead, and never logs a traceback for it.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.commands import FOREVER
from tests.e2e.harness import StartWorld, World, bot_posts, button_ids, job_rows, status_of, wait_state
from tests.fakes.discord_api import FakeChannel, FakeInteraction, FakeMessage
from tests.fakes.gen_service import TaskPlan

CALLBACK = "/interactions/{interaction_id}/{token}/callback"
#: A click's private "thinking…" (callback type 5, flag 64: ephemeral).
PRIVATE_ACK = (5, {"flags": 64})


def before_the_acknowledgement(world: World, gone: Any) -> list[Any]:
    """Run `gone()` (a coroutine function: a moderator deleting something) when the bot's first
    interaction callback reaches the fake Discord, before Discord handles it: what the member
    clicked went away after the click and before the bot answered it.

    Returns the list of the callbacks that ran it (their :class:`FakeRequest`)."""
    ran: list[Any] = []
    routes = world.discord._routes  # noqa: SLF001 - a test-side wrapper around one route of the fake
    for index, (m, pattern, handler, auth, tmpl) in enumerate(routes):
        if m == "POST" and tmpl == CALLBACK:

            async def first_gone(call: Any, _handler: Any = handler) -> Any:
                if not ran:
                    ran.append(call.record)
                    await gone()
                return await _handler(call)

            routes[index] = (m, pattern, first_gone, auth, tmpl)
            return ran
    raise ValueError("the fake Discord has no interaction callback route")


def no_traceback(world: World) -> None:
    """Nothing failed on the bot's side: no ERROR line, no traceback."""
    log = world.bot.log_text()
    assert " ERROR " not in log and "Traceback" not in log, log[-4000:]


async def running_job(world: World, channel: FakeChannel | None = None) -> tuple[int, FakeMessage, str]:
    """Alice's video, running for ever: its id, its message and that message's Cancel button."""
    world.service.default_plan = TaskPlan(polls=FOREVER)
    channel = channel or world.channel
    it = await world.discord.slash(world.guild, channel, world.alice, "video", {"prompt": "a long corridor"})
    job_id = await world.job_id(it)
    await wait_state(world, job_id, "running", timeout=20)
    msg = await it.wait_original(lambda m: any(c.startswith("framecast:cancel:") for c in button_ids(m)))
    [cancel] = [c for c in button_ids(msg) if c.startswith("framecast:cancel:")]
    return job_id, msg, cancel


async def private_answer(world: World, click: FakeInteraction) -> str:
    """The text of a click acknowledged privately, once the bot has written it: in that private
    message, or (an error reply) in a private follow-up."""
    await world.discord.wait_for(
        lambda: bool(click.callbacks), timeout=10, what="the click's acknowledgement"
    )
    assert click.callbacks == [PRIVATE_ACK]

    def written() -> FakeMessage | None:
        answers = [click.original, *click.followups]
        return next((m for m in answers if m is not None and m.content and not m.deleted), None)

    await world.discord.wait_for(lambda: written() is not None, timeout=20, what="the click's answer")
    answer = written()
    assert answer is not None and answer.ephemeral
    return answer.content


async def test_a_cancel_whose_message_is_deleted_before_the_acknowledgement_still_cancels(
    world: World,
) -> None:
    job_id, msg, cancel = await running_job(world)

    async def deleted() -> None:
        await world.discord.delete_message(msg)

    ran = before_the_acknowledgement(world, deleted)
    click = await world.discord.click(msg, cancel, world.alice)
    # The deferred update is refused (10008): the click is answered privately instead, and says so.
    assert await private_answer(world, click) == f"🚫 Job #{job_id} is cancelled."
    assert len(ran) == 1 and [e.code for e in click.errors] == [10008]
    # The cancel was carried out: the job is cancelled, its fresh message says so, with no Cancel left.
    await wait_state(world, job_id, "cancelled", timeout=20)
    await world.discord.wait_for(
        lambda: any(status_of(m).startswith("🚫") for m in bot_posts(world) if not m.deleted),
        timeout=20,
        what="the job's fresh message to show the cancel",
    )
    live = [m for m in bot_posts(world) if not m.deleted]
    assert not any(c.startswith("framecast:cancel:") for m in live for c in button_ids(m))
    no_traceback(world)


async def test_a_cancel_whose_channel_is_deleted_before_the_acknowledgement_ends_the_job_quietly(
    start: StartWorld,
) -> None:
    def with_art(world: World) -> None:
        world.discord.add_channel(world.guild, "art")

    world = await start(setup=with_art)
    [art] = [c for c in world.guild.channels if c.name == "art"]
    job_id, msg, cancel = await running_job(world, art)

    async def deleted() -> None:
        await world.discord.delete_channel(art)

    before_the_acknowledgement(world, deleted)
    click = await world.discord.click(msg, cancel, world.alice)
    # Answered privately: cancelled, or (the channel's end came first) too late to cancel.
    text = await private_answer(world, click)
    assert f"#{job_id}" in text, text
    await world.discord.wait_for(
        lambda: job_rows(world)[job_id]["state"] in ("cancelled", "failed"), timeout=20, what="the job's end"
    )
    no_traceback(world)
