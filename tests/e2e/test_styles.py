"""A server's named styles, end to end: an admin keeps them, members pick them, the service gets them.

``/settings styles add/list/remove`` (Manage Server), ``style:`` on /video and /image with
autocomplete from the server's styles of that kind; the service gets the template around the
member's prompt, byte for byte, while the message, /queue and /job show the member's own prompt
with the style's name (/job also what was sent). Again and Remix keep the style, a style removed
while a job waits does not change that job, the blocklist reads what the member typed, and the
limits (25 styles, 1,000-character templates, the prompt limit with the style) are clear refusals.
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.commands import answer, button, modal_values, refused, settings, text_of
from tests.e2e.harness import (
    StartWorld,
    World,
    button_ids,
    job_rows,
    service_creates,
    task_for,
    wait_state,
)
from tests.fakes.discord_api import FakeInteraction, FakeMessage
from tests.fakes.gen_service import TaskPlan

FOREVER = 10**9
ANIME = "anime style, {prompt}, cel shading, {0} {{braces}} kept"


def styled(template: str, prompt: str) -> str:
    """What the service must receive (written out here, not through the bot's own function)."""
    head, _, tail = template.partition("{prompt}")
    return head + prompt + tail


async def add_style(world: World, name: str, template: str, kind: str | None = None) -> str:
    options = {"name": name, "template": template, **({"kind": kind} if kind else {})}
    return (await settings(world, "styles add", options)).content


async def ask(
    world: World, command: str, prompt: str, *, member: Any = None, locale: str = "en-US", **options: Any
) -> FakeInteraction:
    """/video or /image with options, not waiting for a job (it may be refused)."""
    return await world.discord.slash(
        world.guild,
        world.channel,
        member or world.alice,
        command,
        {"prompt": prompt, **options},
        locale=locale,
    )


async def with_again(world: World, message: FakeMessage) -> FakeMessage:
    """The delivered message, once it shows its Again button."""
    await world.discord.wait_for(
        lambda: any(c.split(":")[1] == "again" for c in button_ids(message)), timeout=5, what="again"
    )
    return message


def fields(message: FakeMessage) -> dict[str, str]:
    embed = message.embeds[0]
    return {f["name"]: f["value"] for f in embed.get("fields", [])}


async def test_a_style_wraps_the_members_prompt_for_the_service_and_the_member_sees_their_own(
    start_synced: StartWorld,
) -> None:
    world = await start_synced(extra_env={"MEMBER_JOB_LIMIT": "10"})
    assert "Anime" in await add_style(world, "Anime", ANIME)
    assert "Noir" in await add_style(world, "Noir", "{prompt}, film noir", "video")
    assert "Watercolour" in await add_style(world, "Watercolour", "watercolour of {prompt}", "image")
    listed = await settings(world, "styles list")
    listing = text_of(listed)
    assert "(3 of 25)" in listing
    assert all(name in listing for name in ("Anime", "Noir", "Watercolour"))
    assert "\\{prompt\\}" not in listing and "{prompt}, film noir" in listing  # shown as typed

    # Autocomplete answers at once, from the server's styles of that kind.
    it = await world.discord.autocomplete(
        world.guild, world.channel, world.alice, "video", {"prompt": "x", "style": ""}, focused="style"
    )
    await it.wait_response()
    assert it.ack_latency is not None and it.ack_latency < 3
    assert it.choices is not None
    assert [c["value"] for c in it.choices] == ["Anime", "Noir"]
    assert all(len(c["name"]) <= 100 and c["name"].startswith(c["value"]) for c in it.choices)
    it = await world.discord.autocomplete(
        world.guild, world.channel, world.alice, "image", {"prompt": "x", "style": "WAT"}, focused="style"
    )
    await it.wait_response()
    assert it.choices is not None and [c["value"] for c in it.choices] == ["Watercolour"]

    # The service gets the template around the prompt, byte for byte (the name in any case).
    prompt = "一只猫在月球上跳舞 🐈‍⬛ {prompt} 100% \\o/"
    it = await ask(world, "video", prompt, style="anime")
    message = await world.delivered(it)
    job_id = await world.job_id(it)
    [create] = service_creates(world, styled(ANIME, prompt))
    assert create.json["prompt"].encode("utf-8") == styled(ANIME, prompt).encode("utf-8")
    assert not service_creates(world, prompt)
    # The message shows the member's own prompt and the style's name.
    assert "cel shading" not in message.embeds[0]["description"]
    assert "一只猫在月球上跳舞" in message.embeds[0]["description"]
    assert fields(message)["Style"] == "Anime"
    params = json.loads(job_rows(world)[job_id]["params"])
    assert (params["prompt"], params["style"], params["style_template"]) == (prompt, "Anime", ANIME)

    # /job shows both: the member's prompt, the style's name and what the service got.
    shown = await answer(
        await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
    )
    assert fields(shown)["Style"] == "Anime"
    assert "cel shading" in fields(shown)["Sent to the service"]
    assert "一只猫在月球上跳舞" in shown.embeds[0]["description"]

    # Again keeps the style; so does Remix, around the edited prompt.
    message = await with_again(world, message)
    again = await world.discord.click(message, button(message, "again"), world.bob)
    await again.wait_response()
    await world.delivered(again)
    assert len(service_creates(world, styled(ANIME, prompt))) == 2
    remix = await world.discord.click(message, button(message, "remix"), world.bob)
    await remix.wait_response()
    assert remix.modal is not None
    values = modal_values(remix)
    assert values["prompt"] == prompt  # the member's prompt, not the expanded one
    submit = await world.discord.submit_modal(remix, {**values, "prompt": "a fox in the snow"})
    await submit.wait_response()
    remixed = await world.delivered(submit)
    assert service_creates(world, styled(ANIME, "a fox in the snow"))
    assert fields(remixed)["Style"] == "Anime"

    # An image-only style on /video, a name the server does not have: clear private refusals.
    text = await refused(await ask(world, "video", "a boat", style="Watercolour"))
    assert text == "The style “Watercolour” is for images only."
    text = await refused(await ask(world, "image", "a boat", style="Nope *bold*"))
    assert "no style called" in text and "\\*bold\\*" in text
    text = await refused(await ask(world, "image", "a boat", style="Noir", locale="de"))
    assert text == "Der Stil „Noir“ ist nur für Videos."
    assert not service_creates(world, "a boat")


async def test_a_style_removed_while_a_job_waits_still_shapes_that_job(start: StartWorld) -> None:
    world = await start(extra_env={"GEN_MAX_RUNNING": "1", "MEMBER_JOB_LIMIT": "5"})
    world.service.plans = [("the blocker", TaskPlan(polls=FOREVER))]
    await add_style(world, "Noir", "{prompt}, film noir, 35mm")
    await world.video("the blocker", member=world.bob)
    it = await ask(world, "video", "a rainy street", style="Noir")
    job_id = await world.job_id(it)
    await wait_state(world, job_id, "queued")
    assert "removed" in (await settings(world, "styles remove", {"name": "NOIR"})).content
    assert "(0 of 25)" in text_of(await settings(world, "styles list"))
    text = await refused(await ask(world, "video", "another street", style="Noir", member=world.bob))
    assert "no style called" in text
    # The queued job keeps the style it was asked with, and the /queue row names it.
    queue = await answer(await world.discord.slash(world.guild, world.channel, world.alice, "queue", {}))
    assert "a rainy street · style: Noir" in text_of(queue)
    task_for(world, "the blocker").plan = TaskPlan(polls=0)
    await world.delivered(it, timeout=60)
    assert service_creates(world, "a rainy street, film noir, 35mm")
    assert not service_creates(world, "a rainy street")


async def test_limits_the_blocklist_and_who_may_change_styles(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env={"PROMPT_MAX_CHARS": "120", "MEMBER_JOB_LIMIT": "10"})
    # The blocklist reads what the member typed, not the admin's template.
    await settings(world, "blocklist add", {"terms": "gore"})
    await add_style(world, "Horror", "{prompt}, gore, horror film")
    await world.delivered(await world.image("a quiet house", opts={"style": "Horror"}))
    assert service_creates(world, "a quiet house, gore, horror film")
    text = await refused(await ask(world, "image", "gore everywhere", style="Horror"))
    assert "does not allow" in text and "gore" not in text.casefold()
    assert not [r for r in service_creates(world) if "gore everywhere" in r.json["prompt"]]
    # The prompt limit counts the prompt with its style.
    await add_style(world, "Long", "x" * 100 + " {prompt}")
    text = await refused(await ask(world, "image", "a cat on a windowsill", style="Long"))
    assert text == (
        "With the style “Long” your prompt is too long (122 characters; at most 120)."
        " Shorten it or pick another style."
    )
    # Templates: {prompt} required, at most 1,000 characters; names unique in any case.
    text = await add_style(world, "Bad", "no placeholder")
    assert "must contain {prompt}" in text
    text = await add_style(world, "Huge", "y" * 993 + "{prompt}")
    assert text == "The template is too long (1001 characters; at most 1000)."
    assert "already has a style called “Horror”" in await add_style(world, "HORROR", "{prompt}")
    assert "1 to 32 characters" in await add_style(world, "n" * 33, "{prompt}")
    for i in range(23):
        await add_style(world, f"s{i}", "{prompt} " + "z" * 991)  # 1,000 characters: the longest allowed
    assert "(25 of 25)" in text_of(await settings(world, "styles list"))
    text = await add_style(world, "one more", "{prompt}")
    assert text == "This server already has 25 styles, the most it may keep. Remove one first."
    # Only Manage Server: Discord hides /settings from others; shown anyway, the bot refuses.
    world.discord.override_command(world.guild, "settings", world.alice)
    it = await world.discord.slash(
        world.guild,
        world.channel,
        world.alice,
        "settings",
        {"name": "x", "template": "{prompt}"},
        subcommand="styles add",
    )
    assert "Manage Server" in (await answer(it)).content
    it = await world.discord.slash(
        world.guild, world.channel, world.alice, "settings", {"name": "s1"}, subcommand="styles remove"
    )
    assert "Manage Server" in (await answer(it)).content
    assert "(25 of 25)" in text_of(await settings(world, "styles list"))
