"""What the bot cannot recover from by itself ends the process non-zero, so a restart policy brings it back.

Docker and compose restart a process that exits (``restart:``), never an unhealthy one. So Discord out
of reach past ``DISCORD_OUTAGE_EXIT`` (refusing the login from the start, or the gateway lost and
refused later) ends the real ``bot.py`` with exit code 3 after a clean shutdown, saying why in one
line. (The event loop blocked past ``LOOP_STALL_EXIT``: tests/ops/test_watchdog.py.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.e2e.harness import BotProcess, StartWorld, close_world, make_world

GIVE_UP = {"DISCORD_OUTAGE_EXIT": "2", "DISCORD_RETRY_MAX_DELAY": "0.2"}


async def test_discord_refusing_the_login_past_the_bound_ends_the_process_with_code_3(tmp_path: Path) -> None:
    world = await make_world(tmp_path, extra_env=GIVE_UP)
    world.discord.fail_next("GET /users/@me", status=503, count=1_000_000)
    world.bot = BotProcess(world.env, tmp_path / "bot.log")
    try:
        await world.bot.start()
        code = await world.bot.wait(30)
        log = world.bot.log_text()
        assert code == 3, log[-3000:]
        assert "Discord has been out of reach for 2 s (DISCORD_OUTAGE_EXIT)" in log
        assert "cannot reach Discord (HTTP 503)" in log and "Traceback" not in log
        assert not world.discord.sessions
    finally:
        await close_world(world)


async def test_the_gateway_lost_and_refused_past_the_bound_ends_the_process_with_code_3(
    start: StartWorld,
) -> None:
    world = await start(extra_env=GIVE_UP)
    it = await world.video("a lighthouse at dusk")
    await world.delivered(it)
    # Connected, the bound never ends it: still running twice the bound later.
    assert world.bot.proc is not None
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(world.bot.proc.wait()), timeout=4)
    world.discord.gateway_failures = 1_000_000
    await world.discord.disconnect()
    code = await world.bot.wait(30)
    log = world.bot.log_text()
    assert code == 3, log[-3000:]
    assert "Discord has been out of reach for 2 s (DISCORD_OUTAGE_EXIT)" in log
    assert "stopped" in log  # the clean shutdown ran first
    # A restart policy starts it again: with Discord back, it connects.
    world.discord.gateway_failures = 0
    await world.start_bot()
