"""The generation-service client (see ``SERVICE_API.md``): patient, liberal in what it accepts,
strict in what it reports, and never spending more than the shared :class:`RequestBudget` allows.

Every request to the service carries ``Authorization: Bearer <key>`` and goes through the budget,
including retries and downloads of the service's own result URLs. The key never appears in an
exception, a log line or a repr.

The service is also untrusted (issue 7): every answer is read with a size cap counted after
decompression, parsed by the pure functions below (which raise only the documented errors, so no
answer can crash a job), and every text taken from it is made safe with
:func:`~framecast.safetext.clean_text`. Result URLs are fetched only over ``http(s)``, from the
service's origin or from hosts :mod:`framecast.netguard` lets through.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import email.utils
import json
import logging
import math
import random
import re
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC
from itertools import accumulate
from numbers import Real
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urljoin

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver

from framecast.budget import Priority, RequestBudget
from framecast.clock import Clock
from framecast.config import Secret
from framecast.errors import (
    AuthError,
    BadResponse,
    DownloadError,
    DownloadTooLarge,
    RateLimited,
    RequestRejected,
    ServiceError,
    ServiceUnavailable,
    TaskFailed,
    TaskTimedOut,
    UnsafeResultURL,
)
from framecast.netguard import (
    REASON_BAD_URL,
    REASON_INTERNAL,
    REASON_TOO_MANY_REDIRECTS,
    GuardedResolver,
    RefusedAddress,
    normalize_host,
    refusal_before_connecting,
)
from framecast.safetext import clean_text

if TYPE_CHECKING:
    from framecast.config import Settings

__all__ = [
    "JSON_MAX_DEPTH",
    "GenerationClient",
    "ImageParams",
    "ImageResult",
    "ModelCatalog",
    "TaskStatus",
    "VideoParams",
    "error_detail",
    "load_json",
    "normalize_progress",
    "parse_image_answer",
    "parse_model_list",
    "parse_poll",
    "parse_retry_after",
    "parse_task_id",
]

log = logging.getLogger(__name__)

TaskState = Literal["pending", "completed", "failed"]
ProgressCallback = Callable[["TaskStatus"], Awaitable[None]]

_DETAIL_MAX = 300  # the service's own words are shown to members: keep them short
_REASON_MAX = 500  # a failed task's reason (stored with the job, shown to its member)
_TEXT_MAX = 2000  # what parsers keep of a text, so the key can be scrubbed before the final cut
_ERROR_BODY_MAX = 16 * 1024  # the beginning of an error body is all its message needs
_ID_MAX = 128  # task and model ids
_URL_MAX = 8192  # result URLs (inline data: URLs aside)
_READ_CHUNK = 64 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Only what the client inflates itself (no brotli or zstd, whose decoders it does not bound).
_ACCEPT_ENCODING = "gzip, deflate"


# -- value types ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class VideoParams:
    """The body of ``POST /v1/videos``."""

    model: str
    prompt: str
    width: int
    height: int
    num_frames: int
    frame_rate: int


@dataclass(frozen=True)
class ImageParams:
    """The body of ``POST /v1/images/generations``."""

    model: str
    prompt: str
    size: str


@dataclass(frozen=True)
class TaskStatus:
    """One poll's answer, normalised.

    ``progress`` is a fraction in ``0..1`` or ``None`` when the service did not say (unknown
    progress stays unknown). ``result_url`` is set exactly when ``state == "completed"``; ``error``
    is the service's reason for a ``failed`` task, when it gave one.
    """

    state: TaskState
    progress: float | None = None
    result_url: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class ImageResult:
    """What creating an image gave: a URL, the image bytes, or a task to poll (exactly one)."""

    url: str | None = None
    data: bytes | None = None
    task_id: str | None = None

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.url, self.data, self.task_id)) != 1:
            raise ValueError("exactly one of url, data and task_id must be set")

    def __repr__(self) -> str:
        # Never dump an image into a log line.
        data = f"<{len(self.data)} bytes>" if self.data is not None else None
        return f"ImageResult(url={self.url!r}, data={data}, task_id={self.task_id!r})"


@dataclass(frozen=True)
class ModelCatalog:
    """The service's models grouped by what they make."""

    video: tuple[str, ...] = ()
    image: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    other: tuple[str, ...] = ()

    def all(self) -> tuple[str, ...]:
        """Every model id, video first."""
        return self.video + self.image + self.text + self.other

    def __contains__(self, model_id: object) -> bool:
        return model_id in self.all()


# -- reading the service's JSON ---------------------------------------------------------------------
#: Deepest nesting of arrays and objects accepted in an answer. Real answers use three or four
#: levels; the bound keeps every recursive walk of an answer (here and in the C JSON scanner) far
#: from Python's recursion limit.
JSON_MAX_DEPTH = 64
#: Longest integer literal accepted (a 40-digit number is already no count, size or id of ours).
_INT_MAX_DIGITS = 40

_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')  # once escapes are gone, a string holds no quote
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as signed bytes


class _Unreadable(ValueError):
    """Raised from inside the JSON scanner's hooks: the reason is the message."""


def _parse_int(text: str) -> int:
    if len(text) - text.startswith("-") > _INT_MAX_DIGITS:
        raise _Unreadable(f"the answer holds a number of more than {_INT_MAX_DIGITS} digits")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 reads as infinity
        raise _Unreadable("the answer holds a number out of range")
    return value


def _refuse_constant(name: str) -> Any:
    raise _Unreadable(f"the answer holds {name}, which is not JSON")


_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float, parse_constant=_refuse_constant)


def _nesting_exceeds(text: str, limit: int) -> bool:
    """Whether `text` nests arrays/objects deeper than `limit` (brackets inside strings ignored).

    Linear, iterative and mostly in C: escapes are dropped, then strings, then everything but
    brackets, and the running depth is summed up. Counting on invalid JSON may be off, but only
    after the point where the JSON scanner itself stops, so it never under-counts what the
    scanner would recurse into.
    """
    if text.count("[") + text.count("{") <= limit:
        return False  # the usual case: too few brackets to be deep at all
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    steps = array("b", skeleton.encode("ascii").translate(_DEPTH_STEPS))
    return max(accumulate(steps), default=0) > limit


def load_json(body: bytes, *, max_depth: int = JSON_MAX_DEPTH) -> Any:
    """Parse an answer of the service as strict UTF-8 JSON.

    Refused with :class:`BadResponse` (and nothing else): bytes that are not UTF-8, nesting deeper
    than `max_depth`, ``NaN``/``Infinity``, floats out of range, integers of more than 40 digits,
    and anything else that is not JSON. A UTF-8 byte order mark is tolerated.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadResponse("the answer is not UTF-8 text") from None
    text = text.removeprefix("\ufeff")
    if _nesting_exceeds(text, max_depth):
        raise BadResponse(f"the answer is nested deeper than {max_depth} levels")
    try:
        return _DECODER.decode(text)
    except _Unreadable as exc:
        raise BadResponse(str(exc)) from None
    except ValueError:
        raise BadResponse("the answer is not valid JSON") from None
    except RecursionError:  # not reachable with the depth check; kept so no input can escape
        raise BadResponse(f"the answer is nested deeper than {max_depth} levels") from None


# -- parsers of the service's answers (pure: data in, value or BadResponse out) ---------------------
def normalize_progress(value: object) -> float | None:
    """Turn whatever the service sends as ``progress`` into a fraction in ``0..1``, or ``None``.

    Integers are percentages (``45`` -> 0.45); floats in ``0..1`` are fractions and floats above 1
    percentages; strings may be ``"45%"``, ``"0.45"`` or ``"45"`` (read like the number they spell).
    Results are clamped to ``0..1``. ``None``, booleans and anything unreadable give ``None``:
    unknown progress is not zero progress. Never raises, whatever the value (a 400-digit integer
    is simply 100 %).
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _from_percent(value)
    if isinstance(value, Real):
        try:
            return _from_float(float(value))
        except (OverflowError, ValueError, TypeError):
            return None
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 64:  # a progress is never a long text
            return None
        if text.endswith("%"):
            number = _float_or_none(text[:-1].strip())
            return _clamp(number / 100) if number is not None and math.isfinite(number) else None
        try:
            return _from_percent(int(text))
        except ValueError:
            pass
        number = _float_or_none(text)
        return _from_float(number) if number is not None else None
    return None


def _from_percent(value: int) -> float:
    # Compared before dividing: a huge integer divided by 100 overflows a float.
    return 0.0 if value <= 0 else 1.0 if value >= 100 else value / 100


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _from_float(number: float) -> float | None:
    if not math.isfinite(number):
        return None
    return _clamp(number if number <= 1.0 else number / 100)


def _clamp(fraction: float) -> float:
    return min(1.0, max(0.0, fraction))


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date.

    `now` is the current wall-clock time (epoch seconds) that an HTTP date is measured against.
    Returns ``None`` for a missing or unreadable header; never raises.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or len(text) > 100:  # no real header is longer
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        delay = when.timestamp() - now
    except (TypeError, ValueError, IndexError, OverflowError, AttributeError):
        return None
    return max(0.0, delay) if math.isfinite(delay) else None


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", int: "number", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _keys_of(data: dict[Any, Any]) -> str:
    keys = [clean_text(k, 40) for k in list(data)[:10]]
    return ", ".join(keys) if keys else "none"


def _nonempty_str(value: object) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _usable_id(text: str) -> bool:
    # Ids go back to the service in a query string and into the database: printable, no spaces
    # (which also rules out lone surrogates and control characters), and short.
    return 0 < len(text) <= _ID_MAX and text.isprintable() and " " not in text


def _id_of(value: object) -> str | None:
    """A task or model id, or ``None`` when `value` is none (or not a usable one)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value) if 0 <= value < 10**_INT_MAX_DIGITS else None
    text = _nonempty_str(value)
    return text if text is not None and _usable_id(text) else None


def _message_of(value: object, depth: int = 0) -> str | None:
    """The human message inside the common error shapes (a string, {"message": ...}, a list...)."""
    if depth > 8:  # real error bodies are two or three levels deep
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, dict):
        for key in ("message", "detail", "msg", "error_description", "error", "description"):
            found = _message_of(value.get(key), depth + 1)
            if found:
                return found
        return None
    if isinstance(value, list) and value:
        return _message_of(value[0], depth + 1)
    return None


def _reason(value: object) -> str | None:
    """The service's reason in an ``error`` field, made safe (see :func:`clean_text`)."""
    reason = _message_of(value)
    if reason is None and value is not None:
        reason = clean_text(value, _TEXT_MAX)
    cleaned = clean_text(reason, _TEXT_MAX) if reason else ""
    return cleaned or None


def error_detail(body: bytes) -> str | None:
    """The service's message from an error body, whatever its shape; ``None`` if it has none.

    Made safe with :func:`clean_text` (at most 2000 characters). Never raises.
    """
    try:
        data = load_json(body)
    except BadResponse:
        text = body.decode("utf-8", "replace").strip()
        if not text or text.startswith("<"):  # an HTML error page says nothing useful to a member
            return None
        return clean_text(text, _TEXT_MAX) or None
    found: str | None = None
    if isinstance(data, dict):
        for key in ("error", "message", "detail", "error_description", "msg", "errors"):
            found = _message_of(data.get(key))
            if found:
                break
    else:
        found = _message_of(data)
    return (clean_text(found, _TEXT_MAX) or None) if found else None


def _absolute_url(url: str, base_url: str) -> str:
    """`url` (maybe relative to the service) as an absolute URL string; checked for sanity only.

    Where it may be fetched from is decided at download time (:mod:`framecast.netguard`).
    """
    if len(url) > _URL_MAX or not url.isprintable() or " " in url:
        raise BadResponse("the result URL in the response is not a usable URL")  # never echoed
    try:
        return urljoin(base_url + "/", url)
    except ValueError:
        raise BadResponse("the result URL in the response is not a usable URL") from None


def parse_task_id(data: Any, *, what: str = "create video") -> str:
    """The task id in a create answer (``video_id``, ``task_id`` or ``id``).

    Raises :class:`BadResponse` when the answer is not an object or has no usable id (ids are at
    most 128 printable characters without spaces, or a non-negative integer).
    """
    if not isinstance(data, dict):
        raise BadResponse(f"{what}: expected a JSON object, got {_type_name(data)}")
    for key in ("video_id", "task_id", "id"):
        task_id = _id_of(data.get(key))
        if task_id is not None:
            return task_id
    raise BadResponse(f"{what}: the response has no usable video_id or task_id (keys: {_keys_of(data)})")


def parse_poll(data: Any, *, kind: str = "video", base_url: str) -> TaskStatus:
    """One poll answer (``GET /svcapi``) as a :class:`TaskStatus`.

    `kind` is ``"video"`` (the URL is in ``video_url``) or ``"image"`` (``image_url``, ``url``,
    ``video_url``, ``result_url`` or ``data[0].url``); a relative URL is taken relative to
    `base_url`. A ``failed`` task is a status, its ``error`` made safe with :func:`clean_text`.
    Raises :class:`BadResponse` (only) for an answer that is not an object, has no or an unknown
    status, or is completed without a usable result URL.
    """
    if not isinstance(data, dict):
        raise BadResponse(f"poll: expected a JSON object, got {_type_name(data)}")
    raw_status = data.get("status")
    if not isinstance(raw_status, str) or not raw_status.strip():
        raise BadResponse(f"poll: the response has no status (keys: {_keys_of(data)})")
    state = raw_status.strip().lower()
    progress = normalize_progress(data.get("progress"))
    if state == "pending":
        return TaskStatus("pending", progress)
    if state == "completed":
        url = _result_url(data, kind, base_url)
        if url is None:
            field = "video_url" if kind == "video" else "result URL (image_url, url or video_url)"
            raise BadResponse(f"poll: the task is completed but the response has no {field}")
        return TaskStatus("completed", 1.0, url)
    if state == "failed":
        return TaskStatus("failed", progress, None, _reason(data.get("error")))
    raise BadResponse(
        f"poll: unknown status {clean_text(raw_status, 60)!r} (expected pending, completed or failed)"
    )


def _result_url(data: dict[Any, Any], kind: str, base_url: str) -> str | None:
    candidates: list[object] = [data.get("video_url")]
    if kind == "image":
        candidates = [data.get("image_url"), data.get("url"), data.get("video_url"), data.get("result_url")]
        entries = data.get("data")
        if isinstance(entries, list) and entries and isinstance(entries[0], dict):
            candidates.append(entries[0].get("url"))
    for candidate in candidates:
        url = _nonempty_str(candidate)
        if url is not None:
            return _absolute_url(url, base_url)
    return None


def _decode_b64(text: str) -> bytes:
    if text.startswith("data:"):  # a data: URL carries the base64 after the comma
        _, _, text = text.partition(",")
    compact = "".join(text.split())
    compact += "=" * (-len(compact) % 4)  # be lenient about stripped padding
    alphabet = b"-_" if ("-" in compact or "_" in compact) else None  # the URL-safe variant
    try:
        data = base64.b64decode(compact.encode("ascii"), altchars=alphabet, validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise BadResponse("create image: the b64_json in the response is not valid base64") from None
    if not data:
        raise BadResponse("create image: the b64_json in the response is empty")
    return data


def _image_from_url(url: str, base_url: str) -> ImageResult:
    if url.startswith("data:"):
        return ImageResult(data=_decode_b64(url))
    return ImageResult(url=_absolute_url(url, base_url))


def parse_image_answer(data: Any, *, base_url: str) -> ImageResult:
    """The answer of ``POST /v1/images/generations`` as an :class:`ImageResult`.

    Accepted: ``data[].url``, ``data[].b64_json``, a top-level ``url``/``image_url`` (a ``data:``
    URL is decoded), or a task id (``video_id``/``task_id``/``id``) to poll. Raises
    :class:`TaskFailed` for an answer that says ``"status": "failed"`` (its reason made safe) and
    :class:`BadResponse` for anything else unusable; nothing else.
    """
    if not isinstance(data, dict):
        raise BadResponse(f"create image: unrecognised response (a JSON {_type_name(data)})")
    entries = data.get("data")
    if isinstance(entries, list) and entries:
        first = entries[0]
        if isinstance(first, dict):
            url = _nonempty_str(first.get("url"))
            if url is not None:
                return _image_from_url(url, base_url)
            b64 = _nonempty_str(first.get("b64_json"))
            if b64 is not None:
                return ImageResult(data=_decode_b64(b64))
        elif isinstance(first, str) and first.strip().startswith(("http://", "https://", "data:")):
            return _image_from_url(first.strip(), base_url)
    for key in ("url", "image_url"):
        url = _nonempty_str(data.get(key))
        if url is not None:
            return _image_from_url(url, base_url)
    b64 = _nonempty_str(data.get("b64_json"))
    if b64 is not None:
        return ImageResult(data=_decode_b64(b64))
    status = _nonempty_str(data.get("status"))
    if status is not None and status.lower() == "failed":
        raise TaskFailed(_reason(data.get("error")))
    for key in ("video_id", "task_id", "id"):
        task_id = _id_of(data.get(key))
        if task_id is not None:
            return ImageResult(task_id=task_id)
    raise BadResponse(
        "create image: unrecognised response: expected data[].url, data[].b64_json, url, image_url "
        f"or a task id (keys: {_keys_of(data)})"
    )


_KIND_FIELDS = ("type", "kind", "modality", "modalities", "category", "task", "model_type", "object")
_GENERIC_KINDS = {"", "model", "models", "list"}


def _classify_kind(value: str) -> str | None:
    v = value.lower()
    if "video" in v:
        return "video"
    if "image" in v or "img" in v or "picture" in v:
        return "image"
    if any(word in v for word in ("text", "chat", "llm", "language", "completion")):
        return "text"
    return None


def _classify_model(model_id: str, entry: dict[Any, Any] | None) -> str:
    explicit: str | None = None
    if entry is not None:
        for field in _KIND_FIELDS:
            raw = entry.get(field)
            if isinstance(raw, list):
                raw = ",".join(x for x in raw[:20] if isinstance(x, str))
            if not isinstance(raw, str) or raw.strip().lower() in _GENERIC_KINDS:
                continue
            kind = _classify_kind(raw[:200])
            if kind is not None:
                return kind
            explicit = explicit or raw
    if explicit is not None:
        return "other"  # the service said what it is, and it is none of ours (audio, embeddings...)
    lowered = model_id.lower()
    if "video" in lowered:
        return "video"
    if "image" in lowered or "img" in lowered:
        return "image"
    return "text"


def parse_model_list(data: Any) -> tuple[ModelCatalog, int]:
    """The answer of ``GET /v1/models`` as a :class:`ModelCatalog`, and how many entries were skipped.

    Accepted: a list, or ``{"data": [...]}``/``{"models": [...]}``, of ids or objects with an
    ``id``/``model``/``name``. Entries without a usable id (see :func:`parse_task_id`) are
    skipped. Raises :class:`BadResponse` (only) when there is no list at all.
    """
    entries: object = data
    if isinstance(data, dict):
        entries = data.get("data", data.get("models"))
    if not isinstance(entries, list):
        shape = f"keys: {_keys_of(data)}" if isinstance(data, dict) else f"a JSON {_type_name(data)}"
        raise BadResponse(f'list models: expected a list of models or {{"data": [...]}}, got {shape}')
    groups: dict[str, list[str]] = {"video": [], "image": [], "text": [], "other": []}
    skipped = 0
    for entry in entries:
        model_id: str | None = None
        meta: dict[Any, Any] | None = None
        if isinstance(entry, str):
            model_id = _id_of(entry)
        elif isinstance(entry, dict):
            model_id = next((found for k in ("id", "model", "name") if (found := _id_of(entry.get(k)))), None)
            meta = entry
        if model_id is None:
            skipped += 1
            continue
        groups[_classify_model(model_id, meta)].append(model_id)
    catalog = ModelCatalog(
        video=_dedupe(groups["video"]),
        image=_dedupe(groups["image"]),
        text=_dedupe(groups["text"]),
        other=_dedupe(groups["other"]),
    )
    return catalog, skipped


def _dedupe(ids: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(ids))


# -- reading bodies: capped after decompression ----------------------------------------------------
class _TooLarge(Exception):
    """The body is larger than allowed (``size``: the declared length, when known)."""

    def __init__(self, size: int | None = None) -> None:
        self.size = size
        super().__init__(size)


class _Undecodable(Exception):
    """The body's Content-Encoding is unknown or its compressed data is broken."""


class _Inflater:
    """Inflates a ``gzip`` or ``deflate`` body, never producing more bytes than asked for.

    aiohttp's own decompression is off for the service's answers (``auto_decompress=False``):
    depending on its version it may inflate a whole network chunk at once, and a 64 KiB chunk of
    a gzip bomb is 64 MiB of output. Here each step stops one byte past the room left.
    """

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in ("gzip", "x-gzip")
        self._inflate: Any = None  # zlib's decompressobj type is not public

    def feed(self, data: bytes, room: int) -> bytes:
        """Inflate `data`; returns at most ``room + 1`` bytes (more than `room` means too large)."""
        out = bytearray()
        while data:
            if self._inflate is None:
                if self._gzip:
                    wbits = 16 + zlib.MAX_WBITS
                else:  # "deflate" is meant to be zlib-wrapped, but raw deflate is common too
                    wbits = zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS
                self._inflate = zlib.decompressobj(wbits)
            try:
                out += self._inflate.decompress(data, room - len(out) + 1)
            except zlib.error:
                raise _Undecodable() from None
            if len(out) > room:
                break
            data = b""
            if self._inflate.eof:
                data = self._inflate.unused_data
                if data and not self._gzip:
                    raise _Undecodable()  # bytes after the end of the deflate stream
                self._inflate = None  # a gzip body may hold several members
        return bytes(out)

    def finish(self) -> None:
        """Raise :class:`_Undecodable` if the body ended inside a compressed stream."""
        if self._inflate is not None and not self._inflate.eof:
            raise _Undecodable()


async def _read_body(resp: aiohttp.ClientResponse, limit: int, *, truncate: bool = False) -> bytes:
    """The body of `resp`, inflated, streaming, never holding much more than `limit` bytes.

    The cap counts the bytes after decompression, and the compressed bytes too. Past it, raises
    :class:`_TooLarge`, or with `truncate` returns the first `limit` bytes (error bodies, whose
    beginning is all a message needs). Raises :class:`_Undecodable` for an unknown or broken
    Content-Encoding (with `truncate`: returns what could be read).
    """
    encoding = resp.headers.get("Content-Encoding", "").strip().lower()
    inflater: _Inflater | None = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        inflater = _Inflater(encoding)
    elif encoding not in ("", "identity"):
        if truncate:
            return b""
        raise _Undecodable()
    length = resp.content_length
    if length is not None and length > limit and not truncate:
        raise _TooLarge(length if inflater is None else None)
    buf = bytearray()
    wire = 0
    try:
        async for chunk in resp.content.iter_chunked(_READ_CHUNK):
            wire += len(chunk)
            buf += inflater.feed(chunk, limit - len(buf)) if inflater is not None else chunk
            if len(buf) > limit or wire > limit:
                # Stop reading at once: the rest may be gigabytes.
                if truncate:
                    return bytes(buf[:limit])
                raise _TooLarge()
        if inflater is not None:
            inflater.finish()
    except _Undecodable:
        if truncate:
            return bytes(buf[:limit])
        raise
    return bytes(buf)


# -- the client -------------------------------------------------------------------------------------
class GenerationClient:
    """The asyncio client of the generation service.

    `session` is shared and owned by the caller; it carries every request to the service's own
    origin (``base_url``), each with the API key and through `budget` (one per key). Result URLs
    on any other host go through a session this client owns (see :meth:`close`), whose connector
    only connects to public addresses or to `result_hosts` (``GEN_RESULT_HOSTS``), and never
    carry the key. `request_timeout` bounds one HTTP request in real seconds; `retry_max` is the
    number of attempts for 429s and transient failures; backoff between transient retries grows
    from `backoff_base` to `backoff_max` seconds of `clock` time, with jitter.

    Every answer is read with a cap counted after decompression: `json_max_bytes` for JSON
    answers, `image_json_max_bytes` for image creates (they may carry the image as base64).
    `max_redirects` bounds the redirects of one result download; `malformed_polls` is how many
    unreadable poll answers in a row end a wait. `resolver` is the DNS resolver behind the guard
    for foreign hosts (default: the system's).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        base_url: str,
        api_key: Secret,
        budget: RequestBudget,
        clock: Clock,
        request_timeout: float = 60,
        retry_max: int = 6,
        backoff_base: float = 2,
        backoff_max: float = 120,
        rng: random.Random | None = None,
        json_max_bytes: int = 1_048_576,
        image_json_max_bytes: int = 50_331_648,
        result_hosts: Iterable[str] = (),
        max_redirects: int = 3,
        malformed_polls: int = 3,
        resolver: AbstractResolver | None = None,
    ) -> None:
        if not isinstance(api_key, Secret):
            raise TypeError("api_key must be a Secret")
        if retry_max < 1 or malformed_polls < 1:
            raise ValueError("retry_max and malformed_polls must be >= 1")
        if max_redirects < 0 or json_max_bytes < 1 or image_json_max_bytes < 1:
            raise ValueError("max_redirects must be >= 0 and the answer caps >= 1")
        self._session = session
        self._base_url = base_url.rstrip("/")
        self._origin = _origin(yarl.URL(self._base_url))
        self._api_key = api_key
        self._budget = budget
        self._clock = clock
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._request_timeout = float(request_timeout)
        self._retry_max = int(retry_max)
        self._backoff_base = float(backoff_base)
        self._backoff_max = float(backoff_max)
        self._rng = rng or random.Random()
        self._json_max_bytes = int(json_max_bytes)
        self._image_json_max_bytes = int(image_json_max_bytes)
        self._result_hosts = tuple(result_hosts)
        self._max_redirects = int(max_redirects)
        self._malformed_polls = int(malformed_polls)
        self._resolver = resolver
        self._guard: GuardedResolver | None = None
        self._foreign: aiohttp.ClientSession | None = None
        self._progress_warned: OrderedDict[str, None] = OrderedDict()

    @classmethod
    def from_settings(
        cls, session: aiohttp.ClientSession, settings: Settings, budget: RequestBudget, clock: Clock
    ) -> GenerationClient:
        """A client configured from :class:`~framecast.config.Settings`."""
        return cls(
            session,
            base_url=settings.gen_api_base_url,
            api_key=settings.gen_api_key,
            budget=budget,
            clock=clock,
            request_timeout=settings.gen_request_timeout,
            retry_max=settings.gen_retry_max,
            backoff_base=settings.gen_backoff_base,
            backoff_max=settings.gen_backoff_max,
            json_max_bytes=settings.gen_json_max_bytes,
            image_json_max_bytes=settings.gen_image_json_max_bytes,
            result_hosts=settings.gen_result_hosts,
            max_redirects=settings.gen_max_redirects,
            malformed_polls=settings.gen_malformed_polls,
        )

    def __repr__(self) -> str:
        return f"<GenerationClient base_url={self._base_url!r}>"

    @property
    def base_url(self) -> str:
        """The service's base URL (no trailing slash)."""
        return self._base_url

    @property
    def budget(self) -> RequestBudget:
        """The request budget every call goes through."""
        return self._budget

    async def close(self) -> None:
        """Close what this client opened itself (the session for foreign result hosts).

        The shared session given to the constructor is the caller's to close. Safe to call twice.
        """
        foreign, guard = self._foreign, self._guard
        self._foreign = self._guard = None
        if foreign is not None:
            await foreign.close()
        if guard is not None:
            await guard.close()

    # -- operations -----------------------------------------------------------------------------
    async def create_video(self, params: VideoParams, *, priority: Priority | int = Priority.NORMAL) -> str:
        """Create a video task (``POST /v1/videos``) and return its id.

        An unreadable or unusable answer raises :class:`BadResponse` and is not retried: a second
        create could start a second task.
        """
        body = {
            "model": params.model,
            "prompt": params.prompt,
            "width": params.width,
            "height": params.height,
            "num_frames": params.num_frames,
            "frame_rate": params.frame_rate,
        }
        data = await self._request_json(
            "POST", "/v1/videos", json_body=body, priority=priority, what="create video"
        )
        task_id = parse_task_id(data, what="create video")
        log.debug("created video task %s", task_id)
        return task_id

    async def poll_video(self, task_id: str, *, priority: Priority | int = Priority.HIGH) -> TaskStatus:
        """Poll a video task once (``GET /svcapi?video_id=...``).

        A ``failed`` task is returned as a status (not raised). Raises :class:`BadResponse` for an
        unreadable answer, a ``completed`` answer without ``video_url`` or an unknown status.
        """
        return await self._poll(task_id, kind="video", priority=priority)

    async def wait_video(
        self,
        task_id: str,
        *,
        interval: float,
        timeout: float,  # noqa: ASYNC109 -- a poll deadline in clock seconds, part of the contract
        started_at: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> TaskStatus:
        """Poll a video task every `interval` seconds until it ends; return the completed status.

        The deadline is `timeout` seconds after `started_at` (the wall-clock time the task was
        created, ``clock.time()``; default now), so a restarted bot keeps the original deadline.
        The first poll comes one interval after `started_at`. `on_progress` is awaited after every
        pending poll (its exceptions propagate). A poll that fails transiently (the service
        unavailable or rate limiting after the client's own retries) does not end the wait, nor
        does an unreadable answer (too big, not JSON, too deep, of the wrong shape), which is not
        retried at once but polled again next interval: only ``malformed_polls`` of them in a
        row raise :class:`BadResponse`. Raises :class:`TaskFailed` or :class:`TaskTimedOut`.
        """
        return await self._wait(task_id, "video", interval, timeout, started_at, on_progress)

    async def wait_image(
        self,
        task_id: str,
        *,
        interval: float,
        timeout: float,  # noqa: ASYNC109 -- a poll deadline in clock seconds, part of the contract
        started_at: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> TaskStatus:
        """Like :meth:`wait_video`, for an image task returned by :meth:`create_image`.

        The result URL may be in ``image_url``, ``url``, ``video_url``, ``result_url`` or
        ``data[0].url``.
        """
        return await self._wait(task_id, "image", interval, timeout, started_at, on_progress)

    async def create_image(
        self, params: ImageParams, *, priority: Priority | int = Priority.NORMAL
    ) -> ImageResult:
        """Create an image (``POST /v1/images/generations``).

        The response shape is not specified; see :func:`parse_image_answer`. The answer may be up
        to ``image_json_max_bytes`` (an inline base64 image). Raises :class:`TaskFailed` when the
        service says the image failed, :class:`BadResponse` (not retried) for anything unusable.
        """
        body = {"model": params.model, "prompt": params.prompt, "size": params.size}
        data = await self._request_json(
            "POST", "/v1/images/generations", json_body=body, priority=priority, what="create image",
            max_bytes=self._image_json_max_bytes,
        )
        try:
            return parse_image_answer(data, base_url=self._base_url)
        except TaskFailed as exc:
            raise TaskFailed(self._shown(exc.reason, _REASON_MAX)) from None

    async def list_models(self, *, priority: Priority | int = Priority.LOW) -> ModelCatalog:
        """List the service's models (``GET /v1/models``), grouped into video, image and text."""
        data = await self._request_json("GET", "/v1/models", priority=priority, what="list models")
        catalog, skipped = parse_model_list(data)
        if skipped:
            log.warning("list models: skipped %d entries without a usable model id", skipped)
        return catalog

    async def download(
        self,
        url: str,
        *,
        max_bytes: int,
        timeout: float,  # noqa: ASYNC109 -- passed to aiohttp as each request's total timeout
        priority: Priority | int = Priority.HIGH,
    ) -> bytes:
        """Fetch a result URL, streaming, at most `max_bytes` bytes (after decompression).

        Only ``http(s)``. The service's own origin gets the key and goes through the budget; any
        other host gets neither, and is fetched only when it is in ``result_hosts`` or resolves
        to public addresses (checked where the connection is made). Redirects are followed by
        hand, at most ``max_redirects``, each checked like the first URL. Each request has
        `timeout` real seconds. Raises :class:`UnsafeResultURL` for a refused link (its message
        says why, never the URL), :class:`DownloadTooLarge` past the cap and
        :class:`DownloadError` for a dead or expired link (403/404/410), a timeout, broken
        compression, or a failure that persists after retries.
        """
        try:
            target = yarl.URL(url)
        except (ValueError, TypeError):
            raise self._refuse(REASON_BAD_URL) from None
        client_timeout = aiohttp.ClientTimeout(total=timeout)
        for attempt in range(1, self._retry_max + 1):
            outcome = await self._download_once(target, max_bytes, client_timeout, timeout, priority)
            if isinstance(outcome, bytes):
                return outcome
            status, retry_after_raw, problem, penalty, same_origin = outcome
            if status is not None:
                if status == 401 and same_origin:
                    raise AuthError(
                        f"download: the service rejected the API key (HTTP {status})", status=status
                    )
                if status in (401, 403, 404, 410):
                    raise DownloadError(
                        f"the result link has expired or is not accessible (HTTP {status})", status=status
                    )
                if not (status == 429 or status >= 500 or status == 408):
                    raise DownloadError(f"the result could not be downloaded (HTTP {status})", status=status)
            if attempt >= self._retry_max:
                raise DownloadError(
                    f"the result could not be downloaded after {attempt} attempts ({problem})", status=status
                )
            if penalty is not None:
                delay = penalty  # the budget itself makes the retry wait
            else:
                delay = self._backoff(attempt, parse_retry_after(retry_after_raw, self._clock.time()))
                await self._clock.sleep(delay)
            log.warning("download: %s; retry %d/%d after %.1fs", problem, attempt + 1, self._retry_max, delay)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- downloads ------------------------------------------------------------------------------
    async def _download_once(
        self,
        url: yarl.URL,
        max_bytes: int,
        client_timeout: aiohttp.ClientTimeout,
        timeout: float,  # noqa: ASYNC109 -- only named in the error message
        priority: Priority | int,
    ) -> bytes | tuple[int | None, str | None, str, float | None, bool]:
        """One attempt, redirects followed: the bytes, or (status, Retry-After, problem, penalty, same origin)."""
        hops = 0
        while True:
            same_origin = _origin(url) == self._origin
            if not same_origin:
                reason = refusal_before_connecting(url, self._result_hosts)
                if reason is not None:
                    raise self._refuse(reason, url)
            session = self._session if same_origin else await self._foreign_session()
            headers = self._headers() if same_origin else {"Accept-Encoding": _ACCEPT_ENCODING}
            status: int | None = None
            retry_after_raw: str | None = None
            location: str | None = None
            problem = ""
            slot = self._budget.slot(priority) if same_origin else contextlib.nullcontext()
            async with slot:
                try:
                    async with session.get(
                        url, headers=headers, timeout=client_timeout, allow_redirects=False,
                        auto_decompress=False,
                    ) as resp:
                        status = resp.status
                        retry_after_raw = resp.headers.get("Retry-After")
                        if status in _REDIRECTS:
                            location = resp.headers.get("Location")
                        elif 200 <= status < 300:
                            data = await self._read_result(resp, max_bytes)
                            if same_origin:
                                self._budget.reward()
                            return data
                except TimeoutError:
                    raise DownloadError(f"the download did not finish within {timeout:g} s") from None
                except aiohttp.InvalidURL:
                    raise self._refuse(REASON_BAD_URL, url) from None
                except aiohttp.ClientConnectorError as exc:
                    if _refused_by_guard(exc):
                        raise self._refuse(REASON_INTERNAL, url) from None
                    problem = f"connection problem ({self._describe(exc)})"
                except aiohttp.ClientError as exc:
                    problem = f"connection problem ({self._describe(exc)})"
                penalty = self._penalize_in_slot(status, retry_after_raw, same_origin)
            if location is None:
                if status is not None:
                    problem = f"HTTP {status}"
                return status, retry_after_raw, problem, penalty, same_origin
            hops += 1
            if hops > self._max_redirects:
                raise self._refuse(REASON_TOO_MANY_REDIRECTS, url)
            try:
                url = url.join(yarl.URL(location))
            except (ValueError, TypeError):
                raise self._refuse(REASON_BAD_URL, url) from None

    async def _read_result(self, resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
        try:
            return await _read_body(resp, max_bytes)
        except _TooLarge as exc:
            raise DownloadTooLarge(limit=max_bytes, size=exc.size) from None
        except _Undecodable:
            raise DownloadError("the result's compression is broken or unknown") from None

    async def _foreign_session(self) -> aiohttp.ClientSession:
        # Created on first use (a session wants a running loop) and closed by close(). No proxy
        # from the environment (trust_env=False): the connection must go where the guard looked.
        if self._foreign is None:
            self._guard = GuardedResolver(self._result_hosts, self._resolver)
            connector = aiohttp.TCPConnector(resolver=self._guard, use_dns_cache=False)
            self._foreign = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._foreign

    def _refuse(self, reason: str, url: yarl.URL | None = None) -> UnsafeResultURL:
        # The operator may need the host to fill GEN_RESULT_HOSTS; the error itself names nothing.
        host = clean_text(url.raw_host or "", 100) if url is not None else ""
        log.warning("refused a result link: %s%s", reason, f" (host {host})" if host else "")
        return UnsafeResultURL(reason)

    # -- internals ------------------------------------------------------------------------------
    def _penalize_in_slot(self, status: int | None, retry_after_raw: str | None, budgeted: bool) -> float | None:
        """On a 429, pause the budget while this request still holds its slot.

        Releasing the slot first would let a waiting request slip out between the 429 and the pause,
        and a server that counts rejected requests would then never see the window drain.
        """
        if status != 429 or not budgeted:
            return None
        return self._budget.penalize(parse_retry_after(retry_after_raw, self._clock.time()))

    def _headers(self) -> dict[str, str]:
        # Built per request and never stored, logged or attached to an error.
        return {
            "Authorization": f"Bearer {self._api_key.reveal()}",
            "Accept": "application/json",
            "Accept-Encoding": _ACCEPT_ENCODING,
        }

    def _url(self, path: str) -> str:
        return self._base_url + path

    def _scrub(self, text: str) -> str:
        key = self._api_key.reveal()
        if len(key) >= 4:
            text = text.replace(key, "***")
        return text

    def _shown(self, text: str | None, limit: int) -> str | None:
        """Service text (already cleaned, longer than `limit`) without the key, cut to `limit`.

        The key is scrubbed before cutting, so a cut can never leave part of it behind.
        """
        if not text:
            return None
        return clean_text(self._scrub(text), limit) or None

    def _describe(self, exc: BaseException) -> str:
        # aiohttp's messages name host and port at most, but scrub anyway; never chain the
        # original exception (response errors carry the request headers in request_info).
        return clean_text(self._scrub(f"{type(exc).__name__}: {exc}"), 200)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(self._backoff_max, retry_after)
        raw = min(self._backoff_max, self._backoff_base * 2 ** min(attempt - 1, 30))
        return raw / 2 + self._rng.uniform(0, raw / 2)

    async def _request_json(
        self,
        method: str,
        path: str,
        *,
        priority: Priority | int,
        what: str,
        params: dict[str, str] | None = None,
        json_body: dict[str, Any] | None = None,
        max_bytes: int | None = None,
    ) -> Any:
        """One API call with budget, retries and error mapping; returns the parsed JSON.

        429s, 5xx, timeouts and connection errors are retried. An answer that cannot be read
        (larger than `max_bytes` after decompression, not UTF-8 JSON, too deep...) raises
        :class:`BadResponse` at once: retrying it blindly would spend the budget, and for a create
        could start a second task.
        """
        limit = max_bytes if max_bytes is not None else self._json_max_bytes
        url = self._url(path)
        headers = self._headers()
        body_bytes = _json_bytes(json_body) if json_body is not None else None
        if body_bytes is not None:
            headers["Content-Type"] = "application/json; charset=utf-8"
        for attempt in range(1, self._retry_max + 1):
            status: int | None = None
            body = b""
            unreadable: str | None = None
            retry_after_raw: str | None = None
            problem = ""
            async with self._budget.slot(priority):
                try:
                    async with self._session.request(
                        method,
                        url,
                        params=params,
                        data=body_bytes,
                        headers=headers,
                        timeout=self._timeout,
                        allow_redirects=False,
                        auto_decompress=False,
                    ) as resp:
                        status = resp.status
                        retry_after_raw = resp.headers.get("Retry-After")
                        if 200 <= status < 300:
                            try:
                                body = await _read_body(resp, limit)
                            except _TooLarge:
                                unreadable = f"the answer is larger than the {limit}-byte limit"
                            except _Undecodable:
                                unreadable = "the answer's compression is broken or unknown"
                        elif 400 <= status < 500:
                            body = await _read_body(resp, _ERROR_BODY_MAX, truncate=True)
                except TimeoutError:
                    problem = f"no answer within {self._request_timeout:g} s"
                except aiohttp.ClientError as exc:
                    problem = f"connection problem ({self._describe(exc)})"
                penalty = self._penalize_in_slot(status, retry_after_raw, True)
            failure: ServiceError
            if status is None:
                failure = ServiceUnavailable(f"{what}: {problem}")
            elif 200 <= status < 300:
                self._budget.reward()
                if unreadable is None:
                    try:
                        return load_json(body)
                    except BadResponse as exc:
                        unreadable = exc.message
                raise BadResponse(f"{what}: {unreadable} (HTTP {status})", status=status)
            elif 300 <= status < 400:
                raise BadResponse(f"{what}: the service answered with a redirect (HTTP {status})", status=status)
            elif status in (401, 403):
                raise AuthError(f"{what}: the service rejected the API key (HTTP {status})", status=status)
            elif status == 429:
                retry_after = parse_retry_after(retry_after_raw, self._clock.time())
                assert penalty is not None
                pause = penalty
                if attempt >= self._retry_max:
                    raise RateLimited(
                        f"{what}: still rate limited after {attempt} attempts",
                        retry_after=retry_after if retry_after is not None else pause,
                    )
                log.warning(
                    "%s: rate limited (HTTP 429); retry %d/%d after the budget's %.1fs pause",
                    what,
                    attempt + 1,
                    self._retry_max,
                    pause,
                )
                continue  # the budget's pause is the backoff: the next slot waits for it
            elif 400 <= status < 500 and status != 408:
                detail = self._shown(error_detail(body), _DETAIL_MAX)
                raise RequestRejected(
                    f"{what}: the service rejected the request (HTTP {status})"
                    + (f": {detail}" if detail else ""),
                    status=status,
                    detail=detail,
                )
            else:
                problem = f"HTTP {status}"
                failure = ServiceUnavailable(f"{what}: the service answered HTTP {status}", status=status)
            if attempt >= self._retry_max:
                raise ServiceUnavailable(
                    f"{failure.message} (after {attempt} attempts)", status=failure.status
                )
            delay = self._backoff(attempt, parse_retry_after(retry_after_raw, self._clock.time()))
            log.warning("%s: %s; retry %d/%d in %.1fs", what, problem, attempt + 1, self._retry_max, delay)
            await self._clock.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _poll(self, task_id: str, *, kind: str, priority: Priority | int) -> TaskStatus:
        what = f"poll task {task_id}"
        data = await self._request_json("GET", "/svcapi", params={"video_id": task_id}, priority=priority, what=what)
        try:
            status = parse_poll(data, kind=kind, base_url=self._base_url)
        except BadResponse as exc:
            raise BadResponse(f"{what}: {exc.message.removeprefix('poll: ')}") from None
        if status.progress is None and isinstance(data, dict) and data.get("progress") is not None:
            self._warn_progress(task_id, data["progress"])
        if status.error is not None:
            status = replace(status, error=self._shown(status.error, _REASON_MAX))
        return status

    def _warn_progress(self, task_id: str, raw: object) -> None:
        if task_id in self._progress_warned:
            return
        self._progress_warned[task_id] = None
        if len(self._progress_warned) > 1000:  # a long-running bot must not grow this forever
            self._progress_warned.popitem(last=False)
        shown = clean_text(raw if isinstance(raw, str) else _type_name(raw), 60)
        log.warning("task %s: unreadable progress %r; showing it as unknown", task_id, shown)

    async def _wait(
        self,
        task_id: str,
        kind: str,
        interval: float,
        timeout: float,  # noqa: ASYNC109
        started_at: float | None,
        on_progress: ProgressCallback | None,
    ) -> TaskStatus:
        if interval <= 0 or timeout <= 0:
            raise ValueError("interval and timeout must be > 0")
        now_wall = self._clock.time()
        elapsed = max(0.0, now_wall - started_at) if started_at is not None else 0.0
        start = self._clock.monotonic()
        deadline = start + max(0.0, timeout - elapsed)
        next_poll = start + max(0.0, interval - elapsed)
        last_problem: ServiceError | None = None
        unreadable = 0  # unreadable answers in a row
        while True:
            delay = min(next_poll, deadline) - self._clock.monotonic()
            if delay > 0:
                await self._clock.sleep(delay)
            try:
                status = await self._poll(task_id, kind=kind, priority=Priority.HIGH)
            except BadResponse as exc:
                # One garbled answer says little about the task: ask again next interval, and
                # give up only when the service keeps answering nonsense.
                unreadable += 1
                last_problem = exc
                if unreadable >= self._malformed_polls:
                    raise BadResponse(
                        f"the service's answers about task {task_id} were unreadable {unreadable} times "
                        f"in a row (last: {exc.message})"
                    ) from None
                log.warning(
                    "task %s: unreadable answer %d of %d in a row (%s); will poll again",
                    task_id, unreadable, self._malformed_polls, exc.message,
                )
            except (ServiceUnavailable, RateLimited) as exc:
                # A long task must not fail because one poll met a bad minute: keep going until
                # the deadline.
                last_problem = exc
                log.warning("task %s: poll failed (%s); will poll again", task_id, exc)
            else:
                last_problem = None
                unreadable = 0
                if status.state == "completed":
                    return status
                if status.state == "failed":
                    raise TaskFailed(status.error, task_id=task_id)
                if on_progress is not None:
                    await on_progress(status)
            now = self._clock.monotonic()
            if now >= deadline:
                message = None
                if last_problem is not None:
                    message = f"generation task {task_id} did not finish within {timeout:g} s (last poll: {last_problem})"
                raise TaskTimedOut(message, task_id=task_id, timeout=timeout)
            next_poll = now + interval


def _refused_by_guard(exc: aiohttp.ClientConnectorError) -> bool:
    """Whether a connection failed because the guard refused every address of the host."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, RefusedAddress) or isinstance(getattr(seen, "os_error", None), RefusedAddress):
            return True
        seen = seen.__cause__
    return False


def _origin(url: yarl.URL) -> tuple[str, str, int | None]:
    return url.scheme.lower(), normalize_host(url.raw_host or ""), url.port


def _json_bytes(body: dict[str, Any]) -> bytes:
    """The request body as UTF-8 JSON, non-ASCII text unescaped.

    Prompts in Chinese, Hindi, Arabic or emoji then travel as the very UTF-8 bytes the member typed,
    not as ``\\uXXXX`` escapes. Text that cannot be UTF-8 (a lone surrogate) falls back to escapes.
    """
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode("ascii")
