"""A stop (SIGTERM) lets the commands being handled finish: a member is never left on "thinking…".

The real bot.py against the fake Discord. A member's ``/video`` is acknowledged (Discord stored the
deferral, "thinking…") and Discord holds its answer while the bot is told to stop. The bot stops
taking work, then lets the handler end before it closes Discord's session, within
``SHUTDOWN_TIMEOUT``: the job is saved, and shown and delivered by the restarted bot. A handler
still waiting when ``SHUTDOWN_TIMEOUT`` runs out is cut off, said once, and leaves no traceback.
"""

from __future__ import annotations

import asyncio
import signal
import time

from tests.e2e.harness import World, hold_route, job_rows, wait_log

SHUTDOWN_TIMEOUT = 3.0  # the harness's SHUTDOWN_TIMEOUT
CALLBACK = "/interactions/{interaction_id}/{token}/callback"
#: What a handler that failed on a closed session, or was left unread, writes to the log.
NEVER_IN_THE_LOG = (
    "Task exception was never retrieved",
    "command video failed",
    "Session is closed",
    "Traceback",
)


async def _acknowledged_and_held(world: World, prompt: str) -> tuple[asyncio.Event, object]:
    """/video by alice; returns once Discord stored its deferral and holds the answer (and the
    event that lets the answer go)."""
    release, held = hold_route(world.discord, "POST", CALLBACK)
    it = await world.discord.slash(world.guild, world.channel, world.alice, "video", {"prompt": prompt})
    await world.discord.wait_for(lambda: bool(held), timeout=10, what="the /video deferral held")
    assert it.acknowledged  # Discord has it: the member sees "thinking…"
    return release, it


async def _stop(world: World) -> asyncio.Task[int]:
    """SIGTERM; returns the wait for the exit, once the bot is stopping."""
    assert world.bot.proc is not None
    world.bot.proc.send_signal(signal.SIGTERM)
    exited = asyncio.create_task(world.bot.wait(SHUTDOWN_TIMEOUT + 15))
    await wait_log(world, "stop requested")
    return exited


def _quiet(log: str) -> None:
    for line in NEVER_IN_THE_LOG:
        assert line not in log, f"the log shows {line!r}:\n{log[-4000:]}"


async def test_a_command_acknowledged_when_the_stop_comes_is_saved_then_shown_and_delivered(
    world: World,
) -> None:
    release, it = await _acknowledged_and_held(world, "a lighthouse at the moment of the stop")
    exited = await _stop(world)
    # The core has stopped taking work and the bot waits for the handler (a bot that closes Discord
    # under it exits instead): only now does Discord's answer to the deferral arrive.
    waiting = asyncio.create_task(wait_log(world, "shutdown: waiting up to", timeout=SHUTDOWN_TIMEOUT + 15))
    await asyncio.wait({exited, waiting}, return_when=asyncio.FIRST_COMPLETED)
    release.set()
    assert await exited == 0
    waiting.cancel()
    # The handler went on to its end: the job is saved (it was accepted, not lost in the stop).
    rows = job_rows(world)
    assert [row["state"] for row in rows.values()] == ["queued"], rows
    log = world.bot.log_text()
    assert "shutdown: waited for 1 interaction(s) being handled" in log
    assert "cut off" not in log
    _quiet(log)

    await world.start_bot()
    # The member's "thinking…" becomes the job, which the restarted bot runs and delivers.
    job_id = await world.job_id(it)  # type: ignore[arg-type]
    assert job_id == next(iter(rows))
    await world.delivered(it)
    assert it.original is not None and not it.original.loading  # type: ignore[attr-defined]
    _quiet(world.bot.log_text())


async def test_a_handler_still_waiting_when_the_shutdown_timeout_runs_out_is_cut_off_quietly(
    world: World,
) -> None:
    release, _ = await _acknowledged_and_held(world, "a lighthouse that never hears back")
    began = time.monotonic()
    exited = await _stop(world)
    try:
        assert await exited == 0
    finally:
        release.set()  # the fake's request ends too
    took = time.monotonic() - began
    assert took < SHUTDOWN_TIMEOUT + 3, f"shutdown took {took:.1f}s"
    log = world.bot.log_text()
    assert "shutdown: waited for 1 interaction(s) being handled" in log
    assert "shutdown: 1 interaction(s) cut off unanswered" in log
    _quiet(log)
    # It never heard that its deferral landed, so it accepted nothing.
    assert job_rows(world) == {}
