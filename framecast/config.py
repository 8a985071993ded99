"""Typed configuration read from the environment.

:func:`load_settings` is the one place that reads configuration. In development a ``.env`` file in
the working directory is loaded first (python-dotenv; real environment variables always win).
Every variable is validated up front: a missing or malformed value raises :class:`ConfigError`
whose message is one readable line naming the variable, so the bot stops before it connects
anywhere. Secret values are never echoed in those messages.
"""

from __future__ import annotations

import base64
import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from dotenv import load_dotenv

__all__ = ["ConfigError", "RateLimit", "Secret", "Settings", "load_settings"]

T = TypeVar("T")

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_INT_RE = re.compile(r"\+?[0-9]+")


class ConfigError(Exception):
    """A missing or malformed configuration value; ``str()`` is one line naming the variable."""

    def __init__(self, variable: str, problem: str) -> None:
        self.variable = variable
        self.problem = problem
        super().__init__(f"{variable}: {problem}")


class Secret:
    """A string that does not show itself: ``str()`` and ``repr()`` give ``***``.

    Call :meth:`reveal` at the one place the value is really needed (an HTTP header, a login).
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret value itself."""
        return self._value

    def __str__(self) -> str:
        return "***"

    def __repr__(self) -> str:
        return "Secret('***')"

    def __format__(self, spec: str) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)

    def __reduce__(self) -> tuple[object, ...]:
        # Pickling would be a way to write the key to disk by accident.
        raise TypeError("Secret values cannot be pickled")


@dataclass(frozen=True)
class RateLimit:
    """At most `requests` requests in any rolling window of `window` seconds."""

    requests: int
    window: float

    def __post_init__(self) -> None:
        if isinstance(self.requests, bool) or not isinstance(self.requests, int) or self.requests < 1:
            raise ValueError("the request count must be an integer >= 1")
        if not (isinstance(self.window, int | float) and math.isfinite(self.window) and self.window > 0):
            raise ValueError("the window must be a number of seconds > 0")

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """Parse ``N/SECONDS`` (e.g. ``16/60`` or ``16/0.5``); raises :class:`ValueError`."""
        count, sep, seconds = text.strip().partition("/")
        if not sep:
            raise ValueError("expected N/SECONDS, e.g. 16/60")
        count, seconds = count.strip(), seconds.strip()
        if not _INT_RE.fullmatch(count) or int(count) < 1:
            raise ValueError("N must be an integer >= 1 (format N/SECONDS, e.g. 16/60)")
        try:
            window = float(seconds)
        except ValueError:
            raise ValueError("SECONDS must be a number (format N/SECONDS, e.g. 16/60)") from None
        if not (math.isfinite(window) and window > 0):
            raise ValueError("SECONDS must be a finite number > 0 (format N/SECONDS, e.g. 16/60)")
        return cls(int(count), window)

    def __str__(self) -> str:
        return f"{self.requests}/{self.window:g}"


@dataclass(frozen=True)
class Settings:
    """All of Framecast's configuration (see ``.env.example`` and docs/ARCHITECTURE.md)."""

    discord_token: Secret
    gen_api_base_url: str
    gen_api_key: Secret
    discord_api_base_url: str | None = None
    discord_gateway_url: str | None = None
    discord_retry_max_delay: float = 60.0
    gen_video_model: str = "svc-video-v2.0"
    gen_image_model: str = "svc-image-2.1-flash"
    gen_rate_limit: RateLimit = RateLimit(16, 60.0)
    gen_poll_interval: float = 30.0
    gen_poll_timeout: float = 900.0
    gen_request_timeout: float = 60.0
    gen_retry_max: int = 6
    gen_backoff_base: float = 2.0
    gen_backoff_max: float = 120.0
    gen_download_max_bytes: int = 209_715_200
    gen_download_timeout: float = 300.0
    gen_max_running: int | None = None
    gen_poll_max_interval: float | None = None
    gen_result_hosts: tuple[str, ...] = ()
    gen_json_max_bytes: int = 1_048_576
    gen_image_json_max_bytes: int = 50_331_648
    gen_max_redirects: int = 3
    gen_malformed_polls: int = 3
    results_at_once: int = 2
    image_max_pixels: int = 40_000_000
    reencode_timeout: float = 300.0
    database_path: Path = Path("data/framecast.sqlite3")
    log_level: str = "INFO"
    member_job_limit: int = 2
    guild_queue_cap: int = 25
    daily_video_quota: int | None = None
    daily_image_quota: int | None = None
    quota_period: float = 86400.0
    guild_keys: bool = True
    key_encryption_secret: Secret | None = None
    prompt_max_chars: int = 2000
    edit_interval: float = 5.0
    token_margin: float = 60.0
    status_message_max_age: float = 3000.0
    shutdown_timeout: float = 20.0
    http_port: int | None = None
    database_url: Secret | None = None
    redis_url: Secret | None = None
    shard_count: int | None = None
    shard_ids: tuple[int, ...] | None = None
    lease_seconds: float = 60.0


# -- value parsers: each raises ValueError with a short reason (never the raw secret) ------------
def _parse_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise ValueError("must be an http:// or https:// URL")
    try:
        host = parts.hostname
        parts.port  # noqa: B018 -- raises ValueError on a malformed port
    except ValueError:
        raise ValueError("has a malformed port") from None
    if not host:
        raise ValueError("must be an http(s) URL with a host")
    return text


def _parse_int(text: str) -> int:
    if not _INT_RE.fullmatch(text):
        raise ValueError("must be a whole number")
    value = int(text)
    if value < 1:
        raise ValueError("must be a positive whole number")
    return value


def _parse_count(text: str) -> int:
    if not _INT_RE.fullmatch(text):
        raise ValueError("must be a whole number")
    return int(text)


_HOST_RE = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")


def _parse_hosts(text: str) -> tuple[str, ...]:
    # Host names only (no scheme, port or path); "*.cdn.example.com" allows every subdomain.
    hosts = [h.strip().lower().rstrip(".") for h in text.replace(",", " ").split()]
    for host in hosts:
        if not _HOST_RE.fullmatch(host):
            raise ValueError(
                f"{_shown(host)} is not a host name (give names like cdn.example.com or *.example.com)"
            )
    return tuple(dict.fromkeys(hosts))


def _parse_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("must be a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a positive number")
    return value


def _parse_level(text: str) -> str:
    level = text.upper()
    if level == "WARN":
        level = "WARNING"
    if level not in _LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
    return level


def _parse_str(text: str) -> str:
    return text


def _parse_path(text: str) -> Path:
    return Path(text).expanduser()


def _parse_rate(text: str) -> RateLimit:
    return RateLimit.parse(text)


def _shown(text: str) -> str:
    # Quote the offending value so the line is readable, but keep it short and on one line.
    shown = text if len(text) <= 60 else text[:57] + "..."
    return repr(shown)


class _Reader:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def raw(self, name: str) -> str | None:
        value = self._environ.get(name)
        if value is None:
            return None
        value = value.strip()
        return value or None  # an empty value counts as unset

    def required(self, name: str, parse: Callable[[str], T], *, secret: bool = False) -> T:
        text = self.raw(name)
        if text is None:
            raise ConfigError(name, "is required but not set")
        return self._parse(name, text, parse, secret=secret)

    def optional(self, name: str, parse: Callable[[str], T], default: T) -> T:
        text = self.raw(name)
        if text is None:
            return default
        return self._parse(name, text, parse, secret=False)

    @staticmethod
    def _parse(name: str, text: str, parse: Callable[[str], T], *, secret: bool) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            got = "" if secret else f" (got {_shown(text)})"
            raise ConfigError(name, f"{exc}{got}") from None


def load_settings(
    environ: Mapping[str, str] | None = None, *, env_file: str | os.PathLike[str] | None = ".env"
) -> Settings:
    """Read and validate the configuration.

    With `environ` given, only that mapping is read (no ``.env``, no ``os.environ``). With
    ``environ=None``, `env_file` (default ``.env`` in the working directory; ``None`` to skip) is
    loaded into the process environment without overriding variables already set, and
    ``os.environ`` is read. Raises :class:`ConfigError` on the first missing or malformed value.
    """
    if environ is None:
        if env_file is not None and Path(env_file).is_file():
            load_dotenv(dotenv_path=env_file, override=False)
        environ = os.environ
    r = _Reader(environ)
    # The defaults live in one place: the dataclass (its class attributes hold them).
    settings = Settings(
        discord_token=Secret(r.required("DISCORD_TOKEN", _parse_str, secret=True)),
        gen_api_base_url=r.required("GEN_API_BASE_URL", _parse_url),
        gen_api_key=Secret(r.required("GEN_API_KEY", _parse_str, secret=True)),
        discord_api_base_url=r.optional("DISCORD_API_BASE_URL", _parse_url, None),
        discord_gateway_url=r.optional("DISCORD_GATEWAY_URL", _parse_gateway_url, None),
        discord_retry_max_delay=r.optional(
            "DISCORD_RETRY_MAX_DELAY", _parse_float, Settings.discord_retry_max_delay
        ),
        gen_video_model=r.optional("GEN_VIDEO_MODEL", _parse_str, Settings.gen_video_model),
        gen_image_model=r.optional("GEN_IMAGE_MODEL", _parse_str, Settings.gen_image_model),
        gen_rate_limit=r.optional("GEN_RATE_LIMIT", _parse_rate, Settings.gen_rate_limit),
        gen_poll_interval=r.optional("GEN_POLL_INTERVAL", _parse_float, Settings.gen_poll_interval),
        gen_poll_timeout=r.optional("GEN_POLL_TIMEOUT", _parse_float, Settings.gen_poll_timeout),
        gen_request_timeout=r.optional("GEN_REQUEST_TIMEOUT", _parse_float, Settings.gen_request_timeout),
        gen_retry_max=r.optional("GEN_RETRY_MAX", _parse_int, Settings.gen_retry_max),
        gen_backoff_base=r.optional("GEN_BACKOFF_BASE", _parse_float, Settings.gen_backoff_base),
        gen_backoff_max=r.optional("GEN_BACKOFF_MAX", _parse_float, Settings.gen_backoff_max),
        gen_download_max_bytes=r.optional(
            "GEN_DOWNLOAD_MAX_BYTES", _parse_int, Settings.gen_download_max_bytes
        ),
        gen_download_timeout=r.optional("GEN_DOWNLOAD_TIMEOUT", _parse_float, Settings.gen_download_timeout),
        gen_max_running=r.optional("GEN_MAX_RUNNING", _parse_int, Settings.gen_max_running),
        gen_poll_max_interval=r.optional(
            "GEN_POLL_MAX_INTERVAL", _parse_float, Settings.gen_poll_max_interval
        ),
        gen_result_hosts=r.optional("GEN_RESULT_HOSTS", _parse_hosts, Settings.gen_result_hosts),
        gen_json_max_bytes=r.optional("GEN_JSON_MAX_BYTES", _parse_int, Settings.gen_json_max_bytes),
        gen_image_json_max_bytes=r.optional(
            "GEN_IMAGE_JSON_MAX_BYTES", _parse_int, Settings.gen_image_json_max_bytes
        ),
        gen_max_redirects=r.optional("GEN_MAX_REDIRECTS", _parse_count, Settings.gen_max_redirects),
        gen_malformed_polls=r.optional("GEN_MALFORMED_POLLS", _parse_int, Settings.gen_malformed_polls),
        results_at_once=r.optional("RESULTS_AT_ONCE", _parse_int, Settings.results_at_once),
        image_max_pixels=r.optional("IMAGE_MAX_PIXELS", _parse_int, Settings.image_max_pixels),
        reencode_timeout=r.optional("REENCODE_TIMEOUT", _parse_float, Settings.reencode_timeout),
        database_path=r.optional("DATABASE_PATH", _parse_path, Settings.database_path),
        log_level=r.optional("LOG_LEVEL", _parse_level, Settings.log_level),
        member_job_limit=r.optional("MEMBER_JOB_LIMIT", _parse_int, Settings.member_job_limit),
        guild_queue_cap=r.optional("GUILD_QUEUE_CAP", _parse_int, Settings.guild_queue_cap),
        daily_video_quota=r.optional("DAILY_VIDEO_QUOTA", _parse_count, Settings.daily_video_quota),
        daily_image_quota=r.optional("DAILY_IMAGE_QUOTA", _parse_count, Settings.daily_image_quota),
        quota_period=r.optional("QUOTA_PERIOD", _parse_float, Settings.quota_period),
        guild_keys=r.optional("GUILD_KEYS", _parse_switch, Settings.guild_keys),
        key_encryption_secret=_key_secret(r),
        prompt_max_chars=r.optional("PROMPT_MAX_CHARS", _parse_int, Settings.prompt_max_chars),
        edit_interval=r.optional("EDIT_INTERVAL", _parse_float, Settings.edit_interval),
        token_margin=r.optional("TOKEN_MARGIN", _parse_float, Settings.token_margin),
        status_message_max_age=r.optional(
            "STATUS_MESSAGE_MAX_AGE", _parse_float, Settings.status_message_max_age
        ),
        shutdown_timeout=r.optional("SHUTDOWN_TIMEOUT", _parse_float, Settings.shutdown_timeout),
        http_port=r.optional("HTTP_PORT", _parse_port, Settings.http_port),
        database_url=_secret_url(r, "DATABASE_URL", ("postgresql", "postgres")),
        redis_url=_secret_url(r, "REDIS_URL", ("redis", "rediss", "unix")),
        shard_count=r.optional("SHARD_COUNT", _parse_int, Settings.shard_count),
        shard_ids=r.optional("SHARD_IDS", _parse_ids, Settings.shard_ids),
        lease_seconds=r.optional("LEASE_SECONDS", _parse_float, Settings.lease_seconds),
    )
    if settings.shard_ids is not None:
        if settings.shard_count is None:
            raise ConfigError("SHARD_IDS", "needs SHARD_COUNT (the total number of shards)")
        too_big = [i for i in settings.shard_ids if i >= settings.shard_count]
        if too_big:
            raise ConfigError(
                "SHARD_IDS", f"shard {too_big[0]} is not below SHARD_COUNT={settings.shard_count}"
            )
    logging.getLogger(__name__).debug("configuration loaded (rate limit %s)", settings.gen_rate_limit)
    return settings


_SWITCH = {
    "on": True,
    "true": True,
    "yes": True,
    "1": True,
    "off": False,
    "false": False,
    "no": False,
    "0": False,
}


def _parse_switch(text: str) -> bool:
    value = _SWITCH.get(text.lower())
    if value is None:
        raise ValueError("must be on or off")
    return value


def _key_secret(r: _Reader) -> Secret | None:
    """KEY_ENCRYPTION_SECRET: a Fernet key (urlsafe base64 of 32 bytes); never echoed when malformed."""
    text = r.raw("KEY_ENCRYPTION_SECRET")
    if text is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raw = b""
    if len(raw) != 32:
        raise ConfigError(
            "KEY_ENCRYPTION_SECRET",
            'must be a Fernet key (make one with: python -c "from cryptography.fernet import Fernet; '
            'print(Fernet.generate_key().decode())")',
        )
    return Secret(text)


def _parse_port(text: str) -> int:
    value = _parse_count(text)
    if not 0 < value < 65536:
        raise ValueError("must be a TCP port (1-65535)")
    return value


def _parse_ids(text: str) -> tuple[int, ...]:
    ids = [part.strip() for part in text.replace(",", " ").split()]
    if not ids or not all(_INT_RE.fullmatch(i) for i in ids):
        raise ValueError("must be shard numbers separated by commas, e.g. 0,1")
    return tuple(sorted(dict.fromkeys(int(i) for i in ids)))


def _secret_url(r: _Reader, name: str, schemes: tuple[str, ...]) -> Secret | None:
    """A connection URL that may carry a password: checked for its scheme, never echoed."""
    text = r.raw(name)
    if text is None:
        return None
    scheme = urlsplit(text).scheme.lower()
    if scheme not in schemes:
        raise ConfigError(name, f"must be a {schemes[0]}:// URL")
    return Secret(text)


def _parse_gateway_url(text: str) -> str:
    # The gateway is a websocket endpoint; discord.py also accepts an http(s) base for it.
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https", "ws", "wss"):
        raise ValueError("must be a ws://, wss://, http:// or https:// URL")
    if not parts.hostname:
        raise ValueError("must be a URL with a host")
    return text
