"""``docker-compose.yml`` as Debian's ``docker-compose`` reads it: valid, and every service operable."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import REPO


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed")
def test_compose_file_is_valid_and_the_bot_service_is_operable(tmp_path: Path) -> None:
    # A copy beside an empty .env (env_file must exist), as a fresh clone made from .env.example has.
    shutil.copy(REPO / "docker-compose.yml", tmp_path / "docker-compose.yml")
    (tmp_path / ".env").write_text("")
    env = {**os.environ, "POSTGRES_PASSWORD": "pw", "REDIS_PASSWORD": "rpw", "REDIS_KEY_SECRET": "k" * 32}
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

    # (Debian's docker-compose 1.29 lists and renders every service whatever the profiles.)
    services = compose("--profile", "scale", "config", "--services").split()
    assert sorted(services) == [
        "bot",
        "bot-shard0",
        "bot-shard1",
        "bot-web",
        "grafana",
        "postgres",
        "prometheus",
        "redis",
    ]
    text = compose("--profile", "scale", "config")
    assert text.count("restart: unless-stopped") == 8
    assert "framecast-data:/data" in text and "HTTP_PORT: '8080'" in text
    assert "SHARD_IDS: '0'" in text and "SHARD_IDS: '1'" in text and text.count("SHARD_COUNT: '2'") == 2
    assert text.count("DATABASE_URL: postgresql://framecast:pw@postgres/framecast") == 2
    assert text.count("REDIS_URL: redis://:rpw@redis:6379/0") == 2
    assert text.count("condition: service_healthy") == 4
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed")
def test_the_web_profile_serves_the_pages_on_the_hosts_loopback(tmp_path: Path) -> None:
    shutil.copy(REPO / "docker-compose.yml", tmp_path / "docker-compose.yml")
    (tmp_path / ".env").write_text("")
    done = subprocess.run(
        ["docker-compose", "--profile", "web", "config"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "WEB_PORT: '8090'" in done.stdout and "HTTP_HOST: 0.0.0.0" in done.stdout
    assert "127.0.0.1:8090:8090" in done.stdout or "host_ip: 127.0.0.1" in done.stdout
    assert "!web" in (REPO / ".dockerignore").read_text()  # the image carries the web edge


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed")
def test_the_observe_profile_runs_prometheus_and_grafana_provisioned_read_only(tmp_path: Path) -> None:
    shutil.copy(REPO / "docker-compose.yml", tmp_path / "docker-compose.yml")
    (tmp_path / ".env").write_text("")
    base = {k: v for k, v in os.environ.items() if k != "GRAFANA_ADMIN_PASSWORD"}

    def config(env: dict[str, str]) -> str:
        done = subprocess.run(
            ["docker-compose", "--profile", "observe", "config"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    text = config({**base, "GRAFANA_ADMIN_PASSWORD": "pw-from-the-environment"})
    prometheus, grafana = service_block(text, "prometheus"), service_block(text, "grafana")
    # Provisioned from the clone's deploy/, read-only; only the data volumes are written.
    assert f"{tmp_path}/deploy/prometheus:/etc/prometheus:ro" in prometheus
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus
    assert f"{tmp_path}/deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana
    assert f"{tmp_path}/deploy/grafana/dashboards:/etc/grafana/dashboards:ro" in grafana
    for service in (prometheus, grafana):
        assert "read_only: true" in service and "observe" in service
        ports = [line.strip() for line in service.splitlines() if ":9090" in line or ":3000" in line]
        assert ports and all(p.startswith("- 127.0.0.1:") for p in ports), ports  # loopback only
    # The mounted files exist in the repository, as the mounts name them.
    for path in (
        "deploy/prometheus/prometheus.yml",
        "deploy/prometheus/alerts.yml",
        "deploy/grafana/provisioning/datasources/prometheus.yml",
        "deploy/grafana/provisioning/dashboards/framecast.yml",
        "deploy/grafana/dashboards/framecast.json",
    ):
        assert (REPO / path).is_file(), path
    # Grafana's password comes from the environment; the file holds none.
    assert "GF_SECURITY_ADMIN_PASSWORD: pw-from-the-environment" in grafana
    unset = config(base)  # the other services keep working without it, and there is no default
    assert "GF_SECURITY_ADMIN_PASSWORD: ''" in service_block(unset, "grafana")


def service_block(config: str, name: str) -> str:
    """The lines of one service in ``docker-compose config``'s output (two-space indented names)."""
    lines = config.splitlines()
    start = lines.index(f"  {name}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("   ")), len(lines))
    return "\n".join(lines[start:end])


def compose_services() -> dict[str, dict[str, Any]]:
    """docker-compose.yml's services as compose reads them (anchors and ``<<`` merges resolved)."""
    loaded = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services: dict[str, dict[str, Any]] = loaded["services"]
    return services


BOTS = ("bot", "bot-shard0", "bot-shard1")


def test_no_password_falls_back_to_a_default_and_redis_has_one() -> None:
    """PostgreSQL and Redis refuse to start without their passwords (no default, as Grafana's), and
    the bots' URLs carry them. The check is each container's: compose interpolates every service
    before it applies profiles, so a ``${VAR:?}`` would stop the plain SQLite ``bot`` too."""
    lines = (REPO / "docker-compose.yml").read_text().splitlines()
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))  # what compose reads
    assert (
        re.search(r"\$\{(POSTGRES_PASSWORD|REDIS_PASSWORD|REDIS_KEY_SECRET):?-[^}]", text) is None
    )  # no default
    assert ":?" not in text  # nothing the plain `bot` does not need is required of it
    services = compose_services()
    postgres, redis = services["postgres"], services["redis"]
    assert postgres["environment"]["POSTGRES_PASSWORD"] == "${POSTGRES_PASSWORD:-}"
    refuse = 'if [ -z "$$POSTGRES_PASSWORD" ]; then'
    assert refuse in postgres["entrypoint"][2] and "exit 1" in postgres["entrypoint"][2]
    assert postgres["entrypoint"][2].endswith("exec docker-entrypoint.sh postgres")
    assert redis["environment"]["REDISCLI_AUTH"] == "${REDIS_PASSWORD:-}"  # redis-cli's health check reads it
    assert 'if [ -z "$$REDISCLI_AUTH" ]; then' in redis["entrypoint"][2]
    assert redis["entrypoint"][2].endswith('redis-server --requirepass "$$REDISCLI_AUTH"')
    for shard in ("bot-shard0", "bot-shard1"):
        env = services[shard]["environment"]
        assert env["DATABASE_URL"] == "postgresql://framecast:${POSTGRES_PASSWORD:-}@postgres/framecast"
        assert env["REDIS_URL"] == "redis://:${REDIS_PASSWORD:-}@redis:6379/0"  # the URL carries it
        assert env["REDIS_KEY_SECRET"] == "${REDIS_KEY_SECRET:-}"  # empty: the bot refuses, naming it
    assert "REDIS_URL" not in services["bot"]["environment"]


@pytest.mark.parametrize("name", [*BOTS, "prometheus", "grafana"])
def test_containers_run_read_only_without_capabilities_or_new_privileges(name: str) -> None:
    service = compose_services()[name]
    assert service.get("read_only") is True, name
    assert service.get("cap_drop") == ["ALL"], name
    assert "no-new-privileges:true" in service.get("security_opt", []), name
    if name in BOTS:
        # Written: the data volume, and /tmp in memory (re-encoding's scratch files); nothing else.
        assert "/tmp" in service["tmpfs"]
        assert any(str(volume).endswith(":/data") for volume in service["volumes"]), service["volumes"]


def readme_compose_commands() -> list[str]:
    """Every ``docker compose`` command the README gives (code blocks and inline), env prefixes included."""
    readme = (REPO / "README.md").read_text()
    found = re.findall(r"(?m)(?:^|`)((?:[A-Z_]+=\S+ )*docker compose [^`\n#]*)", readme)
    return [command.strip() for command in found]


def services_and_profiles(config: str) -> dict[str, set[str]]:
    """Each service of ``docker-compose config``'s output with its profiles (empty: always started)."""
    services: dict[str, set[str]] = {}
    section = ("\n" + config).split("\nservices:\n", 1)[1].split("\nvolumes:\n", 1)[0]
    for line in section.splitlines():
        if re.fullmatch(r"  [a-z0-9-]+:", line):
            name = line.strip().rstrip(":")
            services[name] = set()
    for name in services:
        block = service_block(config, name).splitlines()
        if "    profiles:" in block:
            start = block.index("    profiles:") + 1
            for item in block[start:]:
                if not item.startswith("    - "):
                    break
                services[name].add(item.removeprefix("    - ").strip())
    return services


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="Debian's docker-compose is not installed")
def test_every_compose_command_in_the_readme_names_services_its_profiles_start(tmp_path: Path) -> None:
    """Checked, not run: no registry, no compose v2 CLI and no bridge network where the tests run.

    Each command's environment, profiles and services are read by ``docker-compose config`` on a copy
    of the compose file beside an empty ``.env``: every service it names exists and is started by the
    profiles it gives, and what it sets reaches the services.
    """
    commands = readme_compose_commands()
    assert len(commands) >= 4, commands
    shutil.copy(REPO / "docker-compose.yml", tmp_path / "docker-compose.yml")
    (tmp_path / ".env").write_text("")
    base = {k: v for k, v in os.environ.items() if k not in ("POSTGRES_PASSWORD", "GRAFANA_ADMIN_PASSWORD")}
    for command in commands:
        words = shlex.split(command)
        env = dict(base)
        while "=" in words[0]:
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        assert words[:2] == ["docker", "compose"], command
        words = words[2:]
        profiles: list[str] = []
        while words[0] == "--profile":
            profiles.append(words[1])
            words = words[2:]
        verb, rest = words[0], [w for w in words[1:] if not w.startswith("-")]
        assert verb in ("up", "run"), command
        named = rest if verb == "up" else rest[:1]
        done = subprocess.run(
            ["docker-compose", *(a for p in profiles for a in ("--profile", p)), "config"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (command, done.stderr)
        services = services_and_profiles(done.stdout)
        for service in named:
            assert service in services, f"{command}: no service {service!r}"
            wanted = services[service]
            assert not wanted or wanted & set(profiles), (
                f"{command}: {service} needs --profile {sorted(wanted)}"
            )
        for key, value in env.items():
            if key in ("POSTGRES_PASSWORD", "GRAFANA_ADMIN_PASSWORD"):
                assert value in done.stdout, f"{command}: {key} reaches no service"
