"""The lenient parsing of the service's answers: pure functions, data in, value or error out.

The service's answers vary in shape (``SERVICE_API.md`` leaves much open), so each parser accepts
every shape seen in practice, and raises only the documented errors
(:class:`~framecast.service.errors.BadResponse`, and :class:`~framecast.service.errors.TaskFailed` for an image
the service says failed): no answer can crash a job. Every text taken from an answer is made safe
with :func:`~framecast.safetext.clean_text`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any
from urllib.parse import urljoin

from framecast.safetext import clean_text
from framecast.service.errors import BadResponse, TaskFailed
from framecast.service.fields import normalize_progress
from framecast.service.jsonread import INT_MAX_DIGITS, load_json
from framecast.service.types import ImageResult, ModelCatalog, TaskStatus

__all__ = [
    "TEXT_MAX",
    "error_detail",
    "parse_image_answer",
    "parse_model_list",
    "parse_poll",
    "parse_task_id",
    "type_name",
]

#: What parsers keep of a text, so the API key can be scrubbed before the final cut.
TEXT_MAX = 2000
_ID_MAX = 128  # task and model ids
_URL_MAX = 8192  # result URLs (inline data: URLs aside)


def type_name(value: object) -> str:
    """The JSON name of `value`'s type (``object``, ``array``...), for messages about an answer."""
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
        return str(value) if 0 <= value < 10**INT_MAX_DIGITS else None
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
        reason = clean_text(value, TEXT_MAX)
    cleaned = clean_text(reason, TEXT_MAX) if reason else ""
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
        return clean_text(text, TEXT_MAX) or None
    found: str | None = None
    if isinstance(data, dict):
        for key in ("error", "message", "detail", "error_description", "msg", "errors"):
            found = _message_of(data.get(key))
            if found:
                break
    else:
        found = _message_of(data)
    return (clean_text(found, TEXT_MAX) or None) if found else None


def _absolute_url(url: str, base_url: str) -> str:
    """`url` (maybe relative to the service) as an absolute URL string; checked for sanity only.

    Where it may be fetched from is decided at download time (:mod:`framecast.service.netguard`).
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
        raise BadResponse(f"{what}: expected a JSON object, got {type_name(data)}")
    for key in ("video_id", "task_id", "id"):
        task_id = _id_of(data.get(key))
        if task_id is not None:
            return task_id
    raise BadResponse(f"{what}: the response has no usable video_id or task_id (keys: {_keys_of(data)})")


def parse_poll(data: Any, *, kind: str = "video", base_url: str, task_id: str | None = None) -> TaskStatus:
    """One poll answer (``GET /svcapi``) as a :class:`TaskStatus`.

    `kind` is ``"video"`` (the URL is in ``video_url``) or ``"image"`` (``image_url``, ``url``,
    ``video_url``, ``result_url`` or ``data[0].url``); a relative URL is taken relative to
    `base_url`. A ``failed`` task is a status, its ``error`` made safe with :func:`clean_text`.
    Raises :class:`BadResponse` (only) for an answer that is not an object, names tasks (in
    ``video_id``, ``task_id``) none of which is `task_id` (another task's result is never
    delivered), has no or an unknown status, or is completed without a usable result URL.
    """
    if not isinstance(data, dict):
        raise BadResponse(f"poll: expected a JSON object, got {type_name(data)}")
    named = [
        str(data[field]).strip()
        for field in ("video_id", "task_id")
        if isinstance(data.get(field), (str, int)) and not isinstance(data.get(field), bool)
    ]
    if task_id is not None and named and task_id not in named:
        raise BadResponse(f"poll: the answer is about another task ({clean_text(named[0], 40)!r})")
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
        raise BadResponse(f"create image: unrecognised response (a JSON {type_name(data)})")
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
        shape = f"keys: {_keys_of(data)}" if isinstance(data, dict) else f"a JSON {type_name(data)}"
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
