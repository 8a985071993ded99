"""What crosses the store's edge: rows read back as records, and what callers hand in, checked before
any I/O with one rule for both databases (:func:`check`; a job column's type comes from the schema).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from framecast.guilds.settings import KeyStatus, Setting
from framecast.storage.schema import jobs
from framecast.values import Job, JobKind, JobState, NewJob

INT_MAX = 2**63 - 1
#: The job fields add() takes from a NewJob.
NEW_JOB_FIELDS = tuple(f.name for f in fields(NewJob))
#: The Job fields, in Job's order (the lease columns are not part of a Job).
JOB_COLUMNS = tuple(c for c in jobs.c if c.name not in ("lease_owner", "lease_until"))
# Stored value -> Job field, by position. Floats: SQLite's RETURNING hands back 1.0 as the integer 1.
_READ = {
    "kind": JobKind,
    "state": JobState,
    "params": json.loads,
    "discord": json.loads,
    "result_local": bool,
}
_DECODE: list[Any] = [_READ.get(c.name, float if c.type.python_type is float else None) for c in JOB_COLUMNS]


def job_from_row(row: Sequence[Any]) -> Job:
    """The :class:`Job` a row of :data:`JOB_COLUMNS` holds."""
    return Job(*(v if read is None or v is None else read(v) for read, v in zip(_DECODE, row, strict=True)))


@dataclass(frozen=True)
class MemberJobs:
    """A page of a member's jobs, newest first, and where it sits: whether older or newer jobs exist,
    how many jobs the member has in the server (`total`), how many are newer than the page (`newer`)."""

    jobs: tuple[Job, ...]
    has_older: bool
    has_newer: bool
    total: int
    newer: int


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


def fits(value: int) -> bool:
    """Whether `value` fits a 64-bit column: an id beyond it (a forged custom id's, say) names
    nothing stored, and a database would refuse it as a parameter."""
    return -INT_MAX - 1 <= value <= INT_MAX


def check(what: str, value: object, kind: type) -> Any:
    """`value` as a plain `kind` (int, float, str or bool) that both databases store exactly; else
    ``TypeError``/``ValueError``: NaN/inf, beyond 64 bits, NUL, lone surrogates, bools as numbers."""
    accepted = int | float if kind is float else kind  # a float column takes an int too
    # A bool is an int to Python, not to us.
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, accepted):
        raise TypeError(f"{what} must be {kind.__name__}, not {type(value).__name__}")
    plain = kind(value)  # an IntEnum or a StrEnum is stored as its value
    if kind is int and not fits(plain):
        raise ValueError(f"{what} is out of the 64-bit range")
    if kind is float and not math.isfinite(plain):
        raise ValueError(f"{what} must be finite")  # SQLite would silently store NaN as NULL
    if kind is str and "\x00" in plain:
        raise ValueError(f"{what} contains a NUL character (PostgreSQL text cannot hold it)")
    if kind is str:
        try:
            plain.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what} is not valid Unicode text (lone surrogate)") from None
    return plain


def discord_id(value: int) -> int:
    """A Discord id (guild, user) as a plain 64-bit int."""
    return int(check("a Discord id", value, int))


def encode(name: str, value: Any) -> Any:
    """Validate one job field value and convert it to what the database stores."""
    column, what = jobs.c[name], f"job field {name!r}"
    if value is None:
        if column.nullable:
            return None
        raise TypeError(f"{what} cannot be None")
    if name == "kind":
        return JobKind(value).value
    if name in ("params", "discord"):  # JSON text (JSON escapes NUL: the text never holds one)
        if not isinstance(value, Mapping):
            raise TypeError(f"{what} must be a dict, not {type(value).__name__}")
        return dumps(value)
    return check(what, value, column.type.python_type)


def encode_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the fields of update()/transition(): known names only, never id/state/updated_at."""
    for name in fields:
        if name in ("id", "state", "updated_at"):
            raise ValueError(f"job field {name!r} is the store's own (a state changes only by transition())")
        if name not in jobs.c or name in ("lease_owner", "lease_until"):
            raise ValueError(f"unknown job field {name!r}")
    return {name: encode(name, value) for name, value in fields.items()}


def check_owner(owner: object) -> str:
    """A lease owner name: a non-empty str."""
    if not isinstance(owner, str) or not owner:
        raise TypeError("lease owner must be a non-empty str")
    return str(check("lease owner", owner, str))


def check_token(token: object) -> bytes:
    """A server key's Fernet ciphertext: non-empty bytes."""
    if not isinstance(token, bytes) or not token:
        raise TypeError("a guild key token must be non-empty bytes (the Fernet ciphertext)")
    return token
