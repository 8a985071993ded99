"""Checking what callers hand the store, before any I/O, with one rule for both databases.

Everything is refused on the caller's side with ``TypeError``/``ValueError`` when a database would
store it wrongly or fail later with a less helpful error: NaN/inf (SQLite stores NULL), integers
beyond 64 bits (PostgreSQL BIGINT), NUL characters (PostgreSQL text cannot hold them), lone
surrogates (not UTF-8), bools where numbers belong. The expected type and nullability of a column
come from :mod:`framecast.storage.schema`: a new job column needs no change here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from framecast.guilds.settings import KeyStatus, Setting
from framecast.storage.schema import durations, jobs
from framecast.values import JobKind, JobState, NewJob
from framecast.values.durations import DurationRow

INT_MAX = 2**63 - 1
#: The job fields add() takes from a NewJob.
NEW_JOB_FIELDS = tuple(f.name for f in fields(NewJob))
# Columns update()/transition() may not write: identity, the state (only through transition()),
# and what the store maintains itself.
_NOT_WRITABLE = {"lease_owner", "lease_until"}


@dataclass(frozen=True)
class SettingsChange:
    """One audit-log row: ``user_id`` changed ``setting`` of ``guild_id`` at ``at`` (epoch seconds)."""

    guild_id: int
    user_id: int
    setting: Setting
    at: float


@dataclass(frozen=True)
class StoredKey:
    """A server's own API key as stored: its Fernet token (never the key), last four characters, status."""

    guild_id: int
    token: bytes = field(repr=False)
    last4: str
    status: KeyStatus
    set_by: int
    set_at: float


def dumps(value: Mapping[str, Any]) -> str:
    """JSON text for a params/discord/settings dict: compact, non-ASCII kept as is, NaN/inf refused."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (json.loads makes them from "\ud800" escapes in Discord payloads) are not
        # UTF-8; escaped, they round-trip exactly, since json.loads turns them back into the same.
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


def _type_error(what: str, expected: str, value: object) -> TypeError:
    return TypeError(f"{what} must be {expected}, not {type(value).__name__}")


def check_text(what: str, value: object) -> str:
    """A str both databases store exactly (no NUL, no lone surrogate), as a plain str."""
    if not isinstance(value, str):
        raise _type_error(what, "str", value)
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character (PostgreSQL text cannot hold it)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode text (lone surrogate)") from None
    return str(value)  # plain str: a StrEnum is stored as its value


def check_int(what: str, value: object) -> int:
    """A plain int in the 64-bit range (bools refused: they are ints to Python, not to us)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error(what, "int", value)
    if not -INT_MAX - 1 <= value <= INT_MAX:
        raise ValueError(f"{what} is out of the 64-bit range")
    return int(value)  # plain int: an IntEnum is stored as its number


def check_float(what: str, value: object) -> float:
    """A finite number as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _type_error(what, "a number", value)
    if not math.isfinite(number := float(value)):
        raise ValueError(f"{what} must be finite")  # SQLite would silently store NaN as NULL
    return number


def check_bool(what: str, value: object) -> bool:
    """A bool (not 0/1)."""
    if not isinstance(value, bool):
        raise _type_error(what, "bool", value)
    return value


def check_dict(what: str, value: object) -> str:
    """A JSON-serialisable dict as its JSON text (JSON escapes NUL: the text never holds one)."""
    if not isinstance(value, Mapping):
        raise _type_error(what, "a dict", value)
    return dumps(value)


#: The check of a column's values, by the column type's Python type.
CHECKS: dict[type, Callable[[str, Any], Any]] = {
    int: check_int,
    float: check_float,
    str: check_text,
    bool: check_bool,
}


def discord_id(value: int) -> int:
    """A Discord id (guild, user) as a plain 64-bit int."""
    return check_int("a Discord id", value)


def encode(name: str, value: Any) -> Any:
    """Validate one job field value and convert it to what the database stores."""
    column, what = jobs.c[name], f"job field {name!r}"
    if value is None:
        if column.nullable:
            return None
        raise TypeError(f"{what} cannot be None")
    if name == "kind":
        return JobKind(value).value
    if name in ("params", "discord"):  # JSON text columns
        return check_dict(what, value)
    return CHECKS[column.type.python_type](what, value)


def encode_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the fields of update()/transition(): known names only, never id/state/updated_at."""
    for name in fields:
        if name in ("id", "state"):
            raise ValueError(f"job field {name!r} cannot be updated (state changes only via transition())")
        if name == "updated_at":
            raise ValueError("job field 'updated_at' is maintained by the store")
        if name not in jobs.c or name in _NOT_WRITABLE:
            raise ValueError(f"unknown job field {name!r}")
    return {name: encode(name, value) for name, value in fields.items()}


def check_quota(quota: tuple[int, float] | None) -> tuple[int, float] | None:
    """Validate add()'s ``quota`` = ``(limit, since)``."""
    if quota is None:
        return None
    limit, since = quota
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError("quota limit must be an int >= 0")
    return int(limit), check_float("quota start", since)


def expect_set(expect: JobState | Collection[JobState] | None) -> frozenset[JobState] | None:
    """transition()'s ``expect`` as a set of states."""
    if expect is None:
        return None
    if isinstance(expect, str):  # JobState is a str: check before treating it as a collection
        return frozenset({JobState(expect)})
    return frozenset(JobState(e) for e in expect)


def encode_duration(row: DurationRow) -> dict[str, Any]:
    """Validate a learned-duration row and return its column values."""
    data = {
        c.name: CHECKS[c.type.python_type](f"duration {c.name}", getattr(row, c.name)) for c in durations.c
    }
    if data["count"] < 0:
        raise ValueError("duration count must not be negative")
    return data


def check_token(token: object) -> bytes:
    """A server key's Fernet ciphertext: non-empty bytes."""
    if not isinstance(token, bytes) or not token:
        raise TypeError("a guild key token must be non-empty bytes (the Fernet ciphertext)")
    return token


def check_owner(owner: object) -> str:
    """A lease owner name: a non-empty str."""
    if not isinstance(owner, str) or not owner:
        raise TypeError("lease owner must be a non-empty str")
    return check_text("lease owner", owner)
