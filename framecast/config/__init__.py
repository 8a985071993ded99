"""Typed configuration read from the environment.

:class:`Settings` is one pydantic-settings model: each field is read from the environment variable
of the same name in upper case (``gen_rate_limit`` from ``GEN_RATE_LIMIT``), and its annotation says
how that text is parsed. :func:`load_settings` is the one place that reads configuration: the real
environment, and in development a ``.env`` file in the working directory (real environment
variables always win). Every variable is validated up front: missing or malformed values raise one
:class:`ConfigError` that names every one of them, a readable line each, so the bot stops before it
connects anywhere and the operator fixes them all in one go. Secret values are never echoed in those
messages.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AliasGenerator, PrivateAttr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from framecast.config.values import (
    GEN_API_BASE_URL_PLACEHOLDER,
    REDIS_KEY_SECRET_MIN,
    Count,
    Positive,
    RateLimit,
    Seconds,
    Secret,
    Text,
    _env,
    _Invalid,
    _parse_count,
    _parse_fernet_keys,
    _parse_float,
    _parse_gateway_url,
    _parse_hosts,
    _parse_ids,
    _parse_int,
    _parse_level,
    _parse_listen_host,
    _parse_path,
    _parse_port,
    _parse_postgres_url,
    _parse_redis_url,
    _parse_service_url,
    _parse_shard_count,
    _parse_shared_secret,
    _parse_switch,
    _parse_url,
    fernet_keys,
    url_secrets,
)

__all__ = [
    "GEN_API_BASE_URL_PLACEHOLDER",
    "REDIS_KEY_SECRET_MIN",
    "ConfigError",
    "RateLimit",
    "Secret",
    "Settings",
    "fernet_keys",
    "load_settings",
]


class ConfigError(Exception):
    """Missing or malformed configuration values; ``str()`` is one line per variable, naming it.

    :attr:`variable` and :attr:`problem` are the first (in the order the variables are declared);
    :attr:`problems` holds every one, so an operator learns all of them from one start.
    """

    def __init__(self, variable: str, problem: str, *more: tuple[str, str]) -> None:
        self.variable = variable
        self.problem = problem
        self.problems: tuple[tuple[str, str], ...] = ((variable, problem), *more)
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """One ``VARIABLE: problem`` line per variable."""
        return [f"{variable}: {problem}" for variable, problem in self.problems]


#: Caps on a service answer once decompressed: JSON answers carry a few fields, an image create may
#: carry the image inline as base64 (16 MiB holds a 12 MiB image, past Discord's 10 MiB upload).
#: One value for the settings and the client's own defaults.
GEN_JSON_MAX_BYTES = 1_048_576
GEN_IMAGE_JSON_MAX_BYTES = 16_777_216

#: Bounds on every database call, in seconds: one value for the settings and the store's defaults.
#: Each trades riding out a slow moment against answering soon when the database is gone (a command
#: that meets an outage is refused with "try again in a moment" once its bound is spent).
#: Opening a PostgreSQL connection: longer tolerates a slow network or handshake, shorter notices a
#: dead or silent server sooner.
DATABASE_CONNECT_TIMEOUT = 5.0
#: One statement: PostgreSQL's answer (the driver's command timeout and the server's
#: ``statement_timeout``), SQLite's wait for another process's lock (``busy_timeout``). Longer waits
#: out a busy server or a backup's lock; shorter frees a command sooner on a silent network.
DATABASE_STATEMENT_TIMEOUT = 5.0
#: Waiting for a free pooled PostgreSQL connection: longer queues behind a burst, shorter refuses sooner.
DATABASE_POOL_TIMEOUT = 5.0
#: One store call end to end (all its statements, or the wait for the one SQLite connection): past it
#: the call is abandoned (its connection dropped) whatever the driver is doing. The most a command
#: waits for the store before its answer.
DATABASE_CALL_TIMEOUT = 8.0


class Settings(BaseSettings):
    """All of Framecast's configuration (see ``.env.example`` and docs/ARCHITECTURE.md).

    Frozen. Building one in code (``Settings(discord_token=Secret(...), ...)``) never reads the
    environment; :func:`load_settings` does. Use :meth:`replace` for a changed copy.
    """

    model_config = SettingsConfigDict(
        frozen=True,
        arbitrary_types_allowed=True,  # Secret, RateLimit
        # Field gen_rate_limit is the variable GEN_RATE_LIMIT; code may use either name.
        alias_generator=AliasGenerator(validation_alias=str.upper),
        validate_by_name=True,
        validate_by_alias=True,
        case_sensitive=True,  # as os.environ on Linux: gen_rate_limit=... is not GEN_RATE_LIMIT
        enable_decoding=False,  # tuples are comma lists here, never JSON: the parsers decide
        extra="ignore",
        hide_input_in_errors=True,  # a ValidationError must never carry a secret into a log
    )

    # -- Required, then Discord (declaration order is the order errors are reported in) ----------
    discord_token: Annotated[Secret, _env(Secret, secret=True)]
    gen_api_base_url: Annotated[str, _env(_parse_service_url)]
    gen_api_key: Annotated[Secret, _env(Secret, secret=True)]
    discord_api_base_url: Annotated[str | None, _env(_parse_url)] = None
    discord_gateway_url: Annotated[str | None, _env(_parse_gateway_url)] = None
    discord_retry_max_delay: Seconds = 60.0
    # Bounds past which the bot cannot recover by itself: it exits (code 3) for a restart policy.
    discord_outage_exit: Seconds = 900.0
    loop_stall_exit: Seconds = 120.0
    # -- Generation service --------------------------------------------------------------------
    gen_video_model: Text = "svc-video-v2.0"
    gen_image_model: Text = "svc-image-2.1-flash"
    gen_rate_limit: Annotated[RateLimit, _env(RateLimit.parse)] = RateLimit(16, 60.0)
    gen_poll_interval: Seconds = 30.0
    gen_poll_timeout: Seconds = 900.0
    gen_request_timeout: Seconds = 60.0
    gen_retry_max: Positive = 6
    gen_backoff_base: Seconds = 2.0
    gen_backoff_max: Seconds = 120.0
    gen_download_max_bytes: Positive = 209_715_200
    gen_download_timeout: Seconds = 300.0
    gen_max_running: Annotated[int | None, _env(_parse_int)] = None
    gen_poll_max_interval: Annotated[float | None, _env(_parse_float)] = None
    gen_result_hosts: Annotated[tuple[str, ...], _env(_parse_hosts)] = ()
    gen_json_max_bytes: Positive = GEN_JSON_MAX_BYTES
    gen_image_json_max_bytes: Positive = GEN_IMAGE_JSON_MAX_BYTES
    gen_max_redirects: Count = 3
    gen_malformed_polls: Positive = 3
    results_at_once: Positive = 2
    image_max_pixels: Positive = 40_000_000
    reencode_timeout: Seconds = 300.0
    # -- Bot -----------------------------------------------------------------------------------
    database_path: Annotated[Path, _env(_parse_path)] = Path("data/framecast.sqlite3")
    # What each bound trades: DATABASE_CONNECT_TIMEOUT and its neighbours above.
    database_connect_timeout: Seconds = DATABASE_CONNECT_TIMEOUT
    database_statement_timeout: Seconds = DATABASE_STATEMENT_TIMEOUT
    database_pool_timeout: Seconds = DATABASE_POOL_TIMEOUT
    database_call_timeout: Seconds = DATABASE_CALL_TIMEOUT
    log_level: Annotated[str, _env(_parse_level)] = "INFO"
    member_job_limit: Positive = 2
    guild_queue_cap: Positive = 25
    # -- Servers' own settings -------------------------------------------------------------------
    daily_video_quota: Annotated[int | None, _env(_parse_count)] = None  # 0: none at all; None: no quota
    daily_image_quota: Annotated[int | None, _env(_parse_count)] = None
    quota_period: Seconds = 86400.0
    guild_keys: Annotated[bool, _env(_parse_switch)] = True
    # Commands in DMs and group DMs for people who add the app to their account (off: servers only).
    user_install: Annotated[bool, _env(_parse_switch)] = False
    key_encryption_secret: Annotated[Secret | None, _env(_parse_fernet_keys, secret=True)] = None
    prompt_max_chars: Positive = 2000
    edit_interval: Seconds = 5.0
    token_margin: Seconds = 60.0
    status_message_max_age: Seconds = 3000.0
    shutdown_timeout: Seconds = 20.0
    # -- Operating and scaling out ---------------------------------------------------------------
    http_port: Annotated[int | None, _env(_parse_port)] = None
    http_host: Annotated[str, _env(_parse_listen_host)] = "127.0.0.1"
    database_url: Annotated[Secret | None, _env(_parse_postgres_url, secret=True)] = None
    redis_url: Annotated[Secret | None, _env(_parse_redis_url, secret=True)] = None
    # Names each key's budget in Redis by an HMAC under it (never a plain hash of the key); the same
    # in every process on one Redis, and needed with REDIS_URL.
    redis_key_secret: Annotated[Secret | None, _env(_parse_shared_secret, secret=True)] = None
    shard_count: Annotated[int | None, _env(_parse_shard_count)] = None
    shard_ids: Annotated[tuple[int, ...] | None, _env(_parse_ids)] = None
    lease_seconds: Seconds = 60.0
    # -- Web pages (off without WEB_PORT; the OAuth2 client is the bot's own application) --------
    web_port: Annotated[int | None, _env(_parse_port)] = None
    web_base_url: Annotated[str | None, _env(_parse_url)] = None
    web_client_secret: Annotated[Secret | None, _env(Secret, secret=True)] = None
    web_session_secret: Annotated[Secret | None, _env(Secret, secret=True)] = None
    # Names load_settings met that are no setting (a typo's), for the one warning at start.
    _unknown: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def check_web(self) -> Settings:
        """WEB_PORT needs its https:// address (the Secure cookie), the client secret and a session secret."""
        for name in ("web_base_url", "web_client_secret", "web_session_secret"):
            if self.web_port is not None and getattr(self, name) is None:
                raise _Invalid(name.upper(), "is required when WEB_PORT is set")
        url = urlsplit(self.web_base_url or "https://unset")
        local = url.hostname in ("127.0.0.1", "localhost")
        if url.query or url.fragment or url.path not in ("", "/") or (url.scheme != "https" and not local):
            raise _Invalid("WEB_BASE_URL", "must be a plain https:// address (http:// only on 127.0.0.1)")
        if self.web_session_secret is not None and len(self.web_session_secret.reveal()) < 32:
            raise _Invalid("WEB_SESSION_SECRET", "must be at least 32 random characters")
        return self

    @model_validator(mode="after")
    def check_shards(self) -> Settings:
        """SHARD_IDS needs SHARD_COUNT, and every id must be below it."""
        if self.shard_ids is not None:
            if self.shard_count is None:
                raise _Invalid("SHARD_IDS", "needs SHARD_COUNT (the total number of shards)")
            too_big = [i for i in self.shard_ids if i >= self.shard_count]
            if too_big:
                raise _Invalid("SHARD_IDS", f"shard {too_big[0]} is not below SHARD_COUNT={self.shard_count}")
        return self

    @model_validator(mode="after")
    def check_poll_gaps(self) -> Settings:
        """GEN_POLL_MAX_INTERVAL, the longest gap between two polls of a task, is at least the shortest."""
        if self.gen_poll_max_interval is not None and self.gen_poll_max_interval < self.gen_poll_interval:
            raise _Invalid(
                "GEN_POLL_MAX_INTERVAL", f"must be at least GEN_POLL_INTERVAL ({self.gen_poll_interval:g} s)"
            )
        return self

    @model_validator(mode="after")
    def check_redis_secret(self) -> Settings:
        """REDIS_URL needs REDIS_KEY_SECRET: the budgets' names in Redis are keyed by it."""
        if self.redis_url is not None and self.redis_key_secret is None:
            raise _Invalid(
                "REDIS_KEY_SECRET", "is required with REDIS_URL (the same random string in every process)"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only the given values: reading the environment is :func:`load_settings`'s job.

        So a ``Settings(...)`` built in code (tests, benchmarks) is exactly what it says, whatever
        the process environment holds.
        """
        return (init_settings,)

    def __setattr__(self, name: str, value: Any) -> None:
        # Frozen like the dataclass it replaces: assignment is an AttributeError, not a ValueError.
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def replace(self, **changes: Any) -> Settings:
        """A validated copy with `changes` (field names), like :func:`dataclasses.replace`."""
        unknown = sorted(changes.keys() - type(self).model_fields.keys())
        if unknown:
            raise TypeError(f"Settings has no field {unknown[0]!r}")
        return self.model_validate({**self.__dict__, **changes})

    @property
    def unknown_variables(self) -> tuple[str, ...]:
        """What :func:`load_settings` ignored, one entry a name (never a value), with the setting it is
        closest to: ``GEN_RATELIMIT (GEN_RATE_LIMIT?)``, ``GEN_POLL_INTERVL in .env (...)``."""
        return self._unknown

    def secrets(self) -> list[str]:
        """Every secret these settings hold, for the log filter: the token, the key, the passwords of
        the connection URLs (and those URLs whole: a URL without a password is no secret, so the
        host it names shows), and each key of a ``KEY_ENCRYPTION_SECRET`` list on its own (while rotating)."""
        found = [self.discord_token.reveal(), self.gen_api_key.reveal()]
        found += [s.reveal() for s in (self.web_client_secret, self.web_session_secret) if s is not None]
        for extra in (self.key_encryption_secret, self.redis_key_secret):
            if extra is not None:
                found.append(extra.reveal())
        for url in (self.database_url, self.redis_url):
            if url is not None:
                found.extend(url_secrets(url))
        if self.key_encryption_secret is not None:
            found.extend(key.reveal() for key in fernet_keys(self.key_encryption_secret))
        return found


# Every variable Settings reads, in declaration order (the README and .env.example document them).
_VARIABLES: tuple[str, ...] = tuple(name.upper() for name in Settings.model_fields)


def load_settings(
    environ: Mapping[str, str] | None = None, *, env_file: str | os.PathLike[str] | None = ".env"
) -> Settings:
    """Read and validate the configuration.

    With `environ` given, only that mapping is read (no ``.env``, no ``os.environ``). With
    ``environ=None``, ``os.environ`` is read, and for variables it does not set, `env_file`
    (default ``.env`` in the working directory; ``None`` to skip). A value that is empty or only
    blanks counts as unset, and a variable set empty in the real environment still wins over the
    file. Raises :class:`ConfigError` naming every missing or malformed value at once.
    """
    dotenv: Mapping[str, Any] = {}
    if environ is None:
        environ = os.environ
        sources: list[Mapping[str, Any]] = [EnvSettingsSource(Settings)()]
        if env_file is not None:
            dotenv = _read_env_file(Path(env_file))
            sources.append(dotenv)
    else:
        sources = [environ]
    given: dict[str, str] = {}
    for name in _VARIABLES:
        # The first source that sets the variable wins, even with an empty value (as python-dotenv
        # leaves an already-set variable alone); an empty value then means the default.
        value = next((source[name] for source in sources if source.get(name) is not None), None)
        if isinstance(value, str) and value.strip():
            given[name] = value
    try:
        settings = Settings.model_validate(given)
    except ValidationError as exc:
        raise _config_error(exc) from None
    private = settings.__pydantic_private__  # frozen: the private attribute is written in place
    if private is not None:  # always: Settings declares one
        private["_unknown"] = _unknown_names(environ, dotenv, env_file)
    logging.getLogger(__name__).debug("configuration loaded (rate limit %s)", settings.gen_rate_limit)
    return settings


def _read_env_file(path: Path) -> Mapping[str, Any]:
    """The variables of the ``.env`` file (none if there is no such file); one line naming the file
    when it cannot be read, never its text (it holds the secrets)."""
    if path.is_dir():  # what Docker makes of a bind mount whose file did not exist: nothing was read
        raise ConfigError(str(path), "is a directory, not a file of NAME=value lines")
    try:
        return DotEnvSettingsSource(Settings, env_file=path, env_file_encoding="utf-8")()
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        problem = f"is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} on line {line}): save it as UTF-8"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or type(exc).__name__})"
    raise ConfigError(str(path), problem) from None


#: Environment variables under these prefixes are meant for Framecast: one that is no setting is a
#: typo to warn of. Other prefixes of settings (LOG_, HTTP_, USER_, ...) are too common elsewhere;
#: FRAMECAST_ is warned of only when what follows it is a setting (FRAMECAST_LOG_LEVEL).
_OUR_PREFIXES = ("GEN_", "DISCORD_", "DATABASE_", "REDIS_", "SHARD_", "WEB_")
#: Read by docker compose from .env (and passed on by its env_file), not by the bot (.env.example).
_COMPOSE_VARIABLES = frozenset({"POSTGRES_PASSWORD", "REDIS_PASSWORD", "GRAFANA_ADMIN_PASSWORD"})


def _unknown_names(
    environ: Mapping[str, str], dotenv: Mapping[str, Any], env_file: str | os.PathLike[str] | None
) -> tuple[str, ...]:
    """Each name that looks meant for the bot but is no setting, with the closest setting if any."""
    known = set(_VARIABLES) | _COMPOSE_VARIABLES
    where = f" in {Path(env_file).name}" if env_file is not None else ""
    found: dict[str, str] = {}
    for name in environ:
        bare = name.removeprefix("FRAMECAST_")
        if bare != name and bare in _VARIABLES:
            found[name] = f"{name} ({bare}?)"
        elif name.startswith(_OUR_PREFIXES) and name not in known:
            found[name] = _suggested(name, "")
    for name in dotenv:
        if name not in known and name not in found:
            found[name] = _suggested(name, where)
    return tuple(found[name] for name in sorted(found))


def _suggested(name: str, where: str) -> str:
    close = difflib.get_close_matches(name.upper(), _VARIABLES, n=1, cutoff=0.75)
    return f"{name}{where}" + (f" ({close[0]}?)" if close else "")


def _config_error(exc: ValidationError) -> ConfigError:
    # Every error, in field order, one line per variable; never the input (it may be a secret).
    found: dict[str, str] = {}
    for error in exc.errors(include_url=False, include_input=False):
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, _Invalid):
            variable, problem = cause.variable, cause.problem
        else:
            variable = str(error["loc"][0]).upper() if error["loc"] else "configuration"
            problem = (
                "is required but not set" if error["type"] == "missing" else " ".join(error["msg"].split())
            )
        found.setdefault(variable, problem)
    (first, problem), *more = found.items()
    return ConfigError(first, problem, *more)
