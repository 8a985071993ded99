"""Commands while the database cannot answer: acknowledged at once, then done or clearly refused.

The real bot on PostgreSQL behind a relay the test silences (a blackhole: connections accepted,
nothing forwarded), and on its default SQLite file while another process holds the file's exclusive
lock (an admin's ``sqlite3`` shell, a backup). Each command is answered within Discord's 3 s; a
change that the store cannot make in time is refused with "try again in a moment" (the member or
admin is told nothing was done), and one that can is applied when the lock goes. ``/readyz``
answers within its own bound meanwhile. (Redis outages: tests/e2e/test_operator_port.py and
test_shared_budget.py.)
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg

from tests.e2e.commands import FOREVER, answer, refused, video
from tests.e2e.endpoints import free_port, ops_of, ready_body
from tests.e2e.harness import StartWorld, World, ack_latency, button_ids, job_rows, status_of
from tests.e2e.servers import Relay
from tests.fakes.discord_api import FakeInteraction
from tests.fakes.gen_service import TaskPlan

TRY_AGAIN = "Framecast can't reach its database right now, so this wasn't done. Please try again in a moment."
#: Discord's bound on the first answer.
DISCORD_ACK = 3.0
#: /readyz's own bound per check (OpsServer's check_timeout), and what answering may add to it.
READY_CHECK_TIMEOUT, READY_SLACK = 2.0, 0.5
#: Short store bounds for the PostgreSQL case: an outage is noticed in about a second.
PG_BOUNDS = {
    "DATABASE_CONNECT_TIMEOUT": "1",
    "DATABASE_STATEMENT_TIMEOUT": "1",
    "DATABASE_POOL_TIMEOUT": "1",
    "DATABASE_CALL_TIMEOUT": "2",
}


@contextmanager
def exclusive_lock(world: World) -> Iterator[None]:
    """Another process's exclusive lock on the bot's SQLite file, held until the block ends."""
    other = sqlite3.connect(Path(world.env["DATABASE_PATH"]), isolation_level=None, timeout=10)
    try:
        other.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
    finally:
        other.close()


def stored_settings(world: World) -> list[tuple[int, str]]:
    """The guild_settings rows on disk: (guild id, JSON)."""
    conn = sqlite3.connect(Path(world.env["DATABASE_PATH"]), timeout=10)
    try:
        return [(int(g), str(d)) for g, d in conn.execute("SELECT guild_id, data FROM guild_settings")]
    finally:
        conn.close()


async def limits(world: World, **options: int) -> FakeInteraction:
    """``/settings limits`` as the admin, not waiting for its answer."""
    return await world.discord.slash(
        world.guild, world.channel, world.admins[0], "settings", options, subcommand="limits"
    )


async def test_video_on_a_silent_postgresql_network_is_refused_within_seconds_and_readyz_stays_bounded(
    pg_relay: tuple[str, Relay], start: StartWorld
) -> None:
    dsn, relay = pg_relay
    world = await start(extra_env={"DATABASE_URL": dsn, "HTTP_PORT": str(free_port()), **PG_BOUNDS})
    async with ops_of(world) as ops:
        await ops.until("/readyz", lambda s, _: s == 200, what="ready")
        first = await world.video("before the network went silent")
        await world.delivered(first)
        await first.wait_original(lambda m: status_of(m).startswith("✅"))  # recorded as delivered

        relay.blackhole()
        began = time.monotonic()
        it = await video(world, "while the network is silent")
        text = await refused(it)
        took = time.monotonic() - began
        assert ack_latency(it) < DISCORD_ACK
        assert text == TRY_AGAIN
        # The store's call bound, plus the acknowledgement and the reply's own round trips.
        assert took < float(PG_BOUNDS["DATABASE_CALL_TIMEOUT"]) + 2.0, f"answered after {took:.1f} s"

        began = time.monotonic()
        status, body = await ops.get("/readyz")
        assert time.monotonic() - began < READY_CHECK_TIMEOUT + READY_SLACK
        assert status == 503 and ready_body(body)["checks"]["database"] != "ok"

        await relay.restore()
        await ops.until("/readyz", lambda s, _: s == 200, timeout=20, what="ready again")
        after = await world.video("after the network came back")
        await world.delivered(after)
    # The refused request left no job behind; the bot logged the outage, not a traceback per call.
    assert "while the network is silent" not in [t.prompt for t in world.service.tasks.values()]
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        stored = [json.loads(r["params"])["prompt"] for r in await conn.fetch("SELECT params FROM jobs")]
    finally:
        await conn.close()
    assert sorted(stored) == ["after the network came back", "before the network went silent"]
    log = world.bot.log_text()
    assert log.count("WARNING framecast.storage: job store unavailable") == 1
    assert "job store answers again" in log


async def test_settings_limits_under_another_process_s_lock_is_acknowledged_then_applied_when_it_goes(
    start: StartWorld,
) -> None:
    world = await start(extra_env={"DATABASE_STATEMENT_TIMEOUT": "30"})
    with exclusive_lock(world):
        it = await limits(world, member_jobs=1)
        kind, _ = await it.wait_response(timeout=DISCORD_ACK)
        assert kind == 5  # "thinking…", while the write waits for the lock
        assert ack_latency(it) < DISCORD_ACK
        assert stored_settings(world) == []
    msg = await answer(it)
    assert "Jobs per member" in msg.content and "1" in msg.content
    [(guild_id, data)] = stored_settings(world)
    assert guild_id == world.guild.id and json.loads(data)["member_jobs"] == 1


async def test_settings_limits_and_video_are_refused_clearly_when_the_lock_outlasts_the_store_s_bound(
    start: StartWorld,
) -> None:
    world = await start(extra_env={"DATABASE_STATEMENT_TIMEOUT": "1"})
    with exclusive_lock(world):
        it = await limits(world, member_jobs=1)
        await it.wait_response(timeout=DISCORD_ACK)
        assert ack_latency(it) < DISCORD_ACK
        msg = await answer(it)
        assert msg.content == TRY_AGAIN
        # A job cannot be saved either: acknowledged at once, then refused, nothing queued.
        asked = await video(world, "behind the lock")
        assert await refused(asked) == TRY_AGAIN
        assert ack_latency(asked) < DISCORD_ACK
    assert stored_settings(world) == []
    assert world.service.tasks == {} and job_rows(world) == {}
    # Nothing was changed in memory either: the next change starts from the same settings.
    retried = await limits(world, member_jobs=1)
    assert "Jobs per member" in (await answer(retried)).content
    assert len(stored_settings(world)) == 1


async def test_a_cancel_click_on_a_silent_postgresql_network_is_told_to_try_again(
    pg_relay: tuple[str, Relay], start: StartWorld
) -> None:
    dsn, relay = pg_relay
    world = await start(extra_env={"DATABASE_URL": dsn, **PG_BOUNDS})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    it = await world.video("a slow tide")
    msg = await it.wait_original(lambda m: any(c.startswith("framecast:cancel:") for c in button_ids(m)))
    [cancel] = [c for c in button_ids(msg) if c.startswith("framecast:cancel:")]

    relay.blackhole()
    click = await world.discord.click(msg, cancel, world.alice)
    # Who may cancel is read before the acknowledgement: the store cannot answer in time, so the
    # member hears "try again in a moment" within Discord's bound, not a generic failure.
    assert await refused(click) == TRY_AGAIN
    assert ack_latency(click) < DISCORD_ACK
    await relay.restore()
    assert "the cancel button of job" not in world.bot.log_text()  # no traceback for an outage
