"""/history end to end against the fakes: a member's jobs, privately, newest first, ten a page with
Previous and Next (also after a restart); ``member:`` for Manage Server only; prompts literal."""

from __future__ import annotations

import re
from typing import Any

from cogs.literal import as_text
from tests.e2e.commands import FOREVER
from tests.e2e.harness import StartWorld, World, button_ids
from tests.fakes.discord_api import FakeInteraction, FakeMessage
from tests.fakes.gen_service import TaskPlan

EPHEMERAL = 64
HOSTILE = "@everyone look [free nitro](https://evil.example/x) **now** <@123> # big"


async def history(world: World, member: Any, *, of: Any = None, locale: str = "en-US") -> FakeInteraction:
    options = {"member": of} if of is not None else None
    it = await world.discord.slash(world.guild, world.channel, member, "history", options, locale=locale)
    kind, data = await it.wait_response()
    assert kind == 5 and data is not None and data["flags"] & EPHEMERAL  # private "thinking…"
    return it


async def page_of(it: FakeInteraction) -> FakeMessage:
    """The /history answer once it shows a page (the "thinking…" message completed)."""
    return await it.wait_original(lambda m: bool(m.embeds) and not m.loading, timeout=15)


def rows(message: FakeMessage) -> list[int]:
    """The job numbers on the page, in order."""
    return [int(n) for n in re.findall(r"^\*\*#(\d+)\*\*", message.embeds[0]["description"], re.MULTILINE)]


async def click(world: World, message: FakeMessage, way: str, member: Any) -> FakeMessage:
    """Previous ("newer") or Next ("older"); the same message, once it shows the new page."""
    [custom_id] = [c for c in button_ids(message) if f":{way}:" in c]
    before = message.edit_count
    await world.discord.click(message, custom_id, member)
    await world.discord.wait_for(lambda: message.edit_count > before, timeout=15, what=f"the {way} page")
    return message


async def test_paging_through_23_jobs_newest_first(start: StartWorld) -> None:
    world = await start(extra_env={"GEN_MAX_RUNNING": "1", "MEMBER_JOB_LIMIT": "25", "GUILD_QUEUE_CAP": "30"})
    done = await world.image("the first, delivered")
    first_id = await world.job_id(done)
    result = await world.delivered(done)
    world.service.default_plan = TaskPlan(polls=FOREVER)
    ids = [first_id]
    for n in range(21):
        ids.append(await world.job_id(await world.video(f"job {n}")))
    ids.append(await world.job_id(await world.video(HOSTILE)))
    await world.video("bob's own", member=world.bob)  # not alice's: never listed for her
    newest = ids[::-1]

    it = await history(world, world.alice)
    message = await page_of(it)
    assert message.ephemeral and rows(message) == newest[:10]
    embed = message.embeds[0]
    assert embed["footer"]["text"] == "Page 1 of 3 · jobs in all: 23"
    assert embed["description"].startswith(f"Jobs of <@{world.alice.id}>, newest first")
    [previous, following] = message.components[0]["components"]
    assert previous.get("disabled") and not following.get("disabled")

    # The prompt is literal: nothing pings, nothing becomes a link or formatting.
    assert as_text(HOSTILE, limit=200) in embed["description"]
    assert "](https://evil" not in embed["description"] and "https://evil" not in embed["description"]
    assert not message.pinged_everyone and not message.pinged_user_ids and not message.mention_everyone
    assert "⏳ queued" in embed["description"] and "<t:" in embed["description"]

    await click(world, message, "older", world.alice)
    assert rows(message) == newest[10:20] and message.embeds[0]["footer"]["text"].startswith("Page 2 of 3")
    await world.bot.terminate()
    await world.restart_bot()  # Previous and Next work on an answer from before the restart
    await click(world, message, "older", world.alice)
    assert rows(message) == newest[20:] and message.embeds[0]["footer"]["text"].startswith("Page 3 of 3")
    last = message.embeds[0]["description"]
    assert "✅ done" in last
    # The delivered job links to its message.
    link = f"https://discord.com/channels/{world.guild.id}/{world.channel.id}/{result.id}"
    assert f"[message]({link})" in last
    [previous, following] = message.components[0]["components"]
    assert not previous.get("disabled") and following.get("disabled")
    await click(world, message, "newer", world.alice)
    assert rows(message) == newest[10:20]
    await click(world, message, "newer", world.alice)
    assert rows(message) == newest[:10]


async def test_a_manager_looks_at_another_member_others_may_not(world: World) -> None:
    world.service.default_plan = TaskPlan(polls=FOREVER)
    mine = await world.job_id(await world.video("alice's heron"))

    refused = await history(world, world.bob, of=world.alice)
    await world.discord.wait_for(lambda: bool(refused.followups), timeout=10, what="the refusal")
    text = refused.followups[-1].content
    assert text == "Only members with Manage Server can look at another member's jobs."
    assert refused.followups[-1].ephemeral and "heron" not in text

    admin = world.admins[0]
    it = await history(world, admin, of=world.alice, locale="de")
    message = await page_of(it)
    assert rows(message) == [mine] and "alice's heron" in message.embeds[0]["description"]
    assert message.embeds[0]["title"] == "Auftragsverlauf"
    # The admin's own Next/Previous carry alice as the member looked at, and are re-checked per click.
    assert all(f"framecast:history:{world.alice.id}:" in c for c in button_ids(message))
    empty = await page_of(await history(world, world.bob))
    assert rows(empty) == [] and "No jobs here yet." in empty.embeds[0]["description"]


async def test_forged_pages_beyond_64_bits_show_what_is_there(world: World) -> None:
    """A custom id's numbers are the clicker's to choose (a modified client sends any custom id): a
    cursor, or a member, past what a database column holds names no job and no one. The newest
    page answers a cursor; no jobs answer a member; nothing fails in the bot."""
    world.service.default_plan = TaskPlan(polls=FOREVER)
    mine = await world.job_id(await world.video("alice's heron"))
    huge = 10**20 - 1  # the most a page button's custom id holds (20 digits), beyond 2**64
    message = await page_of(await history(world, world.alice))
    for way in ("older", "newer"):
        edits = message.edit_count

        def turned(edits: int = edits) -> bool:
            return message.edit_count > edits

        forged = f"framecast:history:{world.alice.id}:{way}:{huge}"
        await world.discord.click(message, forged, world.alice, crafted=True)
        await world.discord.wait_for(turned, timeout=15, what=f"the {way} page")
        assert rows(message) == [mine]
    admin = world.admins[0]
    theirs = await page_of(await history(world, admin, of=world.alice))
    before = theirs.edit_count
    await world.discord.click(theirs, f"framecast:history:{huge}:older:{mine}", admin, crafted=True)
    await world.discord.wait_for(
        lambda: theirs.edit_count > before, timeout=15, what="the forged member's page"
    )
    assert rows(theirs) == [] and "No jobs here yet." in theirs.embeds[0]["description"]
    assert world.bot is not None and "Traceback" not in world.bot.log_text()


async def test_a_forged_page_click_on_a_job_message_answers_privately_and_leaves_that_message(
    world: World,
) -> None:
    """Previous and Next edit the private /history answer they are on. Alice sends Next on bob's
    job message instead (a forged custom id): she gets her page privately, and bob's message is
    not replaced, for everyone in the channel, by her jobs."""
    world.service.default_plan = TaskPlan(polls=FOREVER)
    mine = await world.job_id(await world.video("alice's heron"))
    running = await world.video("bob's owl", member=world.bob)
    rmsg = await running.wait_original(lambda m: bool(button_ids(m)))
    forged = f"framecast:history:{world.alice.id}:older:{mine + 1}"
    click = await world.discord.click(rmsg, forged, world.alice, crafted=True)
    kind, data = await click.wait_response()
    assert kind == 5 and data is not None and data["flags"] & EPHEMERAL, (kind, data)
    page = await page_of(click)
    assert page.ephemeral and rows(page) == [mine]
    # Bob's message still shows his job, with its own buttons and no page of alice's.
    assert not any(c.startswith("framecast:history:") for c in button_ids(rmsg))
    assert not any(str(e.get("description", "")).startswith("Jobs of") for e in rmsg.embeds)
    assert button_ids(rmsg) and not rmsg.deleted


async def test_a_deleted_result_shows_as_deleted_without_a_link(world: World) -> None:
    done = await world.image("a deleted kite")
    job_id = await world.job_id(done)
    result = await world.delivered(done)
    await world.discord.wait_for(lambda: len(button_ids(result)) == 3, timeout=5, what="the buttons")
    ask = await world.discord.click(result, f"framecast:delete:{job_id}", world.alice)
    question = await ask.wait_original()
    before = question.edit_count
    await world.discord.click(question, f"framecast:delete-confirm:{job_id}", world.alice)
    # The answer comes once the job is marked (the message goes first): wait for it, not the message.
    await world.discord.wait_for(
        lambda: question.edit_count > before, timeout=10, what="the confirm answered"
    )
    assert result.deleted

    message = await page_of(await history(world, world.alice))
    description = message.embeds[0]["description"]
    assert rows(message) == [job_id] and "🗑️ deleted" in description
    assert "discord.com/channels" not in description
