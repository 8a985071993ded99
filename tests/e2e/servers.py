"""PostgreSQL and Redis for the end-to-end tests: two sharded bot processes, and relays to cut.

* :func:`cluster`: two real ``bot.py`` processes run shards 0 and 1 of 2 (``SHARD_COUNT=2``,
  ``SHARD_IDS=0`` / ``1``) against one fake Discord (four guilds, two on each shard) and one fake
  service whose rate limit is the bot's ``GEN_RATE_LIMIT``. They share a fresh PostgreSQL database
  (``DATABASE_URL``, from tests/pg.py) and a Redis database (``REDIS_URL``, db 9 or the xdist worker's own, flushed before
  and after).
* :class:`Relay`, :func:`pg_relay`, :func:`redis_relay`: a server reached through a TCP relay the
  test can cut (the server "goes away": every connection reset, new ones refused), blackhole (a
  silent network: connections accepted, nothing forwarded either way) and restore on the same port.

Fixtures here are registered for the whole suite by ``tests/conftest.py``. Skipped, saying why,
unless PostgreSQL answers on 127.0.0.1:5432 and Redis on 127.0.0.1:6379.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tests.e2e.endpoints import free_port
from tests.e2e.harness import (
    MEMBER_PERMS,
    BotProcess,
    World,
    close_world,
    make_world,
)
from tests.fakes.discord_api import snowflake_at
from tests.fakes.keys import TEST_REDIS_KEY_SECRET
from tests.pg import fresh_database
from tests.workers import redis_url

SHARDS = 2
RATE = (6, 1.0)  # GEN_RATE_LIMIT: 6 requests per (scaled) second, for both processes together
LEASE_SECONDS = 3.0
REDIS_URL = redis_url()  # this xdist worker's database (db 9 without xdist)
SLOW = 8.0  # seconds a "slow" task stays pending: long enough to kill its process mid-way
CREATED = re.compile(r"created video task (\S+)")


@dataclass
class Cluster:
    """The world (fakes, four guilds) and the two bot processes, by shard."""

    world: World
    bots: dict[int, BotProcess]
    dsn: str

    def shard_of(self, guild_index: int) -> int:
        return (self.world.guilds[guild_index].id >> 22) % SHARDS

    def guilds_of(self, shard: int) -> list[int]:
        return [g for g in range(len(self.world.guilds)) if self.shard_of(g) == shard]

    async def jobs(self) -> dict[int, asyncpg.Record]:
        """The shared job table: id -> (guild_id, state, lease_owner, lease_until)."""
        conn = await asyncpg.connect(self.dsn, timeout=5)
        try:
            rows = await conn.fetch(
                "SELECT id, guild_id, state, lease_owner, lease_until FROM jobs ORDER BY id"
            )
        finally:
            await conn.close()
        return {int(r["id"]): r for r in rows}

    async def jobs_once(
        self, ids: Collection[int], state: str, timeout: float = 10.0
    ) -> dict[int, asyncpg.Record]:
        """The job table once every job of `ids` is in `state` (a file reaches Discord a moment before
        the delivering process records the job delivered); fails saying which were not."""
        deadline = time.monotonic() + timeout
        while True:
            rows = await self.jobs()
            behind = {j: rows[j]["state"] for j in ids if rows[j]["state"] != state}
            if not behind:
                return rows
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs not {state} after {timeout:g}s: {behind}")
            await asyncio.sleep(0.05)

    def created_prompts(self, shard: int) -> list[str]:
        """Prompts of the service tasks the process of `shard` created (from its log)."""
        tasks = self.world.service.tasks
        return [tasks[t].prompt for t in CREATED.findall(self.bots[shard].log_text()) if t in tasks]

    async def wait_created(self, shard: int, prompts: list[str], timeout: float = 5.0) -> None:
        """Wait until the log of `shard`'s process shows exactly these tasks created (a log line
        follows the service's answer, so it may trail the service's record a little)."""
        deadline = time.monotonic() + timeout
        while sorted(self.created_prompts(shard)) != sorted(prompts):
            if time.monotonic() > deadline:
                others = {s: sorted(self.created_prompts(s)) for s in self.bots if s != shard}
                takeovers = [
                    line
                    for bot in self.bots.values()
                    for line in bot.log_text().splitlines()
                    if "taken over" in line
                ]
                raise AssertionError(
                    f"shard {shard} created {sorted(self.created_prompts(shard))}, expected {sorted(prompts)};"
                    f" the others created {others}; takeovers: {takeovers}"
                )
            await asyncio.sleep(0.05)


async def redis_or_skip() -> aioredis.Redis:
    """A client of the test Redis database (flushed by the callers), or skip the test saying why."""
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        await client.aclose()
        pytest.skip(
            f"Redis is not reachable at {REDIS_URL} ({type(exc).__name__}); start a server or set "
            "FRAMECAST_TEST_REDIS_URL to run the multi-process test"
        )
    return client


def _guild_id(shard: int, n: int) -> int:
    """A fresh guild snowflake that Discord's rule ``(id >> 22) % 2`` puts on `shard`."""
    base = snowflake_at(time.time() - 86400 * 30)
    ms = (base >> 22) - (base >> 22) % SHARDS + shard + SHARDS * n
    return (ms << 22) | (base & ((1 << 22) - 1))


@pytest.fixture
async def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Cluster]:
    """Both processes connected (shard 0 synced the commands); torn down with SIGTERM.

    Leases last :data:`LEASE_SECONDS`, or what the test's ``@pytest.mark.lease_seconds(n)`` says
    (a test that restarts a process before its leases lapse needs longer than a start-up takes);
    ``@pytest.mark.cluster_env({...})`` adds to both processes' environment.
    """
    marker = request.node.get_closest_marker("lease_seconds")
    lease_seconds = float(marker.args[0]) if marker is not None else LEASE_SECONDS
    more_env = request.node.get_closest_marker("cluster_env")
    redis = await redis_or_skip()
    async with fresh_database() as dsn:
        await redis.flushdb()
        world = await make_world(tmp_path, guilds=0)
        bots: dict[int, BotProcess] = {}
        try:
            # Four guilds, alternating shards 0, 1, 0, 1, each with a channel and three members.
            for g in range(4):
                guild = world.discord.add_guild(f"Guild {g}", guild_id=_guild_id(g % SHARDS, g // SHARDS))
                world.guilds.append(guild)
                world.channels.append(world.discord.add_channel(guild, "general"))
                world.members[g] = [
                    world.discord.add_member(guild, f"member{g}-{i}", permissions=MEMBER_PERMS)
                    for i in range(3)
                ]
            world.service.rate_limit = RATE
            world.env.update(
                {
                    "DATABASE_URL": dsn,
                    "REDIS_URL": REDIS_URL,
                    "REDIS_KEY_SECRET": TEST_REDIS_KEY_SECRET,
                    "LEASE_SECONDS": str(lease_seconds),
                    "SHARD_COUNT": str(SHARDS),
                    "GEN_RATE_LIMIT": f"{RATE[0]}/{RATE[1]:g}",
                    "MEMBER_JOB_LIMIT": "3",
                    # A task's polls fit the key's window as they do in production (30 s polls, 16
                    # a minute): at 0.05 s, a task past its first expected end planned 20 polls a
                    # window against 6, so its planner admitted no other video until it ended, and
                    # a process's jobs started together only if they came within ~30 ms.
                    "GEN_POLL_INTERVAL": "0.2",
                    **(more_env.args[0] if more_env is not None else {}),
                }
            )
            for shard in range(SHARDS):
                env = {
                    **world.env,
                    "SHARD_IDS": str(shard),
                    # Each process keeps its own local files (results of inline images) apart.
                    "DATABASE_PATH": str(tmp_path / f"shard{shard}" / "framecast.sqlite3"),
                }
                bots[shard] = BotProcess(env, tmp_path / f"bot-shard{shard}.log")
            mark = world.discord.identify_count
            await bots[0].start("--sync")
            await bots[1].start()
            try:
                await world.discord.wait_ready(timeout=30, after=mark, count=SHARDS)
            except TimeoutError:
                for shard, bot in bots.items():
                    print(f"--- shard {shard} (exit {bot.proc and bot.proc.returncode}):")
                    print(bot.log_text()[-4000:])
                raise
            await world.discord.wait_for(lambda: world.discord.command_syncs >= 1, timeout=10)
            sessions = [s for s in world.discord.sessions if s.live and s.ready]
            assert sorted(s.shard for s in sessions if s.shard) == [(0, SHARDS), (1, SHARDS)], (
                "each process must IDENTIFY as its own shard"
            )
            yield Cluster(world=world, bots=bots, dsn=dsn)
        finally:
            for bot in bots.values():
                if bot.running:
                    await bot.terminate()
            await close_world(world)
            for bot in bots.values():
                log = bot.log_text()
                for secret in (world.env["DISCORD_TOKEN"], world.env["GEN_API_KEY"]):
                    assert secret not in log, "a secret reached a bot's log"
                for it in world.discord.interactions:
                    assert not it.token or it.token not in log, "an interaction token reached a bot's log"
            await redis.flushdb()
            await redis.aclose()


class Relay:
    """A TCP relay to a server (PostgreSQL, Redis) that the test can cut, blackhole and restore."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    @property
    def up(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)

    def blackhole(self) -> None:
        """A silent network: connections are accepted, and nothing passes either way until
        :meth:`restore` (then what was held passes, late, as TCP would retransmit it)."""
        self._flowing.clear()

    async def restore(self) -> None:
        """The server is back: listening again after a cut, passing data again after a blackhole."""
        self._flowing.set()
        if self._server is None:
            await self.start()

    async def cut(self) -> None:
        """Stop listening and drop every open connection (the server went away)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        await self._flowing.wait()  # a connection made in a blackhole reaches the server only after it
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    await self._flowing.wait()
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.transport.abort()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers -= {writer, up_writer}


@pytest.fixture
async def pg_relay() -> AsyncIterator[tuple[str, Relay]]:
    """A fresh PostgreSQL database reached through a relay: (its URL through the relay, the relay)."""
    async with fresh_database() as dsn:
        relay = Relay(("127.0.0.1", 5432))
        await relay.start()
        try:
            yield dsn.replace("127.0.0.1:5432", f"127.0.0.1:{relay.port}"), relay
        finally:
            await relay.cut()


@pytest.fixture
async def redis_relay() -> AsyncIterator[tuple[str, Relay]]:
    """Redis db 9 (flushed) through a relay: (its URL through the relay, the relay)."""
    client = await redis_or_skip()
    await client.flushdb()
    relay = Relay(("127.0.0.1", 6379))
    await relay.start()
    try:
        yield REDIS_URL.replace("127.0.0.1:6379", f"127.0.0.1:{relay.port}"), relay
    finally:
        await relay.cut()
        await client.flushdb()
        await client.aclose()
