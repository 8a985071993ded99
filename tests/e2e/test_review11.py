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
import redis.asyncio as aioredis

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
from tests.pg import fresh_database

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
    start: StartWorld, pg_relay: tuple[str, Relay]
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
        failed = await world.video("doomed prompt")
        # A Discord error on an edit of the job message.
        world.discord.fail_next("PATCH /webhooks", status=403, code=50013, count=1)
        await ops.until(
            "/metrics",
            lambda s, t: (value(parse(t), "framecast_jobs_delivered_total", kind="video") or 0) >= 1
            and sum(v for (n, _), v in parse(t).items() if n == "framecast_jobs_failed_total") >= 1,
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
    failures = {dict(labels).get("code") for (n, labels), v in samples.items() if n == "framecast_jobs_failed_total" and v}
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
