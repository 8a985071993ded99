"""A server's own settings, the operator's ceilings, and the effective policy for one guild.

Server admins may tighten the operator's limits (never loosen them: every limit is capped by the
operator's ceiling from the environment), pick defaults for /video and /image, restrict generation
to some channels or to age-restricted ones, and keep a prompt blocklist. This module is pure: no
I/O, no Discord. The store persists :class:`GuildSettings` as JSON; :func:`resolve` turns them and
the :class:`Ceilings` into the :class:`Policy` the intake enforces.

Blocklist matching (:func:`blocked_term`) lives in :mod:`framecast.guilds.blocklist` and is
re-exported here.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from framecast.guilds.blocklist import blocked_term, term_key
from framecast.service.model_list import is_model_id
from framecast.values import JobKind, presets

if TYPE_CHECKING:
    from framecast.config import Settings

__all__ = [
    "MAX_CHANNELS",
    "MAX_TERMS",
    "MAX_TERM_CHARS",
    "Ceilings",
    "GuildSettings",
    "KeyStatus",
    "Policy",
    "Setting",
    "SettingsError",
    "SettingsProblem",
    "Source",
    "blocked_term",
    "check_change",
    "quota_window",
    "resolve",
]

log = logging.getLogger(__name__)

#: Blocklist limits: a list an admin can still read in one message, and matching stays cheap.
MAX_TERMS = 100
MAX_TERM_CHARS = 100
#: At most this many allowed channels (a slash-command option list holds 25).
MAX_CHANNELS = 25


class Setting(StrEnum):
    """Each server setting. The values are persisted in the audit log: never rename them."""

    MEMBER_JOBS = "member_jobs"
    DAILY_VIDEOS = "daily_videos"
    DAILY_IMAGES = "daily_images"
    QUEUE_CAP = "queue_cap"
    VIDEO_SIZE = "video_size"
    VIDEO_SECONDS = "video_seconds"
    VIDEO_FPS = "video_fps"
    VIDEO_MODEL = "video_model"
    IMAGE_SIZE = "image_size"
    IMAGE_MODEL = "image_model"
    CHANNELS = "channels"
    NSFW_ONLY = "nsfw_only"
    BLOCKLIST = "blocklist"
    API_KEY = "api_key"


class Source(StrEnum):
    """Where an effective value comes from."""

    SERVER = "server"
    OPERATOR = "operator"


class KeyStatus(StrEnum):
    """The state of a server's own API key. Persisted: never rename the values."""

    OK = "ok"
    REJECTED = "rejected"  # the service answered 401 to it: an admin must set a new one


@dataclass(frozen=True)
class GuildSettings:
    """A server's own overrides; ``None`` / ``()`` / ``False`` mean "the operator's default"."""

    member_jobs: int | None = None
    daily_videos: int | None = None
    daily_images: int | None = None
    queue_cap: int | None = None
    video_size: str | None = None  # a key of presets.VIDEO_SIZES
    video_seconds: int | None = None  # in presets.VIDEO_SECONDS
    video_fps: int | None = None  # in presets.FRAME_RATES
    video_model: str | None = None
    image_size: str | None = None  # a key of presets.IMAGE_SIZES
    image_model: str | None = None
    channels: tuple[int, ...] = ()  # empty: everywhere
    nsfw_only: bool = False
    blocklist: tuple[str, ...] = ()  # as typed by the admin (normalised only for matching)

    def to_json(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict (only the fields that differ from the defaults)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GuildSettings:
        """Settings from :meth:`to_json` output. Unknown keys and values of the wrong type are ignored.

        Tolerant on purpose: a database written by a newer or older Framecast must still load; a value
        that does not fit falls back to the operator's default (and is logged, without the value).
        """
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            value = _from_json_value(f.name, data[f.name])
            if value is _BAD:
                log.warning("guild settings: stored %s is not valid; using the operator's default", f.name)
                continue
            values[f.name] = value
        return cls(**values)

    def replace(self, **changes: Any) -> GuildSettings:
        """A copy with ``changes`` applied (no validation: see :func:`check_change`)."""
        return dataclasses.replace(self, **changes)

    def overrides(self, setting: Setting) -> bool:
        """Whether this server sets ``setting`` itself (False for API_KEY: keys live elsewhere)."""
        if setting is Setting.API_KEY:
            return False
        field = _FIELDS[setting]
        return bool(getattr(self, setting.value) != field.default)


_FIELDS = {Setting(f.name): f for f in dataclasses.fields(GuildSettings)}
_BAD = object()
_INT_SETTINGS = {"member_jobs", "daily_videos", "daily_images", "queue_cap", "video_seconds", "video_fps"}
_STR_SETTINGS = {"video_size", "video_model", "image_size", "image_model"}


def _from_json_value(name: str, value: Any) -> Any:
    if name in _INT_SETTINGS:
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
        return value if ok else _BAD
    if name in _STR_SETTINGS:
        return value if value is None or isinstance(value, str) else _BAD
    if name == "nsfw_only":
        return value if isinstance(value, bool) else _BAD
    if name == "channels":
        if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return tuple(value)
        return _BAD
    if name == "blocklist":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        return _BAD
    return _BAD


@dataclass(frozen=True)
class Ceilings:
    """The operator's ceilings (which are also the defaults) from the environment."""

    member_jobs: int  # MEMBER_JOB_LIMIT
    queue_cap: int  # GUILD_QUEUE_CAP
    daily_videos: int | None  # DAILY_VIDEO_QUOTA (None: no daily quota)
    daily_images: int | None  # DAILY_IMAGE_QUOTA

    @classmethod
    def from_settings(cls, s: Settings) -> Ceilings:
        """The ceilings of a loaded configuration."""
        return cls(
            member_jobs=s.member_job_limit,
            queue_cap=s.guild_queue_cap,
            daily_videos=s.daily_video_quota,
            daily_images=s.daily_image_quota,
        )


@dataclass(frozen=True)
class Policy:
    """The effective values for one guild: the server's value capped by the operator's ceiling."""

    member_jobs: int
    queue_cap: int
    daily_videos: int | None  # None: no daily quota
    daily_images: int | None
    settings: GuildSettings
    ceilings: Ceilings

    def daily_quota(self, kind: JobKind) -> int | None:
        """A member's daily quota of jobs of ``kind`` in this guild (None: unlimited)."""
        return self.daily_videos if JobKind(kind) is JobKind.VIDEO else self.daily_images

    def source(self, setting: Setting) -> Source:
        """SERVER if the guild overrides ``setting``, else OPERATOR (API_KEY: ask the key store)."""
        return Source.SERVER if self.settings.overrides(setting) else Source.OPERATOR


def resolve(guild: GuildSettings, ceilings: Ceilings) -> Policy:
    """The effective policy: each server limit capped by the operator's ceiling.

    A stored value above the ceiling (the operator lowered it since) is capped, not refused.
    """
    return Policy(
        member_jobs=_capped(guild.member_jobs, ceilings.member_jobs),
        queue_cap=_capped(guild.queue_cap, ceilings.queue_cap),
        daily_videos=_capped_quota(guild.daily_videos, ceilings.daily_videos),
        daily_images=_capped_quota(guild.daily_images, ceilings.daily_images),
        settings=guild,
        ceilings=ceilings,
    )


def _capped(value: int | None, ceiling: int) -> int:
    return ceiling if value is None else min(value, ceiling)


def _capped_quota(value: int | None, ceiling: int | None) -> int | None:
    if value is None:
        return ceiling
    return value if ceiling is None else min(value, ceiling)


# ---------------------------------------------------------------------- validating a change


class SettingsProblem(StrEnum):
    """What is wrong with a settings change (the chat side words it)."""

    ABOVE_CEILING = "above_ceiling"  # params: setting, ceiling
    BAD_VALUE = "bad_value"  # params: setting
    TOO_MANY_TERMS = "too_many_terms"  # params: max
    TERM_TOO_LONG = "term_too_long"  # params: max
    TOO_MANY_CHANNELS = "too_many_channels"  # params: max


class SettingsError(Exception):
    """A settings change an admin can fix: ``problem`` says what, ``params`` give the details."""

    def __init__(self, problem: SettingsProblem, **params: Any) -> None:
        # Only the problem in str(): params may hold admin text (a term) that has no place in a log.
        super().__init__(problem.value)
        self.problem = problem
        self.params = params


def check_change(current: GuildSettings, ceilings: Ceilings, **changes: Any) -> GuildSettings:
    """Validate ``changes`` (field name -> new value; ``None`` resets to the operator's default).

    Returns the new settings; raises :class:`SettingsError` for a value an admin can fix and
    ``TypeError`` for an unknown setting name (a programming error). Quotas must be ``>= 0``,
    member_jobs and queue_cap ``>= 1``, all of them at most the operator's ceiling; sizes, lengths
    and frame rates must be presets; models must look like model ids; channels are distinct ids
    (at most :data:`MAX_CHANNELS`); blocklist terms are stripped, de-duplicated (by their matching
    form) and limited to :data:`MAX_TERMS` terms of :data:`MAX_TERM_CHARS` characters.
    """
    checked: dict[str, Any] = {}
    for name, value in changes.items():
        try:
            setting = Setting(name)
        except ValueError:
            raise TypeError(f"unknown guild setting {name!r}") from None
        if setting is Setting.API_KEY:
            raise TypeError("the API key is not a guild setting field (see KeyVault and the key store)")
        checked[name] = _check_value(setting, value, ceilings)
    return current.replace(**checked)


def _check_value(setting: Setting, value: Any, ceilings: Ceilings) -> Any:
    match setting:
        case Setting.MEMBER_JOBS | Setting.QUEUE_CAP:
            ceiling = ceilings.member_jobs if setting is Setting.MEMBER_JOBS else ceilings.queue_cap
            return _check_int(setting, value, minimum=1, ceiling=ceiling)
        case Setting.DAILY_VIDEOS | Setting.DAILY_IMAGES:
            ceiling_q = ceilings.daily_videos if setting is Setting.DAILY_VIDEOS else ceilings.daily_images
            return _check_int(setting, value, minimum=0, ceiling=ceiling_q)
        case Setting.VIDEO_SIZE:
            return _check_choice(setting, value, presets.VIDEO_SIZES)
        case Setting.IMAGE_SIZE:
            return _check_choice(setting, value, presets.IMAGE_SIZES)
        case Setting.VIDEO_SECONDS:
            return _check_choice(setting, value, presets.VIDEO_SECONDS)
        case Setting.VIDEO_FPS:
            return _check_choice(setting, value, presets.FRAME_RATES)
        case Setting.VIDEO_MODEL | Setting.IMAGE_MODEL:
            if value is None:
                return None
            if not isinstance(value, str) or not is_model_id(value.strip()):
                raise SettingsError(SettingsProblem.BAD_VALUE, setting=setting)
            return value.strip()
        case Setting.CHANNELS:
            return _check_channels(value)
        case Setting.NSFW_ONLY:
            if value is None:
                return False
            if not isinstance(value, bool):
                raise SettingsError(SettingsProblem.BAD_VALUE, setting=setting)
            return value
        case Setting.BLOCKLIST:
            return _check_blocklist(value)
    raise TypeError(f"unhandled setting {setting}")  # pragma: no cover - every member is matched above


def _check_int(setting: Setting, value: Any, *, minimum: int, ceiling: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SettingsError(SettingsProblem.BAD_VALUE, setting=setting)
    if ceiling is not None and value > ceiling:
        raise SettingsError(SettingsProblem.ABOVE_CEILING, setting=setting, ceiling=ceiling)
    return int(value)


def _check_choice(setting: Setting, value: Any, choices: Iterable[Any]) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or value not in choices:
        raise SettingsError(SettingsProblem.BAD_VALUE, setting=setting)
    return value


def _check_channels(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise SettingsError(SettingsProblem.BAD_VALUE, setting=Setting.CHANNELS)
    ids: list[int] = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item <= 0:
            raise SettingsError(SettingsProblem.BAD_VALUE, setting=Setting.CHANNELS)
        if item not in ids:
            ids.append(int(item))
    if len(ids) > MAX_CHANNELS:
        raise SettingsError(SettingsProblem.TOO_MANY_CHANNELS, max=MAX_CHANNELS)
    return tuple(ids)


def _check_blocklist(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise SettingsError(SettingsProblem.BAD_VALUE, setting=Setting.BLOCKLIST)
    terms: list[str] = []
    seen: set[str] = set()
    for item in value:
        if not isinstance(item, str) or any("\ud800" <= ch <= "\udfff" for ch in item):
            raise SettingsError(SettingsProblem.BAD_VALUE, setting=Setting.BLOCKLIST)
        term = " ".join(item.split())  # what the admin typed, white space tidied
        if len(term) > MAX_TERM_CHARS:
            raise SettingsError(SettingsProblem.TERM_TOO_LONG, max=MAX_TERM_CHARS)
        folded = term_key(term)
        if not folded or folded in seen:
            # A term that folds to nothing would match everything; a repeat adds nothing.
            continue
        seen.add(folded)
        terms.append(term)
    if len(terms) > MAX_TERMS:
        raise SettingsError(SettingsProblem.TOO_MANY_TERMS, max=MAX_TERMS)
    return tuple(terms)


# ---------------------------------------------------------------------- quota periods


def quota_window(now: float, period: float) -> tuple[float, float]:
    """``(start, reset_at)`` of the quota period holding ``now``.

    Periods are aligned to multiples of ``period`` since the epoch, so with 86400 s every member's
    quota resets at UTC midnight (one moment the whole server can be told), not 24 h after their
    first job.
    """
    if not (math.isfinite(period) and period > 0):
        raise ValueError("quota period must be a positive number of seconds")
    start = math.floor(now / period) * period
    return start, start + period
