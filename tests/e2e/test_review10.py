"""Review of issue 10 by an independent tester: edge cases of /settings, the server key, quotas,
the blocklist, Again/Remix, /queue and localisation that the other end-to-end tests leave out.

Five of these found product defects when they were written (a variation selector hiding a blocked
term, Arabic vowel points, one key set by two servers getting two budgets, Again after the server's
default model left the service's list, /settings show naming the commands in English); they now pass.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from tests.e2e.harness import (
    World,
    button_ids,
    close_world,
    job_rows,
    make_world,
    service_creates,
    wait_log,
    wait_state,
)
from tests.fakes.discord_api import FakeInteraction, FakeMessage
from tests.fakes.gen_service import TaskPlan

EPHEMERAL = 64
FOREVER = 10**9
SERVER_KEY = "sk-server-" + "r" * 24 + "qrst"
MakeWorld = Callable[..., Any]


@pytest.fixture
async def synced(tmp_path: Path) -> AsyncIterator[MakeWorld]:
    """`await synced(extra_env=..., guilds=..., setup=...)`: a world whose bot started with ``--sync``."""
    worlds: list[World] = []

    async def factory(*, setup: Callable[[World], None] | None = None, **kwargs: Any) -> World:
        tmp = tmp_path / f"w{len(worlds)}"
        tmp.mkdir()
        world = await make_world(tmp, **kwargs)
        worlds.append(world)
        if setup is not None:
            setup(world)
        await world.start_bot("--sync")
        return world

    try:
        yield factory
    finally:
        for world in worlds:
            await close_world(world)


# ---------------------------------------------------------------------- helpers


async def answer(it: FakeInteraction, timeout: float = 10) -> FakeMessage:
    """The interaction's visible private answer."""

    def shown() -> FakeMessage | None:
        return next((m for m in it.messages() if not m.loading and not m.deleted), None)

    await it._fake.wait_for(lambda: shown() is not None, timeout=timeout, what="a private answer")  # noqa: SLF001
    msg = shown()
    assert msg is not None and msg.ephemeral, msg
    return msg


async def settings(
    world: World,
    sub: str,
    options: dict[str, Any] | None = None,
    *,
    guild: int = 0,
    locale: str = "en-US",
) -> FakeMessage:
    """``/settings <sub>`` as the guild's admin; its private answer."""
    it = await world.discord.slash(
        world.guilds[guild],
        world.channels[guild],
        world.admins[guild],
        "settings",
        options or {},
        subcommand=sub,
        locale=locale,
    )
    return await answer(it)


def text_of(msg: FakeMessage) -> str:
    """Content plus every embed's text."""
    parts = [msg.content or ""]
    for embed in msg.embeds:
        parts += [embed.get("title") or "", embed.get("description") or ""]
        parts += [f"{f.get('name')}: {f.get('value')}" for f in embed.get("fields", [])]
        parts.append(str((embed.get("footer") or {}).get("text", "")))
    return "\n".join(parts)


async def refused(it: FakeInteraction) -> str:
    """The private refusal an interaction got (first answer, or a private follow-up after the defer)."""
    kind, data = await it.wait_response()
    if kind == 4:
        assert data is not None and data["flags"] & EPHEMERAL, (kind, data)
        return str(data["content"])
    assert kind == 5, (kind, data)
    msg = await it.wait_followup(lambda m: m.ephemeral and bool(m.content))
    assert not any(m.embeds for m in it.messages() if not m.deleted), "a refused request showed a job"
    return msg.content


async def image(
    world: World, prompt: str, *, member: Any = None, channel: Any = None, locale: str = "en-US"
) -> FakeInteraction:
    """/image, not waiting for a job (it may be refused)."""
    return await world.discord.slash(
        world.guild,
        channel or world.channel,
        member or world.alice,
        "image",
        {"prompt": prompt},
        locale=locale,
    )


async def video(
    world: World, prompt: str, *, member: Any = None, channel: Any = None, locale: str = "en-US"
) -> FakeInteraction:
    """/video, not waiting for a job."""
    return await world.discord.slash(
        world.guild,
        channel or world.channel,
        member or world.alice,
        "video",
        {"prompt": prompt},
        locale=locale,
    )


def button(message: FakeMessage, action: str) -> str:
    [custom_id] = [c for c in button_ids(message) if c.split(":")[1] == action]
    return custom_id


async def with_buttons(world: World, it: FakeInteraction) -> FakeMessage:
    message = await world.delivered(it)
    await world.discord.wait_for(lambda: len(button_ids(message)) == 2, timeout=5, what="again/remix")
    return message


def modal_values(it: FakeInteraction) -> dict[str, str]:
    modal = it.modal
    assert modal is not None
    found: dict[str, str] = {}
    for row in modal["components"]:
        for c in [row.get("component"), *row.get("components", [])]:
            if isinstance(c, dict) and c.get("custom_id"):
                found[c["custom_id"]] = c.get("value") or ""
    return found


async def set_key(world: World, key: str, *, guild: int = 0) -> FakeMessage:
    it = await world.discord.slash(
        world.guilds[guild], world.channels[guild], world.admins[guild], "settings", {}, subcommand="key set"
    )
    await it.wait_response()
    modal = it.modal
    assert modal is not None
    [custom_id] = [
        c["custom_id"]
        for row in modal["components"]
        for c in [row.get("component"), *row.get("components", [])]
        if isinstance(c, dict) and c.get("type") == 4
    ]
    submit = await world.discord.submit_modal(it, {custom_id: key})
    return await answer(submit, timeout=15)


# ---------------------------------------------------------------------- blocklist


async def test_blocklist_scripts_punctuation_emoji_and_innocent_words(synced: MakeWorld) -> None:
    world = await synced(members=4, extra_env={"MEMBER_JOB_LIMIT": "10"})
    terms = "バカ, 바보, ควาย, кот, f*ck, 🍆, ass, Straße"
    msg = await settings(world, "blocklist add", {"terms": terms})
    assert "8 terms" in msg.content, msg.content
    long_prompt = "a calm lake at dawn, " * 90 + "and a КОТ"  # ~1900 characters, the term at the end
    blocked = [
        "ﾊﾞｶやろう",  # half-width katakana with a voiced mark
        "너는 바보야",  # Korean, with a particle attached
        "ควายป่าในทุ่ง",  # Thai, no spaces
        "Кот на крыше",  # Cyrillic, other case
        "F*CK this",  # punctuation inside the term
        "a 🍆 emoji",
        "STRASSE at night",  # ß folds to ss
        long_prompt,
    ]
    for prompt in blocked:
        text = await refused(await image(world, prompt))
        assert "does not allow" in text, (prompt[:40], text)
        for term in ("バカ", "바보", "ควาย", "кот", "f*ck", "🍆", "Straße"):
            assert term not in text.casefold()
        assert not service_creates(world, prompt)
    # A term is no substring of an innocent word in a spaced language.
    innocent = ["a class of grass", "котлета на тарелке", "passion fruit"]
    for member, prompt in zip(world.members[0], innocent, strict=False):
        await world.job_id(await image(world, prompt, member=member))


async def test_an_invisible_variation_selector_does_not_slip_past_the_blocklist(synced: MakeWorld) -> None:
    world = await synced(members=4, extra_env={"MEMBER_JOB_LIMIT": "10"})
    await settings(world, "blocklist add", {"terms": "禁止词, नमस्ते, 🍆"})
    for prompt in ("这是禁\ufe0f止词", "नम\ufe0fस्ते दुनिया", "a 🍆\ufe0f emoji"):
        text = await refused(await image(world, prompt))
        assert "does not allow" in text, (prompt, text)
        assert not service_creates(world, prompt)


async def test_arabic_diacritics_do_not_slip_past_the_blocklist(synced: MakeWorld) -> None:
    world = await synced()
    await settings(world, "blocklist add", {"terms": "كلب"})
    text = await refused(await image(world, "كَلْب كبير"))
    assert "does not allow" in text


async def test_remix_and_again_with_a_blocked_or_empty_prompt(synced: MakeWorld) -> None:
    world = await synced()
    it = await image(world, "a quiet harbour")
    message = await with_buttons(world, it)
    await settings(world, "blocklist add", {"terms": "harbour"})
    # Again re-checks today's blocklist, for another member too.
    text = await refused(await world.discord.click(message, button(message, "again"), world.bob))
    assert "does not allow" in text and "harbour" not in text
    click = await world.discord.click(message, button(message, "remix"), world.bob)
    await click.wait_response()
    values = modal_values(click)
    for prompt in ("   ", "a HARBOUR at night"):
        submit = await world.discord.submit_modal(click, {**values, "prompt": prompt})
        text = await refused(submit)
        assert "harbour" not in text.casefold()
    assert len(service_creates(world)) == 1
    assert len(job_rows(world)) == 1


# ---------------------------------------------------------------------- limits, ceilings, quotas


async def test_a_ceiling_lowered_by_the_operator_caps_the_servers_value(synced: MakeWorld) -> None:
    world = await synced(extra_env={"MEMBER_JOB_LIMIT": "3", "DAILY_IMAGE_QUOTA": "10"})
    await settings(world, "limits", {"member_jobs": 3, "daily_images": 8})
    await world.bot.terminate()
    world.env["MEMBER_JOB_LIMIT"] = "1"
    world.env["DAILY_IMAGE_QUOTA"] = "1"
    await world.restart_bot()
    show = text_of(await settings(world, "show"))
    assert "Jobs per member**: 1 (set by this server; ceiling: 1)" in show, show
    assert "Daily images per member**: 1 (set by this server; ceiling: 1)" in show, show
    world.service.default_plan = TaskPlan(polls=FOREVER)
    await world.job_id(await image(world, "first"))
    assert "1 job" in await refused(await image(world, "second"))
    # Changing another limit does not trip over the stored value above the new ceiling.
    msg = await settings(world, "limits", {"queue_cap": 5})
    assert "Saved" in msg.content, msg.content


async def test_every_setting_can_be_reset_to_the_operators_default(synced: MakeWorld) -> None:
    world = await synced(
        extra_env={"MEMBER_JOB_LIMIT": "3", "DAILY_VIDEO_QUOTA": "4", "DAILY_IMAGE_QUOTA": "4"}
    )
    await settings(world, "limits", {"member_jobs": 1, "daily_videos": 0, "daily_images": 0, "queue_cap": 2})
    await settings(world, "video", {"size": "small", "length": 3, "fps": 16})
    await settings(world, "image", {"size": "landscape"})
    await settings(world, "channels add", {"channel": world.channel})
    await settings(world, "nsfw", {"only": True})
    await settings(world, "blocklist add", {"terms": "x1, x2"})
    show = text_of(await settings(world, "show"))
    assert show.count("set by this server") == 11, show
    for setting in (
        "member_jobs",
        "daily_videos",
        "daily_images",
        "queue_cap",
        "video_size",
        "video_seconds",
        "video_fps",
        "image_size",
        "channels",
        "nsfw_only",
        "blocklist",
    ):
        msg = await settings(world, "reset", {"setting": setting})
        assert "Saved" in msg.content or "Nothing" in msg.content, (setting, msg.content)
    await world.bot.terminate()
    await world.restart_bot()
    show = text_of(await settings(world, "show"))
    assert "set by this server" not in show, show
    # A quota of 0 is gone: a video and an image go through.
    await world.job_id(await video(world, "video after reset"))
    await world.job_id(await image(world, "image after reset"))


async def test_again_and_remix_at_the_daily_quota(synced: MakeWorld) -> None:
    world = await synced(extra_env={"DAILY_IMAGE_QUOTA": "1", "QUOTA_PERIOD": "3600"})
    message = await with_buttons(world, await image(world, "a red kite"))
    text = await refused(await world.discord.click(message, button(message, "again"), world.alice))
    assert "daily limit of 1 image" in text and "<t:" in text
    click = await world.discord.click(message, button(message, "remix"), world.alice)
    kind, _ = await click.wait_response()
    if kind == 9:  # the form opens: its submit is refused
        text = await refused(await world.discord.submit_modal(click, modal_values(click)))
    else:
        text = await refused(click)
    assert "daily limit of 1 image" in text
    # Bob has his own quota.
    again = await world.discord.click(message, button(message, "again"), world.bob)
    await again.wait_response()
    await world.delivered(again)
    assert len(service_creates(world, "a red kite")) == 2
    # A quota of 0 for videos refuses /video at once.
    await settings(world, "limits", {"daily_videos": 0})
    text = await refused(await video(world, "no videos here", member=world.members[0][2]))
    assert "daily limit of 0 videos" in text


async def test_nsfw_only_follows_the_channel_being_toggled(synced: MakeWorld) -> None:
    world = await synced()
    await settings(world, "nsfw", {"only": True})
    assert "age-restricted" in await refused(await image(world, "one"))
    await world.discord.update_channel(world.channel, nsfw=True)
    await asyncio.sleep(0.3)  # the CHANNEL_UPDATE reaches the bot's cache
    await world.job_id(await image(world, "two"))
    await world.discord.update_channel(world.channel, nsfw=False)
    await asyncio.sleep(0.3)
    assert "age-restricted" in await refused(await image(world, "three", member=world.bob))


# ---------------------------------------------------------------------- models


async def test_again_after_the_services_list_drops_the_servers_default_model(synced: MakeWorld) -> None:
    def more(world: World) -> None:
        world.service.models.append(("svc-video-v9", "video"))

    world = await synced(setup=more)
    await wait_log(world, "model list:")
    msg = await settings(world, "video", {"model": "svc-video-v9"})
    assert "Saved" in msg.content, msg.content
    it = await world.video("a slow river")
    message = await with_buttons(world, it)
    assert service_creates(world, "a slow river")[0].json["model"] == "svc-video-v9"
    await world.bot.terminate()
    world.service.models = [m for m in world.service.models if m[0] != "svc-video-v9"]
    mark = len(world.bot.log_text())
    await world.restart_bot()
    await wait_log(world, "model list:", start=mark)
    # /video with no model falls back to the service's default...
    await world.job_id(await video(world, "a fresh river", member=world.bob))
    # ...and so does Again for a member who never picked a model.
    again = await world.discord.click(message, button(message, "again"), world.members[0][2])
    kind, _ = await again.wait_response()
    assert kind == 5
    await asyncio.sleep(1)
    refusals = [m.content for m in again.messages() if m.ephemeral and m.content]
    assert not refusals, refusals  # once: "“svc-video-v9” is not a model the generation service offers."
    await world.delivered(again)
    models = [r.json["model"] for r in service_creates(world, "a slow river")]
    assert models == ["svc-video-v9", "svc-video-v2.0"]
    # /settings show tells the admin what jobs get now, not only the stale pick.
    show = text_of(await settings(world, "show"))
    assert "svc-video-v9 (no longer offered: jobs use svc-video-v2.0)" in show, show


async def test_models_follow_the_services_list_after_a_restart(synced: MakeWorld) -> None:
    world = await synced()
    await wait_log(world, "model list:")
    await world.bot.terminate()
    world.service.models = [("svc-video-v3", "video"), ("svc-image-9", "image")]
    mark = len(world.bot.log_text())
    await world.restart_bot()
    await wait_log(world, "model list:", start=mark)
    it = await world.discord.slash(world.guild, world.channel, world.alice, "models", locale="ja")
    kind, data = await it.wait_response()
    assert kind == 4 and data is not None
    text = "\n".join(f"{f['name']}: {f['value']}" for f in data["embeds"][0]["fields"])
    assert "svc-video-v3" in text and "svc-image-9" in text and "svc-video-v2.0" not in text


# ---------------------------------------------------------------------- the server's key


async def test_a_key_typed_with_spaces_is_stored_trimmed_and_remove_spares_a_running_job(
    synced: MakeWorld,
) -> None:
    def setup(world: World) -> None:
        world.service.api_keys.add(SERVER_KEY)

    world = await synced(extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode()}, setup=setup)
    msg = await set_key(world, f"  {SERVER_KEY}\t ")
    assert "…qrst" in msg.content, msg.content
    world.service.plans = [("long", TaskPlan(polls=40))]
    job_id = await world.job_id(await video(world, "long running on the server key"))
    await world.service.wait_for(lambda: bool(service_creates(world, "long running on the server key")), 10)
    msg = await settings(world, "key remove")
    assert "operator's key" in msg.content
    # The running job finishes on the key that created its task; new jobs use the operator's key.
    await wait_state(world, job_id, "delivered", timeout=30)
    [create] = service_creates(world, "long running on the server key")
    assert create.key == SERVER_KEY
    polls = [r for r in world.service.requests if r.path == "/svcapi"]
    assert len(polls) >= 40 and {r.key for r in polls} == {SERVER_KEY}
    it = await image(world, "after removal", member=world.bob)
    await world.delivered(it)
    assert service_creates(world, "after removal")[0].key == world.service.api_key
    assert SERVER_KEY not in world.bot.log_text()
    db = Path(world.env["DATABASE_PATH"])
    for path in (db, db.with_name(db.name + "-wal")):
        if path.exists():
            assert SERVER_KEY.encode() not in path.read_bytes()


async def test_two_servers_with_the_same_key_share_its_budget(synced: MakeWorld) -> None:
    def setup(world: World) -> None:
        world.service.api_keys.add(SERVER_KEY)
        world.service.rate_limit = (4, 1.0)

    world = await synced(
        guilds=2,
        extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode(), "GEN_RATE_LIMIT": "4/1"},
        setup=setup,
    )
    for g in (0, 1):
        assert "…qrst" in (await set_key(world, SERVER_KEY, guild=g)).content
    await asyncio.sleep(1.1)
    its = []
    for g in (0, 1):
        for member in world.members[g]:
            its.append(
                await world.discord.slash(
                    world.guilds[g],
                    world.channels[g],
                    member,
                    "image",
                    {"prompt": f"shared {g} {member.name}"},
                )
            )
    for it in its:
        await world.delivered(it, timeout=60)
    assert world.service.max_in_window(1.0, key=SERVER_KEY) <= 4
    assert world.service.count(status=429) == 0


# ---------------------------------------------------------------------- /queue


async def test_queue_with_many_jobs_from_many_members(start: Any) -> None:
    world = await start(members=6, extra_env={"GEN_MAX_RUNNING": "1", "MEMBER_JOB_LIMIT": "5"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    for i in range(4):  # 24 videos: one runs, 23 wait (under the queue cap of 25)
        for member in world.members[0]:
            await world.video(f"job {i} of {member.name}", member=member)
    viewer = world.members[0][3]
    it = await world.discord.slash(world.guild, world.channel, viewer, "queue", locale="pl")
    await it.wait_response()
    reply = await it.wait_original(lambda m: bool(m.embeds))
    embed = reply.embeds[0]
    rows = embed["description"].splitlines()
    assert len(rows) == 21 and rows[-1] == "…i jeszcze 4", rows[-1]  # 20 rows, then "…and 4 more" in Polish
    assert embed["footer"]["text"].endswith("1 · w kolejce: 23") or "23" in embed["footer"]["text"], embed
    assert not reply.pinged_user_ids and not reply.pinged_everyone
    assert len(embed["description"]) <= 4096
    assert any(f"<@{viewer.id}>" in row for row in rows[:20])
    assert "{" not in embed["description"] and "{" not in embed["footer"]["text"]


# ---------------------------------------------------------------------- localisation


ENGLISH_WORDS = re.compile(
    r"\b(server|default|daily|queue|channel|allowed|blocklist|ceiling|resets|"
    r"nothing|running|queued|members?|generation|key|saved|refused)\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("locale", ["ja", "hi", "pl"])
async def test_new_replies_are_localised_with_placeholders_filled(synced: MakeWorld, locale: str) -> None:
    def add(world: World) -> None:
        world.extra = world.discord.add_channel(world.guild, "art")  # type: ignore[attr-defined]

    world = await synced(extra_env={"DAILY_IMAGE_QUOTA": "3", "MEMBER_JOB_LIMIT": "3"}, setup=add)
    art = world.extra  # type: ignore[attr-defined]
    texts: dict[str, str] = {}
    texts["limits"] = (await settings(world, "limits", {"member_jobs": 9}, locale=locale)).content
    texts["saved"] = (await settings(world, "limits", {"daily_images": 1}, locale=locale)).content
    texts["blocklist"] = (await settings(world, "blocklist add", {"terms": "zzz"}, locale=locale)).content
    texts["blocked"] = await refused(await image(world, "zzz", locale=locale))
    first = await image(world, "first", locale=locale)
    await world.delivered(first)
    texts["quota"] = await refused(await image(world, "second", locale=locale))
    await settings(world, "channels add", {"channel": art}, locale=locale)
    texts["channel"] = await refused(await image(world, "x", member=world.bob, locale=locale))
    await settings(world, "nsfw", {"only": True}, locale=locale)
    texts["nsfw"] = await refused(await image(world, "x", member=world.bob, channel=art, locale=locale))
    texts["show"] = text_of(await settings(world, "show", locale=locale))
    texts["key"] = (await settings(world, "key set", locale=locale)).content
    it = await world.discord.slash(world.guild, art, world.bob, "help", locale=locale)
    _, data = await it.wait_response()
    assert data is not None
    embed = data["embeds"][0]
    texts["help"] = "\n".join(
        [embed["title"], embed["description"], *(f"{f['name']}: {f['value']}" for f in embed["fields"])]
    )
    it = await world.discord.slash(world.guild, art, world.bob, "queue", locale=locale)
    await it.wait_response()
    reply = await it.wait_original(lambda m: bool(m.embeds))
    texts["queue"] = text_of(reply)
    for name, text in texts.items():
        assert text.strip(), name
        assert not re.search(r"\{\w+\}", text), (name, text)
        # Names of commands and env vars may stay as they are; words of English prose may not.
        prose = re.sub(r"/[\w ]+|KEY_ENCRYPTION_SECRET|<[@#t][^>]*>|\|\|[^|]*\|\||svc-[\w.-]+", "", text)
        assert not ENGLISH_WORDS.search(prose), (name, text)


async def test_settings_show_names_the_commands_as_the_admins_client_does(synced: MakeWorld) -> None:
    world = await synced()
    show = text_of(await settings(world, "show", locale="ja"))
    assert "/動画" in show and "/画像" in show and "/video" not in show, show
