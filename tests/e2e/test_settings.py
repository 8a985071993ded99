"""/settings end to end: server admins shape the bot (limits, quotas, defaults, where, content, their own
API key), every change survives a restart, and only Manage Server may touch it.

The bot runs with ``--sync`` so the fake Discord knows /settings' ``default_member_permissions`` and
hides it from members the way Discord does.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from tests.e2e.harness import (
    MANAGE_GUILD,
    StartWorld,
    World,
    job_rows,
    service_creates,
    wait_state,
)
from tests.fakes.discord_api import CommandHidden, FakeInteraction, FakeMessage
from tests.fakes.gen_service import TaskPlan

EPHEMERAL = 64


async def answer(it: FakeInteraction, timeout: float = 10) -> FakeMessage:
    """The interaction's visible private answer (after any "thinking…"; an error reply replaces it)."""

    def shown() -> FakeMessage | None:
        return next((m for m in it.messages() if not m.loading and not m.deleted), None)

    await it._fake.wait_for(lambda: shown() is not None, timeout=timeout, what="a private answer")  # noqa: SLF001
    msg = shown()
    assert msg is not None and msg.ephemeral, msg
    return msg


async def settings(
    world: World, sub: str, options: dict[str, Any] | None = None, *, guild: int = 0, member: Any = None
) -> FakeMessage:
    """Run ``/settings <sub>`` as the guild's admin (or `member`); its private answer."""
    it = await world.discord.slash(
        world.guilds[guild],
        world.channels[guild],
        member or world.admins[guild],
        "settings",
        options or {},
        subcommand=sub,
    )
    return await answer(it)


def text_of(msg: FakeMessage) -> str:
    """Content plus every embed's text."""
    parts = [msg.content]
    for embed in msg.embeds:
        parts += [embed.get("title") or "", embed.get("description") or ""]
        parts += [f"{f.get('name')}: {f.get('value')}" for f in embed.get("fields", [])]
    return "\n".join(parts)


async def refused(it: FakeInteraction) -> str:
    """The private refusal a command got: its first answer, or (a limit the store checks after the
    "thinking…") a private follow-up, with no job shown."""
    kind, data = await it.wait_response()
    if kind == 4:
        assert data is not None and data["flags"] & EPHEMERAL, (kind, data)
        return str(data["content"])
    assert kind == 5, (kind, data)
    msg = await it.wait_followup(lambda m: m.ephemeral and bool(m.content))
    assert not any(m.embeds for m in it.messages() if not m.deleted), "a refused request showed a job"
    return msg.content


async def image(world: World, prompt: str, *, guild: int = 0, member: Any = None, channel: Any = None) -> Any:
    """/image, not waiting for a job (it may be refused)."""
    return await world.discord.slash(
        world.guilds[guild],
        channel or world.channels[guild],
        member or world.members[guild][0],
        "image",
        {"prompt": prompt},
    )


async def test_only_manage_server_may_change_settings(start_synced: StartWorld) -> None:
    world = await start_synced()
    member = world.alice
    # Discord does not even show /settings to a member without Manage Server.
    with pytest.raises(CommandHidden):
        await world.discord.slash(world.guild, world.channel, member, "settings", {}, subcommand="show")
    assert world.discord.synced_command(None, "settings")["default_member_permissions"] == str(MANAGE_GUILD)  # type: ignore[index]
    # Server Settings -> Integrations shows it to them anyway: the bot still says no, and changes nothing.
    world.discord.override_command(world.guild, "settings", member)
    msg = await settings(world, "limits", {"member_jobs": 1}, member=member)
    assert "Manage Server" in msg.content
    it = await image(world, "allowed still")
    await world.job_id(it)  # a second job would be refused with member_jobs 1
    it = await image(world, "and again")
    await world.job_id(it)
    # An admin may.
    msg = await settings(world, "limits", {"member_jobs": 1})
    assert "Saved" in msg.content and "Jobs per member" in msg.content
    assert "user" in world.bot.log_text() and "changed member_jobs" in world.bot.log_text()


async def test_each_setting_changes_behaviour_and_survives_a_restart(start_synced: StartWorld) -> None:
    def add_channels(world: World) -> None:
        world.extra = {  # type: ignore[attr-defined]
            "art": world.discord.add_channel(world.guild, "art"),
        }

    world = await start_synced(
        extra_env={"MEMBER_JOB_LIMIT": "3", "GUILD_QUEUE_CAP": "10"}, setup=add_channels
    )
    art = world.extra["art"]  # type: ignore[attr-defined]
    # Above the operator's ceiling: refused, in words.
    msg = await settings(world, "limits", {"member_jobs": 4})
    assert "at most 3" in msg.content
    await settings(world, "limits", {"member_jobs": 1, "queue_cap": 5})
    await settings(world, "video", {"size": "small", "length": 3, "fps": 16})
    await settings(world, "channels add", {"channel": art})
    await settings(world, "nsfw", {"only": True})

    async def check_rules() -> None:
        # Channels: only #art.
        text = await refused(
            await world.discord.slash(world.guild, world.channel, world.alice, "video", {"prompt": "x"})
        )
        assert f"<#{art.id}>" in text
        # NSFW only: #art is not age-restricted yet.
        text = await refused(
            await world.discord.slash(world.guild, art, world.alice, "video", {"prompt": "x"})
        )
        assert "age-restricted" in text

    await check_rules()
    show = text_of(await settings(world, "show"))
    for expected in ("Jobs per member**: 1 (set by this server; ceiling: 3)", "Small 3:2", "3 s", "16 fps"):
        assert expected in show, show
    assert "operator's default" in show and f"<#{art.id}>" in show

    await world.bot.terminate()
    await world.restart_bot()
    await check_rules()
    assert text_of(await settings(world, "show")) == show
    # The defaults apply to a /video with no options, in the allowed age-restricted channel.
    await world.discord.update_channel(art, nsfw=True)
    world.service.plans.append(("slow one", _slow_plan()))
    it = await world.discord.slash(world.guild, art, world.alice, "video", {"prompt": "slow one"})
    await world.job_id(it)
    await world.service.wait_for(lambda: bool(service_creates(world, "slow one")), timeout=10)
    body = service_creates(world, "slow one")[0].json
    assert (body["width"], body["height"], body["frame_rate"]) == (768, 512, 16)
    # member_jobs 1: a second job while the first runs is refused.
    text = await refused(await world.discord.slash(world.guild, art, world.alice, "video", {"prompt": "two"}))
    assert "1 job" in text
    # Reset: back to the operator's default (everywhere).
    await settings(world, "reset", {"setting": "channels"})
    await settings(world, "nsfw", {"only": False})
    it = await image(world, "anywhere again", member=world.bob)
    await world.job_id(it)


def _slow_plan() -> TaskPlan:
    return TaskPlan(duration=60.0)  # stays running for the rest of the test


def _answer_of(it: FakeInteraction) -> FakeMessage | None:
    """The job shown or the private refusal, whichever ``it`` got."""
    return next(
        (m for m in it.messages() if not m.deleted and (m.embeds or (m.ephemeral and m.content))), None
    )


async def _second_image_of_one_period(world: World, period: float = 4.0) -> str:
    """The refusal of a member's second image within one quota period.

    Periods are aligned to the wall clock, so under load the first job can be delivered after its
    period ended and the second is then rightly accepted. That second job becomes the first of the
    new period and the test asks again; an acceptance is a failure only while the period of the
    job before it has not ended.
    """
    began = time.time()
    first = await image(world, "first of the period")
    for attempt in range(4):
        ends = (began // period + 1) * period
        await world.delivered(first)
        sent = time.time()
        second = await image(world, f"second of the period ({attempt})")
        answer = await world.discord.wait_for(
            functools.partial(_answer_of, second), timeout=15, what="the second image refused or shown"
        )
        if not answer.embeds:
            return await refused(second)
        assert time.time() >= ends, "a second image within one quota period was accepted"
        began, first = max(sent, ends), second
    raise AssertionError("four quota periods ended before a second image was answered in one")


async def test_daily_quota_refuses_the_next_job_and_resets_on_time(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env={"DAILY_IMAGE_QUOTA": "5", "QUOTA_PERIOD": "4"})
    await settings(world, "limits", {"daily_images": 1})
    show = text_of(await settings(world, "show"))
    assert "Daily images per member**: 1" in show and "<t:" in show
    text = await _second_image_of_one_period(world)
    assert "daily limit of 1 image" in text and "<t:" in text
    resets_at = int(text.split("<t:")[1].split(":")[0])
    assert 0 < resets_at - time.time() <= 4.5
    # Another member has their own quota.
    await world.job_id(await image(world, "bob's first", member=world.bob))
    await asyncio.sleep(max(0.0, resets_at - time.time()) + 0.2)
    await world.job_id(await image(world, "next day"))


async def test_blocklist_matches_accents_scripts_without_spaces_and_hindi(start_synced: StartWorld) -> None:
    world = await start_synced()
    msg = await settings(world, "blocklist add", {"terms": "Café, 禁止词, नमस्ते"})
    assert "3 terms" in msg.content
    show = text_of(await settings(world, "show"))
    assert "||Café||" in show and "||禁止词||" in show
    for prompt in ("I love my CAFE in the morning", "这是一个禁止词的例子", "नमस्ते दुनिया"):
        text = await refused(await image(world, prompt))
        assert "does not allow" in text
        for term in ("Café", "cafe", "CAFE", "禁止词", "नमस्ते"):
            assert term not in text
        assert not service_creates(world, prompt)
    # Each by another member: MEMBER_JOB_LIMIT (2) must not be what refuses them.
    for member, prompt in zip(
        world.members[0], ("a cafeteria at dawn", "禁止 and 词 apart", "नमस्कार दुनिया"), strict=True
    ):
        await world.job_id(await image(world, prompt, member=member))
    await settings(world, "blocklist remove", {"terms": "café"})
    await world.job_id(await image(world, "a café again", member=world.admins[0]))
    await world.bot.terminate()
    await world.restart_bot()
    assert "does not allow" in await refused(await image(world, "禁止词", member=world.admins[0]))
    assert "2 terms" in text_of(await settings(world, "show"))


def _key_world(world: World) -> None:
    world.service.api_keys.add(SERVER_KEY)
    world.discord.add_channel(world.guilds[0], "notices", system=True)


SERVER_KEY = "sk-server-" + "k" * 24 + "wxyz"


async def set_key(world: World, key: str, *, guild: int = 0) -> FakeMessage:
    it = await world.discord.slash(
        world.guilds[guild], world.channels[guild], world.admins[guild], "settings", {}, subcommand="key set"
    )
    await it.wait_response()
    assert it.modal is not None
    for component in _inputs(it.modal):
        assert not component.get("value"), "the key input is never prefilled"
    [custom_id] = [c["custom_id"] for c in _inputs(it.modal)]
    submit = await world.discord.submit_modal(it, {custom_id: key})
    return await answer(submit, timeout=15)


def _inputs(modal: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for row in modal["components"]:
        for c in [row.get("component"), *row.get("components", [])]:
            if isinstance(c, dict) and c.get("type") == 4:
                found.append(c)
    return found


async def test_a_server_key_is_validated_used_for_that_server_only_and_never_shown(
    start_synced: StartWorld,
) -> None:
    secret = Fernet.generate_key().decode()
    world = await start_synced(guilds=2, extra_env={"KEY_ENCRYPTION_SECRET": secret}, setup=_key_world)
    show = text_of(await settings(world, "show"))
    assert "No server key" in show
    # A refused key is not stored.
    msg = await set_key(world, "sk-wrong-key-123456")
    assert "refused" in msg.content
    msg = await set_key(world, SERVER_KEY)
    assert "…wxyz" in msg.content and SERVER_KEY not in msg.content
    checks = [r for r in world.service.requests if r.key == SERVER_KEY]
    assert [(r.method, r.path) for r in checks] == [("GET", "/v1/models")]
    assert "ending in …wxyz is set" in text_of(await settings(world, "show"))

    mine = await image(world, "on the server's key")
    theirs = await image(world, "on the operator's key", guild=1)
    await world.delivered(mine)
    await world.delivered(theirs)
    [create] = service_creates(world, "on the server's key")
    assert create.key == SERVER_KEY
    [create] = service_creates(world, "on the operator's key")
    assert create.key == world.service.api_key
    guild1 = [r for r in world.service.requests if r.key == SERVER_KEY and r.path != "/v1/models"]
    assert guild1 and all(r.key == SERVER_KEY for r in guild1)

    # Survives a restart (decrypted from the store), then the service revokes it.
    await world.bot.terminate()
    await world.restart_bot()
    world.service.revoke(SERVER_KEY)
    it = await image(world, "after revocation")
    job_id = await world.job_id(it)
    row = await wait_state(world, job_id, "failed", timeout=20)
    assert row["error_code"] == "guild_key_rejected"
    admin = world.admins[0]
    dm = world.discord.dm_channel(admin)
    notice = await world.wait_message(lambda m: m.channel_id == dm.id, timeout=10, what="the admin's DM")
    assert "…wxyz" in notice.content and "/settings key set" in notice.content
    assert not notice.pinged_user_ids and not notice.pinged_everyone
    # Nobody else was told: no DM to members, nothing in guild 1.
    others = [world.discord.dm_channel(m).id for g in (0, 1) for m in world.members[g]] + [
        world.discord.dm_channel(world.admins[1]).id
    ]
    assert not [m for m in world.discord.messages.values() if m.channel_id in others]
    assert "refused" in text_of(await settings(world, "show"))
    # Back to the operator's key.
    msg = await settings(world, "key remove")
    assert "operator's key" in msg.content
    await world.job_id(await image(world, "operator again", member=world.bob))

    # The key never left the bot: not in any Discord request, message or embed, log, or database file.
    for request in world.discord.requests:
        assert SERVER_KEY not in json.dumps(request.body, default=str)
    for message in world.discord.messages.values():
        assert SERVER_KEY not in json.dumps(message.to_payload(), default=str)
        assert SERVER_KEY not in json.dumps(message.history, default=str)
    assert SERVER_KEY not in world.bot.log_text()
    db = Path(world.env["DATABASE_PATH"])
    for path in (db, db.with_name(db.name + "-wal")):
        if path.exists():
            assert SERVER_KEY.encode() not in path.read_bytes()
    revoked = [r for r in service_creates(world, "after revocation")]
    assert revoked and all(r.key == SERVER_KEY and r.status == 401 for r in revoked)
    assert job_rows(world)[job_id]["error_code"] == "guild_key_rejected"


async def test_the_admin_is_told_in_the_system_channel_when_a_dm_fails(start_synced: StartWorld) -> None:
    secret = Fernet.generate_key().decode()
    world = await start_synced(extra_env={"KEY_ENCRYPTION_SECRET": secret}, setup=_key_world)
    world.admins[0].user.accepts_dms = False
    await set_key(world, SERVER_KEY)
    world.service.revoke(SERVER_KEY)
    job_id = await world.job_id(await image(world, "revoked"))
    await wait_state(world, job_id, "failed", timeout=20)
    notices = world.guild.system_channel_id
    msg = await world.wait_message(
        lambda m: m.channel_id == notices, timeout=10, what="a system-channel notice"
    )
    assert "…wxyz" in msg.content and not msg.pinged_user_ids and not msg.pinged_everyone
    assert not [m for m in world.discord.messages_in(world.channel) if "wxyz" in m.content]


async def test_without_a_secret_the_key_command_says_so(start_synced: StartWorld) -> None:
    world = await start_synced()
    it = await world.discord.slash(
        world.guild, world.channel, world.admins[0], "settings", {}, subcommand="key set"
    )
    msg = await answer(it)
    assert "KEY_ENCRYPTION_SECRET" in msg.content and it.modal is None
    assert "KEY_ENCRYPTION_SECRET" in text_of(await settings(world, "show"))


async def test_a_server_key_has_its_own_request_budget(start_synced: StartWorld) -> None:
    secret = Fernet.generate_key().decode()

    def setup(world: World) -> None:
        _key_world(world)
        world.service.rate_limit = (4, 1.0)  # per key, like the real service

    world = await start_synced(
        guilds=2, extra_env={"KEY_ENCRYPTION_SECRET": secret, "GEN_RATE_LIMIT": "4/1"}, setup=setup
    )
    msg = await set_key(world, SERVER_KEY)
    assert "…wxyz" in msg.content, (msg.content, world.bot.log_text()[-4000:])
    # The key check goes through a budget of its own (framecast.accounts.Accounts.check_key), not the new
    # account's: let its window pass so that only the account's requests are measured.
    await asyncio.sleep(1.1)
    its = []
    for g in (0, 1):
        for member in world.members[g]:
            its.append(await image(world, f"budget {g} {member.name}", guild=g, member=member))
    for it in its:
        await world.delivered(it, timeout=60)
    service = world.service
    # Each key keeps to its own 4 per second, never pushed back, and both ran side by side: together
    # they went over what one key's budget allows.
    assert service.max_in_window(1.0, key=SERVER_KEY) <= 4
    assert service.max_in_window(1.0, key=service.api_key) <= 4
    assert service.count(status=429) == 0
    assert service.max_in_window(1.0) > 4
    for g in (0, 1):
        for member in world.members[g]:
            [create] = service_creates(world, f"budget {g} {member.name}")
            assert create.key == (SERVER_KEY if g == 0 else service.api_key)
