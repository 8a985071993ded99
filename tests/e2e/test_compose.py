"""``docker-compose.yml`` as Debian's ``docker-compose`` reads it: valid, and every service operable."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.harness import REPO


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
