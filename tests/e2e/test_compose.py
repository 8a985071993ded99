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
