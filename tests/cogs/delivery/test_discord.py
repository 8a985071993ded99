"""The Discord side of delivery against a real discord.py client talking to the fake Discord.

Placement (interaction token or channel message, moving), Discord's error codes, retry decisions
on real refusals, delivery and the requester's ping, the upload limit, and the look for an earlier
delivery after a restart. Nothing here is mocked: the client, the store and the fake are real.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import discord
import pytest
import yarl

from cogs.delivery.codes import MessageUnusable, NowhereToPost, ThreadClosed, TokenDead, TooLarge
from cogs.delivery.drawing import Drawing
from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.limits import UPLOAD_SLACK, limit_below
from cogs.delivery.lookup import JobMessages, result_attachments
from cogs.delivery.placement import Placement, Target
from cogs.delivery.record import DiscordRecord, record_for
from cogs.delivery.reporter import DiscordReporter
from cogs.delivery.retries import ATTEMPTS, retry_delay
from cogs.delivery.timings import DeliveryTimings
from framecast.app import (
    Delivered,
    Interrupted,
    RefusedKeyNotice,
    RemovalFailed,
    RemovalProblem,
    ResultFile,
    ResultLink,
    UploadTooLarge,
    result_filename,
)
from framecast.clock import SystemClock
from framecast.config import Secret, Settings
from framecast.ops.metrics import Metrics
from framecast.planner.estimate import Estimate
from framecast.storage import Store
from framecast.values import Job, JobKind, JobState, NewJob
from framecast.values.reasons import Note
from tests.fakes.discord_api import (
    TEXT_PERMISSIONS,
    FakeChannel,
    FakeDiscord,
    FakeGuild,
    FakeInteraction,
    FakeMember,
    FakeMessage,
    MiB,
)
from tests.fakes.gen_service import VIDEO_MODEL

TOKEN_TTL = 900.0
MARGIN = 60.0
VIDEO = {
    "model": VIDEO_MODEL,
    "prompt": "a paper boat",
    "width": 64,
    "height": 64,
    "num_frames": 12,
    "frame_rate": 12,
}


class Client(discord.Client):
    """A bare client that acknowledges every interaction (as /video does) and hands it to the test."""

    def __init__(self) -> None:
        intents = discord.Intents.none()
        intents.guilds = True
        super().__init__(
            intents=intents,
            allowed_mentions=discord.AllowedMentions.none(),
            max_ratelimit_timeout=30.0,
            guild_ready_timeout=0.05,
        )
        self.interactions: asyncio.Queue[discord.Interaction] = asyncio.Queue()

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer()
        self.interactions.put_nowait(interaction)


@dataclass
class Rig:
    fake: FakeDiscord
    guild: FakeGuild
    channel: FakeChannel
    member: FakeMember
    client: Client
    store: Store
    settings: Settings
    reporter: DiscordReporter

    async def job(self, *, age: float = 0.0, limit: int | None = None) -> tuple[Job, FakeInteraction]:
        """A job started by a /video command `age` seconds old, as ``Members.submit`` stores it."""
        it = await self.fake.slash(
            self.guild,
            self.channel,
            self.member,
            "video",
            {"prompt": "a paper boat"},
            age=age,
            attachment_size_limit=limit,
        )
        interaction = await asyncio.wait_for(self.client.interactions.get(), 10)
        meta = record_for(interaction).to_dict()
        job = await self.store.add(
            NewJob(
                JobKind.VIDEO,
                self.guild.id,
                self.channel.id,
                self.member.id,
                "en-US",
                dict(VIDEO),
                discord=meta,
            ),
            member_limit=None,
            guild_cap=None,
        )
        return job, it

    async def advance(self, job: Job, *to: JobState) -> Job:
        fields: dict[JobState, dict[str, Any]] = {
            JobState.RUNNING: {"task_id": "task-1", "started_at": time.time()},
            JobState.DELIVERING: {"result_url": "https://files.example/r/1.mp4"},
        }
        for state in to:
            job = await self.store.transition(job.id, state, **fields.get(state, {}))
        return job

    async def stored(self, job: Job, predicate: Callable[[Job], bool]) -> Job:
        """The job's record once `predicate` holds for it (the reporter persists in the background)."""
        async with asyncio.timeout(10):
            while True:
                current = await self.store.get(job.id)
                assert current is not None
                if predicate(current):
                    return current
                await asyncio.sleep(0.02)

    def timings(self) -> DeliveryTimings:
        """The delivery's timings, from the rig's settings (as ``bot.py`` fills them in)."""
        s = self.settings
        return DeliveryTimings(s.token_margin, s.status_message_max_age, s.edit_interval, s.gen_poll_timeout)

    def placement(self, errors: DiscordErrors | None = None) -> Placement:
        """A placement of its own (drawing jobs as the reporter does)."""
        drawing = Drawing(
            bookkeeping=self.store, clock=SystemClock(), position=lambda _: 1, poll_timeout=900.0
        )
        return Placement(
            self.client, timings=self.timings(), clock=SystemClock(), drawing=drawing, errors=errors
        )

    def bot_posts(self) -> list[FakeMessage]:
        return [
            m
            for m in self.fake.messages_in(self.channel)
            if m.interaction is None and m.author.id == self.fake.bot_user.id
        ]

    def pings(self) -> list[FakeMessage]:
        return [m for m in self.fake.messages.values() if m.pinged_user_ids]


def title(message: FakeMessage) -> str:
    return str(message.embeds[0].get("title") or "") if message.embeds else ""


def footer(message: FakeMessage) -> str:
    return str((message.embeds[0].get("footer") or {}).get("text") or "") if message.embeds else ""


def status(message: FakeMessage) -> str:
    for embed in message.embeds:
        for f in embed.get("fields", []):
            if f.get("name") == "Status":
                return str(f.get("value"))
    return ""


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    f = FakeDiscord(token_ttl=TOKEN_TTL)
    await f.start()
    monkeypatch.setattr(discord.http.Route, "BASE", f.api_base)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(f.gateway_url))
    try:
        yield f
    finally:
        await f.stop()


@pytest.fixture
async def rig(fake: FakeDiscord, tmp_path: Path) -> AsyncIterator[Rig]:
    guild = fake.add_guild("Test Guild", premium_tier=2)
    channel = fake.add_channel(guild, "general")
    member = fake.add_member(guild, "alice")
    settings = Settings(
        discord_token=Secret(fake.bot_token),
        gen_api_base_url="http://127.0.0.1:9",
        gen_api_key=Secret("key"),
        edit_interval=0.05,
        token_margin=MARGIN,
    )
    client = Client()
    store = await Store.open(tmp_path / "framecast.sqlite3")
    s = settings
    timings = DeliveryTimings(s.token_margin, s.status_message_max_age, s.edit_interval, s.gen_poll_timeout)
    reporter = DiscordReporter(
        client, bookkeeping=store, timings=timings, clock=SystemClock(), position=lambda _: 1
    )
    runner = asyncio.create_task(client.start(fake.bot_token))
    try:
        await fake.wait_ready(timeout=10)
        await asyncio.wait_for(client.wait_until_ready(), 10)
        yield Rig(fake, guild, channel, member, client, store, settings, reporter)
    finally:
        await reporter.close()
        await client.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(runner, 10)
        await store.close()


# -- placement ----------------------------------------------------------------------------------


async def test_a_job_is_drawn_on_its_interaction_and_learns_the_message_id(rig: Rig) -> None:
    job, it = await rig.job()
    await rig.reporter.job_changed(job, urgent=True)
    msg = await it.wait_original(lambda m: f"#{job.id}" in title(m))
    assert "Queued" in status(msg) or "queue" in status(msg).lower()
    stored = await rig.stored(job, lambda j: j.discord.get("message_id") != "@original")
    assert stored.discord["message_id"] == msg.id
    assert rig.bot_posts() == []


async def test_a_token_about_to_expire_moves_the_job_and_points_the_old_message_at_it(rig: Rig) -> None:
    job, it = await rig.job(age=TOKEN_TTL - MARGIN / 2)  # inside the margin: must move now
    await rig.reporter.job_changed(job, urgent=True)
    [moved] = await rig.fake.wait_for(
        lambda: [m for m in rig.bot_posts() if f"#{job.id}" in title(m)] or None
    )
    stored = await rig.stored(job, lambda j: bool(j.discord.get("channel_message_id")))
    assert stored.discord["channel_message_id"] == moved.id
    old = await it.wait_original(lambda m: str(moved.id) in footer(m))  # "moved to <jump link>"
    assert old.components == []  # no buttons on the old message


@pytest.mark.parametrize(("status_code", "code"), [(404, 10015), (401, 50027)])
async def test_a_dead_token_answer_moves_the_job_at_once(rig: Rig, status_code: int, code: int) -> None:
    job, it = await rig.job()
    rig.fake.fail_next("/webhooks/", status=status_code, code=code)
    await rig.reporter.job_changed(job, urgent=True)
    await rig.fake.wait_for(lambda: [m for m in rig.bot_posts() if f"#{job.id}" in title(m)] or None)
    stored = await rig.stored(job, lambda j: bool(j.discord.get("channel_message_id")))
    assert stored.discord["token_dead"] is True


async def test_a_refused_edit_of_a_channel_message_gets_a_fresh_one(rig: Rig) -> None:
    job, _ = await rig.job(age=TOKEN_TTL - MARGIN / 2)
    await rig.reporter.job_changed(job, urgent=True)
    first = (await rig.stored(job, lambda j: bool(j.discord.get("channel_message_id")))).discord[
        "channel_message_id"
    ]
    rig.fake.fail_next("PATCH /api/v10/channels", status=400, code=30046)
    job = await rig.advance(job, JobState.SUBMITTING)  # a change worth drawing
    await rig.reporter.job_changed(job, urgent=True)
    second = (await rig.stored(job, lambda j: j.discord.get("channel_message_id") != first)).discord[
        "channel_message_id"
    ]
    assert second != first
    # No further attempt on the refused message (no pointer to the new one either).
    assert rig.fake.messages[first].edit_count == 0


# -- Discord's error codes ----------------------------------------------------------------------


async def refusal(rig: Rig, placement: Placement, target: Target, status_code: int, code: int) -> Exception:
    route = "/webhooks/" if target.via_token else "PATCH /api/v10/channels"
    rig.fake.fail_next(route, status=status_code, code=code)
    with pytest.raises(Exception) as caught:
        await placement.edit(target, content="x", embed=discord.Embed(title="x"), view=None)
    return caught.value


async def test_discord_error_codes_map_to_what_the_delivery_does_next(rig: Rig) -> None:
    placement = rig.placement()
    job, it = await rig.job()
    token = Target(
        True, "@original", job.channel_id, int(job.discord["application_id"]), job.discord["token"]
    )
    posted = await rig.client.get_partial_messageable(rig.channel.id).send("a job message")
    channel = Target(False, posted.id, rig.channel.id)

    assert isinstance(await refusal(rig, placement, token, 401, 50027), TokenDead)
    assert isinstance(await refusal(rig, placement, token, 404, 10015), TokenDead)
    assert isinstance(await refusal(rig, placement, channel, 400, 30046), MessageUnusable)
    assert isinstance(await refusal(rig, placement, channel, 404, 10008), MessageUnusable)
    # The same codes on the other kind of message mean nothing special.
    assert type(await refusal(rig, placement, channel, 404, 10015)) is discord.NotFound
    forbidden = await refusal(rig, placement, channel, 403, 50013)
    assert isinstance(forbidden, discord.Forbidden)
    # A channel message whose channel was deleted, or hidden from the bot: no message can go there.
    assert isinstance(await refusal(rig, placement, channel, 404, 10003), NowhereToPost)
    assert isinstance(await refusal(rig, placement, channel, 403, 50001), NowhereToPost)
    assert type(await refusal(rig, placement, token, 404, 10003)) is discord.NotFound
    # A closed thread's messages cannot be edited, through the token or not: a fresh one would
    # reopen it (its end does; its progress waits).
    assert isinstance(await refusal(rig, placement, channel, 400, 50083), ThreadClosed)
    assert isinstance(await refusal(rig, placement, token, 400, 50083), ThreadClosed)

    rig.guild.upload_limit = 2000  # a real 413 from the fake's size check
    with pytest.raises(TooLarge):
        await placement.edit(
            channel,
            content=None,
            embed=discord.Embed(title="x"),
            view=None,
            files=[discord.File(io.BytesIO(b"x" * 5000), filename="framecast-1.mp4")],
        )
    assert rig.fake.rejected(40005)


async def test_retry_decisions_on_real_refusals(rig: Rig) -> None:
    placement = rig.placement()
    posted = await rig.client.get_partial_messageable(rig.channel.id).send("a job message")
    channel = Target(False, posted.id, rig.channel.id)
    unavailable = await refusal(rig, placement, channel, 503, 0)
    waits = [retry_delay(unavailable, n) for n in range(1, ATTEMPTS + 1)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0] + [60.0] * (ATTEMPTS - 7) + [None]
    assert retry_delay(await refusal(rig, placement, channel, 403, 50013), 1) is None
    assert retry_delay(discord.RateLimited(7.5), 1) == 7.5
    # An odd wait is not slept as said: hours are capped, nonsense falls back to the backoff.
    assert retry_delay(discord.RateLimited(86_400.0), 1) == 300.0
    assert retry_delay(discord.RateLimited(float("nan")), 3) == 4.0
    assert retry_delay(discord.RateLimited(-5.0), 2) == 2.0
    # A 429 discord.py raises (no Via header): Discord's Retry-After, not a failure.
    rig.fake.rate_limit_next("PATCH /api/v10/channels", retry_after=2.5, via=False)
    with pytest.raises(discord.HTTPException) as limited:
        await placement.edit(channel, content="x", embed=discord.Embed(title="x"), view=None)
    assert limited.value.status == 429
    assert retry_delay(limited.value, 1) == 3.0
    assert retry_delay(aiohttp.ServerDisconnectedError(), 2) == 2.0
    assert retry_delay(TimeoutError(), 1) == 1.0
    assert retry_delay(TooLarge("40005"), 1) is None
    assert retry_delay(RuntimeError("no message could be updated"), 1) is None


# -- delivery, ping, limits, lookup -------------------------------------------------------------


async def test_a_file_is_delivered_on_the_interaction_with_its_note_and_no_ping(rig: Rig) -> None:
    job, it = await rig.job()
    await rig.reporter.job_changed(job, urgent=True)
    job = await rig.advance(job, JobState.SUBMITTING, JobState.RUNNING, JobState.DELIVERING)
    name = result_filename(job.id, "mp4")
    result = ResultFile(b"\x00" * 1000, name, Note.REENCODED)
    assert await asyncio.wait_for(rig.reporter.deliver(job, result), 10) == Delivered()
    msg = it.original
    assert msg is not None and [a.filename for a in msg.attachments] == [name]
    assert "re-encoded" in footer(msg) and status(msg).startswith("✅")
    assert rig.pings() == [] and rig.bot_posts() == []
    # As after a crash: the job as stored, once the reporter has saved the message id in the
    # background (the worker's own copy may be gone by now; read earlier, this flaked).
    job = await rig.stored(job, lambda j: isinstance(j.discord.get("message_id"), int))
    assert await rig.reporter.was_delivered(job)
    current = await rig.reporter.job_message(job)
    assert current is not None and [a.filename for a in result_attachments(current, job.id)] == [name]


async def test_a_result_on_a_channel_message_pings_the_requester_once(rig: Rig) -> None:
    job, _ = await rig.job(age=TOKEN_TTL - MARGIN / 2)
    await rig.reporter.job_changed(job, urgent=True)
    await rig.stored(job, lambda j: bool(j.discord.get("channel_message_id")))
    job = await rig.advance(job, JobState.SUBMITTING, JobState.RUNNING, JobState.DELIVERING)
    assert not await rig.reporter.was_delivered(job)
    link = ResultLink("https://files.example/r/1.mp4", Note.TOO_LARGE)
    assert await asyncio.wait_for(rig.reporter.deliver(job, link), 10) == Delivered()
    [ping] = await rig.fake.wait_for(lambda: rig.pings() or None)
    assert ping.pinged_user_ids == {rig.member.id}
    assert (await rig.stored(job, lambda j: bool(j.discord.get("pinged")))).discord["pinged"] is True
    assert await rig.reporter.was_delivered(job)  # the link is on the message
    await rig.reporter.job_changed(await rig.store.transition(job.id, JobState.DELIVERED), urgent=True)
    await asyncio.sleep(0.2)
    assert len(rig.pings()) == 1


async def test_a_delivery_answers_interrupted_on_discord_trouble_and_too_large_on_a_413(rig: Rig) -> None:
    rig.guild.upload_limit = 2000
    job, _ = await rig.job(age=TOKEN_TTL - MARGIN / 2)  # on a channel message: the bot token's requests
    await rig.reporter.job_changed(job, urgent=True)
    await rig.stored(job, lambda j: bool(j.discord.get("channel_message_id")))
    job = await rig.advance(job, JobState.SUBMITTING, JobState.RUNNING, JobState.DELIVERING)
    name = result_filename(job.id, "mp4")
    rig.fake.fail_next("PATCH /api/v10/channels", status=503)  # not retried by discord.py itself
    small = ResultFile(b"\x00" * 1000, name)
    assert await asyncio.wait_for(rig.reporter.deliver(job, small), 10) == Interrupted(1.0)
    large = ResultFile(b"\x00" * 5000, name)
    assert await asyncio.wait_for(rig.reporter.deliver(job, large), 10) == UploadTooLarge(5000)
    assert not await rig.reporter.was_delivered(job)  # neither attempt put the file there
    assert await asyncio.wait_for(rig.reporter.deliver(job, small), 10) == Delivered()
    assert await rig.reporter.was_delivered(job)


async def test_upload_limits_follow_the_destination_and_the_last_refusal(rig: Rig) -> None:
    job, _ = await rig.job(limit=2 * MiB)
    assert await rig.reporter.upload_limit(job) == 2 * MiB - UPLOAD_SLACK
    assert await rig.reporter.upload_limit(job, refused=1_500_000) == 750_000
    moved, _ = await rig.job(age=TOKEN_TTL - MARGIN / 2)  # too close to expiry: the guild's limit
    assert await rig.reporter.upload_limit(moved) == 50 * MiB - UPLOAD_SLACK  # boost tier 2
    assert (
        await rig.reporter.upload_limit(moved, refused=50 * MiB)
        == limit_below(50 * MiB)
        == 25 * MiB - 64 * 1024
    )


# -- after a restart: the runner looks, the reporter answers --------------------------------------


async def restored_delivering_job(rig: Rig, *, with_file: bool) -> tuple[Job, discord.Message]:
    """A job that had moved to a channel message and was being delivered when the bot died."""
    job, _ = await rig.job()
    job = await rig.advance(job, JobState.SUBMITTING, JobState.RUNNING, JobState.DELIVERING)
    channel = rig.client.get_partial_messageable(rig.channel.id)
    files = (
        [discord.File(io.BytesIO(b"\x00" * 100), filename=result_filename(job.id, "mp4"))]
        if with_file
        else []
    )
    posted = await channel.send(embed=discord.Embed(title=f"Video · job #{job.id}"), files=files)
    job = await rig.store.patch_discord(job.id, {"channel_message_id": posted.id, "token_dead": True})
    return job, posted


async def test_a_restored_job_whose_result_landed_is_left_alone_and_its_requester_pinged(rig: Rig) -> None:
    job, posted = await restored_delivering_job(rig, with_file=True)
    rig.reporter.add_note(job, Note.RESUMED)
    await rig.reporter.job_changed(job, urgent=True)
    await asyncio.sleep(0.3)
    assert rig.fake.messages[posted.id].edit_count == 0  # nothing drawn before the runner looked
    assert await rig.reporter.was_delivered(job)
    assert await rig.reporter.was_delivered(job)  # a pure query: asking again changes nothing
    # The runner records what it found; the chat side finishes the message off (the ping).
    await rig.reporter.job_changed(await rig.store.transition(job.id, JobState.DELIVERED))
    [ping] = await rig.fake.wait_for(lambda: rig.pings() or None)
    assert ping.pinged_user_ids == {rig.member.id}
    await asyncio.sleep(0.3)
    assert rig.fake.messages[posted.id].edit_count == 0 and len(rig.pings()) == 1


async def test_a_restored_job_without_its_result_is_drawn_once_the_runner_looked(rig: Rig) -> None:
    job, posted = await restored_delivering_job(rig, with_file=False)
    rig.reporter.add_note(job, Note.RESUMED)
    await rig.reporter.job_changed(job, urgent=True)
    await asyncio.sleep(0.3)
    assert rig.fake.messages[posted.id].edit_count == 0
    assert not await rig.reporter.was_delivered(job)
    await asyncio.sleep(0.3)
    assert rig.fake.messages[posted.id].edit_count == 0  # the look alone changes nothing
    await rig.reporter.delivery_pending(job)  # the runner: not there, delivering now
    msg = await rig.fake.wait_for(
        lambda: rig.fake.messages[posted.id].edit_count and rig.fake.messages[posted.id]
    )
    assert "restarted" in footer(msg)
    assert rig.pings() == []


# -- estimates between polls ------------------------------------------------------------------------


class Planned:
    """The planner's side of ``Estimates``: whatever the test says it expects of each job."""

    def __init__(self) -> None:
        self.by_job: dict[int, Estimate] = {}
        self.asked = 0
        self._asked = asyncio.Event()

    def estimate(self, job: Job) -> Estimate:
        self.asked += 1
        self._asked.set()
        return self.by_job.get(job.id, Estimate())

    async def asked_again(self, times: int) -> None:
        """Until the reporter has asked `times` more times (each draw asks once)."""
        target = self.asked + times
        async with asyncio.timeout(10):
            while self.asked < target:
                self._asked.clear()
                await self._asked.wait()


@contextlib.asynccontextmanager
async def estimating(rig: Rig, planned: Planned) -> AsyncIterator[DiscordReporter]:
    """A reporter (with its own workers) that shows `planned`'s estimates."""
    reporter = DiscordReporter(
        rig.client,
        bookkeeping=rig.store,
        timings=rig.timings(),
        clock=SystemClock(),
        position=lambda _: 2,
        estimates=planned,
    )
    try:
        yield reporter
    finally:
        await reporter.close()


def shown_statuses(message: FakeMessage) -> list[str]:
    """The status of every version of the message, oldest first."""
    out = []
    for entry in message.history:
        for embed in (entry["payload"] or {}).get("embeds") or []:
            out += [str(f["value"]) for f in embed.get("fields", []) if f.get("name") == "Status"]
    return out


def percents(statuses: list[str]) -> list[int]:
    return [int(m) for text in statuses for m in re.findall(r"(\d+)%", text)]


async def test_the_estimate_moves_on_the_message_between_polls_and_never_goes_back(rig: Rig) -> None:
    planned = Planned()
    job, it = await rig.job()
    job = await rig.advance(job, JobState.SUBMITTING, JobState.RUNNING)
    planned.by_job[job.id] = Estimate(progress=0.22, remaining=130)
    async with estimating(rig, planned) as reporter:
        await reporter.job_changed(job, urgent=True)
        await it.wait_original(lambda m: status(m).endswith("≈ 20% · about 2 minutes left"))
        # No new record from the runner (no poll): the worker draws the planner's newer estimate.
        planned.by_job[job.id] = Estimate(progress=0.47, remaining=65)
        msg = await it.wait_original(lambda m: status(m).endswith("≈ 45% · about 1 minute left"))
        # The service then reports less than was shown: the message keeps 45 %.
        planned.by_job[job.id] = Estimate(progress=0.31, remaining=80, measured=True)
        await planned.asked_again(3)  # drawn a few times meanwhile
        assert status(msg).endswith("≈ 45% · about 1 minute left")
        planned.by_job[job.id] = Estimate(progress=0.52, remaining=40, measured=True)
        await it.wait_original(lambda m: status(m).endswith(" 52% · less than a minute left"))
        assert "≈" not in status(msg)
        stored = await rig.stored(job, lambda j: j.discord.get("shown_percent") == 52)
    assert stored.discord["shown_percent"] == 52  # kept for a restart
    shown = percents(shown_statuses(msg))
    assert shown == sorted(shown) and shown[-1] == 52
    # Only changes of the visible text were sent: no two versions in a row read the same.
    statuses = shown_statuses(msg)
    assert all(a != b for a, b in itertools.pairwise(statuses)), statuses


async def test_a_restarted_bot_does_not_show_less_than_before(rig: Rig) -> None:
    planned = Planned()
    job, it = await rig.job()
    job = await rig.advance(job, JobState.SUBMITTING, JobState.RUNNING)
    planned.by_job[job.id] = Estimate(progress=0.64, remaining=60)
    async with estimating(rig, planned) as reporter:
        await reporter.job_changed(job, urgent=True)
        await it.wait_original(lambda m: "≈ 60%" in status(m))
        await rig.stored(job, lambda j: j.discord.get("shown_percent") == 60)
    # A new process: a fresh reporter, the job as stored, and a planner that knows less.
    restored = await rig.store.get(job.id)
    assert restored is not None
    planned.by_job[job.id] = Estimate(progress=0.1, remaining=200)
    async with estimating(rig, planned) as reporter:
        await reporter.job_changed(restored, urgent=True)
        msg = await it.wait_original(lambda m: "about 3 minutes left" in status(m))
        assert "≈ 60%" in status(msg)


async def test_a_queued_job_shows_when_it_is_expected_to_start(rig: Rig) -> None:
    planned = Planned()
    job, it = await rig.job()
    planned.by_job[job.id] = Estimate(starts_in=250)
    async with estimating(rig, planned) as reporter:
        await reporter.job_changed(job, urgent=True)
        await it.wait_original(
            lambda m: status(m) == "⏳ Queued: #2 in this server's queue · starts in about 4 minutes"
        )
        planned.by_job[job.id] = Estimate(starts_in=20)
        await it.wait_original(lambda m: status(m).endswith("· starts in less than a minute"))


async def test_a_broken_estimate_does_not_stop_the_message(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def estimate(self, job: Job) -> Estimate:
            raise ZeroDivisionError("a bug in the planner")

    job, it = await rig.job()
    job = await rig.advance(job, JobState.SUBMITTING, JobState.RUNNING)
    reporter = DiscordReporter(
        rig.client,
        bookkeeping=rig.store,
        timings=rig.timings(),
        clock=SystemClock(),
        position=lambda _: 1,
        estimates=Broken(),
    )
    try:
        await reporter.job_changed(job, urgent=True)
        await it.wait_original(lambda m: "elapsed" in status(m))
    finally:
        await reporter.close()
    assert "no estimate" in caplog.text


# -- metrics ------------------------------------------------------------------------------------------


def discord_errors(metrics: Metrics, status: str, code: str) -> float:
    value = metrics.registry.get_sample_value(
        "framecast_discord_errors_total", {"status": status, "code": code}
    )
    return value or 0.0


async def test_each_failed_request_to_discord_is_counted_once_by_status_and_code(rig: Rig) -> None:
    metrics = Metrics(process=False)
    reporter = DiscordReporter(
        rig.client,
        bookkeeping=rig.store,
        timings=rig.timings(),
        clock=SystemClock(),
        position=lambda _: 1,
        metrics=metrics,
    )
    try:
        job, _ = await rig.job()
        rig.fake.fail_next("/webhooks/", status=401, code=50027)
        await reporter.job_changed(job, urgent=True)
        await rig.stored(job, lambda j: bool(j.discord.get("channel_message_id")))
        # The refused edit is counted where it was made, not again by the code that moved the job.
        assert discord_errors(metrics, "401", "50027") == 1

        rig.fake.fail_next("PATCH /api/v10/channels", status=403, code=50013)
        job = await rig.advance(job, JobState.SUBMITTING)
        await reporter.job_changed(job, urgent=True)
        async with asyncio.timeout(10):
            while True:
                if discord_errors(metrics, "403", "50013"):
                    break
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # the worker logged it and moves on: nothing counts it again
        assert discord_errors(metrics, "403", "50013") == 1
    finally:
        await reporter.close()


async def test_a_refused_upload_and_a_failed_look_are_counted(rig: Rig) -> None:
    metrics = Metrics(process=False)
    errors = DiscordErrors(metrics)
    placement = rig.placement(errors)
    posted = await rig.client.get_partial_messageable(rig.channel.id).send("a job message")
    rig.guild.upload_limit = 2000
    with pytest.raises(TooLarge):
        await placement.edit(
            Target(False, posted.id, rig.channel.id),
            content=None,
            embed=discord.Embed(title="x"),
            view=None,
            files=[discord.File(io.BytesIO(b"x" * 5000), filename="framecast-1.mp4")],
        )
    assert discord_errors(metrics, "413", "40005") == 1
    # A look for a message that is gone (a restart after a member deleted it) is a refusal too.
    job, _ = await rig.job()
    messages = JobMessages(rig.client, clock=SystemClock(), token_margin=MARGIN, errors=errors)
    record = DiscordRecord.from_dict(job.discord)
    assert await messages.fetch(job, record, posted.id + 12345, via_token=False) is None
    assert discord_errors(metrics, "404", "10008") == 1
    errors.record(RuntimeError("not a request"))  # only failed requests count
    errors.record(aiohttp.ServerDisconnectedError())
    assert discord_errors(metrics, "error", "none") == 1


# -- Delete: removed where it is; "gone" only on Unknown Message ---------------------------------


async def test_removal_says_gone_only_on_unknown_message_never_on_missing_access_or_unknown_channel(
    rig: Rig,
) -> None:
    job, _ = await rig.job()
    job = await rig.advance(
        job, JobState.SUBMITTING, JobState.RUNNING, JobState.DELIVERING, JobState.DELIVERED
    )
    posted = await rig.client.get_partial_messageable(rig.channel.id).send(content="the result")
    job = await rig.store.patch_discord(
        job.id, {"channel_message_id": posted.id, "token_dead": True, "message_id": posted.id}
    )
    # The bot lost sight of the channel (403 Missing Access): the result may well still show.
    await rig.fake.set_bot_permissions(rig.channel, 0)
    with pytest.raises(RemovalFailed) as failed:
        await rig.reporter.remove_job_message(job)
    assert failed.value.problem is RemovalProblem.UNREACHABLE
    assert not rig.fake.messages[posted.id].deleted
    # Back in sight: deleted; and a message already gone (10008) counts as removed.
    await rig.fake.set_bot_permissions(rig.channel, TEXT_PERMISSIONS)
    assert await rig.reporter.remove_job_message(job) is None
    assert rig.fake.messages[posted.id].deleted
    assert await rig.reporter.remove_job_message(job) is None


async def test_a_personal_result_in_a_group_dm_with_no_live_token_is_reported_unreachable(rig: Rig) -> None:
    """The bot's token reaches no group DM (403 there; 404 10003 for a channel that does not exist):
    neither is "gone". Only a live token removes it."""
    dora = rig.fake.add_user("dora")
    for channel_id in (rig.fake.group_dm().id, 10**18):
        job = await rig.store.add(
            NewJob(
                JobKind.VIDEO,
                dora.id,
                channel_id,
                dora.id,
                "en-US",
                dict(VIDEO),
                discord={"context": "group_dm"},
            ),
            member_limit=None,
            guild_cap=None,
        )
        job = await rig.store.patch_discord(job.id, {"message_id": 123, "token_dead": True})
        with pytest.raises(RemovalFailed) as failed:
            await rig.reporter.remove_job_message(job)
        assert failed.value.problem is RemovalProblem.UNREACHABLE
    tried = [r.path for r in rig.fake.requests_to("DELETE", "/channels/")]
    assert tried == []  # the bot's token was not even tried where only a token reaches


async def test_delete_removes_the_older_channel_messages_a_move_left_behind_too(rig: Rig) -> None:
    job, it = await rig.job(age=TOKEN_TTL - MARGIN / 2)  # moves to a channel message at once
    await rig.reporter.job_changed(job, urgent=True)
    first = (await rig.stored(job, lambda j: bool(j.discord.get("channel_message_id")))).discord[
        "channel_message_id"
    ]
    rig.fake.fail_next("PATCH /api/v10/channels", status=400, code=30046)  # then a fresh one
    job = await rig.advance(job, JobState.SUBMITTING)
    await rig.reporter.job_changed(job, urgent=True)
    stored = await rig.stored(job, lambda j: j.discord.get("channel_message_id") != first)
    second = stored.discord["channel_message_id"]
    assert stored.discord["pointers"] == [first]  # remembered, though it was never edited again
    it.expire()
    assert await rig.reporter.remove_job_message(stored) is None
    assert rig.fake.messages[second].deleted and rig.fake.messages[first].deleted
    assert it.original is not None and it.original.deleted  # the interaction's message, through the channel


# -- the admins' notices --------------------------------------------------------------------------------


async def test_a_refused_key_is_told_to_its_admin_by_dm_else_in_the_system_channel(rig: Rig) -> None:
    """The core says whom (``RefusedKeyNotice``); the chat side tells them, in the server's language,
    never with a ping: the admin who set the key by DM, else the server's system channel (here one
    the cache does not hold, as for another shard's server). A refused DM is counted once."""
    metrics = Metrics(process=False)
    reporter = DiscordReporter(
        rig.client,
        bookkeeping=rig.store,
        timings=rig.timings(),
        clock=SystemClock(),
        position=lambda _: 1,
        metrics=metrics,
    )
    notices = rig.fake.add_channel(rig.guild, "notices", system=True)
    rig.guild.preferred_locale = "de"
    updated = asyncio.ensure_future(rig.client.wait_for("guild_update", timeout=10))
    await rig.fake.update_guild(rig.guild, name="Test <@1> Guild")
    await updated  # the client knows the system channel's id (not the channel) and the language
    try:
        await reporter.key_refused(RefusedKeyNotice(rig.guild.id, "wxyz", set_by=rig.member.id))
        [dm] = rig.fake.messages_in(rig.fake.dm_channel(rig.member))
        assert "…wxyz" in dm.content and "Generierungsdienst" in dm.content
        assert "Test \\<\\@1> Guild" in dm.content and not dm.pinged_user_ids and not dm.pinged_everyone
        assert not rig.fake.messages_in(notices)

        rig.member.user.accepts_dms = False
        await reporter.key_refused(RefusedKeyNotice(rig.guild.id, "abcd", set_by=rig.member.id))
        [posted] = rig.fake.messages_in(notices)
        assert "…abcd" in posted.content and not posted.pinged_user_ids and not posted.pinged_everyone
        assert discord_errors(metrics, "403", "50007") == 1  # the refused DM
        # No admin to ask (a key set before the setter was recorded): the system channel directly.
        await reporter.key_refused(RefusedKeyNotice(rig.guild.id, "efgh", set_by=None))
        assert "…efgh" in rig.fake.messages_in(notices)[-1].content
        assert len(rig.fake.messages_in(rig.fake.dm_channel(rig.member))) == 1
        assert not [m for m in rig.fake.messages_in(rig.channel) if "…" in m.content]  # no member's channel
    finally:
        await reporter.close()
