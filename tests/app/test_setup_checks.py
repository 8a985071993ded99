"""The operator's setup, checked before the login: what is refused, and what is only warned of."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from framecast.app.setup_checks import check_setup
from framecast.clock import SystemClock
from framecast.config import load_settings

REQUIRED = {
    "DISCORD_TOKEN": "discord-token-SECRET-1234",
    "GEN_API_BASE_URL": "https://gen.example.com",
    "GEN_API_KEY": "gen-key-SECRET-5678",
}
WARNING = "REDIS_URL is not set"


@pytest.mark.parametrize(
    ("shards", "warned"),
    [
        ({}, False),
        ({"SHARD_COUNT": "2", "SHARD_IDS": "0,1"}, False),  # every shard in this one process
        ({"SHARD_COUNT": "2", "SHARD_IDS": "1"}, True),  # another process runs shard 0
    ],
)
async def test_a_process_of_several_without_redis_is_warned_that_they_would_overspend_a_shared_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, shards: dict[str, str], warned: bool
) -> None:
    settings = load_settings({**REQUIRED, "DATABASE_PATH": str(tmp_path / "db.sqlite3"), **shards})
    with caplog.at_level(logging.WARNING, logger="framecast.app.setup_checks"):
        checked = await check_setup(settings, clock=SystemClock())
    await checked.discard()
    assert checked.problems == []  # a warning, never a refusal: each process may have a key of its own
    assert (WARNING in caplog.text) is warned
    assert "gen-key-SECRET" not in caplog.text
