"""The generation-service client (see ``SERVICE_API.md``): patient, liberal in what it accepts,
strict in what it reports, and never spending more than the shared :class:`RequestBudget` allows.

Every request carries ``Authorization: Bearer <key>`` and goes through the budget, including
retries and downloads of the service's own result URLs. The key never appears in an exception,
a log line or a repr.
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
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC
from numbers import Real
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urljoin, urlsplit

import aiohttp

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
)

if TYPE_CHECKING:
    from framecast.config import Settings

__all__ = [
    "GenerationClient",
    "ImageParams",
    "ImageResult",
    "ModelCatalog",
    "TaskStatus",
    "VideoParams",
    "normalize_progress",
    "parse_retry_after",
]

log = logging.getLogger(__name__)

TaskState = Literal["pending", "completed", "failed"]
ProgressCallback = Callable[["TaskStatus"], Awaitable[None]]

_DETAIL_MAX = 300  # the service's own words are shown to members: keep them short
_DOWNLOAD_CHUNK = 64 * 1024


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


# -- pure helpers -----------------------------------------------------------------------------------
def normalize_progress(value: object) -> float | None:
    """Turn whatever the service sends as ``progress`` into a fraction in ``0..1``, or ``None``.

    Integers are percentages (``45`` -> 0.45); floats in ``0..1`` are fractions and floats above 1
    percentages; strings may be ``"45%"``, ``"0.45"`` or ``"45"`` (read like the number they spell).
    Results are clamped to ``0..1``. ``None``, booleans and anything unreadable give ``None``:
    unknown progress is not zero progress.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _clamp(value / 100)
    if isinstance(value, Real):
        return _from_float(float(value))
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if text.endswith("%"):
            try:
                number = float(text[:-1].strip())
            except ValueError:
                return None
            return _clamp(number / 100) if math.isfinite(number) else None
        try:
            return _clamp(int(text) / 100)
        except ValueError:
            pass
        try:
            return _from_float(float(text))
        except ValueError:
            return None
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
    Returns ``None`` for a missing or unreadable header.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", int: "number", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _keys_of(data: dict[Any, Any]) -> str:
    keys = [str(k)[:40] for k in list(data)[:10]]
    return ", ".join(keys) if keys else "none"


def _nonempty_str(value: object) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _id_of(value: object) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return _nonempty_str(value)


def _one_line(text: str, limit: int = _DETAIL_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _message_of(value: object) -> str | None:
    """The human message inside the common error shapes (a string, {"message": ...}, a list...)."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, dict):
        for key in ("message", "detail", "msg", "error_description", "error", "description"):
            found = _message_of(value.get(key))
            if found:
                return found
        return None
    if isinstance(value, list) and value:
        return _message_of(value[0])
    return None


def _error_detail(body: bytes) -> str | None:
    """The service's message from an error body, whatever its shape; ``None`` if it has none."""
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        if text.startswith("<"):  # an HTML error page says nothing useful to a member
            return None
        return text
    if isinstance(data, dict):
        for key in ("error", "message", "detail", "error_description", "msg", "errors"):
            found = _message_of(data.get(key))
            if found:
                return found
        return None
    return _message_of(data)


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


def _classify_model(model_id: str, entry: dict[str, Any] | None) -> str:
    explicit: str | None = None
    if entry is not None:
        for field in _KIND_FIELDS:
            raw = entry.get(field)
            if isinstance(raw, list):
                raw = ",".join(str(x) for x in raw)
            if not isinstance(raw, str) or raw.strip().lower() in _GENERIC_KINDS:
                continue
            kind = _classify_kind(raw)
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


def _dedupe(ids: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(ids))


# -- the client -------------------------------------------------------------------------------------
class GenerationClient:
    """The asyncio client of the generation service.

    `session` is shared and owned by the caller. Every request goes through `budget` (one per key).
    `request_timeout` bounds one HTTP request in real seconds; `retry_max` is the number of
    attempts for 429s and transient failures; backoff between transient retries grows from
    `backoff_base` to `backoff_max` seconds of `clock` time, with jitter.
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
    ) -> None:
        if not isinstance(api_key, Secret):
            raise TypeError("api_key must be a Secret")
        if retry_max < 1:
            raise ValueError("retry_max must be >= 1")
        self._session = session
        self._base_url = base_url.rstrip("/")
        self._origin = _origin(self._base_url)
        self._api_key = api_key
        self._budget = budget
        self._clock = clock
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._request_timeout = float(request_timeout)
        self._retry_max = int(retry_max)
        self._backoff_base = float(backoff_base)
        self._backoff_max = float(backoff_max)
        self._rng = rng or random.Random()
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

    # -- operations -----------------------------------------------------------------------------
    async def create_video(self, params: VideoParams, *, priority: Priority | int = Priority.NORMAL) -> str:
        """Create a video task (``POST /v1/videos``) and return its id."""
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
        if not isinstance(data, dict):
            raise BadResponse(f"create video: expected a JSON object, got {_type_name(data)}")
        for key in ("video_id", "task_id", "id"):
            task_id = _id_of(data.get(key))
            if task_id is not None:
                log.debug("created video task %s", task_id)
                return task_id
        raise BadResponse(f"create video: the response has no video_id or task_id (keys: {_keys_of(data)})")

    async def poll_video(self, task_id: str, *, priority: Priority | int = Priority.HIGH) -> TaskStatus:
        """Poll a video task once (``GET /svcapi?video_id=...``).

        A ``failed`` task is returned as a status (not raised). Raises :class:`BadResponse` for a
        ``completed`` answer without ``video_url`` or an unknown status.
        """
        return await self._poll(task_id, kind="video", priority=priority)

    async def poll_image(self, task_id: str, *, priority: Priority | int = Priority.HIGH) -> TaskStatus:
        """Poll an image task once; the result URL may be in ``image_url``, ``url`` or ``video_url``."""
        return await self._poll(task_id, kind="image", priority=priority)

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
        unavailable or rate limiting after the client's own retries) does not end the wait.
        Raises :class:`TaskFailed` or :class:`TaskTimedOut`.
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
        """Like :meth:`wait_video`, for an image task returned by :meth:`create_image`."""
        return await self._wait(task_id, "image", interval, timeout, started_at, on_progress)

    async def create_image(
        self, params: ImageParams, *, priority: Priority | int = Priority.NORMAL
    ) -> ImageResult:
        """Create an image (``POST /v1/images/generations``).

        The response shape is not specified; accepted: ``data[].url``, ``data[].b64_json``, a
        top-level ``url``/``image_url``, or a task id (``video_id``/``task_id``/``id``) to poll
        with :meth:`wait_image`. Anything else raises :class:`BadResponse`.
        """
        body = {"model": params.model, "prompt": params.prompt, "size": params.size}
        data = await self._request_json(
            "POST", "/v1/images/generations", json_body=body, priority=priority, what="create image"
        )
        return self._parse_image(data)

    async def list_models(self, *, priority: Priority | int = Priority.LOW) -> ModelCatalog:
        """List the service's models (``GET /v1/models``), grouped into video, image and text."""
        data = await self._request_json("GET", "/v1/models", priority=priority, what="list models")
        entries: object = data
        if isinstance(data, dict):
            entries = data.get("data", data.get("models"))
        if not isinstance(entries, list):
            shape = f"keys: {_keys_of(data)}" if isinstance(data, dict) else f"a JSON {_type_name(data)}"
            raise BadResponse(f'list models: expected a list of models or {{"data": [...]}}, got {shape}')
        groups: dict[str, list[str]] = {"video": [], "image": [], "text": [], "other": []}
        skipped = 0
        for entry in entries:
            if isinstance(entry, str) and entry.strip():
                model_id, meta = entry.strip(), None
            elif isinstance(entry, dict):
                found = next(
                    (_id_of(entry.get(k)) for k in ("id", "model", "name") if _id_of(entry.get(k))), None
                )
                if found is None:
                    skipped += 1
                    continue
                model_id, meta = found, entry
            else:
                skipped += 1
                continue
            groups[_classify_model(model_id, meta)].append(model_id)
        if skipped:
            log.warning("list models: skipped %d entries without a model id", skipped)
        return ModelCatalog(
            video=_dedupe(groups["video"]),
            image=_dedupe(groups["image"]),
            text=_dedupe(groups["text"]),
            other=_dedupe(groups["other"]),
        )

    async def download(
        self,
        url: str,
        *,
        max_bytes: int,
        timeout: float,  # noqa: ASYNC109 -- passed to aiohttp as the download's total timeout
        priority: Priority | int = Priority.HIGH,
    ) -> bytes:
        """Fetch a result URL, streaming, at most `max_bytes` bytes within `timeout` real seconds.

        URLs on the service's own origin carry the key and go through the budget; other hosts (a
        CDN) get neither, so the key never leaks. Raises :class:`DownloadTooLarge` past the cap and
        :class:`DownloadError` for a dead or expired link (403/404/410), a timeout, or a failure
        that persists after retries.
        """
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise DownloadError("the result link is not an http(s) URL")
        same_origin = _origin(url) == self._origin
        headers = self._headers() if same_origin else {}
        client_timeout = aiohttp.ClientTimeout(total=timeout)
        for attempt in range(1, self._retry_max + 1):
            status: int | None = None
            retry_after_raw: str | None = None
            problem: str
            slot = self._budget.slot(priority) if same_origin else contextlib.nullcontext()
            async with slot:
                try:
                    async with self._session.get(url, headers=headers, timeout=client_timeout) as resp:
                        status = resp.status
                        retry_after_raw = resp.headers.get("Retry-After")
                        if 200 <= status < 300:
                            data = await _read_capped(resp, max_bytes)
                            if same_origin:
                                self._budget.reward()
                            return data
                except TimeoutError:
                    raise DownloadError(f"the download did not finish within {timeout:g} s") from None
                except aiohttp.ClientError as exc:
                    problem = f"connection problem ({self._describe(exc)})"
                penalty = self._penalize_in_slot(status, retry_after_raw, same_origin)
            if status is not None:
                if status == 401 and same_origin:
                    raise AuthError(
                        f"download: the service rejected the API key (HTTP {status})", status=status
                    )
                if status in (401, 403, 404, 410):
                    raise DownloadError(
                        f"the result link has expired or is not accessible (HTTP {status})", status=status
                    )
                if status == 429 or status >= 500 or status == 408:
                    problem = f"HTTP {status}"
                else:
                    raise DownloadError(f"the result could not be downloaded (HTTP {status})", status=status)
            retry_after = parse_retry_after(retry_after_raw, self._clock.time())
            if attempt >= self._retry_max:
                raise DownloadError(
                    f"the result could not be downloaded after {attempt} attempts ({problem})", status=status
                )
            if penalty is not None:
                delay = penalty  # the budget itself makes the retry wait
            else:
                delay = self._backoff(attempt, retry_after)
                await self._clock.sleep(delay)
            log.warning("download: %s; retry %d/%d after %.1fs", problem, attempt + 1, self._retry_max, delay)
        raise AssertionError("unreachable")  # pragma: no cover

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
        return {"Authorization": f"Bearer {self._api_key.reveal()}", "Accept": "application/json"}

    def _url(self, path: str) -> str:
        return self._base_url + path

    def _scrub(self, text: str) -> str:
        key = self._api_key.reveal()
        if len(key) >= 4:
            text = text.replace(key, "***")
        return text

    def _describe(self, exc: BaseException) -> str:
        # aiohttp's messages name host and port at most, but scrub anyway; never chain the
        # original exception (response errors carry the request headers in request_info).
        return _one_line(self._scrub(f"{type(exc).__name__}: {exc}"), 200)

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
    ) -> Any:
        """One API call with budget, retries and error mapping; returns the parsed JSON."""
        url = self._url(path)
        headers = self._headers()
        body_bytes = _json_bytes(json_body) if json_body is not None else None
        if body_bytes is not None:
            headers["Content-Type"] = "application/json; charset=utf-8"
        for attempt in range(1, self._retry_max + 1):
            status: int | None = None
            body = b""
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
                    ) as resp:
                        status = resp.status
                        retry_after_raw = resp.headers.get("Retry-After")
                        body = await resp.read()
                except TimeoutError:
                    problem = f"no answer within {self._request_timeout:g} s"
                except aiohttp.ClientError as exc:
                    problem = f"connection problem ({self._describe(exc)})"
                penalty = self._penalize_in_slot(status, retry_after_raw, True)
            failure: ServiceError
            if status is None:
                failure = ServiceUnavailable(f"{what}: {problem}")
            elif 200 <= status < 300:
                try:
                    data = json.loads(body)
                except (ValueError, UnicodeDecodeError):
                    problem = f"malformed JSON (HTTP {status})"
                    failure = ServiceUnavailable(f"{what}: the service sent malformed JSON", status=status)
                else:
                    self._budget.reward()
                    return data
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
                detail = _error_detail(body)
                detail = _one_line(self._scrub(detail)) if detail else None
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
        data = await self._request_json(
            "GET", "/svcapi", params={"video_id": task_id}, priority=priority, what=f"poll task {task_id}"
        )
        return self._parse_status(task_id, kind, data)

    def _parse_status(self, task_id: str, kind: str, data: Any) -> TaskStatus:
        if not isinstance(data, dict):
            raise BadResponse(f"poll task {task_id}: expected a JSON object, got {_type_name(data)}")
        raw_status = data.get("status")
        if not isinstance(raw_status, str) or not raw_status.strip():
            raise BadResponse(f"poll task {task_id}: the response has no status (keys: {_keys_of(data)})")
        state = raw_status.strip().lower()
        raw_progress = data.get("progress")
        progress = normalize_progress(raw_progress)
        if progress is None and raw_progress is not None:
            self._warn_progress(task_id, raw_progress)
        if state == "pending":
            return TaskStatus("pending", progress)
        if state == "completed":
            url = self._result_url(data, kind)
            if url is None:
                field = "video_url" if kind == "video" else "result URL (image_url, url or video_url)"
                raise BadResponse(f"task {task_id} is completed but the response has no {field}")
            return TaskStatus("completed", 1.0, url)
        if state == "failed":
            reason = _message_of(data.get("error"))
            if reason is None and data.get("error") is not None:
                reason = str(data.get("error"))
            return TaskStatus(
                "failed", progress, None, _one_line(self._scrub(reason), 500) if reason else None
            )
        raise BadResponse(
            f"poll task {task_id}: unknown status {_one_line(raw_status, 60)!r} "
            "(expected pending, completed or failed)"
        )

    def _result_url(self, data: dict[str, Any], kind: str) -> str | None:
        candidates: list[object] = [data.get("video_url")]
        if kind == "image":
            candidates = [
                data.get("image_url"),
                data.get("url"),
                data.get("video_url"),
                data.get("result_url"),
            ]
            entries = data.get("data")
            if isinstance(entries, list) and entries and isinstance(entries[0], dict):
                candidates.append(entries[0].get("url"))
        for candidate in candidates:
            url = _nonempty_str(candidate)
            if url is not None:
                # A relative link is taken relative to the service.
                return urljoin(self._base_url + "/", url)
        return None

    def _warn_progress(self, task_id: str, raw: object) -> None:
        if task_id in self._progress_warned:
            return
        self._progress_warned[task_id] = None
        if len(self._progress_warned) > 1000:  # a long-running bot must not grow this forever
            self._progress_warned.popitem(last=False)
        log.warning(
            "task %s: unreadable progress %s; showing it as unknown", task_id, _one_line(repr(raw), 60)
        )

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
        while True:
            delay = min(next_poll, deadline) - self._clock.monotonic()
            if delay > 0:
                await self._clock.sleep(delay)
            try:
                status = await self._poll(task_id, kind=kind, priority=Priority.HIGH)
            except (ServiceUnavailable, RateLimited) as exc:
                # A long task must not fail because one poll met a bad minute: keep going until
                # the deadline.
                last_problem = exc
                log.warning("task %s: poll failed (%s); will poll again", task_id, exc)
            else:
                last_problem = None
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

    def _parse_image(self, data: Any) -> ImageResult:
        if not isinstance(data, dict):
            raise BadResponse(f"create image: unrecognised response (a JSON {_type_name(data)})")
        entries = data.get("data")
        if isinstance(entries, list) and entries:
            first = entries[0]
            if isinstance(first, dict):
                url = _nonempty_str(first.get("url"))
                if url is not None:
                    return self._image_from_url(url)
                b64 = _nonempty_str(first.get("b64_json"))
                if b64 is not None:
                    return ImageResult(data=_decode_b64(b64))
            elif isinstance(first, str) and first.strip().startswith(("http://", "https://", "data:")):
                return self._image_from_url(first.strip())
        for key in ("url", "image_url"):
            url = _nonempty_str(data.get(key))
            if url is not None:
                return self._image_from_url(url)
        b64 = _nonempty_str(data.get("b64_json"))
        if b64 is not None:
            return ImageResult(data=_decode_b64(b64))
        status = _nonempty_str(data.get("status"))
        if status is not None and status.lower() == "failed":
            reason = _message_of(data.get("error"))
            raise TaskFailed(_one_line(self._scrub(reason), 500) if reason else None)
        for key in ("video_id", "task_id", "id"):
            task_id = _id_of(data.get(key))
            if task_id is not None:
                return ImageResult(task_id=task_id)
        raise BadResponse(
            "create image: unrecognised response: expected data[].url, data[].b64_json, url, image_url "
            f"or a task id (keys: {_keys_of(data)})"
        )

    def _image_from_url(self, url: str) -> ImageResult:
        if url.startswith("data:"):
            return ImageResult(data=_decode_b64(url))
        return ImageResult(url=urljoin(self._base_url + "/", url))


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    length = resp.content_length
    if length is not None and length > max_bytes:
        raise DownloadTooLarge(limit=max_bytes, size=length)
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(_DOWNLOAD_CHUNK):
        buf += chunk
        if len(buf) > max_bytes:
            # Stop reading at once: the rest may be gigabytes.
            raise DownloadTooLarge(limit=max_bytes)
    return bytes(buf)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


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
