"""Tests of tests/fakes/discord_api.py, driven by a minimal real discord.py ``commands.Bot``.

The bot runs in the test's event loop with ``Route.BASE`` and ``DEFAULT_GATEWAY`` pointed at the
fake (restored by monkeypatch). Tests wait on events (fake state changes or bot-side events),
never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import discord
import pytest
import yarl
from discord import app_commands
from discord.ext import commands

from tests.fakes.discord_api import (
    ADMINISTRATOR,
    ATTACH_FILES,
    SEND_MESSAGES,
    SEND_MESSAGES_IN_THREADS,
    TEXT_PERMISSIONS,
    CommandHidden,
    FakeChannel,
    FakeDiscord,
    FakeGuild,
    FakeMember,
    FakeUpload,
    MiB,
    ModalRefused,
    snowflake_at,
    snowflake_time,
)
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

MANAGE_GUILD = 1 << 5


class Outcomes:
    """Values recorded by bot handlers, with an event per key so tests can await them."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self._events: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value
        self._events[key].set()

    def clear(self, key: str) -> None:
        self.values.pop(key, None)
        self._events[key].clear()

    async def wait(self, key: str, timeout: float = 5.0) -> Any:  # noqa: ASYNC109 (the API takes a timeout)
        await asyncio.wait_for(self._events[key].wait(), timeout)
        return self.values[key]


@dataclass
class World:
    guild: FakeGuild
    channel: FakeChannel
    member: FakeMember
    other: FakeMember


class CancelButton(discord.ui.DynamicItem[discord.ui.Button], template=r"job:(?P<id>\d+):cancel"):
    def __init__(self, job_id: int) -> None:
        super().__init__(
            discord.ui.Button(
                label="Cancel", style=discord.ButtonStyle.danger, custom_id=f"job:{job_id}:cancel"
            )
        )
        self.job_id = job_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: Any
    ) -> CancelButton:
        return cls(int(match["id"]))

    async def callback(self, interaction: discord.Interaction) -> None:
        await interaction.response.edit_message(content=f"cancelled job {self.job_id}", view=None)


class RetryButton(discord.ui.DynamicItem[discord.ui.Button], template=r"job:(?P<id>\d+):retry"):
    def __init__(self, job_id: int) -> None:
        super().__init__(discord.ui.Button(label="Retry", custom_id=f"job:{job_id}:retry"))
        self.job_id = job_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: Any
    ) -> RetryButton:
        return cls(int(match["id"]))

    async def callback(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer()  # type 6: deferred update of the clicked message
        await interaction.edit_original_response(content=f"retrying job {self.job_id}")


class Feedback(discord.ui.Modal, title="Feedback"):
    text: discord.ui.TextInput = discord.ui.TextInput(label="Text", custom_id="feedback:text")

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message(f"got {self.text.value}", ephemeral=True)


class MiniBot(commands.Bot):
    def __init__(self, outcomes: Outcomes) -> None:
        super().__init__(
            command_prefix="!",
            intents=discord.Intents.default(),
            guild_ready_timeout=0.05,
            allowed_mentions=discord.AllowedMentions.none(),
        )
        self.outcomes = outcomes
        self.fast_reidentify = False
        self._build_commands()

    async def setup_hook(self) -> None:
        self.add_dynamic_items(CancelButton, RetryButton)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        # discord.py sleeps 5 s before every non-initial IDENTIFY; skip that in the tests.
        if not self.fast_reidentify:
            await super().before_identify_hook(shard_id, initial=initial)

    def _build_commands(self) -> None:
        tree = self.tree
        out = self.outcomes

        @tree.command(name="render", description="Render a clip")
        async def render(
            interaction: discord.Interaction, prompt: str, frames: int = 8, size: int = 1000
        ) -> None:
            await interaction.response.defer()
            out.set("render_args", (prompt, frames, interaction.filesize_limit, interaction.locale))
            data = (bytes(range(256)) * (size // 256 + 1))[:size]
            try:
                msg = await interaction.edit_original_response(
                    content=f"{interaction.user.mention} done: {prompt} @everyone",
                    attachments=[discord.File(io.BytesIO(data), filename="clip.mp4")],
                    allowed_mentions=discord.AllowedMentions(users=[interaction.user]),
                )
            except discord.HTTPException as exc:
                out.set("render_error", exc)
            else:
                out.set("render", msg)

        @tree.command(name="secret", description="Ephemeral reply")
        async def secret(interaction: discord.Interaction) -> None:
            await interaction.response.send_message("psst", ephemeral=True)
            out.set("secret", await interaction.original_response())

        @tree.command(name="chat", description="Reply then follow up")
        async def chat(interaction: discord.Interaction) -> None:
            await interaction.response.send_message("first")
            followup = await interaction.followup.send("second", wait=True)
            out.set("chat", followup)

        @tree.command(name="think", description="Ephemeral defer completed by a follow-up")
        async def think(interaction: discord.Interaction) -> None:
            await interaction.response.defer(ephemeral=True)
            out.set("think", await interaction.followup.send("thought", wait=True))

        @tree.command(name="panel", description="Post a job panel")
        async def panel(interaction: discord.Interaction, job: int) -> None:
            view = discord.ui.View(timeout=None)
            view.add_item(CancelButton(job))
            view.add_item(RetryButton(job))
            await interaction.response.send_message(f"job {job}", view=view)

        async def query_complete(
            interaction: discord.Interaction, current: str
        ) -> list[app_commands.Choice[str]]:
            models = [VIDEO_MODEL, "svc-video-v1.5", IMAGE_MODEL]
            return [app_commands.Choice(name=m, value=m) for m in models if current in m][:25]

        @tree.command(name="search", description="Search models")
        @app_commands.autocomplete(query=query_complete)
        async def search(interaction: discord.Interaction, query: str) -> None:
            await interaction.response.send_message(query)

        @tree.command(name="late", description="Edits after the token expired")
        async def late(interaction: discord.Interaction) -> None:
            await interaction.response.defer()
            out.set("late_expires_at", interaction.expires_at)
            # Wait for the token deadline itself (an event in time, not an arbitrary delay).
            delay = (interaction.expires_at - discord.utils.utcnow()).total_seconds()
            await asyncio.sleep(max(0.0, delay) + 0.05)
            try:
                await interaction.edit_original_response(content="too late")
            except discord.HTTPException as exc:
                out.set("late_error", exc)

        @tree.command(name="feedback", description="Opens a modal")
        async def feedback(interaction: discord.Interaction) -> None:
            await interaction.response.send_modal(Feedback())

        @tree.command(name="describe", description="Typed options")
        async def describe(
            interaction: discord.Interaction, target: discord.Member, image: discord.Attachment
        ) -> None:
            data = await image.read()  # downloaded from the fake's /attachments/ URL
            await interaction.response.send_message(
                f"{target.id} {image.filename} {len(data)} {target.guild_permissions.value}"
            )

        @tree.command(name="oops", description="Deletes its own reply")
        async def oops(interaction: discord.Interaction) -> None:
            await interaction.response.send_message("oops")
            await interaction.delete_original_response()
            out.set("oops", True)

        job = app_commands.Group(name="job", description="Jobs")

        @job.command(name="status", description="Job status")
        async def status(interaction: discord.Interaction, id: int) -> None:
            await interaction.response.send_message(f"job {id} is fine")

        tree.add_command(job)

        @tree.command(name="gated", description="Acknowledges only when the test says so")
        async def gated(interaction: discord.Interaction) -> None:
            await out.wait("open_gate")
            try:
                await interaction.response.defer()
            except discord.HTTPException as exc:
                out.set("gated_error", exc)


@contextlib.asynccontextmanager
async def running(fake: FakeDiscord, bot: discord.Client, shards: int = 1) -> AsyncIterator[Any]:
    """Start the bot, wait until the fake saw READY + GUILD_CREATE and the bot is ready; close it after."""
    mark = fake.identify_count
    task = asyncio.create_task(bot.start(fake.bot_token))
    ready = asyncio.create_task(fake.wait_ready(timeout=10, after=mark, count=shards))
    try:
        done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            ready.cancel()
            task.result()
            raise AssertionError("bot.start() returned before READY")
        ready.result()
        await asyncio.wait_for(bot.wait_until_ready(), 10)
        yield bot
    finally:
        ready.cancel()
        await bot.close()
        await asyncio.wait_for(task, 10)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    f = FakeDiscord()
    await f.start()
    monkeypatch.setattr(discord.http.Route, "BASE", f.api_base)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(f.gateway_url))
    try:
        yield f
    finally:
        await f.stop()


@pytest.fixture
def world(fake: FakeDiscord) -> World:
    guild = fake.add_guild("Test Guild", premium_tier=2)
    channel = fake.add_channel(guild, "general")
    member = fake.add_member(guild, "alice")
    other = fake.add_member(guild, "bob")
    return World(guild, channel, member, other)


@pytest.fixture
def outcomes() -> Outcomes:
    return Outcomes()


# --------------------------------------------------------------------------------------------
# Raw REST contract (no bot)
# --------------------------------------------------------------------------------------------


async def test_rest_contract_without_a_bot(fake: FakeDiscord, world: World) -> None:
    auth = {"Authorization": f"Bot {fake.bot_token}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{fake.api_base}/users/@me", headers=auth) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "application/json"
            assert (await resp.json())["id"] == str(fake.bot_user.id)
        async with http.get(f"{fake.api_base}/users/@me", headers={"Authorization": "Bot wrong"}) as resp:
            assert resp.status == 401
            assert resp.headers["Content-Type"] == "application/json"
            assert await resp.json() == {"message": "401: Unauthorized", "code": 0}
        async with http.get(f"{fake.api_base}/gateway/bot", headers=auth) as resp:
            assert (await resp.json())["url"] == fake.gateway_url
        async with http.get(f"{fake.api_base}/no/such/route", headers=auth) as resp:
            assert resp.status == 404
            assert await resp.json() == {"message": "Unknown route", "code": 0}
        url = f"{fake.api_base}/webhooks/{fake.application_id}/not-a-token/messages/@original"
        async with http.patch(url, json={"content": "x"}) as resp:
            assert resp.status == 404
            assert (await resp.json())["code"] == 10015
        # Application command validation: locales and names are checked like Discord does.
        bad = [{"name": "render", "description": "x", "name_localizations": {"xx": "rendu"}}]
        url = f"{fake.api_base}/applications/{fake.application_id}/guilds/{world.guild.id}/commands"
        async with http.put(url, json=bad, headers=auth) as resp:
            assert resp.status == 400
            assert (await resp.json())["code"] == 50035
    assert [r.path for r in fake.unknown_routes] == ["/api/v10/no/such/route"]
    assert len(fake.rejected(10015)) == 1


# --------------------------------------------------------------------------------------------
# With a real discord.py bot
# --------------------------------------------------------------------------------------------


async def test_login_ready_and_guild_cache(fake: FakeDiscord, world: World, outcomes: Outcomes) -> None:
    muted = fake.add_channel(world.guild, "read-only", bot_permissions=TEXT_PERMISSIONS & ~SEND_MESSAGES)
    expected = discord.Permissions.text()
    expected.view_channel = True
    assert TEXT_PERMISSIONS == expected.value

    async with running(fake, MiniBot(outcomes)) as bot:
        assert fake.connected
        assert bot.user is not None and bot.user.id == fake.bot_user.id
        assert bot.application_id == fake.application_id
        guild = bot.get_guild(world.guild.id)
        assert guild is not None and guild.name == "Test Guild"
        assert guild.filesize_limit == 50 * MiB == world.guild.upload_limit
        assert guild.me is not None
        channel = guild.get_channel(world.channel.id)
        assert isinstance(channel, discord.TextChannel)
        assert channel.permissions_for(guild.me).value == TEXT_PERMISSIONS
        ro = guild.get_channel(muted.id)
        assert ro is not None and not ro.permissions_for(guild.me).send_messages
        session = fake.sessions[-1]
        assert session.intents == discord.Intents.default().value
        assert fake.requests_to("GET", "/users/@me") and fake.requests_to("GET", "/oauth2/applications/@me")

        # runtime permission change reaches the cache through CHANNEL_UPDATE
        updated = asyncio.ensure_future(bot.wait_for("guild_channel_update", timeout=5))
        await fake.set_bot_permissions(world.channel, TEXT_PERMISSIONS & ~ATTACH_FILES)
        await updated
        assert not channel.permissions_for(guild.me).attach_files
    await fake.wait_disconnected(timeout=5)
    assert not fake.connected


async def test_slash_defer_then_edit_with_attachment(
    fake: FakeDiscord, world: World, outcomes: Outcomes
) -> None:
    async with running(fake, MiniBot(outcomes)) as bot:
        bot.tree.copy_global_to(guild=discord.Object(world.guild.id))
        synced = await bot.tree.sync(guild=discord.Object(world.guild.id))
        stored = {c["name"]: c for c in fake.commands_for(world.guild)}
        assert {c.name for c in synced} == set(stored)
        assert synced[0].id == int(stored[synced[0].name]["id"])

        it = await fake.slash(
            world.guild, world.channel, world.member, "render", {"prompt": "a cat", "frames": 12}, locale="de"
        )
        assert it.payload["data"]["id"] == stored["render"]["id"]
        assert it.payload["data"]["guild_id"] == str(world.guild.id)
        assert await it.wait_response() == (5, None)
        msg = await it.wait_original(lambda m: bool(m.attachments))
        sent = await outcomes.wait("render")

    assert await outcomes.wait("render_args") == ("a cat", 12, 50 * MiB, discord.Locale.german)
    assert it.ack_latency is not None and it.ack_latency < 3.0
    assert sent.id == msg.id
    assert not msg.loading and not msg.ephemeral
    assert msg.content == f"<@{world.member.id}> done: a cat @everyone"
    assert msg.webhook_id == fake.application_id and msg.interaction is it
    assert msg.interaction_metadata and msg.interaction_metadata["id"] == str(it.id)
    assert [h["action"] for h in msg.history] == ["create", "complete"]
    assert msg.edit_count == 0
    # allowed mentions: recorded as sent; only the requester is pinged
    assert msg.allowed_mentions == {"parse": [], "users": [world.member.id]}
    assert msg.pinged_user_ids == {world.member.id} and not msg.pinged_everyone
    # attachment bytes are stored and served
    (att,) = msg.attachments
    assert att.filename == "clip.mp4" and att.size == 1000 and att.content_type == "video/mp4"
    assert att.data == (bytes(range(256)) * 4)[:1000]
    assert [(a.filename, a.message_id) for a in fake.files_delivered()] == [("clip.mp4", msg.id)]
    async with aiohttp.ClientSession() as http, http.get(att.url) as resp:
        assert await resp.read() == att.data
    # snowflakes encode their creation time
    assert abs(snowflake_time(msg.id) - msg.created_at) < 0.01


async def test_ephemeral_followups_and_thinking(fake: FakeDiscord, world: World, outcomes: Outcomes) -> None:
    async with running(fake, MiniBot(outcomes)) as bot:
        secret = await fake.slash(world.guild, world.channel, world.member, "secret", {})
        await outcomes.wait("secret")
        assert secret.response_type == 4
        assert secret.original is not None and secret.original.ephemeral and secret.original.content == "psst"
        assert secret.original not in fake.messages_in(world.channel)
        assert secret.original in fake.messages_in(world.channel, include_ephemeral=True)
        # ephemeral messages are invisible through the bot token
        with pytest.raises(discord.NotFound) as err:
            await bot.http.get_message(world.channel.id, secret.original.id)
        assert err.value.code == 10008

        chat = await fake.slash(world.guild, world.channel, world.member, "chat", {})
        followup = await outcomes.wait("chat")
        assert chat.original is not None and chat.original.content == "first"
        assert [m.content for m in chat.followups] == ["second"]
        assert followup.id == chat.followups[0].id
        meta = chat.followups[0].interaction_metadata
        assert meta is not None and meta["original_response_message_id"] == str(chat.original.id)

        think = await fake.slash(world.guild, world.channel, world.member, "think", {})
        done = await outcomes.wait("think")
        assert think.response_type == 5
        assert think.original is not None and done.id == think.original.id
        assert think.original.content == "thought" and think.original.ephemeral and not think.original.loading


async def test_dynamic_button_survives_restart_and_autocomplete(
    fake: FakeDiscord, world: World, outcomes: Outcomes
) -> None:
    async with running(fake, MiniBot(outcomes)):
        it = await fake.slash(world.guild, world.channel, world.member, "panel", {"job": 42})
        panel = await it.wait_original()
        assert panel.custom_ids() == ["job:42:cancel", "job:42:retry"]

    # a fresh bot process (new instance) still answers the persistent button
    async with running(fake, MiniBot(outcomes)):
        click = await fake.click(panel, "job:42:cancel", world.other)
        assert (await click.wait_response())[0] == 7
        await fake.wait_for(lambda: panel.content == "cancelled job 42")
        assert panel.components == [] and panel.edit_count == 1
        assert click.original is panel

        ac = await fake.autocomplete(
            world.guild, world.channel, world.member, "search", {"query": "video"}, "query"
        )
        await ac.wait_response()
        assert ac.choices is not None
        assert [c["value"] for c in ac.choices] == [VIDEO_MODEL, "svc-video-v1.5"]
        with pytest.raises(ValueError):
            await fake.click(panel, "job:43:cancel", world.other)


async def test_channel_messages_limits_and_rate_limits(
    fake: FakeDiscord, world: World, outcomes: Outcomes
) -> None:
    async with running(fake, MiniBot(outcomes)) as bot:
        messageable = bot.get_partial_messageable(world.channel.id)
        sent = await messageable.send(
            f"<@{world.member.id}> status <@{world.other.id}>",
            allowed_mentions=discord.AllowedMentions(users=[discord.Object(world.member.id)]),
        )
        stored = fake.messages[sent.id]
        assert stored.pinged_user_ids == {world.member.id}
        assert stored.allowed_mentions == {"parse": [], "users": [world.member.id]}

        # edit through a partial message (no cache), transparently retried after a 429 with Via
        fake.rate_limit_next("PATCH /api/v10/channels/", count=1, retry_after=0.05)
        await messageable.get_partial_message(sent.id).edit(content="progress 50%")
        assert stored.content == "progress 50%" and stored.edit_count == 1
        assert [r.status for r in fake.requests_to("PATCH", f"/channels/{world.channel.id}/messages/")] == [
            429,
            200,
        ]

        # a 429 without Via is raised (discord.py believes it is a Cloudflare ban)
        fake.rate_limit_next("PATCH /api/v10/channels/", count=1, retry_after=0.05, via=False)
        with pytest.raises(discord.HTTPException) as err:
            await messageable.get_partial_message(sent.id).edit(content="progress 60%")
        assert err.value.status == 429

        # old messages: capped edits
        stored.backdate(4000)
        with pytest.raises(discord.HTTPException) as err:
            await messageable.get_partial_message(sent.id).edit(content="progress 70%")
        assert err.value.code == 30046

        # file above the guild's upload limit
        world.guild.upload_limit = 2000
        with pytest.raises(discord.HTTPException) as err:
            await messageable.send(file=discord.File(io.BytesIO(b"x" * 2001), filename="big.mp4"))
        assert err.value.status == 413 and err.value.code == 40005
        ok = await messageable.send(file=discord.File(io.BytesIO(b"x" * 2000), filename="ok.png"))
        assert fake.messages[ok.id].attachments[0].content_type == "image/png"

        # edit with attachments=[] removes the file; keeping by id keeps it
        await ok.edit(attachments=ok.attachments)
        assert len(fake.messages[ok.id].attachments) == 1
        await ok.edit(content="no file", attachments=[])
        assert fake.messages[ok.id].attachments == []

        # injected failures (503 is not retried by discord.py; 500/502/504 are, after 1 s)
        fake.fail_next("POST /api/v10/channels/", status=503)
        with pytest.raises(discord.DiscordServerError):
            await messageable.send("boom")
        fake.fail_next(
            f"/channels/{world.channel.id}/messages", status=400, code=50035, message="Invalid Form Body"
        )
        with pytest.raises(discord.HTTPException) as err:
            await messageable.send("bad")
        assert err.value.code == 50035
        assert (await messageable.send("fine")).content == "fine"

        # DMs
        dm = await bot.create_dm(discord.Object(world.member.id))
        await dm.send("hello in private")
        assert [m.content for m in fake.messages_in(fake.dm_channel(world.member))] == ["hello in private"]

        # permissions
        world.channel.bot_permissions = TEXT_PERMISSIONS & ~ATTACH_FILES
        with pytest.raises(discord.Forbidden) as err:
            await messageable.send(file=discord.File(io.BytesIO(b"x"), filename="a.png"))
        assert err.value.code == 50013
        world.channel.bot_permissions = TEXT_PERMISSIONS & ~SEND_MESSAGES
        with pytest.raises(discord.Forbidden) as err:
            await messageable.send("hello")
        assert err.value.code == 50013
        # in a thread, Send Messages in Threads is what counts, not Send Messages
        thread = fake.add_thread(world.channel, "ideas")
        in_thread = bot.get_partial_messageable(thread.id)
        assert (await in_thread.send("in a thread")).content == "in a thread"
        thread.bot_permissions = TEXT_PERMISSIONS & ~SEND_MESSAGES_IN_THREADS
        with pytest.raises(discord.Forbidden) as err:
            await in_thread.send("not in this one")
        assert err.value.code == 50013
        assert not fake.unknown_routes and not fake.fake_errors


async def test_a_create_with_an_enforced_nonce_answers_with_the_message_it_already_made(
    fake: FakeDiscord, world: World, outcomes: Outcomes
) -> None:
    # Discord: with `enforce_nonce`, a message created by the same author with the same nonce in the
    # past few minutes is returned, and no new message is created. discord.py sends it with any nonce.
    async with running(fake, MiniBot(outcomes)) as bot:
        messageable = bot.get_partial_messageable(world.channel.id)
        first = await messageable.send("status 20%", nonce="fc7-move0")
        again = await messageable.send("status 40%", nonce="fc7-move0")
        assert again.id == first.id and again.content == "status 20%" and again.nonce == "fc7-move0"
        assert [m.content for m in fake.messages_in(world.channel)] == ["status 20%"]
        # Another nonce, or the same one in another channel, is another message.
        other = await messageable.send("status 60%", nonce="fc7-move1")
        elsewhere = fake.add_channel(world.guild, "elsewhere")
        there = await bot.get_partial_messageable(elsewhere.id).send("there", nonce="fc7-move0")
        assert len({first.id, other.id, there.id}) == 3
        # Deleted since, it is still the one answered (the docs promise no new one).
        await messageable.get_partial_message(other.id).delete()
        assert (await messageable.send("status 80%", nonce="fc7-move1")).id == other.id
        assert len(fake.messages_in(world.channel)) == 1
        # Past the window it is a new message.
        fake.messages[first.id].created_at -= fake.nonce_window + 1
        assert (await messageable.send("later", nonce="fc7-move0")).id != first.id
        # An answer lost after Discord stored the message (a dropped connection, a proxy's 503):
        # sent again with its nonce, it is the stored message.
        fake.lose_answer_next("POST /api/v10/channels/")
        with pytest.raises(aiohttp.ClientError):
            await messageable.send("dropped", nonce="fc8-ping")
        fake.lose_answer_next("POST /api/v10/channels/", status=503)
        with pytest.raises(discord.DiscordServerError):
            await messageable.send("a 503", nonce="fc9-ping")
        assert [r.status for r in fake.lost_answers] == [0, 503]
        for text, nonce in (("dropped", "fc8-ping"), ("a 503", "fc9-ping")):
            [stored] = [m for m in fake.messages_in(world.channel) if m.content == text]
            assert (await messageable.send(text, nonce=nonce)).id == stored.id
            assert [m.content for m in fake.messages_in(world.channel)].count(text) == 1

    # Without enforce_nonce a nonce deduplicates nothing (it is only echoed).
    auth = {"Authorization": f"Bot {fake.bot_token}"}
    url = f"{fake.api_base}/channels/{world.channel.id}/messages"
    async with aiohttp.ClientSession() as http:
        ids = []
        for _ in range(2):
            async with http.post(url, json={"content": "x", "nonce": "n1"}, headers=auth) as resp:
                assert resp.status == 200
                body = await resp.json()
                assert body["nonce"] == "n1"
                ids.append(body["id"])
        assert ids[0] != ids[1]
    assert not fake.fake_errors and not fake.spec_violations


async def test_interaction_token_rules(fake: FakeDiscord, world: World, outcomes: Outcomes) -> None:
    async with running(fake, MiniBot(outcomes)):
        # token expiry: the fake and discord.py agree on expires_at
        late = await fake.slash(world.guild, world.channel, world.member, "late", {}, age=899.6)
        expires_at = await outcomes.wait("late_expires_at")
        assert abs(expires_at.timestamp() - (late.created_at + 900)) < 0.002
        err = await outcomes.wait("late_error")
        assert err.status == 401 and err.code == 50027
        assert late.token_expired and late.errors[-1].code == 50027

        # upload limit of an interaction (attachment_size_limit) -> 413
        small = await fake.slash(
            world.guild,
            world.channel,
            world.member,
            "render",
            {"prompt": "x", "size": 3000},
            attachment_size_limit=2048,
        )
        assert small.payload["attachment_size_limit"] == 2048
        err = await outcomes.wait("render_error")
        assert err.status == 413 and err.code == 40005
        assert (await outcomes.wait("render_args"))[2] == 2048

        # acknowledging after the deadline -> 10062 Unknown interaction
        fake.ack_deadline = 0.0
        gated = await fake.slash(world.guild, world.channel, world.member, "gated", {})
        await fake.wait_for(lambda: gated.dispatched_at is not None)
        outcomes.set("open_gate", True)
        err = await outcomes.wait("gated_error")
        assert isinstance(err, discord.NotFound) and err.code == 10062
        assert gated.ack_latency is None and not gated.acknowledged
        fake.ack_deadline = 3.0

        # a second initial response -> 40060
        secret = await fake.slash(world.guild, world.channel, world.member, "secret", {})
        await secret.wait_response()
        await outcomes.wait("secret")
        url = f"{fake.api_base}/interactions/{secret.id}/{secret.token}/callback?with_response=1"
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, json={"type": 4, "data": {"content": "again"}}) as r,
        ):
            assert r.status == 400 and (await r.json())["code"] == 40060


async def test_gateway_cycles_resume_and_reidentify(
    fake: FakeDiscord, world: World, outcomes: Outcomes
) -> None:
    for _ in range(3):
        async with running(fake, MiniBot(outcomes)):
            assert fake.connected
        await fake.wait_disconnected(timeout=5)
        assert not fake.connected
    assert fake.identify_count == 3

    bot = MiniBot(outcomes)
    bot.fast_reidentify = True
    async with running(fake, bot):
        session = fake.sessions[-1]
        # a dropped socket is RESUMEd on the same session
        await fake.disconnect()
        await fake.wait_for(lambda: session.resumes == 1 and session.live)
        outcomes.clear("secret")
        it = await fake.slash(world.guild, world.channel, world.member, "secret", {})
        assert (await it.wait_response())[0] == 4
        await outcomes.wait("secret")

        # a refused RESUME (op 9) makes the bot IDENTIFY again
        fake.allow_resume = False
        mark = fake.identify_count
        await fake.disconnect()
        await fake.wait_ready(timeout=5, after=mark)
        assert fake.identify_count == mark + 1
        outcomes.clear("secret")
        it = await fake.slash(world.guild, world.channel, world.member, "secret", {})
        assert (await it.wait_response())[0] == 4
        await outcomes.wait("secret")


async def test_components_modals_and_typed_options(
    fake: FakeDiscord, world: World, outcomes: Outcomes
) -> None:
    async with running(fake, MiniBot(outcomes)):
        it = await fake.slash(world.guild, world.channel, world.member, "panel", {"job": 7})
        panel = await it.wait_original()
        assert panel.custom_ids() == ["job:7:cancel", "job:7:retry"]
        click = await fake.click(panel, "job:7:retry", world.member)
        assert (await click.wait_response())[0] == 6
        await fake.wait_for(lambda: panel.content == "retrying job 7")
        assert click.original is panel and panel.edit_count == 1

        ask = await fake.slash(world.guild, world.channel, world.member, "feedback", {})
        await ask.wait_response()
        assert ask.modal is not None and ask.modal["title"] == "Feedback"
        submit = await fake.submit_modal(ask, {"feedback:text": "lovely"})
        reply = await submit.wait_original()
        assert reply.content == "got lovely" and reply.ephemeral

        upload = FakeUpload("cat.png", b"\x89PNG" + b"0" * 96)
        desc = await fake.slash(
            world.guild, world.channel, world.member, "describe", {"target": world.other, "image": upload}
        )
        reply = await desc.wait_original()
        perms = world.other.permissions
        assert reply.content == f"{world.other.id} cat.png 100 {perms}"

        status = await fake.slash(
            world.guild, world.channel, world.member, "job", {"id": 3}, subcommand="status"
        )
        assert (await status.wait_original()).content == "job 3 is fine"

        oops = await fake.slash(world.guild, world.channel, world.member, "oops", {})
        await outcomes.wait("oops")
        assert oops.original is not None and oops.original.deleted
        assert oops.original not in fake.messages_in(world.channel)
        assert all(i.ack_latency is not None and i.ack_latency < 3 for i in fake.interactions)


class ShardedBot(commands.AutoShardedBot):
    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        return None  # discord.py waits 5 s between shard IDENTIFYs otherwise

    async def setup_hook(self) -> None:
        @self.tree.command(name="where", description="Which shard am I on")
        async def where(interaction: discord.Interaction) -> None:
            assert interaction.guild is not None
            await interaction.response.send_message(f"shard {interaction.guild.shard_id}")


def _guild_id_on_shard(shard: int, shards: int) -> int:
    base = snowflake_at(time.time() - 86400) >> 22
    base += (shard - base) % shards
    return base << 22 | 1


async def test_sharded_bot_gets_its_guilds_per_shard(fake: FakeDiscord) -> None:
    fake.recommended_shards = 2
    g0 = fake.add_guild("zero", guild_id=_guild_id_on_shard(0, 2))
    g1 = fake.add_guild("one", guild_id=_guild_id_on_shard(1, 2))
    c1 = fake.add_channel(g1, "general")
    m1 = fake.add_member(g1, "carol")
    bot = ShardedBot(command_prefix="!", intents=discord.Intents.default(), guild_ready_timeout=0.05)
    async with running(fake, bot, shards=2):
        assert fake.requests_to("GET", "/gateway/bot")
        assert sorted(s.shard or (-1, -1) for s in fake.sessions if s.live) == [(0, 2), (1, 2)]
        guild0, guild1 = bot.get_guild(g0.id), bot.get_guild(g1.id)
        assert guild0 is not None and guild0.shard_id == 0
        assert guild1 is not None and guild1.shard_id == 1
        it = await fake.slash(g1, c1, m1, "where", {})
        assert (await it.wait_original()).content == "shard 1"
        shard1 = next(s for s in fake.sessions if s.shard == (1, 2))
        assert any(e["t"] == "INTERACTION_CREATE" for e in shard1.events)


class KeyForm(discord.ui.Modal, title="Key"):
    key: discord.ui.TextInput = discord.ui.TextInput(
        label="Key", custom_id="key:value", min_length=8, max_length=20
    )
    note: discord.ui.TextInput = discord.ui.TextInput(
        label="Note", custom_id="key:note", required=False, max_length=5
    )

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await interaction.response.send_message(f"key of {len(self.key.value)}", ephemeral=True)


class GatedBot(commands.Bot):
    """A bot with one Manage-Server command, one that reports the channel's age restriction, a modal."""

    async def setup_hook(self) -> None:
        @self.tree.command(name="admin", description="Manage Server only")
        @app_commands.default_permissions(manage_guild=True)
        async def admin(interaction: discord.Interaction) -> None:
            await interaction.response.send_message("admin ok", ephemeral=True)

        @self.tree.command(name="owneronly", description="Nobody but administrators")
        @app_commands.default_permissions()
        async def owneronly(interaction: discord.Interaction) -> None:
            await interaction.response.send_message("owner ok", ephemeral=True)

        @self.tree.command(name="where", description="Is this channel age-restricted")
        async def where(interaction: discord.Interaction) -> None:
            channel = interaction.channel
            nsfw = channel.is_nsfw() if isinstance(channel, discord.TextChannel) else None
            await interaction.response.send_message(f"nsfw={nsfw}")

        @self.tree.command(name="key", description="Opens a modal with length rules")
        async def key(interaction: discord.Interaction) -> None:
            await interaction.response.send_modal(KeyForm())

        await self.tree.sync()


async def test_permission_gates_nsfw_channels_and_modal_rules(fake: FakeDiscord, world: World) -> None:
    manager = fake.add_member(world.guild, "manager", permissions=TEXT_PERMISSIONS | MANAGE_GUILD)
    boss = fake.add_member(world.guild, "boss", permissions=ADMINISTRATOR)
    adult = fake.add_channel(world.guild, "adult", nsfw=True)
    notices = fake.add_channel(world.guild, "notices", system=True)
    bot = GatedBot(command_prefix="!", intents=discord.Intents.default(), guild_ready_timeout=0.05)
    async with running(fake, bot):
        # The synced definition keeps default_member_permissions, as Discord answers it.
        assert fake.synced_command(None, "admin")["default_member_permissions"] == str(MANAGE_GUILD)  # type: ignore[index]
        assert fake.synced_command(None, "owneronly")["default_member_permissions"] == "0"  # type: ignore[index]
        assert fake.synced_command(None, "where")["default_member_permissions"] is None  # type: ignore[index]

        # A member without Manage Server does not even see /admin.
        with pytest.raises(CommandHidden, match="default_member_permissions"):
            await fake.slash(world.guild, world.channel, world.member, "admin", {})
        with pytest.raises(CommandHidden):
            await fake.autocomplete(world.guild, world.channel, world.member, "admin", {}, "x")
        for who in (manager, boss):
            it = await fake.slash(world.guild, world.channel, who, "admin", {})
            assert (await it.wait_original()).content == "admin ok"
        # "0": administrators (and the owner) only.
        with pytest.raises(CommandHidden):
            await fake.slash(world.guild, world.channel, manager, "owneronly", {})
        it = await fake.slash(world.guild, world.channel, boss, "owneronly", {})
        assert (await it.wait_original()).content == "owner ok"
        # Server Settings -> Integrations can widen or narrow it per member.
        fake.override_command(world.guild, "admin", world.member)
        it = await fake.slash(world.guild, world.channel, world.member, "admin", {})
        assert (await it.wait_original()).content == "admin ok"
        fake.override_command(world.guild, "admin", manager, allow=False)
        with pytest.raises(CommandHidden, match="override"):
            await fake.slash(world.guild, world.channel, manager, "admin", {})
        fake.override_command(world.guild, "admin", manager, allow=None)
        await fake.slash(world.guild, world.channel, manager, "admin", {})

        # Age-restricted channels, in the guild cache and in the interaction's channel.
        it = await fake.slash(world.guild, adult, world.member, "where", {})
        assert (await it.wait_original()).content == "nsfw=True"
        assert it.payload["channel"]["nsfw"] is True
        it = await fake.slash(world.guild, world.channel, world.member, "where", {})
        assert (await it.wait_original()).content == "nsfw=False"
        updated = asyncio.ensure_future(bot.wait_for("guild_channel_update", timeout=5))
        await fake.update_channel(world.channel, nsfw=True)
        before, after = await updated
        assert not before.is_nsfw() and after.is_nsfw() and after.id == world.channel.id
        guild = bot.get_guild(world.guild.id)
        assert guild is not None and guild.system_channel is not None
        assert guild.system_channel.id == notices.id

        # Modal text inputs: required, min_length and max_length are enforced on submit.
        ask = await fake.slash(world.guild, world.channel, world.member, "key", {})
        await ask.wait_response()
        assert ask.modal is not None
        for values, problem in [
            ({}, "required"),
            ({"key:value": "short"}, "8-20"),
            ({"key:value": "x" * 21}, "8-20"),
            ({"key:value": "x" * 10, "key:note": "toolong"}, "0-5"),
            ({"key:value": "x" * 10, "key:other": "?"}, "no text input"),
        ]:
            with pytest.raises(ModalRefused, match=problem):
                await fake.submit_modal(ask, values)
        submit = await fake.submit_modal(ask, {"key:value": "x" * 10})
        assert (await submit.wait_original()).content == "key of 10"


class ReadBot(commands.Bot):
    """A bot whose /canread reports, with discord.py's own rules, which channels the member can see."""

    async def setup_hook(self) -> None:
        @self.tree.command(name="canread", description="Which channels can the member see")
        async def canread(interaction: discord.Interaction) -> None:
            assert interaction.guild is not None and isinstance(interaction.user, discord.Member)
            seen = sorted(
                channel.name
                for channel in interaction.guild.text_channels
                if channel.permissions_for(interaction.user).view_channel
            )
            here = interaction.permissions.view_channel
            await interaction.response.send_message(f"{','.join(seen)} here={here}")

        await self.tree.sync()


async def test_channel_overwrites_follow_discords_rules_and_discordpy_reads_them(
    fake: FakeDiscord, world: World
) -> None:
    from jsonschema import Draft202012Validator

    from tests.fakes.discord_api import VIEW_CHANNEL, ChannelHidden, FakeOverwrite
    from tests.fakes.openapi import spec

    staff = fake.add_role(world.guild, "staff")
    private = fake.add_channel(
        world.guild,
        "staff",
        overwrites=[
            FakeOverwrite.of(world.guild.everyone, deny=VIEW_CHANNEL),
            FakeOverwrite.of(staff, allow=VIEW_CHANNEL),
        ],
    )
    # A member overwrite wins over the roles': this staff member is kept out all the same.
    banned = fake.add_member(world.guild, "banned", roles=[staff])
    private.overwrites.append(FakeOverwrite.of(banned, deny=VIEW_CHANNEL))
    member_of_staff = fake.add_member(world.guild, "carol", roles=[staff])
    thread = fake.add_thread(private, "plans")
    secret = fake.add_thread(world.channel, "secret", private=True, owner=world.member)
    schemas = spec().document["components"]["schemas"]
    assert not list(Draft202012Validator(schemas["GuildChannelResponse"]).iter_errors(private.to_payload()))
    for each in (thread, secret):
        assert not list(Draft202012Validator(schemas["ThreadResponse"]).iter_errors(each.to_payload()))
    # A thread is seen as its channel is; a private one by its owner (and Manage Threads) only.
    assert thread.permissions_for(world.member) == 0 and thread.permissions_for(member_of_staff)
    assert secret.permissions_for(world.member) and secret.permissions_for(member_of_staff) == 0
    assert private.permissions_for(world.member) == 0
    assert private.permissions_for(member_of_staff) & VIEW_CHANNEL
    assert private.permissions_for(banned) == 0
    bot = ReadBot(command_prefix="!", intents=discord.Intents.default(), guild_ready_timeout=0.05)
    async with running(fake, bot):
        it = await fake.slash(world.guild, world.channel, world.member, "canread", {})
        assert (await it.wait_original()).content == "general here=True"
        it = await fake.slash(world.guild, world.channel, member_of_staff, "canread", {})
        assert (await it.wait_original()).content == "general,staff here=True"
        it = await fake.slash(world.guild, world.channel, banned, "canread", {})
        assert (await it.wait_original()).content == "general here=True"
        # Discord never shows the channel to who cannot see it: no command can come from there.
        with pytest.raises(ChannelHidden):
            await fake.slash(world.guild, private, world.member, "canread", {})
        it = await fake.slash(world.guild, private, member_of_staff, "canread", {})
        assert (await it.wait_original()).content == "general,staff here=True"
        # The threads reach discord.py's cache with their parents, from GUILD_CREATE.
        guild = bot.get_guild(world.guild.id)
        assert guild is not None
        cached = {t.id: t for t in guild.threads}
        assert cached[thread.id].parent == guild.get_channel(private.id) and cached[secret.id].is_private()
        it = await fake.slash(world.guild, thread, member_of_staff, "canread", {})
        assert (await it.wait_original()).content == "general,staff here=True"
        with pytest.raises(ChannelHidden):
            await fake.slash(world.guild, thread, world.member, "canread", {})


# --------------------------------------------------------------------------------------------
# OAuth2 (Login with Discord): the fake checks what Discord checks


async def test_oauth_code_is_good_once_for_its_redirect_and_pkce_verifier(
    fake: FakeDiscord, world: World
) -> None:
    import base64
    import hashlib

    oauth = fake.oauth
    back = "http://127.0.0.1:1/login/callback"
    oauth.redirect_uris.add(back)
    oauth.login = world.member.user
    verifier = "v" * 50
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = {
        "client_id": oauth.client_id,
        "response_type": "code",
        "redirect_uri": back,
        "scope": "identify",
        "state": "s1",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }

    def basic(secret: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{oauth.client_id}:{secret}".encode()).decode()}

    auth = basic(oauth.client_secret)
    async with aiohttp.ClientSession() as http:
        async with http.get(
            f"{fake.base_url}/oauth2/authorize",
            params={**query, "redirect_uri": "http://evil/"},
            allow_redirects=False,
        ) as r:
            assert r.status == 400
        async with http.get(f"{fake.base_url}/oauth2/authorize", params=query, allow_redirects=False) as r:
            assert r.status == 302
            location = yarl.URL(r.headers["Location"])
        assert location.query["state"] == "s1"
        code = location.query["code"]
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": back,
            "code_verifier": "w" * 50,
        }
        async with http.post(f"{fake.api_base}/oauth2/token", data=form, headers=auth) as r:
            assert r.status == 400 and (await r.json())["error"] == "invalid_grant"  # wrong verifier
        async with http.post(
            f"{fake.api_base}/oauth2/token", data={**form, "code_verifier": verifier}, headers=auth
        ) as r:
            assert r.status == 400  # the code was spent by the failed try: good once
        async with http.get(f"{fake.base_url}/oauth2/authorize", params=query, allow_redirects=False) as r:
            code = yarl.URL(r.headers["Location"]).query["code"]
        good = {**form, "code": code, "code_verifier": verifier}
        async with http.post(f"{fake.api_base}/oauth2/token", data=good, headers=basic("nope")) as r:
            assert r.status == 401
        async with http.get(f"{fake.base_url}/oauth2/authorize", params=query, allow_redirects=False) as r:
            code = yarl.URL(r.headers["Location"]).query["code"]
        async with http.post(f"{fake.api_base}/oauth2/token", data={**good, "code": code}, headers=auth) as r:
            assert r.status == 200
            token = (await r.json())["access_token"]
        async with http.get(f"{fake.api_base}/users/@me", headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200 and (await r.json())["id"] == str(world.member.id)
        async with http.get(f"{fake.api_base}/users/@me", headers={"Authorization": "Bearer nope"}) as r:
            assert r.status == 401
    assert fake.spec_violations == []
