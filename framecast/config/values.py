"""How each environment variable's text is read: the value types, and one parser per kind of value.

Each parser reads the stripped text of one variable and raises ValueError with a short reason; a
reason may quote the value, so parsers of secrets never do. :func:`_env` turns a parser into the
annotation a :class:`framecast.config.Settings` field carries.
"""

from __future__ import annotations

import base64
import ipaddress
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from pydantic import BeforeValidator, ValidationInfo

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_INT_RE = re.compile(r"\+?[0-9]+")
# A decimal number as people write one (float() also takes "1_0", "inf" and "nan": a typo read as
# another value, or none).
_NUMBER_RE = re.compile(r"\+?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


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


# -- value parsers: each reads the stripped text of one variable and raises ValueError with a
# -- short reason. A reason may quote the value, so parsers of secrets never do.
def _parse_str(text: str) -> str:
    return text


def _split_url(text: str) -> SplitResult:
    # urlsplit's own errors quote the host part, password included: give a reason of our own.
    try:
        return urlsplit(text)
    except ValueError:
        raise ValueError("is not a valid URL") from None


def _check_authority(parts: SplitResult) -> None:
    # The host part as every client reads it: one "@" at most (an unencoded "@" in a password is
    # read as the host by some parsers, SQLAlchemy's among them), and a port of 1-65535 if any.
    if parts.netloc.count("@") > 1:
        raise ValueError("has an @ in its user name or password (write it %40)")
    try:
        port = parts.port
    except ValueError:
        # A "/", "?" or "#" in a password ends the host part early: it reads as a malformed port.
        raise ValueError(
            "has a malformed port (a / ? # or @ in a user name or password must be percent-encoded)"
        ) from None
    if parts.netloc.endswith(":"):
        raise ValueError("has no port after its host's colon (drop the colon, or give a port)")
    if port == 0:
        raise ValueError("has port 0 (a port is 1-65535)")


def _refuse_credentials(parts: SplitResult) -> None:
    # The service is reached with GEN_API_KEY and Discord with DISCORD_TOKEN, both sent as an
    # Authorization header, which aiohttp refuses to combine with credentials in the URL; a password
    # here would also show wherever the URL is logged (it is not a secret the log filter masks).
    if "@" in parts.netloc:
        raise ValueError("must not carry a user name or password (user:password@)")


def _parse_url(text: str) -> str:
    parts = _split_url(text)
    if parts.scheme not in ("http", "https"):
        raise ValueError("must be an http:// or https:// URL")
    _check_authority(parts)
    _refuse_credentials(parts)
    if not parts.hostname:
        raise ValueError("must be an http(s) URL with a host")
    return text


#: ``GEN_API_BASE_URL`` as ``.env.example`` leaves it: a newcomer who kept it is told what belongs there.
GEN_API_BASE_URL_PLACEHOLDER = "https://your-generation-service.example"


def _parse_service_url(text: str) -> str:
    if text.rstrip("/").lower() == GEN_API_BASE_URL_PLACEHOLDER:
        raise ValueError(
            "is still the placeholder from .env.example: put your generation service's API address "
            "here (the http:// or https:// base URL its documentation gives)"
        )
    return _parse_url(text)


def _parse_gateway_url(text: str) -> str:
    # The gateway is a websocket endpoint; discord.py also accepts an http(s) base for it.
    parts = _split_url(text)
    if parts.scheme not in ("http", "https", "ws", "wss"):
        raise ValueError("must be a ws://, wss://, http:// or https:// URL")
    _check_authority(parts)
    _refuse_credentials(parts)
    if not parts.hostname:
        raise ValueError("must be a URL with a host")
    return text


def _parse_count(text: str) -> int:
    if not _INT_RE.fullmatch(text):
        raise ValueError("must be a whole number")
    try:
        return int(text)
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits())
        raise ValueError("is too large") from None


def _parse_int(text: str) -> int:
    value = _parse_count(text)
    if value < 1:
        raise ValueError("must be a positive whole number")
    return value


#: The most shards SHARD_COUNT may name. Discord documents no maximum (only at most 2,500 servers
#: per shard, about 1,000 recommended); 100,000 shards hold 100 million servers at the recommended
#: load, past any bot there is, while anything sized by the count (a set of shard numbers) stays small.
SHARD_COUNT_MAX = 100_000


def _parse_shard_count(text: str) -> int:
    value = _parse_int(text)
    if value > SHARD_COUNT_MAX:
        raise ValueError(f"must be at most {SHARD_COUNT_MAX:,} (Discord's shards, not servers)")
    return value


def _parse_port(text: str) -> int:
    value = _parse_count(text)
    if not 0 < value < 65536:
        raise ValueError("must be a TCP port (1-65535)")
    return value


def _parse_listen_host(text: str) -> str:
    # An address to listen on: an IP literal (0.0.0.0 for every interface) or a host name.
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", text):
        raise ValueError("must be an IP address (127.0.0.1, 0.0.0.0, ::) or a host name")
    return text


#: The longest duration any setting takes, in seconds: 2,147,483 s (24.8 days), the most milliseconds a
#: signed 32-bit number holds, which is what the strictest consumers take (PostgreSQL's
#: statement_timeout, SQLite's busy_timeout; a larger value overflows them, or int() of it fails).
#: One bound for every duration: far past anything the bot waits for or keeps (the longest default
#: is QUOTA_PERIOD's day, so a weekly quota still fits); what it refuses is a quota period of a month.
SECONDS_MAX = 2_147_483


def _parse_float(text: str) -> float:
    if not _NUMBER_RE.fullmatch(text):
        raise ValueError("must be a number")
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a positive number")
    if value > SECONDS_MAX:
        raise ValueError(f"must be at most {SECONDS_MAX:,} seconds (24.8 days)")
    return value


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


def _parse_level(text: str) -> str:
    level = text.upper()
    if level == "WARN":
        level = "WARNING"
    if level not in _LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
    return level


def _parse_path(text: str) -> Path:
    try:
        return Path(text).expanduser()
    except RuntimeError:  # "~someone/..." for a user this system does not know
        raise ValueError("starts with ~ but that home directory is unknown") from None


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


def _parse_ids(text: str) -> tuple[int, ...]:
    ids = [part.strip() for part in text.replace(",", " ").split()]
    if not ids or not all(_INT_RE.fullmatch(i) for i in ids):
        raise ValueError("must be shard numbers separated by commas, e.g. 0,1")
    return tuple(sorted(dict.fromkeys(int(i) for i in ids)))


def fernet_keys(secret: Secret) -> tuple[Secret, ...]:
    """The keys in a ``KEY_ENCRYPTION_SECRET`` value, in order (the first encrypts, all decrypt).

    The value is one Fernet key or a comma-separated list of them; blanks around each are ignored.
    """
    return tuple(Secret(part.strip()) for part in secret.reveal().split(","))


def _check_fernet_key(text: str, where: str) -> None:
    # A Fernet key is the urlsafe base64 of 32 bytes; the message says how to make one.
    if not text:
        raise ValueError(f"{where}is empty (a stray comma?)")
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raw = b""
    if len(raw) != 32:
        raise ValueError(
            f'{where}must be a Fernet key (make one with: python -c "from cryptography.fernet import Fernet; '
            'print(Fernet.generate_key().decode())")'
        )


def _parse_fernet_keys(text: str) -> Secret:
    # One key, or several to rotate (new first, then the old ones until `python -m
    # framecast.keys.rotate` has re-encrypted every stored key). A bad one is named by its position.
    keys = fernet_keys(Secret(text))
    for n, key in enumerate(keys, 1):
        _check_fernet_key(key.reveal(), "" if len(keys) == 1 else f"key {n} of {len(keys)} ")
    return Secret(",".join(key.reveal() for key in keys))


#: The shortest REDIS_KEY_SECRET accepted: 32 characters (of a random string: enough that nobody
#: who reads Redis can guess it and test API keys against the names).
REDIS_KEY_SECRET_MIN = 32


def _parse_shared_secret(text: str) -> Secret:
    if len(text) < REDIS_KEY_SECRET_MIN:
        raise ValueError(f"must be at least {REDIS_KEY_SECRET_MIN} characters (a random string)")
    return Secret(text)


def _parse_secret_url(*schemes: str) -> Callable[[str], Secret]:
    # A connection URL may carry a password: the reasons never quote any part of it. The host part
    # is checked here, so a URL the drivers cannot read is one line now, not a traceback at start-up.
    def parse(text: str) -> Secret:
        parts = _split_url(text)
        if parts.scheme.lower() not in schemes:
            raise ValueError(f"must be a {schemes[0]}:// URL")
        _check_authority(parts)
        return Secret(text)

    return parse


_parse_postgres_url = _parse_secret_url("postgresql", "postgres")
_parse_redis_url = _parse_secret_url("redis", "rediss", "unix")


# Whatever comes before a URL's last "@" (after its scheme) may be a user name and password.
_CREDENTIALS = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?.*@", re.DOTALL)


def _shown(text: str) -> str:
    """The offending value as an error quotes it: one line, short, and never a URL's user:password@
    part (redacted before shortening, so a cut never leaves a password without its "@")."""
    text = _CREDENTIALS.sub(r"\1***@", text)
    shown = text if len(text) <= 60 else text[:57] + "..."
    return repr(shown)


def url_secrets(url: Secret) -> list[str]:
    """What the log filter must mask of a connection URL: its password (as written and decoded, and
    any ``password=`` in its query) and then the whole URL; nothing of a URL without one, so its
    host shows in the logs (``redact_dsn`` writes it without the password either way)."""
    text = url.reveal()
    try:
        parts = urlsplit(text)
        found = [parts.password or ""]
    except ValueError:
        return [text]  # unreadable: the whole of it, to be safe
    found += [value for key, value in parse_qsl(parts.query) if key.lower() in ("password", "passwd")]
    found = [s for s in dict.fromkeys([*found, *(unquote(s) for s in found)]) if s]
    return [*found, text] if found else []


class _Invalid(ValueError):
    """Raised inside validation; carries the variable so the error can name it."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(problem)
        self.variable = variable
        self.problem = problem


def _env(parse: Callable[[str], Any], *, secret: bool = False) -> BeforeValidator:
    """Annotation metadata: how a field's environment text is parsed (`secret`: never quote it).

    Only text is parsed; values that are already typed (``Settings(...)`` built in code, as the
    tests do) pass through to pydantic's type check untouched, as they did with the dataclass.
    """

    def read(value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        text = value.strip()
        try:
            return parse(text)
        except ValueError as exc:
            got = "" if secret else f" (got {_shown(text)})"
            raise _Invalid(str(info.field_name).upper(), f"{exc}{got}") from None

    return BeforeValidator(read)


# Field types that say how the variable's text is read (a positive whole number, seconds, ...).
Url = Annotated[str, _env(_parse_url)]
Text = Annotated[str, _env(_parse_str)]
Seconds = Annotated[float, _env(_parse_float)]
Positive = Annotated[int, _env(_parse_int)]
Count = Annotated[int, _env(_parse_count)]
