"""A fake generation service that follows ``SERVICE_API.md``, for tests (aiohttp on 127.0.0.1).

Knobs are plain mutable attributes, so a test (or an end-to-end test running the real bot as a
subprocess against this fake) can steer it while it runs::

    fake = FakeService()
    await fake.start()
    fake.id_field = "task_id"
    fake.progress_shape = "percent_str"
    fake.plans.append(("explode", TaskPlan(outcome="failed", error="content policy")))
    fake.rate_limit = (16, 1.0)
    fake.api_keys.add("a-server-key")  # a second tenant: its own window, its own tasks
    ...
    assert fake.max_in_window(1.0) <= 16 and fake.count(status=429) == 0
    assert fake.count(key="a-server-key") == 3
    await fake.stop()

Every request is recorded (:class:`RecordedRequest`); :meth:`FakeService.wait_for` wakes on each
new record or response, so tests never sleep-poll.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import itertools
import json
import logging
import secrets
import time
import zlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

__all__ = [
    "IMAGE_MODEL",
    "POLL_PATH",
    "VIDEO_MODEL",
    "FakeService",
    "FakeTask",
    "RecordedRequest",
    "TaskPlan",
    "tiny_png",
]

log = logging.getLogger(__name__)

ProgressShape = Literal[
    "int", "float", "percent_str", "fraction_str", "int_str", "float_percent", "missing", "null", "garbage"
]
ImageShape = Literal["data_url", "data_b64", "url", "image_url", "task", "weird", "bad_b64"]
ModelsShape = Literal["data", "data_kind", "data_no_kind", "bare", "strings", "weird"]

#: The video and image models the fake lists first: the bot's defaults (GEN_VIDEO_MODEL, GEN_IMAGE_MODEL).
VIDEO_MODEL = "svc-video-v2.0"
IMAGE_MODEL = "svc-image-2.1-flash"
#: The route a video task is polled on (``GET /svcapi?video_id=...``).
POLL_PATH = "/svcapi"

_API_PATHS = ("/v1/videos", "/v1/images/generations", "/v1/models", POLL_PATH)


@dataclass
class TaskPlan:
    """How a fake task behaves.

    A task stays ``pending`` until both `duration` real seconds have passed since it was created
    and it has answered `polls` pending polls; then it ends with `outcome`.
    """

    duration: float = 0.0
    polls: int = 1
    outcome: Literal["completed", "failed"] = "completed"
    error: str | None = None  # the ``error`` field of a failed task (None: the field is omitted)
    omit_url: bool = False  # completed without ``video_url`` (a client must report it clearly)
    status: str | None = None  # answer every poll with this status string (e.g. an unknown one)
    reject_status: int | None = None  # refuse the create itself with this HTTP status...
    reject_message: str = "the request was rejected"  # ...and this message ({"error": {"message"}})


@dataclass
class FakeTask:
    """A task the fake created."""

    id: str
    kind: Literal["video", "image"]
    prompt: str
    body: dict[str, Any]
    plan: TaskPlan
    created: float  # time.monotonic()
    polls: int = 0  # pending polls answered so far
    state: str = "pending"
    key: str | None = field(default=None, repr=False)  # the key that created it (only it may poll it)

    @property
    def elapsed(self) -> float:
        """Real seconds since creation."""
        return time.monotonic() - self.created


@dataclass
class RecordedRequest:
    """One request as the fake received it."""

    method: str
    path: str
    query: dict[str, str]
    body: bytes
    json: Any  # the parsed JSON body, or None
    auth: Literal["ok", "wrong", "missing"]
    received: float  # time.monotonic() on arrival
    status: int | None = None  # the response status, once sent
    counted: bool = False  # whether it counted towards the rate-limit window
    #: The bearer token it carried (None: no Authorization header). Kept out of repr(): a failing
    #: assertion must not print a key into the test log.
    key: str | None = field(default=None, repr=False)

    @property
    def auth_ok(self) -> bool:
        """Whether it carried the right key."""
        return self.auth == "ok"


_PNG_CACHE: bytes | None = None
_MP4_CACHE: bytes | None = None


def tiny_png(width: int = 8, height: int = 8) -> bytes:
    """A real, valid RGB PNG built with zlib only (a fallback when PyAV media is unavailable)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return len(data).to_bytes(4, "big") + kind + data + crc.to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])  # 8-bit RGB
    raw = b"".join(
        b"\x00" + bytes(v for x in range(width) for v in (x * 30 % 256, y * 30 % 256, 128))
        for y in range(height)
    )  # each scanline: filter type 0, then RGB pixels
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _default_png() -> bytes:
    global _PNG_CACHE
    if _PNG_CACHE is None:
        try:
            from tests.fakes.media import make_png

            _PNG_CACHE = make_png(64, 64)
        except Exception:  # mediagen missing or PyAV broken: a zlib PNG still is a real PNG
            _PNG_CACHE = tiny_png(16, 16)
    return _PNG_CACHE


def _default_mp4() -> bytes:
    global _MP4_CACHE
    if _MP4_CACHE is None:
        try:
            from tests.fakes.media import make_mp4

            _MP4_CACHE = make_mp4(64, 64, 12, 12)
        except Exception:
            _MP4_CACHE = _pyav_mp4()
    return _MP4_CACHE


def _pyav_mp4(width: int = 64, height: int = 64, frames: int = 12, fps: int = 12) -> bytes:
    import io

    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast"}
        for i in range(frames):
            frame = av.VideoFrame(width, height, "yuv420p")
            for plane in frame.planes:
                plane.update(bytes([(i * 20 + 16) % 256]) * (plane.line_size * plane.height))
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(data).encode(), content_type="application/json", headers=headers
    )


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    return _json({"error": {"message": message, "type": kind}}, status=status)


class FakeService:
    """The fake service. Knobs (plain attributes, change them at any time):

    * ``api_key``: the key it accepts (``Authorization: Bearer <key>``; anything else: 401).
      ``api_keys``: more keys it accepts (other tenants, e.g. a server's own key). Each key has its
      own rate-limit window, and a task can only be polled with the key that created it (another
      key gets 404, as from a real multi-tenant service). :meth:`revoke` makes a key answer 401
      from then on. Every :class:`RecordedRequest` says which key it carried (``key``).
    * ``id_field``: ``"video_id"`` or ``"task_id"``: how create responses name the task id.
    * ``progress_shape``: how pending polls report progress: ``int`` (45), ``float`` (0.45),
      ``percent_str`` ("45%"), ``fraction_str`` ("0.45"), ``int_str`` ("45"), ``float_percent``
      (45.0), ``missing`` (no field), ``null``, ``garbage`` ("soon").
    * ``default_plan`` / ``plans``: how tasks behave (:class:`TaskPlan`); ``plans`` is a list of
      ``(substring, plan)``: the first whose substring occurs in the prompt wins.
    * ``image_shape``: the create-image response: ``data_url``, ``data_b64``, ``url``,
      ``image_url``, ``task`` (a task id to poll), ``weird`` (unrecognisable), ``bad_b64``.
    * ``image_poll_url_field``: where a completed image task's poll puts the URL (``image_url``).
    * ``models`` / ``models_shape``: the model list ((id, kind) pairs) and its JSON shape:
      ``data``, ``data_kind``, ``data_no_kind``, ``bare``, ``strings``, ``weird``.
      ``unknown_models``: whether a create naming a model not in ``models`` (for its kind) is
      refused 400 ``{"error": {"message": "The model `x` does not exist", "code": "model_not_found"}}``
      (default False: any model is accepted). :meth:`rename_model` renames one and turns this on.
    * ``rate_limit``: ``(N, window_seconds)`` or None: a sliding window per key over every
      authorised request (downloads of result URLs with the key included); over it, 429.
      ``retry_after``: the 429's ``Retry-After`` header (seconds or a string; None: no header).
      ``count_rejected``: whether 429'd requests count towards the window (default True).
    * ``fail_next`` / ``fail_status`` / ``fail_retry_after``: answer the next K API requests with
      that 5xx status (and optional ``Retry-After``).
    * ``malformed_next``: answer the next K API requests 200 with broken JSON.
    * ``scripted``: a list of ``(status, body, headers)`` answered, in order, to the next API
      requests (body: dict/list as JSON, str as text, bytes raw).
    * ``delay``: seconds to wait before answering every request; ``delays``: a list of per-request
      delays consumed first (one per request).
    * ``video_payload`` / ``image_payload``: bytes served at ``/files/<id>.mp4`` / ``.png``
      (default: real small MP4/PNG). ``file_status``: answer file requests with this status
      instead (404/410: expired link). ``file_chunked``: stream without Content-Length.
      ``file_stall``: seconds to stall after the first chunk (slow download).
      ``file_resets``: the next K file requests break off after their first chunk (the connection
      reset mid-download: a Content-Length is promised, half the bytes come, the socket closes).
      ``file_trickle``: ``(size, seconds)``: serve files `size` bytes at a time, one piece every
      `seconds`, the whole length promised (``(1, 0.3)``: a stalled result host; None: off).
      ``file_trickle_only``: trickle only the files of tasks whose prompt holds this text (None:
      every file).
    * ``result_base_url``: the base of result URLs (default: this fake; see ``alt_base_url`` for
      the same server under another host name, i.e. a "foreign" CDN origin).
    * ``result_url``: a result URL given verbatim (any scheme, host or path: ``file:///etc/passwd``,
      ``http://169.254.169.254/``...) in completed polls and inline image answers.
    * ``file_redirect``: answer file requests with a 302 to this ``Location``.
    * ``file_redirects``: ``Location`` values answered (302), one per file request, before
      ``file_redirect`` and the file itself: a chain of hops that ends somewhere.
    * ``file_gzip``: serve files gzip-compressed (``Content-Encoding: gzip``), e.g. a bomb.
      ``file_encoding``: the codings applied then, in order, and named in the header (``"gzip,
      gzip"``, ``"deflate"``...; one it cannot apply, such as ``br``, is only named).
    * ``path_scripted``: like ``scripted``, per path (``"/svcapi"``, ``"/v1/videos"``, ...), so a
      hostile poll answer is not eaten by a model-list refresh; consumed before ``scripted``.
    * ``max_running``: a concurrency cap K (None: none). A create (video, or image answered as a
      task) is refused with 429 while the key already has K tasks running (created, not yet
      finished on the service: its duration has not elapsed or it still owes pending polls);
      polls, downloads and model lists are answered as usual. The refusal's body is
      ``{"error": {"message": max_running_message, "type": max_running_type}}`` (the message may
      hold ``{limit}``), with ``max_running_retry_after`` as ``Retry-After`` (None: no header).
      Set the message to ``"Rate limit exceeded"`` to make it look like a rate refusal.
    * ``drop_next``: the next K API requests are counted and answered, then their connection is
      cut before the answer leaves (a service restarting mid-burst): the client never hears of them.
    * ``before_answer``: awaited with each request's record once its answer is ready and before it
      is sent (None: nothing), so a test can make something happen between the service's work and
      the bot hearing of it (a database cut while a create's answer is on its way).
    """

    def __init__(self, *, api_key: str | None = None, host: str = "127.0.0.1") -> None:
        self.api_key = api_key or f"fake-key-{secrets.token_hex(8)}"
        self.api_keys: set[str] = set()
        self.revoked: set[str] = set()
        self.host = host
        self.id_field: Literal["video_id", "task_id"] = "video_id"
        self.progress_shape: ProgressShape = "int"
        self.default_plan = TaskPlan()
        self.plans: list[tuple[str, TaskPlan]] = []
        self.image_shape: ImageShape = "data_url"
        self.image_poll_url_field = "image_url"
        self.models: list[tuple[str, str]] = [
            (VIDEO_MODEL, "video"),
            (IMAGE_MODEL, "image"),
            ("svc-text-1.5", "text"),
        ]
        self.models_shape: ModelsShape = "data"
        self.unknown_models = False
        self.rate_limit: tuple[int, float] | None = None
        self.retry_after: float | str | None = None
        self.count_rejected = True
        self.fail_next = 0
        self.drop_next = 0
        self.fail_status = 503
        self.fail_retry_after: str | None = None
        self.malformed_next = 0
        self.scripted: list[tuple[int, Any, dict[str, str] | None]] = []
        self.delay = 0.0
        self.delays: list[float] = []
        self.video_payload: bytes | None = None
        self.image_payload: bytes | None = None
        self.file_status: int | None = None
        self.file_chunked = False
        self.file_stall = 0.0
        self.file_resets = 0
        self.file_trickle: tuple[int, float] | None = None
        self.file_trickle_only: str | None = None
        self.result_base_url: str | None = None
        self.result_url: str | None = None
        self.file_redirect: str | None = None
        self.file_redirects: list[str] = []
        self.file_gzip = False
        self.file_encoding = "gzip"
        self.path_scripted: dict[str, list[tuple[int, Any, dict[str, str] | None]]] = {}
        self.max_running: int | None = None
        self.max_running_message = "too many tasks are running for this key"
        self.max_running_type = "concurrency_limit_exceeded"
        self.max_running_retry_after: str | None = None
        self.before_answer: Callable[[RecordedRequest], Awaitable[None]] | None = None

        self.requests: list[RecordedRequest] = []
        self.tasks: dict[str, FakeTask] = {}
        self._windows: dict[str, deque[float]] = {}
        self._ids = itertools.count(1)
        self._prefix = secrets.token_hex(2)
        self._cond: asyncio.Condition | None = None
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on an ephemeral port of 127.0.0.1."""
        self._cond = asyncio.Condition()
        app = web.Application(middlewares=[self._middleware], client_max_size=16 * 1024 * 1024)
        app.router.add_post("/v1/videos", self._create_video)
        app.router.add_get(POLL_PATH, self._poll)
        app.router.add_post("/v1/images/generations", self._create_image)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/files/{name}", self._file)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.25)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        sockname = self._runner.addresses[0]
        self._port = int(sockname[1])

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        """The port it listens on."""
        if self._port is None:
            raise RuntimeError("the fake service is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{self.host}:{self.port}"

    @property
    def alt_base_url(self) -> str:
        """The same server under the host name ``localhost``: a different origin for a client."""
        return f"http://localhost:{self.port}"

    # -- payloads -------------------------------------------------------------------------------
    def video_bytes(self) -> bytes:
        """What ``/files/<id>.mp4`` serves."""
        return self.video_payload if self.video_payload is not None else _default_mp4()

    def image_bytes(self) -> bytes:
        """What ``/files/<id>.png`` serves."""
        return self.image_payload if self.image_payload is not None else _default_png()

    # -- inspection -----------------------------------------------------------------------------
    def accepts(self, key: str | None) -> bool:
        """Whether `key` is accepted now (``api_key`` or one of ``api_keys``, and not revoked)."""
        return key is not None and key not in self.revoked and (key == self.api_key or key in self.api_keys)

    def revoke(self, key: str) -> None:
        """From now on, requests carrying `key` get 401 (the service withdrew it)."""
        self.revoked.add(key)

    def count(
        self,
        status: int | None = None,
        *,
        path: str | None = None,
        method: str | None = None,
        key: str | None = None,
    ) -> int:
        """How many recorded requests match (all of the given filters; `key`: the key carried)."""
        return sum(
            1
            for r in self.requests
            if (status is None or r.status == status)
            and (path is None or r.path == path)
            and (method is None or r.method == method)
            and (key is None or r.key == key)
        )

    def max_in_window(
        self, window: float | None = None, *, only_authorised: bool = True, key: str | None = None
    ) -> int:
        """The most requests received in any rolling window of `window` real seconds.

        `window` defaults to the rate limit's window. Counts authorised requests only, unless told;
        with `key`, only the requests that carried that key.
        """
        if window is None:
            if self.rate_limit is None:
                raise ValueError("give a window or set rate_limit")
            window = self.rate_limit[1]
        times = sorted(
            r.received
            for r in self.requests
            if (r.auth_ok or not only_authorised) and (key is None or r.key == key)
        )
        best = 0
        lo = 0
        for hi, t in enumerate(times):
            while times[lo] <= t - window:
                lo += 1
            best = max(best, hi - lo + 1)
        return best

    def rename_model(self, old: str, new: str) -> None:
        """The service renames model `old` to `new` (same kind) and refuses `old` from now on."""
        self.models = [(new if model == old else model, kind) for model, kind in self.models]
        self.unknown_models = True

    def _unknown_model(self, body: dict[str, Any], kind: str) -> web.Response | None:
        if not self.unknown_models or (body["model"], kind) in self.models:
            return None
        message = f"The model `{body['model']}` does not exist"
        return _json(
            {"error": {"message": message, "type": "invalid_request_error", "code": "model_not_found"}}, 400
        )

    def running(self, key: str | None) -> int:
        """Tasks of `key` still running on the service (what ``max_running`` counts)."""
        return sum(
            1
            for t in self.tasks.values()
            if t.key == key
            and t.state == "pending"
            and (t.elapsed < t.plan.duration or t.polls < t.plan.polls)
            and t.plan.status is None
        )

    def _over_cap(self, request: web.Request) -> web.Response | None:
        """The 429 of a create while the key runs ``max_running`` tasks (None: room, or no cap)."""
        if self.max_running is None or self.running(_bearer(request)) < self.max_running:
            return None
        extra = (
            None if self.max_running_retry_after is None else {"Retry-After": self.max_running_retry_after}
        )
        message = self.max_running_message.replace("{limit}", str(self.max_running))
        return _json({"error": {"message": message, "type": self.max_running_type}}, 429, extra)

    def plan_for(self, prompt: str) -> TaskPlan:
        """The plan a task with this prompt gets."""
        for needle, plan in self.plans:
            if needle in prompt:
                return plan
        return self.default_plan

    def clear(self) -> None:
        """Forget recorded requests and the rate-limit windows (tasks are kept)."""
        self.requests.clear()
        self._windows.clear()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Wait until `predicate()` is true; re-checked on every recorded request and response."""
        assert self._cond is not None, "start() first"
        async with self._cond:
            try:
                await asyncio.wait_for(self._cond.wait_for(predicate), timeout)
            except TimeoutError:
                raise TimeoutError(f"fake service: condition not met within {timeout:g} s") from None

    async def _notify(self) -> None:
        if self._cond is not None:
            async with self._cond:
                self._cond.notify_all()

    # -- request pipeline -----------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        received = time.monotonic()
        body = await request.read()
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        header = request.headers.get("Authorization")
        key = header.removeprefix("Bearer ") if header is not None and header.startswith("Bearer ") else None
        auth: Literal["ok", "wrong", "missing"]
        if header is None:
            auth = "missing"
        elif self.accepts(key):
            auth = "ok"
        else:
            auth = "wrong"
        record = RecordedRequest(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            body=body,
            json=parsed,
            auth=auth,
            received=received,
            key=key if header is not None else None,
        )
        self.requests.append(record)
        await self._notify()
        try:
            response = await self._respond(request, handler, record)
        except web.HTTPException as exc:
            record.status = exc.status
            await self._notify()
            raise
        record.status = response.status
        if self.before_answer is not None:
            await self.before_answer(record)
        if self.drop_next > 0 and request.path in _API_PATHS and request.transport is not None:
            self.drop_next -= 1
            request.transport.abort()
        await self._notify()
        return response

    async def _respond(
        self, request: web.Request, handler: Callable[..., Any], record: RecordedRequest
    ) -> web.StreamResponse:
        delay = self.delays.pop(0) if self.delays else self.delay
        if delay > 0:
            await asyncio.sleep(delay)
        is_file = request.path.startswith("/files/")
        if record.auth == "wrong" or (record.auth == "missing" and not is_file):
            return _error(401, "Invalid or missing API key", "authentication_error")
        if record.auth == "ok" and self.rate_limit is not None:
            limit, window = self.rate_limit
            # One window per key: the service limits each key (tenant) on its own.
            slots = self._windows.setdefault(record.key or "", deque())
            while slots and slots[0] <= record.received - window:
                slots.popleft()
            if len(slots) >= limit:
                if self.count_rejected:
                    slots.append(record.received)
                    record.counted = True
                limited = {} if self.retry_after is None else {"Retry-After": _header_value(self.retry_after)}
                return _json(
                    {"error": {"message": "Rate limit exceeded", "type": "rate_limit_error"}},
                    status=429,
                    headers=limited,
                )
            slots.append(record.received)
            record.counted = True
        if not is_file and request.path in _API_PATHS:
            queued = self.path_scripted.get(request.path)
            if queued:
                status, payload, extra = queued.pop(0)
                return _scripted_response(status, payload, extra)
            if self.scripted:
                status, payload, extra = self.scripted.pop(0)
                return _scripted_response(status, payload, extra)
            if self.fail_next > 0:
                self.fail_next -= 1
                transient = {"Retry-After": self.fail_retry_after} if self.fail_retry_after else None
                return _json(
                    {"error": {"message": "upstream trouble"}}, status=self.fail_status, headers=transient
                )
            if self.malformed_next > 0:
                self.malformed_next -= 1
                return web.Response(status=200, body=b'{"status": "pend', content_type="application/json")
        return await handler(request)

    # -- handlers -------------------------------------------------------------------------------
    def _new_id(self, kind: str) -> str:
        return f"{kind[0]}{self._prefix}{next(self._ids):05d}"

    def _result_url(self, task: FakeTask) -> str:
        if self.result_url is not None:
            return self.result_url
        base = self.result_base_url or self.base_url
        ext = "mp4" if task.kind == "video" else "png"
        return f"{base.rstrip('/')}/files/{task.id}.{ext}"

    async def _create_video(self, request: web.Request) -> web.StreamResponse:
        body = _json_body(request, await request.read())
        if body is None:
            return _error(400, "the request body must be a JSON object")
        problem = _check_fields(
            body, {"model": str, "prompt": str}, ("width", "height", "num_frames", "frame_rate")
        )
        if problem:
            return _error(400, problem)
        if (refused := self._unknown_model(body, "video")) is not None:
            return refused
        plan = self.plan_for(body["prompt"])
        if plan.reject_status is not None:
            return _error(plan.reject_status, plan.reject_message)
        if (capped := self._over_cap(request)) is not None:
            return capped
        task = FakeTask(
            self._new_id("video"), "video", body["prompt"], body, plan, time.monotonic(), key=_bearer(request)
        )
        self.tasks[task.id] = task
        return _json({self.id_field: task.id})

    async def _create_image(self, request: web.Request) -> web.StreamResponse:
        body = _json_body(request, await request.read())
        if body is None:
            return _error(400, "the request body must be a JSON object")
        problem = _check_fields(body, {"model": str, "prompt": str, "size": str}, ())
        if problem:
            return _error(400, problem)
        if (refused := self._unknown_model(body, "image")) is not None:
            return refused
        plan = self.plan_for(body["prompt"])
        if plan.reject_status is not None:
            return _error(plan.reject_status, plan.reject_message)
        if self.image_shape == "task" and (capped := self._over_cap(request)) is not None:
            return capped
        task = FakeTask(
            self._new_id("image"), "image", body["prompt"], body, plan, time.monotonic(), key=_bearer(request)
        )
        self.tasks[task.id] = task
        shape = self.image_shape
        if shape != "task":
            task.state = "completed"  # answered inline
        created = int(time.time())
        if shape == "data_url":
            return _json({"created": created, "data": [{"url": self._result_url(task)}]})
        if shape == "data_b64":
            b64 = base64.b64encode(self.image_bytes()).decode()
            return _json({"created": created, "data": [{"b64_json": b64}]})
        if shape == "bad_b64":
            return _json({"created": created, "data": [{"b64_json": "!!not*base64!!"}]})
        if shape == "url":
            return _json({"url": self._result_url(task)})
        if shape == "image_url":
            return _json({"image_url": self._result_url(task)})
        if shape == "task":
            return _json({self.id_field: task.id, "status": "pending"})
        return _json({"result": "ok", "created": created})

    async def _poll(self, request: web.Request) -> web.StreamResponse:
        task_id = request.query.get("video_id")
        if not task_id:
            return _error(400, "missing video_id")
        task = self.tasks.get(task_id)
        if task is None or (task.key is not None and task.key != _bearer(request)):
            # Another tenant's task does not exist for this key.
            return _error(404, f"unknown video_id {task_id}")
        plan = task.plan
        if task.state == "pending" and task.elapsed >= plan.duration and task.polls >= plan.polls:
            task.state = plan.outcome
        out: dict[str, Any] = {"status": plan.status or task.state}
        if task.state == "pending":
            task.polls += 1
            self._put_progress(out, task)
        elif task.state == "completed":
            self._put_progress(out, task, done=True)
            if not plan.omit_url:
                field_name = "video_url" if task.kind == "video" else self.image_poll_url_field
                out[field_name] = self._result_url(task)
        else:
            if plan.error is not None:
                out["error"] = plan.error
        return _json(out)

    def _put_progress(self, out: dict[str, Any], task: FakeTask, *, done: bool = False) -> None:
        plan = task.plan
        if done:
            fraction = 1.0
        else:
            parts = []
            if plan.duration > 0:
                parts.append(task.elapsed / plan.duration)
            if plan.polls > 0:
                parts.append(task.polls / (plan.polls + 1))
            fraction = min(parts) if parts else 0.5
            fraction = min(0.99, max(0.0, fraction))
        percent = round(fraction * 100)
        shape = self.progress_shape
        if shape == "missing":
            return
        value: Any
        if shape == "int":
            value = percent
        elif shape == "float":
            value = round(fraction, 4)
        elif shape == "percent_str":
            value = f"{percent}%"
        elif shape == "fraction_str":
            value = f"{fraction:.2f}"
        elif shape == "int_str":
            value = str(percent)
        elif shape == "float_percent":
            value = float(percent) + 0.5 if 1 < percent < 99 else float(max(percent, 2))
        elif shape == "null":
            value = None
        else:
            value = "soon"
        out["progress"] = value

    async def _models(self, request: web.Request) -> web.StreamResponse:
        shape = self.models_shape
        if shape == "data":
            return _json(
                {"object": "list", "data": [{"id": m, "object": "model", "type": k} for m, k in self.models]}
            )
        if shape == "data_kind":
            return _json({"data": [{"id": m, "kind": k, "owned_by": "svc"} for m, k in self.models]})
        if shape == "data_no_kind":
            return _json({"data": [{"id": m} for m, _ in self.models]})
        if shape == "bare":
            return _json([{"id": m, "type": k} for m, k in self.models])
        if shape == "strings":
            return _json([m for m, _ in self.models])
        return _json({"models": len(self.models)})

    def _trickles(self, name: str) -> bool:
        """Whether the file `name` is trickled (see ``file_trickle_only``)."""
        if self.file_trickle_only is None:
            return True
        task = self.tasks.get(name.split(".")[0])
        return task is not None and self.file_trickle_only in task.prompt

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if self.file_status is not None:
            return _error(self.file_status, "this link has expired")
        if self.file_redirects:
            return web.Response(status=302, headers={"Location": self.file_redirects.pop(0)})
        if self.file_redirect is not None:
            return web.Response(status=302, headers={"Location": self.file_redirect})
        name = request.match_info["name"]
        if name.endswith(".mp4"):
            payload, mime = self.video_bytes(), "video/mp4"
        elif name.endswith(".png"):
            payload, mime = self.image_bytes(), "image/png"
        else:
            return _error(404, "no such file")
        if self.file_gzip:
            for coding in self.file_encoding.split(","):
                if coding.strip() == "gzip":
                    payload = gzip.compress(payload, 9)
                elif coding.strip() == "deflate":
                    payload = zlib.compress(payload, 9)
            return web.Response(
                body=payload, content_type=mime, headers={"Content-Encoding": self.file_encoding}
            )
        if self.file_resets > 0:
            self.file_resets -= 1
            return await _broken_off(request, payload, mime)
        if self.file_trickle is not None and self._trickles(name):
            return await _trickled(request, payload, mime, *self.file_trickle)
        if not self.file_chunked and self.file_stall <= 0:
            return web.Response(body=payload, content_type=mime)
        response = web.StreamResponse(headers={"Content-Type": mime})
        if not self.file_chunked:
            response.content_length = len(payload)
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        step = 64 * 1024
        for offset in range(0, len(payload), step):
            await response.write(payload[offset : offset + step])
            if offset == 0 and self.file_stall > 0:
                await asyncio.sleep(self.file_stall)
        await response.write_eof()
        return response


async def _trickled(
    request: web.Request, payload: bytes, mime: str, size: int, every: float
) -> web.StreamResponse:
    """A result host that sends `size` bytes every `every` seconds, the full length promised, until
    the whole file is sent or the client goes away."""
    response = web.StreamResponse(headers={"Content-Type": mime})
    response.content_length = len(payload)
    await response.prepare(request)
    try:
        for offset in range(0, len(payload), size):
            await response.write(payload[offset : offset + size])
            await asyncio.sleep(every)
        await response.write_eof()
    except ConnectionError:
        pass  # the client gave up on it
    return response


async def _broken_off(request: web.Request, payload: bytes, mime: str) -> web.StreamResponse:
    """A download whose connection is reset half-way: the full length promised, half of it sent."""
    response = web.StreamResponse(headers={"Content-Type": mime})
    response.content_length = len(payload)
    await response.prepare(request)
    await response.write(payload[: max(1, len(payload) // 2)])
    transport = request.transport
    if transport is not None:
        transport.abort()
    return response


def _bearer(request: web.Request) -> str | None:
    """The bearer token a request carried (None: none)."""
    header = request.headers.get("Authorization", "")
    return header.removeprefix("Bearer ") if header.startswith("Bearer ") else None


def _header_value(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _scripted_response(status: int, payload: Any, headers: dict[str, str] | None) -> web.Response:
    if isinstance(payload, bytes):
        return web.Response(status=status, body=payload, headers=headers, content_type="application/json")
    if isinstance(payload, str):
        return web.Response(status=status, text=payload, headers=headers)
    return _json(payload, status=status, headers=headers)


def _json_body(request: web.Request, raw: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _check_fields(body: dict[str, Any], strings: dict[str, type], ints: tuple[str, ...]) -> str | None:
    for name in strings:
        value = body.get(name)
        if not isinstance(value, str) or not value.strip():
            return f"'{name}' is required and must be a non-empty string"
    for name in ints:
        value = body.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            return f"'{name}' is required and must be a positive integer"
    return None
