"""Configuration: defaults, parsing, validation, one-line errors, and .env handling."""

from __future__ import annotations

import base64
import dataclasses
import os
import pickle
import re
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from framecast.config import ConfigError, RateLimit, Secret, Settings, fernet_keys, load_settings
from framecast.config.values import SECONDS_MAX, SHARD_COUNT_MAX
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL

ROOT = Path(__file__).parent.parent
#: Every variable the model reads: a field is the variable of the same name in upper case.
VARIABLES = {name.upper() for name in Settings.model_fields}

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
    "discord_outage_exit": 900.0,
    "loop_stall_exit": 120.0,
    "gen_video_model": VIDEO_MODEL,
    "gen_image_model": IMAGE_MODEL,
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
    "database_connect_timeout": 5.0,
    "database_statement_timeout": 5.0,
    "database_pool_timeout": 5.0,
    "database_call_timeout": 8.0,
    "log_level": "INFO",
    "member_job_limit": 2,
    "guild_queue_cap": 25,
    "prompt_max_chars": 2000,
    "edit_interval": 5.0,
    "token_margin": 60.0,
    "status_message_max_age": 3000.0,
    "shutdown_timeout": 20.0,
    "gen_result_hosts": (),
    "gen_json_max_bytes": 1_048_576,
    "gen_image_json_max_bytes": 16_777_216,
    "gen_max_redirects": 3,
    "gen_malformed_polls": 3,
    "results_at_once": 2,
    "image_max_pixels": 40_000_000,
    "reencode_timeout": 300.0,
    "daily_video_quota": None,
    "daily_image_quota": None,
    "quota_period": 86400.0,
    "guild_keys": True,
    "user_install": False,
    "key_encryption_secret": None,
    "http_port": None,
    "http_host": "127.0.0.1",
    "database_url": None,
    "redis_url": None,
    "redis_key_secret": None,
    "shard_count": None,
    "shard_ids": None,
    "lease_seconds": 60.0,
    "web_port": None,
    "web_base_url": None,
    "web_client_secret": None,
    "web_session_secret": None,
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


def test_every_field_has_its_default_here() -> None:
    required = {name for name, field in Settings.model_fields.items() if field.is_required()}
    assert required == {"discord_token", "gen_api_base_url", "gen_api_key"}
    assert set(Settings.model_fields) == set(DEFAULTS) | required
    for name, value in DEFAULTS.items():
        assert Settings.model_fields[name].default == value, name


def test_env_example_documents_every_variable() -> None:
    text = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"(?m)^#?\s*([A-Z][A-Z0-9_]*)=", text))
    assert VARIABLES - documented == set(), "missing from .env.example"
    assert documented - VARIABLES == set(), "documented in .env.example but not read"


def test_readme_configuration_table_lists_every_variable() -> None:
    section = (ROOT / "README.md").read_text().split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    first_cells = [row.split("|")[1] for row in section.splitlines() if row.startswith("| `")]
    listed = {name for cell in first_cells for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", cell)}
    assert VARIABLES - listed == set(), "missing from the README's configuration table"
    assert listed - VARIABLES == set(), "in the README's configuration table but not read"


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


def test_operating_variables_are_read() -> None:
    fernet = "ZmVybmV0LWtleS0zMi1ieXRlcy1sb25nLXh4eHh4eHg="  # urlsafe base64 of 32 bytes
    s = load_settings(
        env(
            GEN_RESULT_HOSTS="CDN.example.com., *.media.example.org, cdn.example.com",
            GEN_JSON_MAX_BYTES="+2048",
            GEN_IMAGE_JSON_MAX_BYTES="4096",
            GEN_MAX_REDIRECTS="0",
            GEN_MALFORMED_POLLS="5",
            RESULTS_AT_ONCE="1",
            IMAGE_MAX_PIXELS="1000",
            REENCODE_TIMEOUT="1.5",
            DAILY_VIDEO_QUOTA="0",
            DAILY_IMAGE_QUOTA="10",
            QUOTA_PERIOD="60",
            GUILD_KEYS="Off",
            KEY_ENCRYPTION_SECRET=fernet,
            HTTP_PORT="8080",
            DATABASE_URL="postgresql://fc:pw@db/fc",
            REDIS_URL="rediss://:pw@cache:6380/0",
            REDIS_KEY_SECRET="r" * 32,
            SHARD_COUNT="4",
            SHARD_IDS="3, 1,1",
            LEASE_SECONDS="30",
            LOG_LEVEL="warn",
            DATABASE_PATH="~/fc.sqlite3",
        )
    )
    assert s.gen_result_hosts == ("cdn.example.com", "*.media.example.org")
    assert (s.gen_json_max_bytes, s.gen_image_json_max_bytes, s.gen_max_redirects) == (2048, 4096, 0)
    assert (s.gen_malformed_polls, s.results_at_once) == (5, 1)
    assert (s.image_max_pixels, s.reencode_timeout) == (1000, 1.5)
    assert (s.daily_video_quota, s.daily_image_quota, s.quota_period) == (0, 10, 60.0)
    assert s.guild_keys is False and s.http_port == 8080 and s.lease_seconds == 30.0
    assert s.key_encryption_secret == Secret(fernet)
    assert s.database_url == Secret("postgresql://fc:pw@db/fc")
    assert s.redis_url == Secret("rediss://:pw@cache:6380/0")
    assert s.redis_key_secret == Secret("r" * 32)
    assert (s.shard_count, s.shard_ids) == (4, (1, 3))
    assert s.log_level == "WARNING" and s.database_path == Path("~/fc.sqlite3").expanduser()


@pytest.mark.parametrize(
    ("text", "expected"), [("on", True), ("YES", True), ("1", True), ("no", False), ("0", False)]
)
def test_switches(text: str, expected: bool) -> None:
    assert load_settings(env(GUILD_KEYS=text)).guild_keys is expected
    assert load_settings(env(USER_INSTALL=text)).user_install is expected


@pytest.mark.parametrize(
    ("shards", "message"),
    [
        ({"SHARD_IDS": "0"}, "SHARD_IDS: needs SHARD_COUNT (the total number of shards)"),
        ({"SHARD_IDS": "0,2", "SHARD_COUNT": "2"}, "SHARD_IDS: shard 2 is not below SHARD_COUNT=2"),
    ],
)
def test_shard_ids_must_fit_the_shard_count(shards: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env(**shards))
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("KEY_ENCRYPTION_SECRET", "not-a-key-hidden4242", "must be a Fernet key"),
        ("DATABASE_URL", "mysql://fc:hidden4242@db/fc", "must be a postgresql:// URL"),
        ("REDIS_URL", "http://:hidden4242@cache", "must be a redis:// URL"),
    ],
)
def test_malformed_secret_is_never_echoed(name: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env(**{name: value}))
    assert info.value.variable == name and str(info.value).startswith(f"{name}: {problem}")
    assert "hidden4242" not in str(info.value) and "hidden4242" not in repr(info.value)
    assert info.value.__cause__ is None  # nothing chained that could carry the value into a log


# -- KEY_ENCRYPTION_SECRET: one Fernet key or a list of them (rotation: the first encrypts) --------
fernet_key = st.binary(min_size=32, max_size=32).map(lambda raw: base64.urlsafe_b64encode(raw).decode())
blanks = st.text(alphabet=" \t\n", max_size=3)


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(fernet_key, min_size=1, max_size=5), pads=st.lists(blanks, min_size=12, max_size=12))
def test_a_list_of_fernet_keys_is_read_in_order_whatever_the_blanks(keys: list[str], pads: list[str]) -> None:
    text = ",".join(f"{pads[2 * i]}{key}{pads[2 * i + 1]}" for i, key in enumerate(keys))
    s = load_settings(env(KEY_ENCRYPTION_SECRET=text))
    assert s.key_encryption_secret is not None
    assert fernet_keys(s.key_encryption_secret) == tuple(Secret(key) for key in keys)
    assert all(key not in f"{s} {s!r} {s.model_dump()}" for key in keys)


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(fernet_key, min_size=2, max_size=5),
    data=st.data(),
    bad=st.one_of(st.just(""), st.text(max_size=40).map(lambda t: f"hid{t}den4242")),
)
def test_a_bad_key_in_the_list_is_named_by_its_position_never_shown(
    keys: list[str], data: st.DataObject, bad: str
) -> None:
    at = data.draw(st.integers(0, len(keys) - 1))
    keys[at] = bad.replace(",", ";")
    with pytest.raises(ConfigError) as info:
        load_settings(env(KEY_ENCRYPTION_SECRET=", ".join(keys)))
    shown = f"{info.value} {info.value!r} {info.value.problem}"
    assert str(info.value).startswith(f"KEY_ENCRYPTION_SECRET: key {at + 1} of {len(keys)} ")
    assert len(str(info.value).splitlines()) == 1 and info.value.__cause__ is None
    assert "den4242" not in shown and not any(key in shown for key in keys if key)


def test_every_secret_of_the_settings_is_given_to_the_log_filter_each_rotation_key_alone() -> None:
    first, second = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    s = load_settings(
        env(
            KEY_ENCRYPTION_SECRET=f"{first}, {second}",
            DATABASE_URL="postgresql://fc:pw-4242@db/fc",
            REDIS_URL="redis://:rpw-4242@cache:6379/0",
            REDIS_KEY_SECRET="shared-" + "k" * 30,
        )
    )
    found = s.secrets()
    for secret in (s.discord_token, s.gen_api_key, s.database_url, s.redis_url, s.redis_key_secret):
        assert secret is not None and secret.reveal() in found
    assert first in found and second in found  # a line logged with one key only is masked too


def test_redis_url_needs_a_long_redis_key_secret_and_neither_is_shown() -> None:
    with pytest.raises(ConfigError) as missing:
        load_settings(env(REDIS_URL="redis://:rpw-4242@cache:6379/0"))
    assert missing.value.variable == "REDIS_KEY_SECRET" and "REDIS_URL" in missing.value.problem
    assert "rpw-4242" not in str(missing.value)
    with pytest.raises(ConfigError) as short:
        load_settings(env(REDIS_URL="redis://cache:6379/0", REDIS_KEY_SECRET="short-hidden4242"))
    assert short.value.variable == "REDIS_KEY_SECRET" and "32 characters" in short.value.problem
    assert "hidden4242" not in str(short.value)
    s = load_settings(env(REDIS_URL="redis://cache:6379/0", REDIS_KEY_SECRET="x" * 32))
    assert s.redis_key_secret == Secret("x" * 32) and "x" * 32 not in repr(s)


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
        ("GEN_POLL_MAX_INTERVAL", "5"),  # below GEN_POLL_INTERVAL (30 s): never the longest gap
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
        ("GEN_RESULT_HOSTS", "https://cdn.example.com"),
        ("GEN_RESULT_HOSTS", "cdn.example.com:443"),
        ("GEN_MAX_REDIRECTS", "-1"),
        ("GEN_JSON_MAX_BYTES", "1MiB"),
        ("RESULTS_AT_ONCE", "0"),
        ("DAILY_VIDEO_QUOTA", "-1"),
        ("DAILY_IMAGE_QUOTA", "lots"),
        ("QUOTA_PERIOD", "day"),
        ("GUILD_KEYS", "maybe"),
        ("HTTP_PORT", "0"),
        ("HTTP_PORT", "65536"),
        ("HTTP_PORT", "http"),
        ("SHARD_COUNT", "0"),
        ("SHARD_IDS", "one"),
        ("SHARD_IDS", "0;1"),
        ("LEASE_SECONDS", "-60"),
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
    assert s.gen_video_model == VIDEO_MODEL
    assert s.gen_image_model == IMAGE_MODEL
    assert s.gen_rate_limit == RateLimit(16, 60.0)
    assert "GEN_VIDEO_MODEL" not in os.environ  # the .env file was not even loaded


def _isolate(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    # setenv then delenv: monkeypatch then restores "absent" even if something writes the variable.
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
    assert "GEN_VIDEO_MODEL" not in os.environ  # the file is read, not exported to the process


def test_environ_none_a_variable_set_empty_still_wins_over_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _isolate(monkeypatch, "GEN_VIDEO_MODEL", "gen_image_model", "GEN_IMAGE_MODEL")
    for name, value in REQUIRED.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "custom.env").write_text("GEN_VIDEO_MODEL=from-dotenv\ngen_image_model=lower-case\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEN_VIDEO_MODEL", "")  # set, but empty: the default, as python-dotenv did
    monkeypatch.setenv("gen_image_model", "lower-case")  # names are case-sensitive, as on Linux
    s = load_settings(env_file="custom.env")
    assert (s.gen_video_model, s.gen_image_model) == (VIDEO_MODEL, IMAGE_MODEL)
    assert load_settings(env_file=None).gen_video_model == VIDEO_MODEL


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


def test_settings_built_in_code_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEN_RETRY_MAX", "1")
    monkeypatch.setenv("GEN_VIDEO_MODEL", "from-environ")
    s = Settings(discord_token=Secret("t"), gen_api_base_url="http://127.0.0.1:1", gen_api_key=Secret("k"))
    assert (s.gen_retry_max, s.gen_video_model) == (6, VIDEO_MODEL)
    assert s == load_settings(
        {"DISCORD_TOKEN": "t", "GEN_API_BASE_URL": "http://127.0.0.1:1", "GEN_API_KEY": "k"}
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        del s.gen_video_model


def test_replace_is_a_validated_copy() -> None:
    s = load_settings(dict(REQUIRED))
    changed = s.replace(gen_api_key=Secret("other"), gen_retry_max=2)
    assert (changed.gen_api_key.reveal(), changed.gen_retry_max) == ("other", 2)
    assert (s.gen_api_key.reveal(), s.gen_retry_max) == (REQUIRED["GEN_API_KEY"], 6)
    assert changed.replace(gen_api_key=s.gen_api_key, gen_retry_max=6) == s
    with pytest.raises(TypeError):
        s.replace(gen_retry_maximum=2)  # a typo is an error, as with dataclasses.replace
    with pytest.raises(ValidationError):  # the cross-field rule still holds
        s.replace(shard_ids=(0,))


# -- properties: outside text never gets past load_settings as anything but a ConfigError line ----
SECRET_VARIABLES = (
    "DISCORD_TOKEN",
    "GEN_API_KEY",
    "KEY_ENCRYPTION_SECRET",
    "DATABASE_URL",
    "REDIS_URL",
    "REDIS_KEY_SECRET",
)
# WEB_PORT alone is refused for the three variables it needs (WEB_BASE_URL, ...): tested on its own above.
PLAIN_VARIABLES = sorted(VARIABLES - set(SECRET_VARIABLES) - {"WEB_PORT"})
# Near misses find more than random text alone: numbers, lists, URLs, rates, switches, odd blanks.
outside_text = st.one_of(
    st.text(max_size=80),
    st.from_regex(r"[ +-]?[0-9]{1,5}([.,/][0-9]{0,4}){0,3}[ a-z]?", fullmatch=True),
    st.tuples(
        st.sampled_from(["", "http://", "https://[", "ws://", "~", "*.", "on", "16/", "0x", "1e", "\u2028"]),
        st.text(max_size=30),
    ).map("".join),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(PLAIN_VARIABLES), text=outside_text)
def test_any_text_is_a_setting_or_one_line_naming_the_variable(name: str, text: str) -> None:
    try:
        load_settings(env(**{name: text}))
    except ConfigError as exc:
        assert exc.variable == name
        assert str(exc).startswith(f"{name}: ")
        assert len(str(exc).splitlines()) == 1
        assert exc.__cause__ is None and exc.__suppress_context__


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(SECRET_VARIABLES),
    head=st.sampled_from(["", "postgresql://u:", "redis://:", "mysql://u:", "http://[", "unix://", "ZmVy"]),
    tail=st.text(max_size=30),
)
def test_a_secret_value_is_never_shown(name: str, head: str, tail: str) -> None:
    value = f"{head}hid{tail}den4242{tail}"  # "hid...den4242": the part that must never appear
    # REDIS_URL comes with its secret (without one it is refused naming REDIS_KEY_SECRET).
    paired = {"REDIS_KEY_SECRET": "p" * 32} if name == "REDIS_URL" else {}
    try:
        s = load_settings(env(**{name: value}, **paired))
    except ConfigError as exc:
        shown = f"{exc} {exc!r} {exc.problem}"
        assert exc.variable == name and len(str(exc).splitlines()) == 1
    else:
        shown = f"{s} {s!r} {s.model_dump()}"
    assert "den4242" not in shown


# -- several problems at once, and .env.example's placeholder ---------------------------------------
def test_every_missing_or_malformed_variable_is_named_in_one_error() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"GEN_API_BASE_URL": "ftp://x", "GEN_POLL_INTERVAL": "soon", "HTTP_PORT": "99999"})
    assert str(info.value).splitlines() == [
        "DISCORD_TOKEN: is required but not set",
        "GEN_API_BASE_URL: must be an http:// or https:// URL (got 'ftp://x')",
        "GEN_API_KEY: is required but not set",
        "GEN_POLL_INTERVAL: must be a number (got 'soon')",
        "HTTP_PORT: must be a TCP port (1-65535) (got '99999')",
    ]
    assert info.value.variable == "DISCORD_TOKEN" and len(info.value.problems) == 5


@pytest.mark.parametrize("text", ["1_0", "inf", "nan", "0x1e", "1,5", "30s", "--3"])
def test_a_duration_that_is_no_plain_number_is_refused_not_read_as_another(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env(GEN_POLL_INTERVAL=text))
    assert info.value.variable == "GEN_POLL_INTERVAL" and "must be" in info.value.problem


@pytest.mark.parametrize(
    ("text", "value"), [("30", 30.0), ("2.5", 2.5), (".5", 0.5), ("1e1", 10.0), ("+4.", 4.0)]
)
def test_a_duration_written_as_people_write_numbers_is_read(text: str, value: float) -> None:
    assert load_settings(env(GEN_POLL_INTERVAL=text)).gen_poll_interval == value


def test_the_env_example_placeholder_for_the_service_is_refused_with_what_to_put_there() -> None:
    example = (ROOT / ".env.example").read_text()
    placeholder = re.search(r"(?m)^GEN_API_BASE_URL=(.*)$", example)
    assert placeholder is not None
    with pytest.raises(ConfigError) as info:
        load_settings(env(GEN_API_BASE_URL=placeholder.group(1)))
    assert info.value.variable == "GEN_API_BASE_URL"
    assert "placeholder from .env.example" in info.value.problem
    assert "put your generation service's API address here" in info.value.problem
    # The same address with a slash, in capitals: still the placeholder.
    with pytest.raises(ConfigError):
        load_settings(env(GEN_API_BASE_URL=placeholder.group(1).upper() + "/"))


WEB = {
    "WEB_PORT": "8090",
    "WEB_BASE_URL": "https://framecast.example.org/",
    "WEB_CLIENT_SECRET": "client-SECRET-abcdef",
    "WEB_SESSION_SECRET": "s" * 40,
}


def test_the_web_pages_are_off_by_default_and_need_their_three_variables_once_on() -> None:
    assert load_settings(REQUIRED).web_port is None
    s = load_settings({**REQUIRED, **WEB})
    assert (s.web_port, s.web_base_url) == (8090, "https://framecast.example.org/")
    for missing in ("WEB_BASE_URL", "WEB_CLIENT_SECRET", "WEB_SESSION_SECRET"):
        env = {k: v for k, v in {**REQUIRED, **WEB}.items() if k != missing}
        with pytest.raises(ConfigError, match=f"^{missing}: is required when WEB_PORT is set$"):
            load_settings(env)


def test_the_web_base_url_must_be_a_plain_https_address_but_on_the_loopback() -> None:
    for bad in (
        "http://gallery.example.org",
        "https://gallery.example.org/?x=1",
        "https://g.example.org/#top",
    ):
        with pytest.raises(ConfigError, match="^WEB_BASE_URL: must be a plain https:// address"):
            load_settings({**REQUIRED, **WEB, "WEB_BASE_URL": bad})
    assert load_settings({**REQUIRED, **WEB, "WEB_BASE_URL": "http://127.0.0.1:8090"}).web_port == 8090


def test_a_short_web_session_secret_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({**REQUIRED, **WEB, "WEB_SESSION_SECRET": "short-SECRET"})
    assert refused.value.variable == "WEB_SESSION_SECRET" and "short-SECRET" not in str(refused.value)


def test_the_web_secrets_are_masked_in_logs() -> None:
    s = load_settings({**REQUIRED, **WEB})
    assert {WEB["WEB_CLIENT_SECRET"], WEB["WEB_SESSION_SECRET"]} <= set(s.secrets())


# -- bounds: what nothing downstream can take is refused here, one line naming the variable ----------
def test_a_shard_count_beyond_what_discord_can_have_is_refused_in_one_line() -> None:
    for too_many in ("99999999999999999999999", str(SHARD_COUNT_MAX + 1)):
        with pytest.raises(ConfigError) as info:
            load_settings(env(SHARD_COUNT=too_many, SHARD_IDS="0"))
        assert info.value.variable == "SHARD_COUNT" and len(str(info.value).splitlines()) == 1
    assert load_settings(env(SHARD_COUNT=str(SHARD_COUNT_MAX), SHARD_IDS="0")).shard_count == SHARD_COUNT_MAX


DURATIONS = sorted(
    name.upper() for name, field in Settings.model_fields.items() if field.annotation in (float, float | None)
)


@pytest.mark.parametrize("name", DURATIONS)
def test_every_duration_past_the_one_bound_is_refused_in_one_line(name: str) -> None:
    for too_long in ("1e308", str(SECONDS_MAX + 1)):
        with pytest.raises(ConfigError) as info:
            load_settings(env(**{name: too_long}))
        assert info.value.variable == name and "at most 2,147,483 seconds" in str(info.value)
        assert len(str(info.value).splitlines()) == 1
    assert getattr(load_settings(env(**{name: str(SECONDS_MAX)})), name.lower()) == SECONDS_MAX


def test_every_default_and_every_value_of_the_env_example_is_within_the_bounds() -> None:
    for name in DURATIONS:
        default = Settings.model_fields[name.lower()].default
        assert default is None or 0 < default <= SECONDS_MAX, name
    example = dict(re.findall(r"(?m)^#?\s*([A-Z][A-Z0-9_]*)=(.+)$", (ROOT / ".env.example").read_text()))
    example = {name: value for name, value in example.items() if name in VARIABLES}
    load_settings({**example, **REQUIRED})  # its placeholder for the service aside, .env.example loads


# -- URLs: never a password in an error, and none where nothing would mask it ------------------------
URL_VARIABLES = ("GEN_API_BASE_URL", "DISCORD_API_BASE_URL", "DISCORD_GATEWAY_URL", "WEB_BASE_URL")


@pytest.mark.parametrize("name", URL_VARIABLES)
@pytest.mark.parametrize(
    "value",
    [
        "https://user:hunter2pw@svc.example:notaport",
        "https://user:hunter2pw@svc.example:99999999",
        "https://user:hunter2pw@svc.example",
        "https://user:p@hunter2pw@svc.example/v1",
        "ftp://user:hunter2pw@svc.example",
        "user:hunter2pw@svc.example",
        "https://user:" + "hunter2pw" * 10 + "@svc.example",  # longer than the quote is cut to
    ],
)
def test_a_url_setting_never_echoes_the_user_and_password_it_carries(name: str, value: str) -> None:
    with_web = {"WEB_PORT": "8090", "WEB_CLIENT_SECRET": "c" * 10, "WEB_SESSION_SECRET": "s" * 40}
    with pytest.raises(ConfigError) as info:
        load_settings(env(**{name: value, **(with_web if name == "WEB_BASE_URL" else {})}))
    assert info.value.variable == name and len(str(info.value).splitlines()) == 1
    assert "hunter2pw" not in f"{info.value} {info.value!r} {info.value.problem}"
    assert "***@" in str(info.value)


@pytest.mark.parametrize("name", ["GEN_API_BASE_URL", "DISCORD_API_BASE_URL", "DISCORD_GATEWAY_URL"])
def test_credentials_in_the_service_and_discord_urls_are_refused_since_nothing_would_mask_them(
    name: str,
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env(**{name: "https://user:hunter2pw@svc.example/v1"}))
    assert (
        str(info.value)
        == f"{name}: must not carry a user name or password (user:password@) (got 'https://***@svc.example/v1')"
    )


@pytest.mark.parametrize(
    "value",
    [
        "postgresql://u:hunter2pw@127.0.0.1:notaport/db",
        "postgresql://u:hunter2pw@127.0.0.1:99999/db",
        "postgresql://u:hunter2pw@127.0.0.1:0/db",
        "postgresql://u:hunter2pw@[::1/db",
        "postgresql://u:p@hunter2pw@127.0.0.1/db",
        "postgresql://u:p/hunter2pw@127.0.0.1/db",
        "postgresql://h1:5432,h2:5432/db?password=hunter2pw",
    ],
)
def test_a_database_url_the_driver_cannot_read_is_one_line_without_its_password(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env(DATABASE_URL=value))
    assert info.value.variable == "DATABASE_URL" and len(str(info.value).splitlines()) == 1
    assert "hunter2pw" not in f"{info.value} {info.value!r} {info.value.problem}"


@settings(max_examples=300, deadline=None)
@given(
    authority=st.tuples(
        st.sampled_from(["", "u@", "u:pw@", "u:p@w@", "u:p/w@", "u:p%40w@"]),
        st.sampled_from(["", "db.example", "127.0.0.1", "[::1]", "[::1", "h1,h2"]),
        st.sampled_from(["", ":", ":5432", ":0", ":99999", ":-1", ": 5", ":+5", ":x", ":5432,h2:5433"]),
        st.sampled_from(["", "/db", "/db?sslmode=require", "?host=/tmp"]),
    ).map("".join),
)
def test_every_database_url_the_configuration_accepts_the_store_can_parse(authority: str) -> None:
    from sqlalchemy.engine import make_url

    try:
        s = load_settings(env(DATABASE_URL=f"postgresql://{authority}"))
    except ConfigError as exc:
        assert exc.variable == "DATABASE_URL" and len(str(exc).splitlines()) == 1
        return
    assert s.database_url is not None
    make_url(s.database_url.reveal())  # what the PostgreSQL store does first with it (no traceback)


@pytest.mark.parametrize(
    ("name", "url", "shown", "hidden"),
    [
        ("DATABASE_URL", "postgresql://framecast@db.example:5432/fc", "framecast@db.example:5432", ""),
        ("DATABASE_URL", "postgresql://fc:pw-hidden4242@db.example/fc", "fc@db.example", "pw-hidden4242"),
        (
            "DATABASE_URL",
            "postgresql://fc@db.example/fc?password=pw-hidden4242",
            "fc@db.example",
            "pw-hidden4242",
        ),
        ("REDIS_URL", "redis://cache.example:6379/0", "cache.example:6379", ""),
        ("REDIS_URL", "redis://:pw-hidden4242@cache.example:6379/0", "cache.example:6379", "pw-hidden4242"),
    ],
)
def test_the_log_mask_hides_a_connection_urls_password_and_never_its_host(
    name: str, url: str, shown: str, hidden: str
) -> None:
    from framecast.logsetup import SecretIndex, mask
    from framecast.storage.dialects import redact_dsn

    s = load_settings(env(**{name: url}, REDIS_KEY_SECRET="k" * 32))
    index = SecretIndex(s.secrets())
    # As the store and the Redis check write their target: without the password.
    line = f"cannot open the job store at {redact_dsn(url)}; Redis answers at {shown}"
    assert shown in mask(line, index)
    assert hidden == "" or hidden not in mask(f"connecting with {url} ({hidden})", index)
    assert (url in s.secrets()) is bool(hidden)  # the whole URL only when it carries a password


# -- the .env file, and names that are no setting -------------------------------------------------------
def test_an_env_file_that_is_not_utf8_is_one_line_naming_the_file_never_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _isolate(monkeypatch, *REQUIRED)
    (tmp_path / ".env").write_bytes(b"# caf\xe9 settings\nDISCORD_TOKEN=tok-hidden4242\xe9\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == ".env: is not UTF-8 text (byte 0xe9 on line 1): save it as UTF-8"
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_an_env_that_is_a_directory_is_named_not_silently_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _isolate(monkeypatch, *REQUIRED)
    (tmp_path / ".env").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == ".env: is a directory, not a file of NAME=value lines"


def test_names_that_look_meant_for_the_bot_but_are_no_setting_are_listed_with_the_closest_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = load_settings(
        env(GEN_RATELIMIT="1/1", FRAMECAST_LOG_LEVEL="DEBUG", DATABASE_HOST="db", WEB_THEME="v-hidden4242")
        # Not the bot's: compose's own variable, the test suite's, and other programs' prefixes.
        | {"REDIS_PASSWORD": "x", "FRAMECAST_TEST_PORT_BASE": "33000", "HTTP_PROXY": "http://p", "HOME": "/"}
    )
    assert s.unknown_variables == (
        "DATABASE_HOST (DATABASE_PATH?)",
        "FRAMECAST_LOG_LEVEL (LOG_LEVEL?)",
        "GEN_RATELIMIT (GEN_RATE_LIMIT?)",
        "WEB_THEME",
    )
    assert load_settings(dict(REQUIRED)).unknown_variables == ()
    _isolate(monkeypatch, *REQUIRED, "GEN_POLL_INTERVL")
    for name, value in REQUIRED.items():
        monkeypatch.setenv(name, value)
    (tmp_path / ".env").write_text("GEN_POLL_INTERVL=5\nPOSTGRES_PASSWORD=pw\nGEN_VIDEO_MODEL=v\n")
    monkeypatch.chdir(tmp_path)
    assert "GEN_POLL_INTERVL in .env (GEN_POLL_INTERVAL?)" in load_settings().unknown_variables
