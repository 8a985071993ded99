"""The README's Docker lines, run as written: build, run with an .env made from .env.example, stop.

The commands come from the README itself (its "### Docker" block; the env file is made the way its
"Install and run" says: ``cp .env.example .env``, then the required values filled in, here pointing at
a fake Discord and a fake generation service started in this process). The test reaches ``/healthz``
from the host through the port the line publishes, waits for Docker's own health check (the image's
``HEALTHCHECK``) to call the container healthy, then runs the README's ``docker stop`` and expects a
clean shutdown (exit 0, "stopped") inside the grace the line gives (``--stop-timeout``).

What is changed in the README's lines, and why (:func:`adapt`):

* ``--network=host`` on ``docker build`` and ``docker run``: the daemon this runs on (``docker-local``)
  has host networking only, and the fakes listen on the host's 127.0.0.1, which a bridged container
  could not reach anyway. On the host network Docker discards ``-p`` (kept as written, with its
  warning): the container's port *is* the host's. ``-e HTTP_HOST=127.0.0.1`` then keeps the port on
  the host's loopback, as the README's ``-p 127.0.0.1:8080:8080`` does; and ``-e HTTP_PORT=<free>``
  is added only when the host's 8080 is taken.
* ``--health-interval``: the image's own probe, asked every second instead of every 30 s, so that
  the test learns "healthy" as soon as the bot is, not half a minute later (the image's start period
  still forgives the probes before that).
* Names: the image, the container and the volume get a unique suffix, so the test never touches an
  operator's own ``framecast`` container, and test runs sharing a daemon do not collide.

Needs a Docker daemon: skipped with the reason unless ``docker info`` answers, and when
``FRAMECAST_CONTAINER_TEST=0``. ``.ci/run`` starts a private daemon with the ``docker-local`` script
named by ``FRAMECAST_DOCKER_LOCAL`` (else ``../shared/tools/docker-local`` beside the clone) where it
exists; by hand: ``eval "$(../shared/tools/docker-local)"``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import REPO, World, close_world, make_world

# The first build installs every locked requirement inside the image (PyAV, cryptography...): minutes.
BUILD_TIMEOUT = 1500.0
# From `docker run` to a READY gateway session and a healthy container (a start on a busy machine).
START_TIMEOUT = 150.0
#: How often Docker runs the image's HEALTHCHECK in the test (the image says 30 s).
HEALTH_INTERVAL = "1s"
# Removing the container, its volume and the image: each a full copy of the image's files on vfs.
CLEANUP_TIMEOUT = 300.0
#: Variables the image sets that an env file made from .env.example must leave alone.
IMAGE_OWNS = ("DATABASE_PATH", "HTTP_PORT", "HTTP_HOST", "SHUTDOWN_TIMEOUT")
# The image build takes minutes: under pytest-xdist this module starts first (tests/conftest.py).
pytestmark = pytest.mark.minutes


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


async def remove_leftovers(name: str, image: str) -> None:
    """Remove the test's container, volume and image; a removal that fails or hangs only warns.

    Cleaning up is not what the test proves: on the vfs storage of ``docker-local`` a removal deletes
    a full copy of the image's files, which a machine busy with the other workers can take minutes
    to do, and a pass must not turn into a failure over it. Each removal is still waited for (within
    CLEANUP_TIMEOUT), so a run does not leave images to fill the disk.
    """
    for args in (("rm", "-f", "-v", name), ("volume", "rm", f"{name}-data"), ("rmi", image)):
        try:
            code, out = await docker(*args, check=False, timeout=CLEANUP_TIMEOUT)
        except AssertionError as exc:  # docker() says which command ran out of time
            warnings.warn(f"container test cleanup: {exc}", stacklevel=1)
            continue
        if code != 0 and "No such" not in out:
            warnings.warn(
                f"container test cleanup: `docker {' '.join(args)}` exited {code}: {out[-300:]}", stacklevel=1
            )


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


def readme_docker_commands() -> list[str]:
    """The commands of the README's "### Docker" block, continuation lines joined."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n### Docker\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("\n```", 1)[0]
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def readme_env_recipe() -> str:
    """The README's command that makes .env ("cp .env.example .env && nano .env")."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Install and run", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^cp \.env\.example \.env.*$", section, re.MULTILINE)
    assert found is not None, "the README no longer says how to make .env"
    return found.group(0)


def make_env_file(folder: Path, fill: dict[str, str]) -> Path:
    """``cp .env.example .env``, then the values filled in as an operator does in the editor."""
    assert readme_env_recipe().startswith("cp .env.example .env")
    env_file = folder / ".env"
    shutil.copy(REPO / ".env.example", env_file)
    env_file.chmod(0o600)  # the tokens stay readable by this user only
    text = env_file.read_text()
    for key, value in fill.items():
        text, n = re.subn(rf"(?m)^#?\s*{key}=.*$", f"{key}={value}", text)
        assert n == 1, f"{key} is not in .env.example"
    env_file.write_text(text)
    return env_file


def port_free(port: int) -> bool:
    """Whether nothing listens on the host's `port` now."""
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def adapt(command: str, *, suffix: str, http_port: int) -> list[str]:
    """The README's `command` as run here: host networking and unique names (see the module's doc)."""
    words = shlex.split(command)
    assert words[0] == "docker", command
    verb = words[1]
    if verb == "build":
        assert words[2:] == ["-t", "framecast", "."], command
        return ["docker", "build", "--network=host", "-t", f"framecast-{suffix}", "."]
    if verb == "run":
        out = [
            "docker",
            "run",
            "--network=host",
            "-e",
            "HTTP_HOST=127.0.0.1",
            f"--health-interval={HEALTH_INTERVAL}",
        ]
        if http_port != 8080:
            out += ["-e", f"HTTP_PORT={http_port}"]
        rest = words[2:]
        assert rest[-1] == "framecast" and rest[rest.index("--name") + 1] == "framecast", command
        rest[rest.index("--name") + 1] = f"framecast-{suffix}"
        rest = [f"framecast-{suffix}-data:/data" if w == "framecast-data:/data" else w for w in rest]
        rest[-1] = f"framecast-{suffix}"
        return out + rest
    if verb == "stop":
        assert words[2:] == ["framecast"], command
        return ["docker", "stop", f"framecast-{suffix}"]
    raise AssertionError(f"the README's Docker block has a command this test does not know: {command}")


async def sh(args: list[str], *, cwd: Path, timeout: float) -> tuple[int, str]:
    """Run one adapted README command; returns (exit code, output)."""
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=str(cwd),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"`{shlex.join(args[:3])}` took more than {timeout:g} s") from None
    return (proc.returncode if proc.returncode is not None else -1), out.decode(errors="replace")


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


async def get_healthz(port: int) -> int:
    """``/healthz`` from the host through the published port: its status, or 0 while nothing answers."""
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz", timeout=aiohttp.ClientTimeout(total=5)) as resp,
        ):
            return resp.status
    except aiohttp.ClientError:
        return 0


async def until_healthz(port: int, timeout: float) -> int:
    """Ask ``/healthz`` until it answers 200 or `timeout` passes; its last status."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    status = await get_healthz(port)
    while status != 200 and loop.time() < deadline:
        await asyncio.sleep(0.2)  # the bot's start-up: nothing to wait on from outside the container
        status = await get_healthz(port)
    return status


def test_the_readme_gives_the_docker_lines_this_test_runs() -> None:
    commands = readme_docker_commands()
    assert [c.split()[1] for c in commands] == ["build", "run", "stop"]
    run = shlex.split(commands[1])
    assert "--env-file" in run and run[run.index("--env-file") + 1] == ".env"
    assert "-p" in run and run[run.index("-p") + 1] == "127.0.0.1:8080:8080"
    # Docker's grace must hold the bot's whole bounded shutdown (SHUTDOWN_TIMEOUT + 10 s of closing).
    image_shutdown = re.search(r"SHUTDOWN_TIMEOUT=(\d+)", (REPO / "Dockerfile").read_text())
    assert image_shutdown is not None
    assert int(run[run.index("--stop-timeout") + 1]) > int(image_shutdown.group(1)) + 10


def test_an_env_file_made_from_env_example_leaves_the_images_settings_alone(tmp_path: Path) -> None:
    text = make_env_file(tmp_path, {"DISCORD_TOKEN": "t", "GEN_API_KEY": "k"}).read_text()
    for key in IMAGE_OWNS:
        assert not re.search(rf"(?m)^{key}=", text), f".env.example sets {key}: it would override the image's"


async def test_the_readmes_docker_lines_run_healthy_and_stop_cleanly(
    docker_daemon: None, tmp_path: Path
) -> None:
    """Build, run with .env from .env.example, /healthz through the published port, healthy, stop: exit 0."""
    build, run, stop = readme_docker_commands()
    suffix = f"test-{secrets.token_hex(4)}"
    image = f"framecast-{suffix}"
    http_port = 8080 if port_free(8080) else free_port()
    world = await make_world(tmp_path)
    fill = {
        **world.discord.env(),
        "GEN_API_BASE_URL": world.service.base_url,
        "GEN_API_KEY": world.env["GEN_API_KEY"],
    }
    make_env_file(tmp_path, fill)
    name = f"framecast-{suffix}"
    try:
        code, out = await sh(
            adapt(build, suffix=suffix, http_port=http_port), cwd=REPO, timeout=BUILD_TIMEOUT
        )
        assert code == 0, out[-4000:]
        config = (await inspect(image))["Config"]
        assert config["User"] == "framecast", "the image must not run as root"
        assert config.get("StopSignal") == "SIGTERM"
        assert "/healthz" in " ".join((config.get("Healthcheck") or {}).get("Test") or [])

        # `docker run` from the folder holding .env (the README's `--env-file .env`).
        code, out = await sh(adapt(run, suffix=suffix, http_port=http_port), cwd=tmp_path, timeout=120)
        assert code == 0, out[-4000:]
        await wait_connected(world, name, START_TIMEOUT)
        status = await until_healthz(http_port, timeout=30)
        assert status == 200, "/healthz does not answer through the published port"
        state = await wait_healthy(name, START_TIMEOUT)
        assert any(entry.get("ExitCode") == 0 for entry in state["Health"]["Log"])
        env = dict(e.split("=", 1) for e in (await inspect(name))["Config"]["Env"])
        assert env["DATABASE_PATH"] == "/data/framecast.sqlite3" and env["SHUTDOWN_TIMEOUT"] == "8"

        grace = float(shlex.split(run)[shlex.split(run).index("--stop-timeout") + 1])
        started = time.monotonic()
        code, out = await sh(
            adapt(stop, suffix=suffix, http_port=http_port), cwd=tmp_path, timeout=grace + 30
        )
        took = time.monotonic() - started
        assert code == 0, out
        state = dict((await inspect(name))["State"])
        _, logs = await docker("logs", name)
        assert state["Status"] == "exited"
        assert state["ExitCode"] == 0, f"exit code {state['ExitCode']} after docker stop:\n{logs[-4000:]}"
        assert took < grace, f"docker stop took {took:.1f} s: the grace ({grace:g} s) ran out"
        assert "stop requested" in logs and "stopped" in logs, logs[-4000:]
        for secret in (fill["DISCORD_TOKEN"], fill["GEN_API_KEY"]):
            assert secret not in logs, "a secret reached the container's log"
    finally:
        await remove_leftovers(name, image)
        await close_world(world)
