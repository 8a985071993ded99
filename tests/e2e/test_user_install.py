"""User installs (``USER_INSTALL``): /video and /image in DMs and group DMs, end to end.

A person who added the app to their own account asks outside any server: the job joins their own
queue (the operator's limits, quotas and key), shows its progress on the interaction's answer and
delivers the file there. Once the token is spent it moves to the person's DM with the bot; if Discord
refuses that DM too, the result waits in ``/job``. The fake Discord speaks the user-install shapes
(``integration_types``, ``contexts``, ``authorizing_integration_owners``) and refuses what Discord
refuses: channel requests in a group DM, a sixth follow-up, a DM the person does not accept.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import (
    StartWorld,
    World,
    answer_to,
    button_ids,
    footer_of,
    job_rows,
    service_creates,
    status_of,
    task_for,
    wait_log,
    wait_recorded,
    wait_state,
)
from tests.fakes.discord_api import USER_INSTALL_FOLLOWUPS, CommandHidden, FakeInteraction, FakeMessage
from tests.fakes.gen_service import TaskPlan

FOREVER = 10**9
TOKEN_TTL = 900.0
ON = {"USER_INSTALL": "on"}
PERSONAL = ("video", "image", "job")


def synced(world: World, name: str) -> dict[str, Any]:
    """The global command `name` as the bot published it."""
    [cmd] = [c for c in world.discord.commands_for(None) if c["name"] == name]
    return cmd


def channel_requests(world: World, channel_id: int) -> list[Any]:
    """Requests the bot made to a channel with its own token."""
    return world.discord.requests_to(contains=f"/channels/{channel_id}")


def followups_created(it: FakeInteraction) -> list[FakeMessage]:
    """Messages the bot created through the interaction's follow-up endpoint."""
    return [m for m in it.followups if m is not it.original]


async def personal(world: World, channel: Any, user: Any, name: str, **options: Any) -> FakeInteraction:
    """A slash command from `user`'s own install in `channel`, answered (deferred or refused)."""
    it = await world.discord.slash_personal(channel, user, name, options)
    await it.wait_response(timeout=5)
    return it


async def job_answer(world: World, channel: Any, user: Any, job_id: int) -> FakeMessage:
    """`user`'s /job id:`job_id` in `channel`, answered (its private message, once written)."""
    ask = await personal(world, channel, user, "job", id=job_id)
    return await ask.wait_original(lambda m: bool(m.content or m.embeds), timeout=15)


async def handed_over(world: World, job_id: int, timeout: float = 5.0) -> None:
    """Wait until the job is recorded as no longer parked (just after its /job answer is shown), and
    the bot has said so in its log: it deletes its saved copy between the two."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while job_rows(world)[job_id]["discord"].get("parked") is not False:
        if loop.time() > deadline:
            raise TimeoutError(f"job {job_id} is still parked after {timeout:g} s")
        await asyncio.sleep(0.02)
    await wait_log(world, f"job {job_id}: its parked result was handed to its requester", timeout)


def file_downloads(world: World) -> list[Any]:
    """Requests for result files at the fake service."""
    return [r for r in world.service.requests if r.path.startswith("/files/")]


async def refusal_text(it: FakeInteraction) -> str:
    """The private refusal `it` got (a reply, or the follow-up after a deferral)."""
    kind, data = await it.wait_response()
    if kind == 4:
        assert data is not None
        return str(data["content"])
    message = await it.wait_followup(lambda m: bool(m.content), timeout=5)
    return str(message.content)


async def test_off_by_default_commands_stay_with_servers(start_synced: StartWorld) -> None:
    world = await start_synced()
    for name in (*PERSONAL, "settings"):
        cmd = synced(world, name)
        assert cmd["contexts"] == [0], (name, cmd["contexts"])  # servers only, as before
        assert 1 not in (cmd.get("integration_types") or [0])
    dora = world.discord.add_user("dora")
    with pytest.raises(CommandHidden):
        await world.discord.slash_personal(world.discord.dm_channel(dora), dora, "video", {"prompt": "x"})


async def test_switched_off_before_a_new_sync_a_dm_command_is_refused_clearly(
    start_synced: StartWorld,
) -> None:
    # Discord still offers the commands published while it was on; the bot no longer takes them.
    world = await start_synced(extra_env=ON)
    await world.bot.terminate()
    world.env["USER_INSTALL"] = "off"
    await world.restart_bot()
    dora = world.discord.add_user("dora")
    it = await personal(world, world.discord.dm_channel(dora), dora, "video", prompt="a kite")
    assert await refusal_text(it) == "Framecast works in servers, not in direct messages."
    assert job_rows(world) == {} and service_creates(world) == []


async def test_on_video_in_a_dm_is_the_persons_own_job_delivered_on_the_interaction(
    start_synced: StartWorld,
) -> None:
    world = await start_synced(extra_env=ON)
    for name in PERSONAL:
        cmd = synced(world, name)
        assert sorted(cmd["integration_types"]) == [0, 1] and sorted(cmd["contexts"]) == [0, 1, 2]
    for name in ("settings", "queue"):
        cmd = synced(world, name)
        assert cmd["integration_types"] == [0] and cmd["contexts"] == [0], name
    dora = world.discord.add_user("dora")
    dm = world.discord.dm_channel(dora)
    it = await personal(world, dm, dora, "video", prompt="a paper boat on a puddle")
    job_id = await world.job_id(it)
    message = await world.delivered(it)
    assert it.original is not None and message.id == it.original.id
    assert status_of(message).startswith("✅")
    row = job_rows(world)[job_id]
    # Her own queue: named by her own id, marked as asked in a DM.
    assert row["guild_id"] == dora.id and row["user_id"] == dora.id
    assert row["discord"]["context"] == "dm"
    assert world.discord.rejected() == [] and followups_created(it) == []


async def test_group_dm_job_uses_only_the_interaction(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env=ON)
    dora = world.discord.add_user("dora")
    group = world.discord.group_dm()
    it = await personal(world, group, dora, "image", prompt="a lantern festival")
    job_id = await world.job_id(it)
    message = await world.delivered(it)
    assert it.original is not None and message.id == it.original.id
    assert len(world.files_for(job_id)) == 1
    assert job_rows(world)[job_id]["discord"]["context"] == "group_dm"
    # The bot is not in the group DM: it never asked Discord anything about that channel.
    assert channel_requests(world, group.id) == []
    assert world.discord.rejected() == [] and followups_created(it) == []


async def test_in_a_group_dm_another_person_may_take_a_result_again_as_their_own_job(
    start_synced: StartWorld,
) -> None:
    """Again and Remix are for whoever sees a delivered result: in a group DM, someone else's
    (they were told "You have no job #1"). Again makes a job in their own queue; Delete stays the
    requester's."""
    world = await start_synced(extra_env=ON)
    dora, eve = world.discord.add_user("dora"), world.discord.add_user("eve")
    group = world.discord.group_dm()
    it = await personal(world, group, dora, "image", prompt="dora's lantern")
    job_id = await world.job_id(it)
    message = await world.delivered(it)
    await wait_state(world, job_id, "delivered")
    buttons = {c.split(":")[1]: c for c in button_ids(message)}
    remix = await world.discord.click(message, buttons["remix"], eve)
    await remix.wait_response()
    assert remix.modal is not None, "the Remix form opened"
    again = await world.discord.click(message, buttons["again"], eve)
    await again.wait_response()
    mine = await world.job_id(again)
    await world.delivered(again)
    assert (job_rows(world)[mine]["user_id"], job_rows(world)[mine]["guild_id"]) == (eve.id, eve.id)
    delete = await world.discord.click(message, buttons["delete"], eve)
    assert (await answer_to(world, delete))[1], "refused privately"
    assert not message.deleted and job_rows(world)[job_id]["discord"].get("deleted_by") is None


async def test_a_server_without_the_bot_is_the_persons_own_queue_too(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env=ON)
    dora = world.discord.add_user("dora")
    guild, channel = world.discord.foreign_guild("friends", dora)
    it = await personal(world, channel, dora, "image", prompt="a map of the server")
    job_id = await world.job_id(it)
    message = await world.delivered(it)
    assert it.original is not None and message.id == it.original.id
    row = job_rows(world)[job_id]
    assert row["guild_id"] == dora.id and row["discord"]["context"] == "user_guild"
    assert (
        channel_requests(world, channel.id) == [] and world.discord.requests_to(contains=str(guild.id)) == []
    )
    assert world.discord.rejected() == [] and followups_created(it) == []


async def test_each_person_has_the_operators_member_limit_and_quota(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env={**ON, "MEMBER_JOB_LIMIT": "1", "DAILY_VIDEO_QUOTA": "2"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    dora, eve = world.discord.add_user("dora"), world.discord.add_user("eve")
    first = await personal(world, world.discord.dm_channel(dora), dora, "video", prompt="first")
    first_id = await world.job_id(first)
    # A second job while the first runs: over her limit of 1.
    second = await personal(world, world.discord.dm_channel(dora), dora, "video", prompt="second")
    assert "1" in await refusal_text(second)
    # Another person's queue is their own.
    other = await personal(world, world.discord.group_dm(), eve, "video", prompt="eve's")
    await world.job_id(other)
    task_for(world, "first").plan = TaskPlan(polls=0)
    await wait_recorded(world, first_id, "delivered")
    world.service.default_plan = TaskPlan(polls=0)
    third = await personal(world, world.discord.dm_channel(dora), dora, "video", prompt="third")
    await wait_recorded(world, await world.job_id(third), "delivered")
    # Two videos today: the operator's daily quota of 2 is spent.
    fourth = await personal(world, world.discord.dm_channel(dora), dora, "video", prompt="fourth")
    text = await refusal_text(fourth)
    assert "2" in text and "<t:" in text
    assert [c.json["prompt"] for c in service_creates(world)] == ["first", "eve's", "third"]


async def test_a_job_outliving_its_token_moves_to_the_persons_dm(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env={**ON, "TOKEN_MARGIN": "4"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    dora = world.discord.add_user("dora")
    group = world.discord.group_dm()
    # 6 s of token left: the job leaves it after 2 s, long before it is done.
    it = await world.discord.slash_personal(
        group, dora, "video", {"prompt": "a slow sunrise"}, age=TOKEN_TTL - 6
    )
    job_id = await world.job_id(it)
    dm = world.discord.dm_channel(dora)
    moved = await world.wait_message(
        lambda m: m.channel_id == dm.id and bool(m.embeds), timeout=10, what="the move to the DM"
    )
    task_for(world, "a slow sunrise").plan = TaskPlan(polls=0)
    delivered = await world.delivered(it)
    assert delivered.id == moved.id and delivered.channel_id == dm.id
    assert job_rows(world)[job_id]["discord"]["dm_channel_id"] == dm.id
    assert channel_requests(world, group.id) == []
    assert followups_created(it) == []


@pytest.mark.parametrize("refusal", ["send", "open"])
async def test_dm_refused_the_result_waits_in_job(start_synced: StartWorld, refusal: str) -> None:
    world = await start_synced(extra_env={**ON, "TOKEN_MARGIN": "4"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    dora = world.discord.add_user("dora")
    if refusal == "send":
        dora.accepts_dms = False  # the DM opens; the message is refused (50007)
    else:
        dora.refuses_dm_channel = True  # even opening the DM is refused (50007)
    group = world.discord.group_dm()
    it = await world.discord.slash_personal(
        group, dora, "video", {"prompt": "a quiet harbour"}, age=TOKEN_TTL - 6
    )
    job_id = await world.job_id(it)
    await world.discord.wait_for(
        lambda: bool(world.discord.rejected(50007)), timeout=10, what="the refused DM"
    )
    # The token's last edit tells her where the result will wait.
    await it.wait_original(lambda m: f"/job id:{job_id}" in footer_of(m), timeout=5)
    task_for(world, "a quiet harbour").plan = TaskPlan(polls=0)
    row = await wait_state(world, job_id, "delivered", timeout=20)
    assert row["discord"]["parked"] is True and row["discord"]["dm_refused"] is True
    # Asked once: the refusal is remembered, never tried again.
    assert len(world.discord.rejected(50007)) == 1
    # Later, from her DM with the bot, /job hands her the file itself, downloaded again.
    answer = await job_answer(world, world.discord.dm_channel(dora), dora, job_id)
    [file] = answer.attachments
    assert file.filename == f"framecast-{job_id}.mp4" and file.data == world.service.video_bytes()
    assert "here it is" in answer.content and "File:" not in answer.content
    assert len(file_downloads(world)) == 2  # the runner's, then /job's
    await handed_over(world, job_id)
    assert channel_requests(world, group.id) == []
    assert followups_created(it) == []


async def test_a_parked_inline_image_reaches_its_requester_through_job(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env={**ON, "TOKEN_MARGIN": "4", "GEN_REQUEST_TIMEOUT": "30"})
    world.service.image_shape = "data_b64"  # sent inline: only the bot's saved copy holds it
    world.service.delays = [6.0]  # the create answers after the token is spent and the DM refused
    dora, eve = world.discord.add_user("dora"), world.discord.add_user("eve")
    dora.accepts_dms = False
    it = await world.discord.slash_personal(
        world.discord.group_dm(), dora, "image", {"prompt": "a hidden garden"}, age=TOKEN_TTL - 6
    )
    job_id = await world.job_id(it)
    row = await wait_state(world, job_id, "delivered", timeout=20)
    assert row["discord"]["parked"] is True and world.files_for(job_id) == []
    results = Path(world.env["DATABASE_PATH"]).parent / "results"
    assert [p.name for p in results.iterdir()] == [f"job-{job_id}.png"]  # kept for her
    # Someone else asking for it gets no file (nor the job).
    other = await job_answer(world, world.discord.dm_channel(eve), eve, job_id)
    assert other.attachments == [] and world.files_for(job_id) == []
    # She gets the picture itself, on her own /job.
    answer = await job_answer(world, world.discord.dm_channel(dora), dora, job_id)
    [file] = answer.attachments
    assert file.filename == f"framecast-{job_id}.png" and file.data == world.service.image_bytes()
    assert file.ephemeral
    # Handed over: the bot's copy is gone, and the job no longer waits.
    await handed_over(world, job_id)
    assert list(results.iterdir()) == []
    again = await job_answer(world, world.discord.dm_channel(dora), dora, job_id)
    assert again.attachments == [] and "here it is" not in again.content
    assert len(world.discord.rejected()) == len(world.discord.rejected(50007))  # only the DM


async def test_a_parked_video_whose_download_fails_stays_parked_for_another_try(
    start_synced: StartWorld,
) -> None:
    world = await start_synced(extra_env={**ON, "TOKEN_MARGIN": "4"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    dora = world.discord.add_user("dora")
    dora.refuses_dm_channel = True
    it = await world.discord.slash_personal(
        world.discord.group_dm(), dora, "video", {"prompt": "a night train"}, age=TOKEN_TTL - 6
    )
    job_id = await world.job_id(it)
    await world.discord.wait_for(
        lambda: bool(world.discord.rejected(50007)), timeout=10, what="the refused DM"
    )
    task_for(world, "a night train").plan = TaskPlan(polls=0)
    await wait_state(world, job_id, "delivered", timeout=20)
    world.service.file_status = 410  # the service's link does not answer now
    dm = world.discord.dm_channel(dora)
    failed = await job_answer(world, dm, dora, job_id)
    assert failed.attachments == [] and f"/job id:{job_id}" in failed.content
    assert job_rows(world)[job_id]["discord"]["parked"] is True
    world.service.file_status = None
    answer = await job_answer(world, dm, dora, job_id)
    [file] = answer.attachments
    assert file.data == world.service.video_bytes()
    await handed_over(world, job_id)


async def test_settings_are_not_offered_outside_servers(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env=ON)
    dora = world.discord.add_user("dora")
    for channel in (world.discord.dm_channel(dora), world.discord.group_dm()):
        with pytest.raises(CommandHidden):
            await world.discord.slash_personal(channel, dora, "settings", subcommand="show")


async def test_the_fake_refuses_what_discord_refuses_a_user_install(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env=ON)
    dora, eve = world.discord.add_user("dora"), world.discord.add_user("eve")
    eve.refuses_dm_channel = True
    group = world.discord.group_dm()
    it = await personal(world, group, dora, "video", prompt="a kite")
    await world.delivered(it)
    api, bot = world.discord.api_base, {"Authorization": f"Bot {world.env['DISCORD_TOKEN']}"}
    async with aiohttp.ClientSession() as session:

        async def answer(method: str, path: str, **kw: Any) -> tuple[int, Any]:
            async with session.request(method, f"{api}{path}", **kw) as reply:
                return reply.status, (await reply.json()).get("code")

        # A sixth follow-up of a user install's interaction.
        followup = f"/webhooks/{world.discord.application_id}/{it.token}?wait=true"
        statuses = [
            await answer("POST", followup, json={"content": f"{n}"})
            for n in range(USER_INSTALL_FOLLOWUPS + 1)
        ]
        assert statuses[:USER_INSTALL_FOLLOWUPS] == [(200, None)] * USER_INSTALL_FOLLOWUPS
        assert statuses[-1] == (400, 40094)
        # The bot's token reaches no group DM, and a person may refuse even the opening of a DM.
        # The group DM exists, the bot is not in it: 403 Missing Access, as Discord answers.
        assert await answer("GET", f"/channels/{group.id}", headers=bot) == (403, 50001)
        assert await answer("GET", f"/channels/{group.id + 1}", headers=bot) == (404, 10003)  # none at all
        opened = {"recipient_id": str(eve.id)}
        assert await answer("POST", "/users/@me/channels", headers=bot, json=opened) == (403, 50007)


async def test_her_own_install_in_a_server_that_has_the_bot_is_refused_never_a_personal_job(
    start_synced: StartWorld,
) -> None:
    """Discord names only her own install (``authorizing_integration_owners`` {"1": her}) but the
    server has Framecast: the server did not allow the command to her there, so it is refused, with
    the reason; nothing is asked of the service and no job skips the server's rules."""
    world = await start_synced(extra_env=ON)
    alice = world.alice
    for name, options in (("video", {"prompt": "blocked by the server"}), ("image", {"prompt": "x"})):
        it = await personal(world, world.channel, alice, name, **options)
        assert await refusal_text(it) == (
            "Framecast is installed in this server, so here it follows the server's settings, and the "
            "server has not allowed this command here. Use it in your DMs, or ask the server's admins."
        )
    assert job_rows(world) == {} and service_creates(world) == []


async def test_a_personal_queues_answers_speak_of_your_jobs_not_a_server(start_synced: StartWorld) -> None:
    world = await start_synced(extra_env={**ON, "GEN_MAX_RUNNING": "1"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    dora = world.discord.add_user("dora")
    dm = world.discord.dm_channel(dora)
    ask = await personal(world, dm, dora, "job", id=4)
    answer = await ask.wait_original(lambda m: bool(m.content), timeout=15)
    assert answer.content == "You have no job #4."
    # Her second job waits behind her first: in her queue, not "this server's".
    await world.job_id(await personal(world, dm, dora, "video", prompt="first"))
    second = await personal(world, dm, dora, "video", prompt="second")
    await world.job_id(second)
    waiting = await second.wait_original(lambda m: "Queued" in status_of(m), timeout=15)
    assert status_of(waiting).startswith("⏳ Queued: #1 in your queue"), status_of(waiting)
    assert "server" not in str(waiting.to_payload()["embeds"])
