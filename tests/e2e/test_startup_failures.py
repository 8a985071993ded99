"""Start-up failures an operator meets: each one line naming the variable, before the login, all at once.

``HTTP_PORT`` taken, ``DATABASE_PATH`` a directory or a file that is not SQLite, an unreachable
PostgreSQL or Redis: one ``start-up error`` line each, exit code 2, and Discord never asked (the
checks come before the login). Several missing or malformed variables: one message naming them all.
``GEN_API_BASE_URL`` left at ``.env.example``'s placeholder: the line says what to put there. No line
echoes a password.
"""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from framecast.keys.redis_names import SECRET_MARK, check_secret
from tests.e2e.endpoints import free_port
from tests.e2e.harness import REPO, World, close_world, make_world
from tests.fakes.keys import TEST_REDIS_KEY_SECRET
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


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on (every interface, as the image's HTTP_HOST)."""
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def startup_errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The ``start-up error`` lines of a run, from ``VARIABLE:`` on."""
    out = proc.stdout + proc.stderr
    return [line.split("start-up error: ", 1)[1] for line in out.splitlines() if "start-up error: " in line]


def asked_discord(world: World) -> bool:
    """Whether the bot tried to log in (``GET /users/@me``) or open the gateway."""
    return bool(world.discord.requests_to("GET", "/users/@me")) or bool(world.discord.sessions)


async def test_http_port_in_use_at_start_is_one_line_before_the_login(
    idle_world: World, taken_port: int
) -> None:
    env = {**idle_world.env, "HTTP_PORT": str(taken_port), "HTTP_HOST": "0.0.0.0", "LOG_LEVEL": "INFO"}
    proc = await asyncio.to_thread(run_bot_once, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert startup_errors(proc) == [
        f"HTTP_PORT: cannot listen on 0.0.0.0:{taken_port} (Address already in use)"
    ]
    assert "Traceback" not in out, "a known start-up problem should be one line, not a traceback"
    assert not asked_discord(idle_world)


async def test_an_http_host_that_does_not_resolve_says_so_in_one_line(
    idle_world: World, taken_port: int
) -> None:
    env = {**idle_world.env, "HTTP_PORT": str(taken_port), "HTTP_HOST": "no-such-host.invalid"}
    proc = await asyncio.to_thread(run_bot_once, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    [error] = startup_errors(proc)
    assert error.startswith(f"HTTP_PORT: cannot listen on no-such-host.invalid:{taken_port} (")
    assert "Unknown error" not in error and "Traceback" not in out  # it was "Unknown error -2"


async def test_a_database_path_too_long_for_the_system_is_one_line_before_the_login(
    idle_world: World,
) -> None:
    path = idle_world.tmp / ("d" * 300) / "framecast.sqlite3"
    proc = await asyncio.to_thread(run_bot_once, {**idle_world.env, "DATABASE_PATH": str(path)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    [error] = startup_errors(proc)
    assert error.startswith("DATABASE_PATH: cannot open ") and "File name too long" in error
    assert "Traceback" not in out


async def test_a_database_path_that_is_a_directory_is_one_line_before_the_login(idle_world: World) -> None:
    folder = idle_world.tmp / "a-folder"
    folder.mkdir()
    proc = await asyncio.to_thread(run_bot_once, {**idle_world.env, "DATABASE_PATH": str(folder)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert startup_errors(proc) == [f"DATABASE_PATH: {folder} is a directory, not a database file"]
    assert "Traceback" not in out
    assert not asked_discord(idle_world)


async def test_a_database_path_that_is_not_sqlite_is_one_line_before_the_login(idle_world: World) -> None:
    notes = idle_world.tmp / "notes.txt"
    notes.write_text("not a database, just some notes\n" * 200)
    proc = await asyncio.to_thread(run_bot_once, {**idle_world.env, "DATABASE_PATH": str(notes)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert startup_errors(proc) == [
        f"DATABASE_PATH: {notes} is not a usable SQLite database (file is not a database)"
    ]
    assert "Traceback" not in out
    assert notes.read_text().startswith("not a database")  # left as it was
    assert not asked_discord(idle_world)


async def test_every_setup_problem_is_told_at_once(idle_world: World, taken_port: int) -> None:
    folder = idle_world.tmp / "a-folder"
    folder.mkdir()
    closed = free_port()
    env = {
        **idle_world.env,
        "HTTP_PORT": str(taken_port),
        "HTTP_HOST": "0.0.0.0",
        "DATABASE_PATH": str(folder),
        "REDIS_URL": f"redis://:hunter2-secret@127.0.0.1:{closed}/0",
        "REDIS_KEY_SECRET": TEST_REDIS_KEY_SECRET,
    }
    proc = await asyncio.to_thread(run_bot_once, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert [line.split(":", 1)[0] for line in startup_errors(proc)] == [
        "HTTP_PORT",
        "DATABASE_PATH",
        "REDIS_URL",
    ]
    assert "hunter2" not in out and "Traceback" not in out
    assert not asked_discord(idle_world)


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


async def test_several_missing_or_malformed_variables_are_named_in_one_message(idle_world: World) -> None:
    env = {k: v for k, v in idle_world.env.items() if k not in ("DISCORD_TOKEN", "GEN_API_KEY")}
    env.update({"GEN_POLL_INTERVAL": "soon", "HTTP_PORT": "99999"})
    proc = await asyncio.to_thread(run_bot_once, env)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert [re.sub(r":.*", "", line.removeprefix("framecast: configuration error: ")) for line in lines] == [
        "DISCORD_TOKEN",
        "GEN_API_KEY",
        "GEN_POLL_INTERVAL",
        "HTTP_PORT",
    ], proc.stderr
    assert all(line.startswith("framecast: configuration error: ") for line in lines)
    assert not asked_discord(idle_world)


async def test_the_env_example_placeholder_for_the_service_says_what_to_put_there(idle_world: World) -> None:
    example = (REPO / ".env.example").read_text()
    placeholder = re.search(r"(?m)^GEN_API_BASE_URL=(.+)$", example)
    assert placeholder is not None
    proc = await asyncio.to_thread(run_bot_once, {**idle_world.env, "GEN_API_BASE_URL": placeholder.group(1)})
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("framecast: configuration error: GEN_API_BASE_URL: is still the placeholder")
    assert "put your generation service's API address here" in lines[0]


async def test_shard_ids_without_shard_count_is_a_config_error(idle_world: World) -> None:
    proc = await asyncio.to_thread(run_bot_once, {**idle_world.env, "SHARD_IDS": "0"})
    assert proc.returncode == 2
    assert "SHARD_IDS" in proc.stderr and "SHARD_COUNT" in proc.stderr


async def test_unreachable_database_url_is_one_line_before_the_login_without_the_password(
    idle_world: World,
) -> None:
    closed = free_port()
    url = f"postgresql://framecast:hunter2-secret@127.0.0.1:{closed}/framecast"
    proc = await asyncio.to_thread(run_bot_once, {**idle_world.env, "DATABASE_URL": url, "LOG_LEVEL": "INFO"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert "hunter2" not in out
    [line] = startup_errors(proc)
    assert line.startswith("DATABASE_URL: ") and f"127.0.0.1:{closed}" in line and "PostgreSQL" in line, out[
        -2000:
    ]
    assert not asked_discord(idle_world)


async def test_unreachable_redis_url_is_one_line_before_the_login_without_the_password(
    idle_world: World,
) -> None:
    closed = free_port()
    url = f"redis://:hunter2-secret@127.0.0.1:{closed}/0"
    env = {
        **idle_world.env,
        "REDIS_URL": url,
        "REDIS_KEY_SECRET": TEST_REDIS_KEY_SECRET,
        "LOG_LEVEL": "DEBUG",
    }
    proc = await asyncio.to_thread(run_bot_once, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert startup_errors(proc) == [f"REDIS_URL: cannot reach Redis at 127.0.0.1:{closed} (ConnectionError)"]
    assert "hunter2" not in out and "Traceback" not in out
    assert not asked_discord(idle_world)


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
    assert proc.returncode == 2, out[-2000:]
    assert "REDIS_KEY_SECRET: another process on this Redis uses a different one" in out, out[-2000:]
    assert not asked_discord(idle_world)  # told before the login, like every other setup problem
    assert "Traceback" not in out and "hidden4242" not in out and "o" * 20 not in out
