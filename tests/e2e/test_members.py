"""Members iterate and look around: Again and Remix on a delivered result (also after a restart),
/queue, /models and /help, end to end against the fakes."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from tests.e2e.commands import settings
from tests.e2e.harness import (
    StartWorld,
    World,
    button_ids,
    job_rows,
    service_creates,
    wait_log,
    wait_recorded,
)
from tests.fakes.discord_api import FakeInteraction, FakeMessage
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL, TaskPlan

FOREVER = 10**9  # a TaskPlan that stays pending until the test lets it finish
EPHEMERAL = 64


def bodies(world: World, prompt: str) -> list[dict[str, Any]]:
    """The create bodies the fake service received for `prompt`."""
    return [r.json for r in service_creates(world, prompt)]


def button(message: FakeMessage, action: str) -> str:
    """The custom id of the message's `action` button (again, remix, ...)."""
    [custom_id] = [c for c in button_ids(message) if c.split(":")[1] == action]
    return custom_id


async def delivered_video(world: World, prompt: str, **opts: Any) -> tuple[int, FakeMessage]:
    """/video by alice, delivered; returns (job id, its message)."""
    it = await world.video(prompt, opts=opts)
    job_id = await world.job_id(it)
    message = await world.delivered(it)
    # The file and the buttons come in one edit, but wait for the buttons explicitly anyway.
    await world.discord.wait_for(lambda: len(button_ids(message)) == 3, timeout=5, what="again/remix/delete")
    # And for the bot's own view of alice's jobs: until then a limit of one still counts this job.
    await wait_recorded(world, job_id, "delivered")
    return job_id, message


async def refusal(it: FakeInteraction) -> str:
    """The private refusal an interaction got as its first answer."""
    kind, data = await it.wait_response()
    assert kind == 4 and data is not None and data["flags"] & EPHEMERAL, (kind, data)
    return str(data["content"])


def modal_inputs(it: FakeInteraction) -> dict[str, dict[str, Any]]:
    """The text inputs of the modal the bot answered `it` with, by custom id."""
    modal = it.modal
    assert modal is not None, f"{it!r} got no modal"
    found: dict[str, dict[str, Any]] = {}
    for row in modal["components"]:
        for component in [row.get("component"), *row.get("components", [])]:
            if isinstance(component, dict) and component.get("custom_id"):
                found[component["custom_id"]] = component
    return found


def values_of(it: FakeInteraction) -> dict[str, str]:
    """The modal's prefilled values (what a member submits without touching anything)."""
    return {name: c.get("value") or "" for name, c in modal_inputs(it).items()}


# ---------------------------------------------------------------------- Again


async def test_again_queues_the_same_request_as_the_clickers_own_job(world: World) -> None:
    prompt = "a heron in the reeds"
    job_id, message = await delivered_video(world, prompt, size="vertical", length=3, fps=30)
    assert button(message, "again") == f"framecast:again:{job_id}:{world.alice.id}"
    # Bob is not the requester and has no Manage Server: Again is his to use all the same.
    click = await world.discord.click(message, button(message, "again"), world.bob)
    kind, _ = await click.wait_response()
    assert kind == 5  # "thinking…", then the new job's own message
    new_id = await world.job_id(click)
    assert new_id != job_id
    new = await world.delivered(click)
    assert not new.ephemeral and new.id != message.id
    first, again = bodies(world, prompt)
    assert again == first
    assert (first["width"], first["height"], first["num_frames"], first["frame_rate"]) == (720, 1280, 91, 30)
    rows = job_rows(world)
    assert rows[new_id]["user_id"] == world.bob.id and rows[job_id]["user_id"] == world.alice.id
    # The new job's message says who asked for it, without pinging anybody from the embed.
    assert new.embeds[0]["fields"][0]["value"] == f"<@{world.bob.id}>"


async def test_again_is_refused_at_the_clickers_member_limit(start: StartWorld) -> None:
    world = await start(extra_env={"MEMBER_JOB_LIMIT": "1"})
    _, message = await delivered_video(world, "a paper boat")
    world.service.plans = [("bob's own", TaskPlan(polls=FOREVER))]
    await world.video("bob's own long job", member=world.bob)
    click = await world.discord.click(message, button(message, "again"), world.bob)
    text = await refusal(click)
    assert "You already have 1 job queued or running" in text
    assert len(bodies(world, "a paper boat")) == 1  # no new job
    # Alice (at no limit now) may.
    mine = await world.discord.click(message, button(message, "again"), world.alice)
    await mine.wait_response()
    await world.delivered(mine)
    assert len(bodies(world, "a paper boat")) == 2


# ---------------------------------------------------------------------- Remix


async def test_remix_opens_a_prefilled_form_and_queues_the_edited_request(world: World) -> None:
    prompt = "a lantern festival"
    job_id, message = await delivered_video(world, prompt, size="vertical", length=3, fps=30)
    click = await world.discord.click(message, button(message, "remix"), world.bob)
    kind, _ = await click.wait_response()
    assert kind == 9  # a modal
    assert click.modal is not None and click.modal["custom_id"].startswith(
        f"framecast:remix-form:video:{job_id}:"
    )
    inputs = modal_inputs(click)
    assert values_of(click) == {"prompt": prompt, "size": "vertical", "length": "3", "fps": "30", "model": ""}
    assert inputs["prompt"]["style"] == 2 and inputs["prompt"]["required"]
    assert VIDEO_MODEL in inputs["model"]["placeholder"]  # empty means the default
    values = {**values_of(click), "prompt": "a lantern festival in the rain", "size": "Square"}
    submit = await world.discord.submit_modal(click, values)
    kind, _ = await submit.wait_response()
    assert kind == 5
    new_id = await world.job_id(submit)
    await world.delivered(submit)
    [body] = bodies(world, "a lantern festival in the rain")
    assert body == {
        "model": VIDEO_MODEL,
        "prompt": "a lantern festival in the rain",
        "width": 960,
        "height": 960,
        "num_frames": 91,
        "frame_rate": 30,
    }
    assert job_rows(world)[new_id]["user_id"] == world.bob.id
    assert len(bodies(world, prompt)) == 1


async def test_two_remix_forms_open_at_once_each_have_their_own_id_and_both_queue(world: World) -> None:
    """Bob and Carol open Remix on one result together (and Bob a second time): three forms, three
    ids; submitted in any order, each queues its own job. None is lost."""
    job_id, message = await delivered_video(world, "a harbour at dawn")
    carol = world.members[0][2]
    forms = []
    for who in (world.bob, carol, world.bob):
        click = await world.discord.click(message, button(message, "remix"), who)
        kind, _ = await click.wait_response()
        assert kind == 9 and click.modal is not None
        forms.append(click)
    ids = [click.modal["custom_id"] for click in forms if click.modal is not None]
    assert len(set(ids)) == 3 and all(i.startswith(f"framecast:remix-form:video:{job_id}:") for i in ids)
    submits = []
    for n, click in reversed(list(enumerate(forms))):
        submit = await world.discord.submit_modal(
            click, {**values_of(click), "prompt": f"a harbour, take {n}"}
        )
        submits.append(submit)
    for submit in submits:
        await world.delivered(submit)
    for n in range(3):
        assert len(bodies(world, f"a harbour, take {n}")) == 1
    owners = sorted(row["user_id"] for jid, row in job_rows(world).items() if jid != job_id)
    assert owners == sorted([world.bob.id, carol.id, world.bob.id])


async def test_remix_of_an_image_with_a_frame_size_typed_out(world: World) -> None:
    it = await world.image("a lighthouse", opts={"size": "landscape"})
    message = await world.delivered(it)
    await world.discord.wait_for(lambda: len(button_ids(message)) == 3, timeout=5, what="again/remix/delete")
    click = await world.discord.click(message, button(message, "remix"), world.alice)
    await click.wait_response()
    assert values_of(click) == {"prompt": "a lighthouse", "size": "landscape", "model": ""}
    submit = await world.discord.submit_modal(click, {"prompt": "a lighthouse at night", "size": "1280×720"})
    await world.delivered(submit)
    [body] = bodies(world, "a lighthouse at night")
    assert body == {"model": IMAGE_MODEL, "prompt": "a lighthouse at night", "size": "1280x720"}


async def test_remix_with_a_bad_size_or_length_is_refused_and_queues_nothing(world: World) -> None:
    _, message = await delivered_video(world, "a windmill")
    for field, value, option in (("size", "enormous", "size"), ("length", "forever", "length")):
        click = await world.discord.click(message, button(message, "remix"), world.bob)
        await click.wait_response()
        submit = await world.discord.submit_modal(click, {**values_of(click), field: value})
        assert await refusal(submit) == f"That value for “{option}” is not one of the offered choices."
    assert len(service_creates(world)) == 1
    assert len(job_rows(world)) == 1


async def test_remix_with_a_length_or_fps_of_zero_is_refused_not_given_the_default(world: World) -> None:
    """Only an option left empty takes the server's default: a 0 typed into the form is no offered
    value, refused as any other, and nothing is queued (it was queued as a 5 s, 24 fps video)."""
    _, message = await delivered_video(world, "a windmill", length=3, fps=30)
    for field, option in (("length", "length"), ("fps", "fps")):
        click = await world.discord.click(message, button(message, "remix"), world.bob)
        await click.wait_response()
        submit = await world.discord.submit_modal(click, {**values_of(click), field: "0"})
        assert await refusal(submit) == f"That value for “{option}” is not one of the offered choices."
    assert len(service_creates(world)) == 1
    assert len(job_rows(world)) == 1


async def test_retry_of_a_prompt_blocked_since_it_failed_is_refused_and_sends_nothing(world: World) -> None:
    """Retry reads today's blocklist, as a new /video and Again do: a term an admin added after the
    job failed holds, and the prompt does not reach the service a second time."""
    world.service.plans = [("kraken", TaskPlan(outcome="failed", error="a hiccup"))]
    asked = await world.video("a kraken attacks the ship", member=world.bob)
    message = await asked.wait_original(lambda m: any(":retry:" in c for c in button_ids(m)))
    await settings(world, "blocklist add", {"terms": "kraken"})
    click = await world.discord.click(message, button(message, "retry"), world.bob)
    assert await refusal(click) == (
        "Your prompt contains a word or phrase this server does not allow. Please rephrase it."
    )
    assert len(service_creates(world, "a kraken attacks the ship")) == 1
    assert len(job_rows(world)) == 1


# ---------------------------------------------------------------------- after a restart


async def test_again_and_remix_work_on_an_old_message_after_a_restart(world: World) -> None:
    prompt = "a comet over the sea"
    job_id, message = await delivered_video(world, prompt, size="small")
    assert await world.bot.terminate() == 0
    await world.restart_bot()
    again = await world.discord.click(message, button(message, "again"), world.bob)
    await again.wait_response()
    await world.delivered(again)
    remix = await world.discord.click(message, button(message, "remix"), world.bob)
    await remix.wait_response()
    assert values_of(remix)["size"] == "small"
    # And the form outlives a restart too: it was opened before this one, submitted after it.
    assert await world.bot.terminate() == 0
    await world.restart_bot()
    submit = await world.discord.submit_modal(remix, {**values_of(remix), "prompt": "a comet over the bay"})
    await submit.wait_response()
    await world.delivered(submit)
    first, repeated = bodies(world, prompt)
    assert repeated == first and (first["width"], first["height"]) == (768, 512)
    [remixed] = bodies(world, "a comet over the bay")
    assert {k: v for k, v in remixed.items() if k != "prompt"} == {
        k: v for k, v in first.items() if k != "prompt"
    }
    assert {row["user_id"] for i, row in job_rows(world).items() if i != job_id} == {world.bob.id}


# ---------------------------------------------------------------------- /queue


async def queue_reply(world: World, member: Any, until: Any = None, timeout: float = 15) -> FakeMessage:
    """/queue by `member`: the private reply (asked again until `until(description)` holds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        it = await world.discord.slash(world.guild, world.channel, member, "queue")
        await it.wait_response()
        reply = await it.wait_original(lambda m: bool(m.embeds))
        if until is None or until(reply.embeds[0]["description"]) or loop.time() > deadline:
            return reply
        await asyncio.sleep(0.2)


async def test_queue_lists_running_and_queued_jobs_marks_mine_and_pings_nobody(start: StartWorld) -> None:
    world = await start(extra_env={"GEN_MAX_RUNNING": "1"})
    # The running task reports steady progress, so the next job's start can be estimated.
    world.service.plans = [("first:", TaskPlan(duration=60.0, polls=0))]
    world.service.default_plan = TaskPlan(polls=FOREVER)
    carol = world.members[0][2]
    await world.video("first: <@everyone> **bold** https://example.com/x", member=world.alice)
    await world.discord.wait_for(lambda: len(service_creates(world)) == 1, timeout=10, what="first running")
    second = await world.video("second", member=world.bob)
    third = await world.image("third", member=carol)
    ids = [await world.job_id(second), await world.job_id(third)]
    reply = await queue_reply(world, world.bob, until=lambda text: "<t:" in text and "%" in text)
    assert reply.ephemeral
    assert reply.pinged_user_ids == set() and not reply.pinged_everyone
    assert reply.allowed_mentions is not None and not reply.allowed_mentions.get("parse")
    rows = reply.embeds[0]["description"].splitlines()
    assert len(rows) == 3, rows
    running, bobs, carols = rows
    assert running.startswith("▶️ Video #1") and f"by <@{world.alice.id}>" in running
    assert re.search(r" · ≈? ?\d+% · ", running), running
    # The prompt is literal text: no mention, no bold, no link.
    assert "\\<\\@everyone>" in running and "\\*\\*bold\\*\\*" in running and "https\\://" in running
    assert bobs.startswith(f"**1.** Video #{ids[0]} · starts <t:") and f"by <@{world.bob.id}>" in bobs
    assert int(re.findall(r"<t:(\d+):R>", bobs)[0]) > time.time()
    # Places are counted per kind: Carol's image is the first image in line, whatever videos wait.
    assert carols.startswith(f"**1.** Image #{ids[1]}") and f"by <@{carol.id}>" in carols
    assert bobs.endswith("← you") and not carols.endswith("← you") and not running.endswith("← you")
    assert reply.embeds[0]["footer"]["text"] == "Running: 1 · queued: 2"
    # Carol sees the same queue with her own job marked instead.
    rows = (await queue_reply(world, carol)).embeds[0]["description"].splitlines()
    assert [row.endswith("← you") for row in rows] == [False, False, True]


async def test_queue_when_nothing_waits(world: World) -> None:
    it = await world.discord.slash(world.guild, world.channel, world.alice, "queue")
    await it.wait_response()
    reply = await it.wait_original(lambda m: bool(m.embeds))
    assert reply.ephemeral
    assert reply.embeds[0]["description"] == "Nothing is queued or running in this server right now."


# ---------------------------------------------------------------------- /models and /help


async def test_models_lists_the_services_models_by_kind_with_the_default_marked(start: StartWorld) -> None:
    def more_models(world: World) -> None:
        world.service.models += [("svc-video-v2.1", "video"), ("svc-image-3.0", "image")]

    world = await start(setup=more_models)
    await wait_log(world, "model list:")
    it = await world.discord.slash(world.guild, world.channel, world.alice, "models")
    kind, data = await it.wait_response()
    assert kind == 4 and data is not None and data["flags"] & EPHEMERAL
    fields = {f["name"]: f["value"].splitlines() for f in data["embeds"][0]["fields"]}
    assert fields == {
        "Video": [f"{VIDEO_MODEL} ← default here", "svc-video-v2.1"],
        "Image": [f"{IMAGE_MODEL} ← default here", "svc-image-3.0"],
    }


async def test_help_answers_in_the_members_language(world: World) -> None:
    it = await world.discord.slash(world.guild, world.channel, world.alice, "help", locale="de")
    kind, data = await it.wait_response()
    assert kind == 4 and data is not None and data["flags"] & EPHEMERAL
    embed = data["embeds"][0]
    assert embed["title"] == "Über Framecast"
    assert embed["description"].startswith("Framecast macht aus einem Text-Prompt")
    commands, limits = (f["value"] for f in embed["fields"])
    assert "/bild: ein Bild aus einem Text-Prompt" in commands  # the command's German name
    assert "**Nochmal**" in commands and "**Remixen**" in commands
    assert limits == "Du kannst bis zu 2 Aufträge gleichzeitig in der Warteschlange oder in Arbeit haben."
    english = await world.discord.slash(world.guild, world.channel, world.alice, "help")
    _, data = await english.wait_response()
    assert data is not None and data["embeds"][0]["title"] == "About Framecast"
