"""``/queue`` end to end: with many jobs from many members, a bounded, localised list that pings
nobody; with private and age-restricted channels, others' prompts only where the member can read them."""

from __future__ import annotations

import re
from typing import Any

from tests.e2e.commands import FOREVER, settings
from tests.e2e.harness import StartWorld, World, answer_to, button_ids, status_of, wait_recorded
from tests.fakes.discord_api import VIEW_CHANNEL, FakeChannel, FakeMember, FakeOverwrite, FakeRole
from tests.fakes.gen_service import TaskPlan


def staff_channel(world: World, where: dict[str, Any]) -> FakeRole:
    """A private #staff channel (``where["staff"]``): @everyone may not see it, the staff role
    (returned) may."""
    guild, fake = world.guild, world.discord
    staff = fake.add_role(guild, "staff")
    overwrites = [
        FakeOverwrite.of(guild.everyone, deny=VIEW_CHANNEL),
        FakeOverwrite.of(staff, allow=VIEW_CHANNEL),
    ]
    where["staff"] = fake.add_channel(guild, "staff", overwrites=overwrites)
    return staff


async def test_queue_with_many_jobs_from_many_members(start: StartWorld) -> None:
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


async def test_queue_shows_other_members_prompts_only_from_channels_they_can_read(start: StartWorld) -> None:
    """A private staff channel (@everyone may not see it, the staff role may) and an age-restricted
    channel: each member sees every job's place, and another member's prompt only where Discord
    would show it to them; the age-restricted prompt only from an age-restricted channel."""
    where: dict[str, Any] = {}

    def channels(world: World) -> None:
        guild, fake = world.guild, world.discord
        staff = staff_channel(world, where)
        where["adult"] = fake.add_channel(guild, "adult", nsfw=True)
        where["boss"] = fake.add_member(guild, "boss", roles=[staff])
        where["deputy"] = fake.add_member(guild, "deputy", roles=[staff])

    world = await start(setup=channels, extra_env={"GEN_MAX_RUNNING": "1"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    fake, guild, general = world.discord, world.guild, world.channel
    alice, carol = world.alice, world.members[0][2]

    async def video(prompt: str, member: FakeMember, channel: FakeChannel) -> None:
        it = await fake.slash(guild, channel, member, "video", {"prompt": prompt})
        await it.wait_response()
        await world.job_id(it)

    async def queue_rows(member: FakeMember, channel: FakeChannel) -> list[str]:
        it = await fake.slash(guild, channel, member, "queue")
        await it.wait_response()
        reply = await it.wait_original(lambda m: bool(m.embeds))
        assert reply.ephemeral and reply.embeds[0]["footer"]["text"] == "Running: 1 · queued: 3"
        return list(reply.embeds[0]["description"].splitlines())

    await video("open prompt", alice, general)
    await video("staff secret plans", where["boss"], where["staff"])
    await video("adult prompt", alice, where["adult"])
    await video("carol's own", carol, general)
    hidden_channel = "(a prompt from a channel you can't see)"
    hidden_age = "(an age-restricted prompt: shown only in age-restricted channels)"

    # Carol has no staff role: the staff prompt is a placeholder, in its place; from #general the
    # age-restricted prompt is one too; her own job shows in full.
    rows = await queue_rows(carol, general)
    assert len(rows) == 4, rows
    assert rows[0].startswith("▶️ Video #") and rows[0].endswith("open prompt")
    assert rows[1].startswith("**1.** ") and rows[1].endswith(hidden_channel)
    assert rows[2].startswith("**2.** ") and rows[2].endswith(hidden_age)
    assert rows[3].startswith("**3.** ") and "carol's own" in rows[3] and rows[3].endswith("← you")
    assert not any("staff secret" in row or "adult prompt" in row for row in rows)
    # From the age-restricted channel, the age-restricted prompt shows; the staff one still does not.
    rows = await queue_rows(carol, where["adult"])
    assert rows[1].endswith(hidden_channel) and rows[2].endswith("adult prompt")
    # Another staff member reads the staff channel: the staff prompt shows (age rule as for anyone).
    rows = await queue_rows(where["deputy"], general)
    assert rows[1].endswith("staff secret plans") and rows[2].endswith(hidden_age)
    rows = await queue_rows(where["deputy"], where["adult"])
    assert rows[1].endswith("staff secret plans") and rows[2].endswith("adult prompt")


async def test_job_shows_a_manager_what_queue_shows_of_a_channel_they_cannot_read(start: StartWorld) -> None:
    """/job follows /queue's rule: a member with Manage Server who cannot read #staff gets no prompt,
    no message link and no file link of a job asked there (nor of an age-restricted one from
    elsewhere); its requester gets everything."""
    where: dict[str, Any] = {}

    def channels(world: World) -> None:
        guild, fake = world.guild, world.discord
        staff = staff_channel(world, where)
        where["adult"] = fake.add_channel(guild, "adult", nsfw=True)
        where["boss"] = fake.add_member(guild, "boss", roles=[staff])

    world = await start(setup=channels)
    fake, guild, general, admin = world.discord, world.guild, world.channel, world.admins[0]

    async def delivered(prompt: str, member: FakeMember, channel: FakeChannel) -> int:
        it = await fake.slash(guild, channel, member, "image", {"prompt": prompt})
        await it.wait_response()
        job_id = await world.job_id(it)
        await world.delivered(it)
        return job_id

    async def job(member: FakeMember, channel: FakeChannel, job_id: int) -> str:
        look = await fake.slash(guild, channel, member, "job", {"id": job_id})
        await look.wait_response()
        shown = await look.wait_original(lambda m: bool(m.embeds) and not m.loading)
        return str(shown.to_payload())

    staff_job = await delivered("staff secret plans", where["boss"], where["staff"])
    adult_job = await delivered("adult prompt", world.alice, where["adult"])

    seen = await job(admin, general, staff_job)
    assert "staff secret" not in seen and "framecast-" not in seen and "/channels/" not in seen, seen
    assert "(a prompt from a channel you can't see)" in seen
    seen = await job(admin, general, adult_job)
    assert "adult prompt" not in seen and "framecast-" not in seen and "/channels/" not in seen, seen
    # From an age-restricted channel the manager may see the age-restricted job, link and file.
    seen = await job(admin, where["adult"], adult_job)
    assert "adult prompt" in seen and "framecast-" in seen
    # The requester sees their own job in full, from anywhere.
    seen = await job(where["boss"], general, staff_job)
    assert "staff secret plans" in seen and "framecast-" in seen


async def test_again_remix_and_retry_of_a_job_from_a_channel_the_clicker_cannot_read_are_refused(
    start: StartWorld,
) -> None:
    """Again and Remix put a delivered job's prompt where the clicker is (a new job's message for
    everyone there, a form), Retry a failed one's. A forged custom id can name a job of #staff
    from #general: to a member who cannot read #staff (a manager included) it is no such job, and
    its prompt shows nowhere; the staff member who asked still can."""
    where: dict[str, Any] = {}

    def channels(world: World) -> None:
        guild, fake = world.guild, world.discord
        staff = staff_channel(world, where)
        where["boss"] = fake.add_member(guild, "boss", roles=[staff])

    world = await start(setup=channels)
    fake, guild, boss = world.discord, world.guild, where["boss"]
    world.service.plans = [("doomed staff", TaskPlan(outcome="failed", error="nope"))]
    secret = await fake.slash(guild, where["staff"], boss, "image", {"prompt": "staff secret plans"})
    await secret.wait_response()
    secret_id = await world.job_id(secret)
    await world.delivered(secret)
    doomed = await fake.slash(guild, where["staff"], boss, "video", {"prompt": "doomed staff memo"})
    await doomed.wait_response()
    doomed_id = await world.job_id(doomed)
    await doomed.wait_original(lambda m: status_of(m).startswith("❌"))

    mine = await world.image("alice's kite")
    result = await world.delivered(mine)
    creates_before = len([r for r in world.service.requests if r.method == "POST"])
    for action, member in (("again", world.alice), ("remix", world.alice), ("retry", world.admins[0])):
        job_id = doomed_id if action == "retry" else secret_id
        click = await fake.click(result, f"framecast:{action}:{job_id}", member, crafted=True)
        # Not a form (Remix's would hold the prompt): the refusal, privately.
        assert await answer_to(world, click) == (f"There is no job #{job_id} in this server.", True), action
    assert len([r for r in world.service.requests if r.method == "POST"]) == creates_before
    shown = [m for m in fake.messages.values() if m.channel_id != where["staff"].id]
    assert not any("staff secret" in m.content or "staff secret" in str(m.embeds) for m in shown)

    # Boss reads #staff: Again there makes his new job.
    delivered = await world.delivered(secret)
    [again_id] = [c for c in button_ids(delivered) if c.startswith("framecast:again:")]
    again = await fake.click(delivered, again_id, boss)
    await again.wait_response()

    def made_again() -> bool:
        return (
            sum(1 for r in world.service.requests if (r.json or {}).get("prompt") == "staff secret plans")
            == 2
        )

    await fake.wait_for(made_again, timeout=15, what="boss's Again")


async def test_job_of_a_hidden_styled_or_failed_job_shows_a_manager_neither_prompt_nor_its_echo(
    start: StartWorld,
) -> None:
    """A hidden job keeps no words of its requester's: a styled one has no "sent to the service"
    field (it was empty, and Discord refused the whole answer), and a failed one no service text,
    which may quote the prompt."""
    where: dict[str, Any] = {}

    def channels(world: World) -> None:
        staff = staff_channel(world, where)
        where["boss"] = world.discord.add_member(world.guild, "boss", roles=[staff])

    world = await start(setup=channels)
    fake, guild, boss, admin = world.discord, world.guild, where["boss"], world.admins[0]
    await settings(world, "styles add", {"name": "noir", "template": "film noir, {prompt}, grain"})
    world.service.plans = [
        ("merger", TaskPlan(outcome="failed", error="the prompt 'secret merger' is banned"))
    ]
    styled = await fake.slash(
        guild, where["staff"], boss, "image", {"prompt": "staff secret", "style": "noir"}
    )
    await styled.wait_response()
    styled_id = await world.job_id(styled)
    await world.delivered(styled)
    failed = await fake.slash(guild, where["staff"], boss, "video", {"prompt": "secret merger"})
    await failed.wait_response()
    failed_id = await world.job_id(failed)
    await failed.wait_original(lambda m: status_of(m).startswith("❌"))

    for job_id in (styled_id, failed_id):
        look = await fake.slash(guild, world.channel, admin, "job", {"id": job_id})
        await look.wait_response()
        shown = await look.wait_original(lambda m: bool(m.embeds) and not m.loading)
        seen = str(shown.to_payload())
        assert not look.errors, look.errors
        assert "secret" not in seen and "(a prompt from a channel you can't see)" in seen, seen


async def test_job_answers_in_the_askers_language_not_the_requesters(world: World) -> None:
    """The job's message speaks its requester's language; /job speaks the asker's, all of it: the
    title, the fields, the status and the failure reason."""
    world.service.plans = [("doomed", TaskPlan(outcome="failed", error="nope"))]
    asked = await world.video("doomed one", member=world.bob, locale="ja")
    job_id = await world.job_id(asked)
    await wait_recorded(world, job_id, "failed")
    look = await world.discord.slash(
        world.guild, world.channel, world.admins[0], "job", {"id": job_id}, locale="de"
    )
    await look.wait_response()
    shown = await look.wait_original(lambda m: bool(m.embeds) and not m.loading)
    [embed] = shown.embeds
    assert embed["title"] == f"Video · Auftrag #{job_id}", embed["title"]
    assert [f["name"] for f in embed["fields"]][0] == "Angefordert von", embed["fields"]
    assert not re.search("[\u3040-\u30ff]", str(embed)), embed  # no kana: nothing Japanese left
