"""The container: the real image, built from the Dockerfile and run against the test fakes.

Builds ``framecast:test``, runs it with host networking against a fake Discord and a fake generation
service started in this process on 127.0.0.1, waits until Docker's own health check (the image's
``HEALTHCHECK`` on ``/healthz``) reports the container healthy, then stops it the way an operator does
(``docker stop``: SIGTERM) and expects a clean exit.

Needs a Docker daemon: skipped with the reason unless ``docker info`` answers, and when
``FRAMECAST_CONTAINER_TEST=0``. ``.ci/run`` starts a private daemon with the ``docker-local`` script
named by ``FRAMECAST_DOCKER_LOCAL`` (else ``../shared/tools/docker-local`` beside the clone) where it
exists; by hand: ``eval "$(../shared/tools/docker-local)"``. Host networking is
required (that daemon has no bridge network) and is what lets the container reach the fakes.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import REPO, SCALED_ENV, World, close_world, make_world

IMAGE = "framecast:test"
# The first build installs every requirement inside the image (PyAV, cryptography...): minutes.
BUILD_TIMEOUT = 1500.0
# From `docker run` to a READY gateway session and a healthy container (the Python start-up included).
START_TIMEOUT = 120.0
# Health probe cadence for this run only (the image's own is 30 s): healthy within seconds.
HEALTH_FLAGS = (
    "--health-interval=1s",
    "--health-timeout=3s",
    "--health-retries=3",
    "--health-start-period=30s",
)


def _docker_unavailable() -> str | None:
    """Why the container test cannot run here, or None when a Docker daemon answers."""
    if os.environ.get("FRAMECAST_CONTAINER_TEST") == "0":
        return "FRAMECAST_CONTAINER_TEST=0"
    if shutil.which("docker") is None:
        return "no docker command on PATH"
    try:
        info = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 20 s"
    if info.returncode != 0:
        return (
            "no Docker daemon reachable (`docker info` failed; start one with "
            '`eval "$(../shared/tools/docker-local)"`)'
        )
    return None


@pytest.fixture(scope="module")
def docker_daemon() -> None:
    """Skip the module's tests, with the reason, unless a Docker daemon answers."""
    reason = _docker_unavailable()
    if reason is not None:
        pytest.skip(f"container test skipped: {reason}")


async def docker(*args: str, timeout: float = 60.0, check: bool = True) -> tuple[int, str]:
    """Run ``docker *args``; returns (exit code, stdout and stderr). No secret is ever an argument."""
    proc = await asyncio.create_subprocess_exec(
        "docker",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"`docker {args[0]}` took more than {timeout:g} s") from None
    text = out.decode(errors="replace")
    code = proc.returncode if proc.returncode is not None else -1
    if check and code != 0:
        raise AssertionError(f"`docker {' '.join(args[:2])}` exited with {code}:\n{text[-4000:]}")
    return code, text


async def image_id(tag: str) -> str | None:
    """The id of the image `tag` names, or None when there is none."""
    code, text = await docker("image", "inspect", "--format", "{{.Id}}", tag, check=False)
    return text.strip() if code == 0 else None


async def build_image() -> None:
    """Build the image from the repository's Dockerfile; drop the previous build of the same tag.

    The previous ``framecast:test`` would otherwise stay behind untagged, a full copy of the image per
    code change on storage drivers without sharing (docker-local uses vfs).
    """
    previous = await image_id(IMAGE)
    await docker("build", "--network=host", "-t", IMAGE, str(REPO), timeout=BUILD_TIMEOUT)
    if previous is not None and previous != await image_id(IMAGE):
        await docker("rmi", previous, check=False)


async def inspect(name: str) -> dict[str, Any]:
    """``docker inspect`` of one container or image."""
    _, text = await docker("inspect", name)
    found = json.loads(text)
    assert isinstance(found, list) and found, f"docker inspect {name}: nothing"
    return dict(found[0])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the container binds it on the host's network)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def container_env(world: World, http_port: int) -> dict[str, str]:
    """Only what the bot needs (not this machine's environment): the fakes, scaled timings, ports."""
    env = dict(world.discord.env())
    env.update(SCALED_ENV)
    env.update(
        {
            "GEN_API_BASE_URL": world.service.base_url,
            "GEN_API_KEY": world.env["GEN_API_KEY"],
            "HTTP_PORT": str(http_port),
            # On the image's /data volume (an anonymous volume here, removed with the container).
            "DATABASE_PATH": "/data/framecast.sqlite3",
        }
    )
    return env


def write_env_file(path: Path, env: dict[str, str]) -> None:
    """A ``--env-file`` readable by its owner only: the tokens stay off every command line."""
    path.touch(mode=0o600)
    path.write_text("".join(f"{key}={value}\n" for key, value in env.items()))


async def wait_healthy(name: str, timeout: float) -> dict[str, Any]:
    """Poll ``docker inspect`` until the container's health is "healthy"; returns its State."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        state = dict((await inspect(name))["State"])
        health = state.get("Health") or {}
        if health.get("Status") == "healthy":
            return state
        if state.get("Status") != "running" or health.get("Status") == "unhealthy" or loop.time() > deadline:
            _, logs = await docker("logs", name, check=False)
            probes = [entry.get("Output", "").strip()[-300:] for entry in health.get("Log") or []][-3:]
            raise AssertionError(
                f"container {state.get('Status')} (exit {state.get('ExitCode')}), health "
                f"{health.get('Status')!r}; last probes: {probes}\n--- logs ---\n{logs[-4000:]}"
            )
        await asyncio.sleep(0.5)


async def wait_connected(world: World, name: str, timeout: float) -> None:
    """Wait for the containerised bot's READY gateway session on the fake Discord (fail fast on exit)."""
    ready = asyncio.ensure_future(world.discord.wait_ready(timeout=timeout))
    try:
        while not ready.done():
            state = dict((await inspect(name))["State"])
            if state.get("Status") not in ("created", "running"):
                _, logs = await docker("logs", name, check=False)
                raise AssertionError(
                    f"the container exited with {state.get('ExitCode')} before connecting:\n{logs[-4000:]}"
                )
            await asyncio.wait({ready}, timeout=0.5)
        ready.result()
    finally:
        if not ready.done():
            ready.cancel()
        await asyncio.gather(ready, return_exceptions=True)


async def test_image_runs_healthy_and_stops_cleanly(docker_daemon: None, tmp_path: Path) -> None:
    """Build, run against the fakes, healthy by Docker's own probe, `docker stop` exits 0."""
    await build_image()
    image = await inspect(IMAGE)
    config = image["Config"]
    assert config["User"] == "framecast", "the image must not run as root"
    assert "8080/tcp" in (config.get("ExposedPorts") or {})
    assert config["Env"] and "HTTP_PORT=8080" in config["Env"]
    assert "/healthz" in " ".join((config.get("Healthcheck") or {}).get("Test") or [])
    assert config.get("StopSignal") == "SIGTERM"

    world = await make_world(tmp_path)
    name = f"framecast-test-{secrets.token_hex(4)}"
    env_file = tmp_path / "container.env"
    http_port = free_port()
    env = container_env(world, http_port)
    write_env_file(env_file, env)
    try:
        await docker(
            "run",
            "-d",
            "--name",
            name,
            "--network=host",
            "--env-file",
            str(env_file),
            *HEALTH_FLAGS,
            IMAGE,
        )
        await wait_connected(world, name, START_TIMEOUT)
        state = await wait_healthy(name, START_TIMEOUT)
        assert any(entry.get("ExitCode") == 0 for entry in state["Health"]["Log"])

        # The same endpoint the probe uses answers this test too (host network: 127.0.0.1).
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{http_port}/healthz", timeout=aiohttp.ClientTimeout(total=5)) as resp,
        ):
            assert resp.status == 200

        # `docker stop`: SIGTERM to PID 1 (python, exec-form CMD), SIGKILL only after 10 s.
        await docker("stop", "--time", "10", name, timeout=30)
        state = dict((await inspect(name))["State"])
        _, logs = await docker("logs", name)
        assert state["Status"] == "exited"
        assert state["ExitCode"] == 0, f"exit code {state['ExitCode']} after docker stop:\n{logs[-4000:]}"
        assert "stop requested" in logs and "stopped" in logs, logs[-4000:]
        for secret in (env["DISCORD_TOKEN"], env["GEN_API_KEY"]):
            assert secret not in logs, "a secret reached the container's log"
    finally:
        await docker("rm", "-f", "-v", name, check=False, timeout=60)
        await close_world(world)
