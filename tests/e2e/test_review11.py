"""Review of issue 11 (operate and scale out), as an independent tester: cases the other tests leave out.

* ``/readyz`` while the database is unreachable (PostgreSQL behind a TCP relay the test cuts) and
  while the model list never loaded; ``/metrics`` after 429s, failures, Discord errors and
  re-encodes.
* Start-up failures an operator meets: ``HTTP_PORT`` taken, an unreachable ``DATABASE_URL``,
  malformed URLs, ``SHARD_IDS`` without ``SHARD_COUNT``: each a clear line, no password echoed.
* Redis going away mid-run (the budget fails closed, then recovers), one process on PostgreSQL
  (no sharding) behaving like SQLite, and two shards: SIGTERM of one, a restart getting its jobs
  back, a takeover of a job whose upload was under way, and two processes on the same shard.
* The compose file as Debian's ``docker-compose`` reads it.

PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379) tests skip, saying so, without servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.e2e.harness import (
    REPO,
    BotProcess,
    StartWorld,
    World,
    close_world,
    hold_route,
    make_world,
    service_creates,
    wait_log,
)
from tests.e2e.test_operate import Ops, free_port, parse, value
from tests.e2e.test_scale_out import (  # noqa: F401 - the cluster fixture is used by name
    LEASE_SECONDS,
    REDIS_URL,
    SLOW,
    Cluster,
    _redis_or_skip,
    cluster,
)
from tests.fakes.gen_service import TaskPlan
from tests.fakes.media import make_large_mp4
from tests.pg import fresh_database, pg_dsn  # noqa: F401 - a fixture used by name

MiB = 1024 * 1024


class Relay:
    """A TCP relay to a server (PostgreSQL, Redis) that the test can cut and restore on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def up(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)

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
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
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


@contextlib.asynccontextmanager
async def ops_of(world: World) -> AsyncIterator[Ops]:
    """The world's bot's operating endpoints."""
    async with aiohttp.ClientSession() as session:
        yield Ops(session, int(world.env["HTTP_PORT"]))


def ready_body(text: str) -> dict[str, Any]:
    return dict(json.loads(text))


# -- /readyz ------------------------------------------------------------------------------------------
async def test_readyz_names_the_database_while_postgresql_is_unreachable_and_recovers(
    pg_relay: tuple[str, Relay], start: StartWorld
) -> None:
    dsn, relay = pg_relay
    world = await start(extra_env={"HTTP_PORT": str(free_port()), "DATABASE_URL": dsn})
    async with ops_of(world) as ops:
        await ops.until("/readyz", lambda s, _: s == 200, what="ready")
        await relay.cut()
        status, text = await ops.until("/readyz", lambda s, _: s == 503, timeout=15, what="not ready")
        checks = ready_body(text)["checks"]
        assert checks["database"] != "ok" and checks["gateway"] == "ok" and checks["models"] == "ok"
        assert (await ops.get("/healthz"))[0] == 200  # alive: no restart for a database outage
        await relay.start()
        await ops.until("/readyz", lambda s, _: s == 200, timeout=20, what="ready again")
        # And the store works again: a job goes through.
        it = await world.video("after the database came back")
        await world.delivered(it)


async def test_readyz_fails_on_models_while_the_model_list_never_loaded(start: StartWorld) -> None:
    def models_down(world: World) -> None:
        world.service.path_scripted["/v1/models"] = [(503, {"error": {"message": "down"}}, None)] * 200

    world = await start(setup=models_down, extra_env={"HTTP_PORT": str(free_port())})
    async with ops_of(world) as ops:
        await ops.until("/healthz", lambda s, _: s == 200, what="healthy")
        await wait_log(world, "could not load the model list", timeout=20)
        # Connected and the database answers: only the model list keeps the bot from being ready.
        status, text = await ops.until(
            "/readyz", lambda s, t: ready_body(t)["checks"]["gateway"] == "ok", timeout=15, what="connected"
        )
        assert status == 503
        assert ready_body(text)["checks"] == {"gateway": "ok", "database": "ok", "models": "failed"}


# -- /metrics after trouble ---------------------------------------------------------------------------
async def test_metrics_count_429s_failures_discord_errors_and_reencodes(start: StartWorld) -> None:
    world = await start(extra_env={"HTTP_PORT": str(free_port()), "REENCODE_TIMEOUT": "60"})
    async with ops_of(world) as ops:
        await ops.until("/readyz", lambda s, _: s == 200, what="ready")
        # Two 429s on the create, then a video too large for the channel: re-encoded to fit.
        world.service.path_scripted["/v1/videos"] = [
            (429, {"error": {"message": "slow down", "type": "rate_limit_error"}}, {"Retry-After": "0.1"})
        ] * 2
        world.service.video_payload = make_large_mp4(3 * MiB, width=320, height=240)
        it = await world.video("too large a lighthouse", attachment_size_limit=1 * MiB)
        await world.delivered(it, timeout=60)
        # A job that fails: the service fails the task.
        world.service.plans.append(("doomed", TaskPlan(outcome="failed", error="content_policy")))
        await world.video("doomed prompt")
        # A Discord error on an edit of the job message.
        world.discord.fail_next("PATCH /webhooks", status=403, code=50013, count=1)
        await ops.until(
            "/metrics",
            lambda s, t: (
                (value(parse(t), "framecast_jobs_delivered_total", kind="video") or 0) >= 1
                and sum(v for (n, _), v in parse(t).items() if n == "framecast_jobs_failed_total") >= 1
            ),
            timeout=20,
            what="counting the delivery and the failure",
        )
        samples = await ops.samples()
    names = {n for (n, _) in samples}
    for family in (
        "framecast_jobs",
        "framecast_queue_depth",
        "framecast_service_requests_total",
        "framecast_service_429_total",
        "framecast_budget_used",
        "framecast_planner_concurrency",
        "framecast_completion_to_file_seconds_count",
        "framecast_discord_errors_total",
        "framecast_reencodes_total",
        "framecast_reencode_seconds_count",
        "framecast_jobs_failed_total",
    ):
        assert family in names, f"{family} missing from /metrics"
    assert value(samples, "framecast_service_429_total", key="operator") == 2
    # (README's metrics table gives this family a `key` label too; the code has kind and status only.)
    assert value(samples, "framecast_service_requests_total", kind="create_video", status="429") == 2
    fitted = value(samples, "framecast_reencodes_total", kind="video", outcome="fitted")
    assert fitted is not None and fitted >= 1
    assert (value(samples, "framecast_reencode_seconds_count", kind="video") or 0) >= 1
    failures = {
        dict(labels).get("code")
        for (n, labels), v in samples.items()
        if n == "framecast_jobs_failed_total" and v
    }
    assert failures and None not in failures
    errors = {
        (dict(labels)["status"], dict(labels)["code"])
        for (n, labels), v in samples.items()
        if n == "framecast_discord_errors_total" and v
    }
    assert ("403", "50013") in errors, errors


# -- start-up failures --------------------------------------------------------------------------------
def run_bot_once(env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``python bot.py`` to its exit (a start-up failure), output captured."""
    return subprocess.run(
        [sys.executable, str(REPO / "bot.py")],
        cwd=str(REPO),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
async def idle_world(tmp_path: Path) -> AsyncIterator[World]:
    """The fakes, no bot."""
    world = await make_world(tmp_path)
    try:
        yield world
    finally:
        await close_world(world)


async def test_http_port_in_use_at_start_is_a_clear_error(idle_world: World) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**idle_world.env, "HTTP_PORT": str(port), "LOG_LEVEL": "INFO"}
        proc = await asyncio.to_thread(run_bot_once, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode not in (0, None), out[-2000:]
    assert "HTTP_PORT" in out or f"port {port}" in out, out[-2000:]
    assert "Traceback" not in out, "a known start-up problem should be one line, not a traceback"


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("DATABASE_URL", "mysql://framecast:hunter2-secret@127.0.0.1/framecast"),
        ("REDIS_URL", "http://:hunter2-secret@127.0.0.1:6379/0"),
    ],
)
async def test_malformed_store_urls_are_one_config_line_without_the_password(
    idle_world: World, name: str, url: str
) -> None:
    proc = await asyncio.to_thread(run_bot_once, {**idle_world.env, name: url})
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and name in lines[0] and "configuration error" in lines[0], proc.stderr
    assert "hunter2" not in proc.stdout + proc.stderr


async def test_shard_ids_without_shard_count_is_a_config_error(idle_world: World) -> None:
    proc = await asyncio.to_thread(run_bot_once, {**idle_world.env, "SHARD_IDS": "0"})
    assert proc.returncode == 2
    assert "SHARD_IDS" in proc.stderr and "SHARD_COUNT" in proc.stderr


async def test_unreachable_database_url_fails_fast_without_the_password(idle_world: World) -> None:
    closed = free_port()
    url = f"postgresql://framecast:hunter2-secret@127.0.0.1:{closed}/framecast"
    proc = await asyncio.to_thread(run_bot_once, {**idle_world.env, "DATABASE_URL": url, "LOG_LEVEL": "INFO"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    assert "hunter2" not in out
    assert f"127.0.0.1:{closed}" in out and "PostgreSQL" in out, out[-2000:]
    # (It is logged with a traceback, though the message alone says it all: see the HTTP_PORT test.)


async def test_unreachable_redis_url_does_not_leak_the_password(idle_world: World) -> None:
    closed = free_port()
    url = f"redis://:hunter2-secret@127.0.0.1:{closed}/0"
    env = {**idle_world.env, "REDIS_URL": url, "LOG_LEVEL": "DEBUG", "HTTP_PORT": str(free_port())}
    bot = BotProcess(env, idle_world.tmp / "redis-down.log")
    await bot.start()
    try:
        await asyncio.sleep(6)
    finally:
        if bot.running:
            await bot.terminate()
    assert "hunter2" not in bot.log_text()


# -- Redis and PostgreSQL in one process ---------------------------------------------------------------
@pytest.fixture
async def redis_relay() -> AsyncIterator[tuple[str, Relay]]:
    """Redis db 9 (flushed) through a relay: (its URL through the relay, the relay)."""
    client = await _redis_or_skip()
    await client.flushdb()
    relay = Relay(("127.0.0.1", 6379))
    await relay.start()
    try:
        yield REDIS_URL.replace("127.0.0.1:6379", f"127.0.0.1:{relay.port}"), relay
    finally:
        await relay.cut()
        await client.flushdb()
        await client.aclose()


async def test_redis_going_away_mid_run_fails_closed_then_recovers(
    redis_relay: tuple[str, Relay], start: StartWorld
) -> None:
    url, relay = redis_relay
    world = await start(extra_env={"REDIS_URL": url, "HTTP_PORT": str(free_port())})
    first = await world.video("before the outage")
    await world.delivered(first)
    async with ops_of(world) as ops:
        samples = await ops.samples()  # the shared budget is shown like the local one
    assert value(samples, "framecast_budget_limit", key="operator") == 16
    assert value(samples, "framecast_budget_used", key="operator") is not None
    await relay.cut()
    before = len(world.service.requests)
    it = await world.video("during the outage")
    await asyncio.sleep(2.0)  # two scaled budget windows
    # Fail closed: without Redis no grant, so nothing reaches the service.
    assert service_creates(world, "during the outage") == []
    assert len(world.service.requests) == before
    async with ops_of(world) as ops:
        assert (await ops.get("/healthz"))[0] == 200
    await relay.start()
    await world.delivered(it, timeout=30)
    assert len(service_creates(world, "during the outage")) == 1
    assert world.service.count(status=429) == 0


async def test_one_process_on_postgresql_without_shards_works_like_sqlite(
    pg_dsn: str,  # noqa: F811 - first: the database outlives the bot
    start: StartWorld,
) -> None:
    dsn = pg_dsn
    world = await start(extra_env={"DATABASE_URL": dsn})
    world.service.plans.append(("slow", TaskPlan(duration=2.0)))
    video = await world.video("a plain video on postgres", member=world.members[0][0])
    image = await world.image("a plain image on postgres", member=world.members[0][1])
    slow = await world.video("a slow video on postgres", member=world.members[0][2])
    await world.delivered(video)
    await world.delivered(image)
    slow_id = await world.job_id(slow)
    await world.service.wait_for(lambda: len(service_creates(world, "a slow video on postgres")) == 1)
    # A crash mid-poll, then a restart: the job continues on the same task, at once (same owner).
    await asyncio.sleep(0.3)
    await world.bot.kill()
    restarted = time.monotonic()
    await world.restart_bot()
    await world.delivered(slow, timeout=30)
    assert time.monotonic() - restarted < 15
    assert len(service_creates(world, "a slow video on postgres")) == 1
    assert len(world.files_for(slow_id)) == 1
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        rows = await conn.fetch("SELECT id, state, lease_owner FROM jobs ORDER BY id")
    finally:
        await conn.close()
    assert [r["state"] for r in rows] == ["delivered"] * 3
    assert {r["lease_owner"] for r in rows} == {"framecast"}


# -- two shards --------------------------------------------------------------------------------------
async def _slow_jobs_on(cl: Cluster, shard: int) -> dict[str, int]:
    """One slow job in each guild of `shard`, RUNNING on the service: prompt -> job id."""
    world = cl.world
    world.service.plans.append(("slow", TaskPlan(duration=SLOW)))
    prompts = {f"slow review job on guild {g}": g for g in cl.guilds_of(shard)}
    ids = {}
    for prompt, g in prompts.items():
        ids[prompt] = await world.job_id(await world.video(prompt, guild=g))
    await world.service.wait_for(
        lambda: all(len(service_creates(world, p)) == 1 for p in prompts), timeout=30
    )
    deadline = time.monotonic() + 5
    while any(row["state"] != "running" for j, row in (await cl.jobs()).items() if j in ids.values()):
        assert time.monotonic() < deadline, "the jobs never showed RUNNING"
        await asyncio.sleep(0.05)
    return ids


async def test_sigterm_of_one_shard_stops_cleanly_and_the_other_takes_over(cluster: Cluster) -> None:  # noqa: F811
    world = cluster.world
    ids = await _slow_jobs_on(cluster, 1)
    began = time.monotonic()
    code = await cluster.bots[1].terminate()
    assert code == 0 and time.monotonic() - began < 10
    if ids:
        await world.discord.wait_for(lambda: all(world.files_for(j) for j in ids.values()), timeout=45)
    await asyncio.sleep(0.5)
    rows = await cluster.jobs()
    for prompt, job_id in ids.items():
        assert len(world.files_for(job_id)) == 1
        assert len(service_creates(world, prompt)) == 1
        assert rows[job_id]["state"] == "delivered" and rows[job_id]["lease_owner"] == "framecast-shards-0"


async def test_a_restarted_shard_gets_its_own_jobs_back_before_anyone_takes_them(cluster: Cluster) -> None:  # noqa: F811
    world = cluster.world
    ids = await _slow_jobs_on(cluster, 1)
    assert await cluster.bots[1].terminate() == 0
    mark = world.discord.identify_count
    await cluster.bots[1].start()
    await world.discord.wait_ready(timeout=30, after=mark)
    if ids:
        await world.discord.wait_for(lambda: all(world.files_for(j) for j in ids.values()), timeout=45)
    await asyncio.sleep(0.5)
    rows = await cluster.jobs()
    for prompt, job_id in ids.items():
        assert len(world.files_for(job_id)) == 1
        assert len(service_creates(world, prompt)) == 1
        assert rows[job_id]["lease_owner"] == "framecast-shards-1"
    assert "taken over from a lapsed lease" not in cluster.bots[0].log_text()


async def test_takeover_of_a_job_killed_mid_upload_delivers_it_exactly_once(cluster: Cluster) -> None:  # noqa: F811
    world = cluster.world
    victim, survivor = 1, 0
    g = cluster.guilds_of(victim)[0]
    release, held = hold_route(
        world.discord,
        "PATCH",
        "/webhooks/{app_id}/{token}/messages/{message_id}",
        when=lambda call: bool(call.uploads),
    )
    it = await world.video("a job cut off mid upload", guild=g)
    job_id = await world.job_id(it)
    await world.discord.wait_for(lambda: held, timeout=20, what="the upload to be stored")
    assert len(world.files_for(job_id)) == 1
    await cluster.bots[victim].kill()
    release.set()
    assert (await cluster.jobs())[job_id]["state"] == "delivering"
    deadline = time.monotonic() + 30
    while (await cluster.jobs())[job_id]["state"] != "delivered":
        assert time.monotonic() < deadline, "the survivor never finished the job"
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    assert len(world.files_for(job_id)) == 1
    assert len(service_creates(world, "a job cut off mid upload")) == 1
    assert (await cluster.jobs())[job_id]["lease_owner"] == f"framecast-shards-{survivor}"
    assert f"job {job_id} taken over from a lapsed lease" in cluster.bots[survivor].log_text()


async def test_a_second_process_on_the_same_shard_leaves_the_first_ones_jobs_alone(
    cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    world = cluster.world
    ids = await _slow_jobs_on(cluster, 1)
    twin = BotProcess(
        {**cluster.bots[1].env, "DATABASE_PATH": str(tmp_path / "twin" / "f.sqlite3")}, tmp_path / "twin.log"
    )
    await twin.start()
    try:
        await wait_log_of(twin, "scheduler started with", timeout=20)
        if ids:
            await world.discord.wait_for(lambda: all(world.files_for(j) for j in ids.values()), timeout=45)
        await asyncio.sleep(0.5)
        for prompt, job_id in ids.items():
            assert len(world.files_for(job_id)) == 1
            assert len(service_creates(world, prompt)) == 1
        # The twin must not run jobs a live process holds (or must refuse to start at all).
        assert twin.running is False or "scheduler started with 0 unfinished job(s)" in twin.log_text()
    finally:
        if twin.running:
            await twin.terminate()


async def wait_log_of(bot: BotProcess, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in bot.log_text():
        if not bot.running:
            return
        assert time.monotonic() < deadline, f"{text!r} never logged"
        await asyncio.sleep(0.05)


# -- compose -----------------------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed")
def test_compose_file_is_valid_and_the_bot_service_is_operable(tmp_path: Path) -> None:
    # A copy beside an empty .env (env_file must exist), as a fresh clone made from .env.example has.
    shutil.copy(REPO / "docker-compose.yml", tmp_path / "docker-compose.yml")
    (tmp_path / ".env").write_text("")
    env = {**os.environ, "POSTGRES_PASSWORD": "pw"}
    for profile in ([], ["--profile", "scale"]):
        out = subprocess.run(
            ["docker-compose", *profile, "config"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr

    def compose(*args: str) -> str:
        done = subprocess.run(
            ["docker-compose", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    services = compose("--profile", "scale", "config", "--services").split()
    assert sorted(services) == ["bot", "bot-shard0", "bot-shard1", "postgres", "redis"]
    text = compose("--profile", "scale", "config")
    assert text.count("restart: unless-stopped") == 5
    assert "framecast-data:/data" in text and "HTTP_PORT: '8080'" in text
    assert "SHARD_IDS: '0'" in text and "SHARD_IDS: '1'" in text and text.count("SHARD_COUNT: '2'") == 2
    assert text.count("DATABASE_URL: postgresql://framecast:pw@postgres/framecast") == 2
    assert text.count("condition: service_healthy") == 4
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile
