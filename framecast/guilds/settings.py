"""A server's own settings, the operator's ceilings, and the effective policy for one guild.

Server admins may tighten the operator's limits (never loosen them: every limit is capped by the
operator's ceiling from the environment), pick defaults for /video and /image, restrict generation
to some channels or to age-restricted ones, and keep a prompt blocklist. This module is pure: no
I/O, no Discord. The store persists :class:`GuildSettings` as JSON; :func:`resolve` turns them and
the :class:`Ceilings` into the :class:`Policy` the intake enforces.

Blocklist matching (:func:`blocked_term`) is case- and accent-insensitive for the alphabets where
accents are decoration (Latin, Greek, Cyrillic), matches substrings in scripts written without
spaces (Chinese, Japanese, Thai, ...), and whole words elsewhere, Hindi included, where vowel signs
are part of the word and are kept.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from framecast.jobs import JobKind, presets
from framecast.service.model_list import is_model_id

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
        folded, _ = _term_form(term)
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


# ---------------------------------------------------------------------- blocklist matching


# Scripts written without spaces between words: a term in them is matched as a substring, since
# there are no word boundaries to look for. (start, end) code point ranges, inclusive.
_UNSPACED_RANGES: tuple[tuple[int, int], ...] = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x2E80, 0x2FDF),  # CJK and Kangxi radicals
    (0x3005, 0x3007),  # ideographic iteration mark, closing mark, number zero
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3038, 0x303B),
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3130, 0x318F),  # Hangul compatibility Jamo
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # Hangul Jamo extended A
    (0xA9E0, 0xA9FF),  # Myanmar extended B
    (0xAA60, 0xAA7F),  # Myanmar extended A
    (0xAC00, 0xD7FF),  # Hangul syllables, Jamo extended B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana (NFKD widens them anyway)
    (0x1B000, 0x1B16F),  # Kana supplement and extensions
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)
# The alphabets whose combining marks are accents or vowel points a member may or may not type
# (é ~ e, Ü ~ u; Arabic harakat and Hebrew points, left out in everyday writing: كَلْب ~ كلب).
# Elsewhere (Devanagari vowel signs, Japanese voicing marks...) marks are kept: dropping them
# would make different words equal (काम "work" and कम "less").
_ACCENTED_ALPHABETS = ("LATIN", "GREEK", "CYRILLIC", "ARABIC", "HEBREW")
# Marks that only pick a glyph's presentation (variation selectors, the combining grapheme joiner,
# Mongolian free variation selectors): invisible, so a prompt cannot hide a term behind them.
_IGNORABLE_MARKS = frozenset(
    [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0), 0x034F, 0x180B, 0x180C, 0x180D, 0x180F]
)
_ZERO_WIDTH_SPACE = "\u200b"


def _unspaced(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in _UNSPACED_RANGES)


@functools.lru_cache(maxsize=4096)
def _accented_base(ch: str) -> bool:
    """Whether combining marks after ``ch`` are droppable accents."""
    return unicodedata.name(ch, "").startswith(_ACCENTED_ALPHABETS)


def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "M"


def _word_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LMN"


def _fold(text: str) -> str:
    """The matching form of ``text``: caseless, accentless for Latin/Greek/Cyrillic (and Arabic and
    Hebrew vowel points), presentation selectors dropped, spaces folded.

    NFKD + casefold + NFKD (the canonical caseless match recipe; NFKD also maps full-width and
    compatibility forms to plain ones), then combining marks are dropped only after Latin, Greek,
    Cyrillic, Arabic and Hebrew letters (variation selectors everywhere), and the result is NFC so that whatever marks remain (Indic vowel signs)
    have one form on both sides. Format characters (zero-width joiners, bidi controls, soft
    hyphens) are dropped, except the zero-width space which separates words like a space.
    """
    decomposed = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())
    out: list[str] = []
    drop_marks = False
    for ch in decomposed:
        if _is_mark(ch):
            if not drop_marks and ord(ch) not in _IGNORABLE_MARKS:
                out.append(ch)
            continue
        if ch == _ZERO_WIDTH_SPACE or ch.isspace():
            out.append(" ")
        elif unicodedata.category(ch) in ("Cf", "Cc"):
            continue  # invisible: neither a letter nor a boundary
        else:
            out.append(ch)
        drop_marks = _accented_base(ch)
    return unicodedata.normalize("NFC", _collapse_spaces("".join(out)))


def _collapse_spaces(text: str) -> str:
    # Phrases match whatever white space separates their words.
    return " ".join(part for part in text.split(" ") if part)


@functools.lru_cache(maxsize=1024)
def _term_form(term: str) -> tuple[str, bool]:
    """``(folded term, substring match?)`` for one blocklist term; ``""`` if it holds nothing to match.

    A term of nothing but marks, spaces and invisible characters would match almost anywhere (or
    nowhere sensible): it folds to ``""``. Emoji and symbols are kept: "🍆" is a fair term.
    """
    folded = _fold(term)
    if not any(unicodedata.category(ch)[0] not in "MZC" for ch in folded):
        return "", False
    return folded, any(_unspaced(ch) for ch in folded)


def _occurs_as_word(needle: str, haystack: str) -> bool:
    start = haystack.find(needle)
    while start >= 0:
        end = start + len(needle)
        before_ok = start == 0 or not _word_char(haystack[start - 1])
        after_ok = end == len(haystack) or not _word_char(haystack[end])
        if before_ok and after_ok:
            return True
        start = haystack.find(needle, start + 1)
    return False


def blocked_term(prompt: str, blocklist: Iterable[str]) -> str | None:
    """The first term of ``blocklist`` (as stored) that occurs in ``prompt``, or None.

    Both sides are folded (see :func:`_fold`). A term containing characters of a script written
    without spaces (Han, Hiragana, Katakana, Hangul, Thai, Lao, Khmer, Myanmar, Tibetan) matches
    anywhere; any other term matches whole words or phrases only (no letter, mark or digit right
    before or after it), so "ass" does not block "class" and "राम" does not block "रामायण".
    Never raises for any text.
    """
    terms = tuple(blocklist)
    if not terms:
        return None
    haystack = _fold(prompt)
    for term in terms:
        needle, substring = _term_form(term)
        if not needle:
            continue  # folds to nothing: would match everywhere
        if substring:
            if needle in haystack:
                return term
        elif _occurs_as_word(needle, haystack):
            return term
    return None
