"""Start-up failures an operator meets, each told in a clear line that echoes no password.

``HTTP_PORT`` taken, malformed ``DATABASE_URL`` / ``REDIS_URL``, ``SHARD_IDS`` without
``SHARD_COUNT``, an unreachable PostgreSQL; and an unreachable Redis never leaks its password
into the log.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from framecast.keys.redis_names import SECRET_MARK, check_secret
from tests.e2e.endpoints import free_port
from tests.e2e.harness import REPO, BotProcess, World, close_world, make_world
from tests.workers import redis_url


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


async def test_a_redis_key_secret_differing_from_the_other_processes_is_one_clear_line(
    idle_world: World,
) -> None:
    """The processes on one Redis must name budgets under one REDIS_KEY_SECRET, or each would spend
    the whole key: a process started with another secret stops, saying so, echoing neither."""
    url = redis_url()  # this xdist worker's own database
    client = aioredis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        try:
            await client.delete(SECRET_MARK)
        except Exception:
            pytest.skip(f"no Redis at {url}")
        await check_secret(client, "the-other-processes-secret-" + "o" * 20)  # they run already
        theirs = "mine-hidden4242-" + "m" * 30
        env = {**idle_world.env, "REDIS_URL": url, "REDIS_KEY_SECRET": theirs, "LOG_LEVEL": "INFO"}
        proc = await asyncio.to_thread(run_bot_once, env)
    finally:
        await client.delete(SECRET_MARK)
        await client.aclose()
    out = proc.stdout + proc.stderr
    assert proc.returncode not in (0, None), out[-2000:]
    assert "REDIS_KEY_SECRET: another process on this Redis uses a different one" in out, out[-2000:]
    assert "Traceback" not in out and "hidden4242" not in out and "o" * 20 not in out
