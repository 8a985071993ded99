"""A job's message or channel gone while jobs are queued and running, end to end against the fakes:
the jobs still end (delivered where they can be, else failed), and the rest of the queue goes on."""

from __future__ import annotations

import functools
import re

from tests.e2e.commands import FOREVER, answer, text_of
from tests.e2e.harness import StartWorld, World, service_creates, task_for, wait_log, wait_state
from tests.fakes.discord_api import MANAGE_THREADS, SEND_MESSAGES, TEXT_PERMISSIONS
from tests.fakes.gen_service import RecordedRequest, TaskPlan


def pinged(world: World, user_id: int) -> bool:
    """Whether a message in the world's channel pinged `user_id`."""
    return any(user_id in m.pinged_user_ids for m in world.discord.messages_in(world.channel))


#: A token age that leaves the job's interaction token about three seconds (TOKEN_MARGIN is 2 s).
TOKEN_GONE_SOON = 895.0


def refused_edits(world: World) -> int:
    """Edits Discord refused because their thread is closed (50083)."""
    return sum(r.code == 50083 for r in world.discord.requests if r.method == "PATCH")


async def end_as_channel_gone(world: World, *job_ids: int) -> None:
    """Each job fails with the reason ``channel_gone``."""
    for job_id in job_ids:
        row = await wait_state(world, job_id, "failed")
        assert row["error_code"] == "channel_gone"


async def one_running_one_waiting_in_art(world: World) -> tuple[int, int]:
    """Alice's job running in #art (it never ends by itself) and Bob's waiting behind it there."""
    [art] = [c for c in world.guild.channels if c.name == "art"]
    world.service.default_plan = TaskPlan(polls=FOREVER)
    running = await world.discord.slash(world.guild, art, world.alice, "video", {"prompt": "art, running"})
    first = await world.job_id(running)
    await wait_state(world, first, "running")
    queued = await world.discord.slash(world.guild, art, world.bob, "video", {"prompt": "art, waiting"})
    return first, await world.job_id(queued)


async def test_job_messages_a_moderator_deletes_are_posted_afresh_and_get_their_results(
    start: StartWorld,
) -> None:
    """A moderator deletes the messages of a running and a queued job (the interactions' answers,
    their tokens still live): each result comes once, on a fresh channel message, with its ping."""
    world = await start(extra_env={"GEN_MAX_RUNNING": "1"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    running = await world.video("a slow tide", member=world.alice)
    queued = await world.video("a quick gull", member=world.bob)
    first, second = await world.job_id(running), await world.job_id(queued)
    await wait_state(world, first, "running")
    for it in (running, queued):
        assert it.original is not None
        await world.discord.delete_message(it.original)
    world.service.default_plan = TaskPlan(polls=0)
    task_for(world, "a slow tide").plan = TaskPlan(polls=0)
    for it, job_id, member in ((running, first, world.alice), (queued, second, world.bob)):
        message = await world.delivered(it)
        assert message.interaction is None and message.channel_id == world.channel.id
        assert len(world.files_for(job_id)) == 1
        await wait_state(world, job_id, "delivered")
        await world.discord.wait_for(
            functools.partial(pinged, world, member.id), timeout=10, what="the requester's ping"
        )
    assert "unexpected error" not in world.bot.log_text()


async def test_jobs_of_a_deleted_channel_end_with_the_reason_and_the_queue_goes_on(start: StartWorld) -> None:
    """An admin deletes #art while Alice's job runs there and Bob's waits there, Carol's behind them
    in #general: Alice's and Bob's jobs fail at once, saying why (Bob's never reaches the service),
    their messages are not tried again and again, and Carol's job is delivered."""
    world = await start(
        setup=lambda w: w.discord.add_channel(w.guild, "art"), extra_env={"GEN_MAX_RUNNING": "1"}
    )
    [art] = [c for c in world.guild.channels if c.name == "art"]
    carol = world.members[0][2]
    first, second = await one_running_one_waiting_in_art(world)
    world.service.plans = [("general", TaskPlan(polls=0))]
    behind = await world.video("general, behind them", member=carol)
    await world.discord.delete_channel(art)
    await end_as_channel_gone(world, first, second)
    refused_at_end = len(world.discord.rejected())
    await world.delivered(behind)
    assert service_creates(world, "art, waiting") == []
    look = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": first})
    shown = await answer(look)
    assert "its channel was deleted, or Framecast was removed from the server" in text_of(shown)
    # Once ended, each job's message was tried twice more at most (a redraw in flight as it ended,
    # then its last; each its answer, then a fresh one), not at every redraw while Carol's job ran.
    assert len(world.discord.rejected()) - refused_at_end <= 8


async def test_a_server_that_removes_the_bot_loses_its_queue_and_the_other_server_goes_on(
    start: StartWorld,
) -> None:
    """Two servers on the operator's key: the second removes the bot while its jobs run and wait.
    Its jobs end at once (the waiting one never reaches the service), and the first server's jobs,
    queued behind them, are delivered."""
    world = await start(guilds=2, extra_env={"GEN_MAX_RUNNING": "1"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    world.service.plans = [("staying", TaskPlan(polls=0))]
    running = await world.video("leaving, running", guild=1)
    first = await world.job_id(running)
    await wait_state(world, first, "running")
    queued = await world.video("leaving, waiting", guild=1, member=world.members[1][1])
    staying = await world.video("staying", guild=0)
    second = await world.job_id(queued)
    await world.discord.remove_guild(world.guilds[1])
    await end_as_channel_gone(world, first, second)
    await world.delivered(staying)
    assert service_creates(world, "leaving, waiting") == []


async def test_the_jobs_of_a_deleted_thread_end_and_its_channels_go_on(start: StartWorld) -> None:
    """Alice asks in a thread of #general, Bob in #general itself; the thread is deleted: Alice's
    job ends, saying why, and Bob's is delivered."""
    world = await start(setup=lambda w: w.discord.add_thread(w.channel, "ideas"))
    [thread] = world.guild.threads
    world.service.default_plan = TaskPlan(polls=FOREVER)
    world.service.plans = [("in the channel", TaskPlan(polls=0))]
    in_thread = await world.discord.slash(
        world.guild, thread, world.alice, "video", {"prompt": "in the thread"}
    )
    job_id = await world.job_id(in_thread)
    await wait_state(world, job_id, "running")
    await world.discord.delete_channel(thread)
    await end_as_channel_gone(world, job_id)
    await world.delivered(await world.video("in the channel", member=world.bob))


async def test_a_server_that_removed_the_bot_while_it_was_down_loses_its_queue_on_restart(
    start: StartWorld,
) -> None:
    """The bot is stopped with jobs of two servers running and waiting; the second server removes
    it meanwhile (no event reaches it). On restart that server's jobs end, saying why, and the
    first server's jobs are delivered."""
    world = await start(guilds=2, extra_env={"GEN_MAX_RUNNING": "1"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    running = await world.video("away, running", guild=1)
    first = await world.job_id(running)
    await wait_state(world, first, "running")
    queued = await world.video("away, waiting", guild=1, member=world.members[1][1])
    staying = await world.video("home, waiting", guild=0)
    second = await world.job_id(queued)
    assert await world.bot.terminate() == 0
    await world.discord.remove_guild(world.guilds[1])
    world.service.plans = [("home", TaskPlan(polls=0))]
    await world.restart_bot()
    await end_as_channel_gone(world, first, second)
    await world.delivered(staying)
    assert service_creates(world, "away, waiting") == []


async def test_jobs_of_a_channel_deleted_while_the_bot_was_down_end_on_restart(start: StartWorld) -> None:
    """The bot is stopped with Alice's job running in #art and Bob's waiting there, Carol's in
    #general; #art is deleted meanwhile. On restart Alice's and Bob's jobs end, saying why, and
    Carol's is delivered."""
    world = await start(
        setup=lambda w: w.discord.add_channel(w.guild, "art"), extra_env={"GEN_MAX_RUNNING": "1"}
    )
    [art] = [c for c in world.guild.channels if c.name == "art"]
    first, second = await one_running_one_waiting_in_art(world)
    behind = await world.video("general, behind them", member=world.members[0][2])
    assert await world.bot.terminate() == 0
    await world.discord.delete_channel(art)
    world.service.plans = [("general", TaskPlan(polls=0))]
    await world.restart_bot()
    await end_as_channel_gone(world, first, second)
    await world.delivered(behind)
    assert service_creates(world, "art, waiting") == []


async def test_a_result_whose_channel_goes_while_it_downloads_waits_for_its_requester_in_job(
    start: StartWorld,
) -> None:
    """#art is deleted while Alice's finished video downloads (the job is delivering, so it keeps
    its outcome): nowhere to post it, the file waits for Alice, who gets it with /job in #general."""
    world = await start(setup=lambda w: w.discord.add_channel(w.guild, "art"))
    [art] = [c for c in world.guild.channels if c.name == "art"]
    world.service.default_plan = TaskPlan(polls=0)

    async def delete_art(record: RecordedRequest) -> None:
        if record.path.startswith("/files/"):
            world.service.before_answer = None
            await world.discord.delete_channel(art)

    world.service.before_answer = delete_art
    asked = await world.discord.slash(world.guild, art, world.alice, "video", {"prompt": "art, finishing"})
    job_id = await world.job_id(asked)
    await wait_state(world, job_id, "delivered")
    assert "unexpected error" not in world.bot.log_text()
    look = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
    shown = await answer(look)
    assert [a.filename for a in shown.attachments] == [f"framecast-{job_id}.mp4"]
    assert "its channel is gone" in text_of(shown)


async def test_a_thread_a_moderator_closes_while_jobs_run_there_gets_their_results(start: StartWorld) -> None:
    """Alice's job runs in a thread that a moderator closes (archives): its message cannot be edited
    any more, so the result comes on a fresh message there, which reopens the thread, as a member's
    message would. In a thread also locked, a bot without Manage Threads may not post: the file
    waits for Alice in /job."""
    world = await start(setup=lambda w: w.discord.add_thread(w.channel, "ideas"))
    [thread] = world.guild.threads
    for locked in (False, True):
        world.service.default_plan = TaskPlan(polls=FOREVER)
        prompt = f"in a thread closed, locked={locked}"
        asked = await world.discord.slash(world.guild, thread, world.alice, "video", {"prompt": prompt})
        job_id = await world.job_id(asked)
        await wait_state(world, job_id, "running")
        if locked:
            thread.bot_permissions &= ~MANAGE_THREADS  # as most bots: it may not reopen a locked thread
        await world.discord.archive_thread(thread, locked=locked)
        task_for(world, prompt).plan = TaskPlan(polls=0)
        await wait_state(world, job_id, "delivered")
        files = world.files_for(job_id)
        if locked:
            assert files == [] and thread.archived
            look = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
            shown = await answer(look)
            assert [a.filename for a in shown.attachments] == [f"framecast-{job_id}.mp4"]
        else:
            assert len(files) == 1 and not thread.archived
            [message] = [m for m in world.discord.messages_in(thread) if m.attachments]
            assert message.interaction is None  # a fresh message, sent with the bot's token
    assert "unexpected error" not in world.bot.log_text()


async def test_progress_in_a_thread_a_moderator_closed_does_not_reopen_it_its_result_does(
    start: StartWorld,
) -> None:
    """Alice's job runs in a thread; a moderator closes it. The next progress edit is refused, and
    the bot stops drawing progress there: it does not post a fresh message that would reopen the
    thread for a percentage. Its result does (as a member's message would)."""
    world = await start(setup=lambda w: w.discord.add_thread(w.channel, "ideas"))
    [thread] = world.guild.threads
    world.service.default_plan = TaskPlan(polls=FOREVER)  # progress 0 % until told otherwise
    prompt = "progress in a closed thread"
    asked = await world.discord.slash(world.guild, thread, world.alice, "video", {"prompt": prompt})
    job_id = await world.job_id(asked)
    await wait_state(world, job_id, "running")
    await world.discord.archive_thread(thread)
    task = task_for(world, prompt)
    polled = task.polls
    task.plan = TaskPlan(polls=polled + 6)  # each of the next six polls reports more progress

    await world.discord.wait_for(lambda: refused_edits(world) >= 1, what="a progress edit refused")
    await world.discord.wait_for(lambda: task.polls >= polled + 4, what="progress past the refusal")
    assert thread.archived and refused_edits(world) == 1  # no fresh message, and no edit tried again
    assert world.discord.messages_in(thread) == [asked.original]

    await wait_state(world, job_id, "delivered")
    assert not thread.archived
    [message] = [m for m in world.discord.messages_in(thread) if m.attachments]
    assert message.interaction is None and len(world.files_for(job_id)) == 1
    assert "unexpected error" not in world.bot.log_text()


async def test_a_closed_thread_opened_again_shows_its_jobs_progress_again(start: StartWorld) -> None:
    """A moderator closes the thread of Alice's job, and its progress stops there; a member opens it
    again (a message), and the progress shows again, on a fresh message once the job's interaction
    token ran out meanwhile (about three seconds after the command); the result follows."""
    world = await start(setup=lambda w: w.discord.add_thread(w.channel, "ideas"))
    [thread] = world.guild.threads
    world.service.default_plan = TaskPlan(polls=FOREVER)
    prompt = "a thread closed, then open again"
    asked = await world.discord.slash(
        world.guild, thread, world.alice, "video", {"prompt": prompt}, age=TOKEN_GONE_SOON
    )
    job_id = await world.job_id(asked)
    await wait_state(world, job_id, "running")
    await world.discord.archive_thread(thread)
    task = task_for(world, prompt)
    polled = task.polls
    task.plan = TaskPlan(polls=polled + 12)
    await world.discord.wait_for(lambda: refused_edits(world) >= 1, what="a progress edit refused")
    await world.discord.wait_for(lambda: task.polls >= polled + 3, what="progress past the refusal")
    task.plan = TaskPlan(polls=FOREVER)  # it runs until told, having shown progress nobody saw yet
    assert thread.archived and refused_edits(world) == 1

    seen = len(world.discord.requests)
    await world.discord.reopen_thread(thread)

    def drawn_again() -> bool:
        return any(r.method in ("PATCH", "POST") and r.status == 200 for r in world.discord.requests[seen:])

    await world.discord.wait_for(drawn_again, what="progress drawn again")
    task.plan = TaskPlan(polls=0)
    await wait_state(world, job_id, "delivered")
    [message] = [m for m in world.discord.messages_in(thread) if m.attachments]
    assert len(world.files_for(job_id)) == 1 and refused_edits(world) == 1
    assert "unexpected error" not in world.bot.log_text()


async def test_a_job_asked_in_a_closed_thread_is_shown_there_at_once(start: StartWorld) -> None:
    """Bob asks in a thread a moderator closed: his job's first look is his own command's answer, so
    it is posted (on a fresh message, since the closed thread refuses the edit of the first one,
    reopening it as his message would), not held back like progress."""
    world = await start(setup=lambda w: w.discord.add_thread(w.channel, "ideas"))
    [thread] = world.guild.threads
    await world.discord.archive_thread(thread)
    world.service.default_plan = TaskPlan(polls=FOREVER)
    prompt = "asked while closed"
    asked = await world.discord.slash(world.guild, thread, world.bob, "video", {"prompt": prompt})
    shown = await world.wait_message(
        lambda m: m.channel_id == thread.id and bool(m.embeds) and m.embeds[0].get("description") == prompt,
        what="the job shown in the thread",
    )
    assert not thread.archived
    # His command's own answer does not stay "thinking…": once the thread is open, it points there.
    await world.discord.wait_for(
        lambda: asked.original is not None and not asked.original.loading, what="the answer edited"
    )
    assert asked.original is not None and str(shown.id) in text_of(asked.original)
    job_id = int(re.findall(r"#(\d+)", shown.embeds[0]["title"])[0])
    await wait_state(world, job_id, "running")
    task_for(world, prompt).plan = TaskPlan(polls=0)
    await wait_state(world, job_id, "delivered")
    assert len(world.files_for(job_id)) == 1


async def test_a_command_whose_thread_is_closed_before_its_answer_is_no_error(start: StartWorld) -> None:
    """Bob's /queue in a thread a moderator closes before its answer: Discord refuses the answer
    (and any apology) there. Nothing failed on the bot's side: no ERROR, no traceback."""
    world = await start(setup=lambda w: w.discord.add_thread(w.channel, "ideas"))
    [thread] = world.guild.threads
    await world.discord.archive_thread(thread)
    await world.discord.slash(world.guild, thread, world.bob, "queue")
    await wait_log(world, "command queue: not answered, its thread was closed meanwhile")
    assert " ERROR " not in world.bot.log_text() and "Traceback" not in world.bot.log_text()


async def test_a_channel_closed_to_the_bot_under_a_running_job_is_not_asked_again_and_again(
    start: StartWorld,
) -> None:
    """An admin takes Send Messages from the bot in the channel of Alice's running job, and the
    job's interaction token runs out: it cannot move to a channel message. The bot tries once and
    then draws nothing more there (each redraw tried again at once: hundreds of refused requests a
    second, which Discord counts against the bot); the result tries once more, then waits for
    Alice in /job."""
    world = await start()
    world.service.default_plan = TaskPlan(polls=FOREVER)
    prompt = "a channel closing"
    asked = await world.discord.slash(
        world.guild, world.channel, world.alice, "video", {"prompt": prompt}, age=TOKEN_GONE_SOON
    )
    job_id = await world.job_id(asked)
    world.channel.bot_permissions = TEXT_PERMISSIONS & ~SEND_MESSAGES
    await wait_state(world, job_id, "running")
    task = task_for(world, prompt)
    polled = task.polls

    def refused_posts() -> int:
        posts = world.discord.requests_to("POST", f"/channels/{world.channel.id}/messages")
        return sum(r.status == 403 for r in posts)

    await world.discord.wait_for(lambda: refused_posts() >= 1, what="the move refused")
    task.plan = TaskPlan(polls=task.polls + 6)  # progress at each of the next polls, then done
    await wait_state(world, job_id, "delivered")
    assert task.polls >= polled + 6 and refused_posts() == 2  # the move, then the result's own try
    look = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
    shown = await answer(look)
    assert [a.filename for a in shown.attachments] == [f"framecast-{job_id}.mp4"]
