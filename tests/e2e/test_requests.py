"""What members type: any language, hostile text, bad input, limits, autocomplete, localisation."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.e2e.harness import World, close_world, make_world
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL

MULTILINGUAL = [
    "一只在雪地里奔跑的红狐狸，电影感，慢动作",
    "बर्फ में दौड़ती हुई एक लाल लोमड़ी, सिनेमाई",
    "ثعلب أحمر يركض في الثلج",
    "👩‍👩‍👧‍👦 family picnic 🌸 with cherry blossoms 🇯🇵",
    "Zoë's café, naïve e\u0301 combining, zero\u200bwidth, RTL \u202eevil\u202c and tabs\tinside",
    "日本語とEnglishと한국어のmixed prompt — « guillemets » “quotes”",
]
HOSTILE = (
    "@everyone @here <@{uid}> <@&{rid}> <#123> ||spoiler|| **bold** `code` https://example.invalid/x?a=1"
)


async def service_prompts(world: World) -> list[str]:
    return [
        r.json["prompt"]
        for r in world.service.requests
        if r.method == "POST" and r.json and "prompt" in r.json
    ]


@pytest.mark.parametrize("prompt", MULTILINGUAL)
async def test_prompts_in_any_language_reach_the_service_byte_exact(world: World, prompt: str) -> None:
    it = await world.video(prompt)
    msg = await world.delivered(it)
    [sent] = await service_prompts(world)
    assert sent == prompt
    raw = next(r.body for r in world.service.requests if r.path == "/v1/videos")
    # What went over the wire decodes to exactly the member's text: same code points, same UTF-8 bytes.
    assert json.loads(raw)["prompt"].encode("utf-8") == prompt.encode("utf-8")
    # ...and travels as the member's own UTF-8 bytes, not as \uXXXX escapes.
    assert all(ch.encode("utf-8") in raw for ch in prompt if ord(ch) > 127)
    assert b"\\u" not in raw
    assert msg.embeds[0]["description"] == prompt


async def test_mentions_in_prompts_never_ping(world: World) -> None:
    prompt = HOSTILE.format(uid=world.bob.id, rid=world.guild.id)
    it = await world.video(prompt)
    await world.delivered(it)
    assert (await service_prompts(world)) == [prompt]
    for m in world.discord.messages.values():
        assert not m.pinged_everyone
        assert not m.pinged_role_ids
        assert m.pinged_user_ids <= {world.alice.id}, m
        assert world.bob.id not in m.pinged_user_ids


@pytest.mark.parametrize("prompt", ["", "   ", "\u200b\u200b", "\n\t"])
async def test_empty_prompts_get_a_private_error_and_queue_nothing(world: World, prompt: str) -> None:
    it = await world.discord.slash(world.guild, world.channel, world.alice, "video", {"prompt": prompt})
    kind, data = await it.wait_response()
    assert data is not None
    assert kind == 4 and data["flags"] & 64
    assert "empty" in data["content"]
    await_nothing_queued(world)


async def test_overlong_prompt_gets_a_private_error_with_the_limit(world: World) -> None:
    it = await world.discord.slash(world.guild, world.channel, world.alice, "image", {"prompt": "x" * 2001})
    kind, data = await it.wait_response()
    assert data is not None
    assert kind == 4 and data["flags"] & 64
    assert "2001" in data["content"] and "2000" in data["content"]
    await_nothing_queued(world)


async def test_errors_follow_the_members_language(world: World) -> None:
    it = await world.discord.slash(
        world.guild, world.channel, world.alice, "video", {"prompt": " "}, locale="de"
    )
    _, data = await it.wait_response()
    assert data is not None
    assert data["flags"] & 64 and "Prompt" in data["content"] and "leer" in data["content"]
    it = await world.discord.slash(
        world.guild, world.channel, world.alice, "video", {"prompt": ""}, locale="zh-CN"
    )
    _, data = await it.wait_response()
    assert data is not None
    assert any("\u4e00" <= ch <= "\u9fff" for ch in data["content"])


async def test_unknown_model_is_refused_privately(world: World) -> None:
    it = await world.discord.slash(
        world.guild, world.channel, world.alice, "video", {"prompt": "a cat", "model": "not-a-model"}
    )
    _, data = await it.wait_response()
    assert data is not None
    assert data["flags"] & 64 and "not-a-model" in data["content"]
    await_nothing_queued(world)


async def test_model_autocomplete_answers_from_the_service_list(world: World) -> None:
    world.service.models.append(("svc-video-v3.0-preview", "video"))
    # the cache refreshes on its own schedule: the known default is there at once
    it = await world.discord.autocomplete(
        world.guild, world.channel, world.alice, "video", {"prompt": "x", "model": "svc"}, focused="model"
    )
    await it.wait_response()
    assert it.ack_latency is not None and it.ack_latency < 3
    assert it.choices is not None
    names = [c["value"] for c in it.choices]
    assert names[0] == VIDEO_MODEL
    assert all("image" not in n and "text" not in n for n in names)
    it = await world.discord.autocomplete(
        world.guild, world.channel, world.alice, "image", {"prompt": "x", "model": ""}, focused="model"
    )
    await it.wait_response()
    assert it.choices is not None
    assert [c["value"] for c in it.choices] == [IMAGE_MODEL]
    # The admins' defaults offer the same list.
    it = await world.discord.autocomplete(
        world.guild,
        world.channel,
        world.admins[0],
        "settings",
        {"model": "svc"},
        focused="model",
        subcommand="video",
    )
    await it.wait_response()
    assert it.choices is not None and [c["value"] for c in it.choices] == names


async def test_member_limit_and_guild_cap_give_clear_messages(tmp_path) -> None:
    world = await make_world(
        tmp_path,
        members=4,
        extra_env={"GEN_MAX_RUNNING": "1", "MEMBER_JOB_LIMIT": "2", "GUILD_QUEUE_CAP": "3"},
    )
    try:
        await world.start_bot()
        from tests.fakes.gen_service import TaskPlan

        world.service.default_plan = TaskPlan(duration=30)
        a, b, c, d = world.members[0]
        await world.video("one", member=a)  # running
        await world.video("two", member=a)  # queued 1
        it = await world.discord.slash(world.guild, world.channel, a, "video", {"prompt": "three"})
        kind, data = await it.wait_response()
        assert data is not None, (kind, it.callbacks, it.errors)
        assert data["flags"] & 64 and "2 jobs" in data["content"]
        await world.video("four", member=b)  # queued 2
        await world.video("five", member=c)  # queued 3
        it = await world.discord.slash(world.guild, world.channel, d, "video", {"prompt": "six"})
        _, data = await it.wait_response()
        assert data is not None
        assert data["flags"] & 64 and "queue is full" in data["content"] and "3" in data["content"]
        assert [p for p in await service_prompts(world)] == ["one"]
    finally:
        await close_world(world)


async def test_missing_channel_permissions_are_caught_when_asked(tmp_path) -> None:
    world = await make_world(tmp_path)
    try:
        no_attach = world.discord.add_channel(
            world.guild, "no-files", bot_permissions=world.channel.bot_permissions & ~(1 << 15)
        )
        await world.start_bot()
        it = await world.discord.slash(world.guild, no_attach, world.alice, "video", {"prompt": "a cat"})
        _, data = await it.wait_response()
        assert data is not None
        assert data["flags"] & 64 and "Attach Files" in data["content"]
        assert await service_prompts(world) == []
    finally:
        await close_world(world)


async def test_commands_are_synced_only_on_request(tmp_path) -> None:
    world = await make_world(tmp_path)
    try:
        await world.start_bot()
        assert not world.discord.requests_to("PUT", "/commands")
        await world.bot.terminate()
        await world.start_bot("--sync")
        await world.discord.wait_for(
            lambda: world.discord.requests_to("PUT", "/commands"), what="command sync"
        )
        names = {c["name"] for c in world.discord.commands_for()}
        assert {"video", "image", "job", "sync"} <= names
        video = next(c for c in world.discord.commands_for() if c["name"] == "video")
        assert video.get("description_localizations", {}).get("de")
        assert not video.get("dm_permission", True) or video.get("contexts") == [0]
    finally:
        await close_world(world)


def await_nothing_queued(world: World) -> None:
    assert not [r for r in world.service.requests if r.method == "POST"]
    assert not [
        m for m in world.discord.messages.values() if m.embeds and "job #" in (m.embeds[0].get("title") or "")
    ]


async def test_configuration_errors_stop_startup_with_one_readable_line_each(tmp_path) -> None:
    import os
    import sys

    from tests.e2e.harness import REPO

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEN_", "DISCORD_"))}
    env.update(
        {"DISCORD_TOKEN": "x" * 30, "GEN_API_BASE_URL": "http://127.0.0.1:9", "GEN_RATE_LIMIT": "sixteen"}
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "bot.py"),
        cwd=str(tmp_path),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    lines = err.decode().strip().splitlines()
    # Both problems from one start, one line each (the operator fixes them in one go).
    assert [line.split(":")[2].strip() for line in lines] == ["GEN_API_KEY", "GEN_RATE_LIMIT"], lines
    assert all(line.startswith("framecast: configuration error: ") for line in lines)
    assert "Traceback" not in err.decode()
    assert "x" * 30 not in out.decode() + err.decode()


async def test_sync_command_is_for_the_bot_owner_only(tmp_path) -> None:
    world = await make_world(tmp_path)
    try:
        owner = world.discord.add_member(
            world.guild, world.discord.app_owner, permissions=(1 << 3) | (1 << 31)
        )
        await world.start_bot()
        it = await world.discord.slash(world.guild, world.channel, world.admins[0], "sync", {})
        await it.wait_response()
        msg = await it.wait_original(lambda m: not m.loading)
        assert msg.ephemeral and "owner" in msg.content
        assert not world.discord.requests_to("PUT", "/commands")
        it = await world.discord.slash(world.guild, world.channel, owner, "sync", {})
        await it.wait_response()
        msg = await it.wait_original(lambda m: not m.loading)
        assert msg.ephemeral and "Synced" in msg.content
        assert world.discord.requests_to("PUT", "/commands")
    finally:
        await close_world(world)


async def test_a_wrong_discord_token_exits_with_a_clear_message(tmp_path) -> None:
    from tests.e2e.harness import BotProcess

    world = await make_world(tmp_path)
    try:
        env = dict(world.env, DISCORD_TOKEN="wrong-token-" + "z" * 40)
        bot = BotProcess(env, tmp_path / "wrong.log")
        await bot.start()
        assert await bot.wait(30) == 2
        log = bot.log_text()
        assert "DISCORD_TOKEN" in log
        assert "z" * 40 not in log and world.env["GEN_API_KEY"] not in log
        assert "Traceback" not in log
    finally:
        await close_world(world)
