"""The operator's setup, checked before the login: what is refused, and what is only warned of."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from framecast.app import setup_checks
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


@pytest.mark.parametrize(("count", "ids", "warned"), [(10**23, (0,), True), (3, (2, 0, 1), False)])
async def test_whether_a_process_runs_every_shard_is_counted_never_by_listing_the_shards(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    count: int,
    ids: tuple[int, ...],
    warned: bool,
) -> None:
    def listing(*args: int) -> range:
        raise AssertionError(f"range{args}: {count} shards listed one by one would block the event loop")

    monkeypatch.setattr(setup_checks, "range", listing, raising=False)
    # Built in code, past SHARD_COUNT's bound: the check must not depend on the configuration's.
    settings = load_settings({**REQUIRED, "DATABASE_PATH": str(tmp_path / "db.sqlite3")})
    settings = settings.replace(shard_count=count, shard_ids=ids)
    with caplog.at_level(logging.WARNING, logger="framecast.app.setup_checks"):
        checked = await check_setup(settings, clock=SystemClock())
    await checked.discard()
    assert checked.problems == [] and (WARNING in caplog.text) is warned


async def test_names_meant_for_the_bot_that_are_no_setting_are_warned_of_once_by_name_never_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {**REQUIRED, "DATABASE_PATH": str(tmp_path / "db.sqlite3"), "GEN_RATELIMIT": "1/1-hidden4242"}
    with caplog.at_level(logging.WARNING, logger="framecast.app.setup_checks"):
        checked = await check_setup(load_settings(environ), clock=SystemClock())
    await checked.discard()
    assert checked.problems == []  # a warning only: the name may be another program's
    warned = [r.getMessage() for r in caplog.records if "GEN_RATELIMIT" in r.getMessage()]
    assert warned == ["ignored, not settings of Framecast (a typo?): GEN_RATELIMIT (GEN_RATE_LIMIT?)"]
    assert "hidden4242" not in caplog.text
