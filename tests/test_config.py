"""Configuration: defaults, parsing, validation, one-line errors, and .env handling."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from framecast.config import ConfigError, RateLimit, Secret, Settings, load_settings

REQUIRED = {
    "DISCORD_TOKEN": "discord-token-SECRET-1234",
    "GEN_API_BASE_URL": "https://gen.example.com",
    "GEN_API_KEY": "gen-key-SECRET-5678",
}

# Every documented variable with the default the architecture fixes.
DEFAULTS = {
    "discord_api_base_url": None,
    "discord_gateway_url": None,
    "discord_retry_max_delay": 60.0,
    "gen_video_model": "svc-video-v2.0",
    "gen_image_model": "svc-image-2.1-flash",
    "gen_rate_limit": RateLimit(16, 60.0),
    "gen_poll_interval": 30.0,
    "gen_poll_timeout": 900.0,
    "gen_request_timeout": 60.0,
    "gen_retry_max": 6,
    "gen_backoff_base": 2.0,
    "gen_backoff_max": 120.0,
    "gen_download_max_bytes": 209_715_200,
    "gen_download_timeout": 300.0,
    "gen_max_running": None,
    "gen_poll_max_interval": None,
    "database_path": Path("data/framecast.sqlite3"),
    "log_level": "INFO",
    "member_job_limit": 2,
    "guild_queue_cap": 25,
    "prompt_max_chars": 2000,
    "edit_interval": 5.0,
    "token_margin": 60.0,
    "status_message_max_age": 3000.0,
    "shutdown_timeout": 20.0,
}


def env(**overrides: str) -> dict[str, str]:
    return {**REQUIRED, **overrides}


def test_defaults() -> None:
    s = load_settings(dict(REQUIRED))
    for name, value in DEFAULTS.items():
        assert getattr(s, name) == value, name
    assert s.gen_api_base_url == "https://gen.example.com"
    assert s.discord_token.reveal() == REQUIRED["DISCORD_TOKEN"]
    assert s.gen_api_key.reveal() == REQUIRED["GEN_API_KEY"]


def test_env_example_documents_every_variable() -> None:
    text = (Path(__file__).parent.parent / ".env.example").read_text()
    names = {line.split("=", 1)[0].lstrip("# ").strip() for line in text.splitlines() if "=" in line}
    expected = {
        "DISCORD_TOKEN", "DISCORD_API_BASE_URL", "DISCORD_GATEWAY_URL", "DISCORD_RETRY_MAX_DELAY",
        "GEN_API_BASE_URL", "GEN_API_KEY",
        "GEN_VIDEO_MODEL", "GEN_IMAGE_MODEL", "GEN_RATE_LIMIT", "GEN_POLL_INTERVAL", "GEN_POLL_TIMEOUT",
        "GEN_REQUEST_TIMEOUT", "GEN_RETRY_MAX", "GEN_BACKOFF_BASE", "GEN_BACKOFF_MAX", "GEN_DOWNLOAD_MAX_BYTES",
        "GEN_DOWNLOAD_TIMEOUT", "GEN_MAX_RUNNING", "GEN_POLL_MAX_INTERVAL", "DATABASE_PATH", "LOG_LEVEL", "MEMBER_JOB_LIMIT",
        "GUILD_QUEUE_CAP", "PROMPT_MAX_CHARS", "EDIT_INTERVAL", "TOKEN_MARGIN", "STATUS_MESSAGE_MAX_AGE",
        "SHUTDOWN_TIMEOUT",
    }  # fmt: skip
    assert expected <= names
    assert len(expected) == len(DEFAULTS) + 3  # the three required ones have no default


def test_every_variable_is_read() -> None:
    s = load_settings(
        env(
            DISCORD_API_BASE_URL="http://127.0.0.1:9000/api",
            DISCORD_GATEWAY_URL="ws://127.0.0.1:9001/gateway",
            DISCORD_RETRY_MAX_DELAY="0.25",
            GEN_VIDEO_MODEL="v-model",
            GEN_IMAGE_MODEL="i-model",
            GEN_RATE_LIMIT=" 5 / 0.5 ",
            GEN_POLL_INTERVAL="0.25",
            GEN_POLL_TIMEOUT="12",
            GEN_REQUEST_TIMEOUT="3.5",
            GEN_RETRY_MAX="3",
            GEN_BACKOFF_BASE="0.01",
            GEN_BACKOFF_MAX="1",
            GEN_DOWNLOAD_MAX_BYTES="1024",
            GEN_DOWNLOAD_TIMEOUT="9",
            GEN_MAX_RUNNING="7",
            DATABASE_PATH="/tmp/x/fc.sqlite3",
            LOG_LEVEL="debug",
            MEMBER_JOB_LIMIT="5",
            GUILD_QUEUE_CAP="50",
            PROMPT_MAX_CHARS="100",
            EDIT_INTERVAL="0.5",
            TOKEN_MARGIN="30",
            STATUS_MESSAGE_MAX_AGE="100",
            SHUTDOWN_TIMEOUT="2",
        )
    )
    assert s.discord_api_base_url == "http://127.0.0.1:9000/api"
    assert s.discord_gateway_url == "ws://127.0.0.1:9001/gateway"
    assert s.discord_retry_max_delay == 0.25
    assert (s.gen_video_model, s.gen_image_model) == ("v-model", "i-model")
    assert s.gen_rate_limit == RateLimit(5, 0.5)
    assert (s.gen_poll_interval, s.gen_poll_timeout, s.gen_request_timeout) == (0.25, 12.0, 3.5)
    assert (s.gen_retry_max, s.gen_backoff_base, s.gen_backoff_max) == (3, 0.01, 1.0)
    assert (s.gen_download_max_bytes, s.gen_download_timeout, s.gen_max_running) == (1024, 9.0, 7)
    assert s.database_path == Path("/tmp/x/fc.sqlite3")
    assert s.log_level == "DEBUG"
    assert (s.member_job_limit, s.guild_queue_cap, s.prompt_max_chars) == (5, 50, 100)
    assert (s.edit_interval, s.token_margin, s.status_message_max_age, s.shutdown_timeout) == (
        0.5, 30.0, 100.0, 2.0,
    )  # fmt: skip
    assert isinstance(s.gen_retry_max, int) and isinstance(s.gen_poll_interval, float)


@pytest.mark.parametrize("name", ["DISCORD_TOKEN", "GEN_API_BASE_URL", "GEN_API_KEY"])
@pytest.mark.parametrize("value", [None, "", "   "])
def test_required_missing(name: str, value: str | None) -> None:
    e = dict(REQUIRED)
    if value is None:
        del e[name]
    else:
        e[name] = value
    with pytest.raises(ConfigError) as info:
        load_settings(e)
    assert info.value.variable == name
    assert str(info.value).startswith(f"{name}: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GEN_API_BASE_URL", "ftp://gen.example.com"),
        ("GEN_API_BASE_URL", "gen.example.com"),
        ("GEN_API_BASE_URL", "http://"),
        ("GEN_API_BASE_URL", "http://host:notaport"),
        ("DISCORD_API_BASE_URL", "localhost:8080"),
        ("DISCORD_GATEWAY_URL", "tcp://127.0.0.1:1"),
        ("GEN_RATE_LIMIT", "16"),
        ("GEN_RATE_LIMIT", "0/60"),
        ("GEN_RATE_LIMIT", "-1/60"),
        ("GEN_RATE_LIMIT", "1.5/60"),
        ("GEN_RATE_LIMIT", "16/0"),
        ("GEN_RATE_LIMIT", "16/-5"),
        ("GEN_RATE_LIMIT", "16/abc"),
        ("GEN_RATE_LIMIT", "16/inf"),
        ("GEN_RATE_LIMIT", "16/nan"),
        ("GEN_RATE_LIMIT", "a/b"),
        ("GEN_POLL_INTERVAL", "soon"),
        ("GEN_POLL_INTERVAL", "0"),
        ("GEN_POLL_TIMEOUT", "-1"),
        ("GEN_POLL_TIMEOUT", "inf"),
        ("GEN_REQUEST_TIMEOUT", "nan"),
        ("GEN_RETRY_MAX", "2.5"),
        ("GEN_RETRY_MAX", "0"),
        ("GEN_RETRY_MAX", "three"),
        ("GEN_DOWNLOAD_MAX_BYTES", "1e6"),
        ("GEN_MAX_RUNNING", "-2"),
        ("MEMBER_JOB_LIMIT", "1.0"),
        ("GUILD_QUEUE_CAP", "x"),
        ("PROMPT_MAX_CHARS", "0"),
        ("EDIT_INTERVAL", "-0.5"),
        ("TOKEN_MARGIN", "a lot"),
        ("STATUS_MESSAGE_MAX_AGE", "0"),
        ("SHUTDOWN_TIMEOUT", "forever"),
        ("DISCORD_RETRY_MAX_DELAY", "0"),
        ("DISCORD_RETRY_MAX_DELAY", "never"),
        ("LOG_LEVEL", "LOUD"),
    ],
)
def test_malformed_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env(**{name: value}))
    message = str(info.value)
    assert info.value.variable == name
    assert message.startswith(f"{name}: ")
    assert "\n" not in message and len(message) < 200


def test_malformed_value_message_is_readable() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env(GEN_RATE_LIMIT="sixteen per minute"))
    assert str(info.value) == "GEN_RATE_LIMIT: expected N/SECONDS, e.g. 16/60 (got 'sixteen per minute')"


def test_multiline_value_stays_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env(GEN_POLL_INTERVAL="3\n0x"))
    assert "\n" not in str(info.value)


def test_empty_optional_means_default() -> None:
    s = load_settings(
        env(
            DISCORD_API_BASE_URL="",
            DISCORD_GATEWAY_URL=" ",
            GEN_POLL_INTERVAL="",
            GEN_RATE_LIMIT="",
            LOG_LEVEL="",
        )
    )
    assert s.discord_api_base_url is None and s.discord_gateway_url is None
    assert s.gen_poll_interval == 30.0 and s.gen_rate_limit == RateLimit(16, 60.0) and s.log_level == "INFO"


def test_secrets_never_show() -> None:
    s = load_settings(dict(REQUIRED))
    for text in (str(s), repr(s), str(s.gen_api_key), repr(s.discord_token), f"{s.gen_api_key}"):
        assert REQUIRED["GEN_API_KEY"] not in text
        assert REQUIRED["DISCORD_TOKEN"] not in text
    assert str(s.gen_api_key) == "***"
    assert Secret("a") == Secret("a") and Secret("a") != Secret("b")
    with pytest.raises(TypeError):
        pickle.dumps(s.gen_api_key)


def test_secret_not_echoed_in_errors() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env(GEN_API_BASE_URL="nope"))
    assert info.value.variable == "GEN_API_BASE_URL"
    assert "'nope'" in str(info.value)
    for secret in (REQUIRED["GEN_API_KEY"], REQUIRED["DISCORD_TOKEN"]):
        assert secret not in str(info.value) and secret not in repr(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("16/60", RateLimit(16, 60.0)), ("1/0.25", RateLimit(1, 0.25)), (" 200 / 1 ", RateLimit(200, 1.0))],
)
def test_rate_limit_parse(text: str, expected: RateLimit) -> None:
    assert RateLimit.parse(text) == expected
    assert RateLimit.parse(str(expected)) == expected


def test_rate_limit_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        RateLimit(0, 60)
    with pytest.raises(ValueError):
        RateLimit(1, 0)


def test_explicit_mapping_ignores_dotenv_and_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("GEN_VIDEO_MODEL=from-dotenv\nGEN_RATE_LIMIT=1/1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEN_IMAGE_MODEL", "from-environ")
    s = load_settings(dict(REQUIRED))
    assert s.gen_video_model == "svc-video-v2.0"
    assert s.gen_image_model == "svc-image-2.1-flash"
    assert s.gen_rate_limit == RateLimit(16, 60.0)
    assert "GEN_VIDEO_MODEL" not in os.environ  # the .env file was not even loaded


def _isolate(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    # setenv then delenv: monkeypatch then restores "absent" even for values python-dotenv writes.
    for name in names:
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)


def test_environ_none_loads_dotenv_without_overriding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [*REQUIRED, "GEN_VIDEO_MODEL", "GEN_POLL_INTERVAL"]
    _isolate(monkeypatch, *names)
    (tmp_path / ".env").write_text(
        "DISCORD_TOKEN=dotenv-token\nGEN_API_BASE_URL=http://127.0.0.1:1\nGEN_API_KEY=dotenv-key\n"
        "GEN_VIDEO_MODEL=from-dotenv\nGEN_POLL_INTERVAL=7\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEN_POLL_INTERVAL", "3")  # the real environment wins
    s = load_settings()
    assert s.gen_video_model == "from-dotenv"
    assert s.gen_poll_interval == 3.0
    assert s.gen_api_key.reveal() == "dotenv-key"


def test_environ_none_without_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _isolate(monkeypatch, *REQUIRED)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.variable == "DISCORD_TOKEN"


def test_settings_is_frozen() -> None:
    s = load_settings(dict(REQUIRED))
    with pytest.raises(AttributeError):
        s.gen_retry_max = 1  # type: ignore[misc]
    assert isinstance(s, Settings)
