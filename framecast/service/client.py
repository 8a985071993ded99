"""The generation-service client: the operations of ``SERVICE_API.md`` on top of the transport.

Create, poll and wait for tasks, list models, download results. The requests themselves (budget,
retries, caps, error mapping) are :class:`~framecast.service.transport.Transport`'s; result
downloads are :class:`~framecast.service.download.ResultFetcher`'s; answers are read by the pure
functions of :mod:`framecast.service.parsing`.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp.abc import AbstractResolver

from framecast.backoff import Backoff
from framecast.clock import Clock
from framecast.config import GEN_IMAGE_JSON_MAX_BYTES, GEN_JSON_MAX_BYTES, Secret
from framecast.ops.metrics import OPERATOR_KEY, Metrics
from framecast.safetext import clean_text
from framecast.service.budget import Budget
from framecast.service.download import ResultFetcher
from framecast.service.errors import (
    BadResponse,
    RateLimited,
    RequestRejected,
    ServiceError,
    ServiceUnavailable,
    TaskFailed,
    TaskTimedOut,
    UnreadableAnswer,
    refused_model,
)
from framecast.service.outage import ServiceOutage
from framecast.service.parsing import (
    parse_image_answer,
    parse_model_list,
    parse_poll,
    parse_task_id,
    type_name,
)
from framecast.service.transport import Gate, Transport
from framecast.service.types import (
    ImageParams,
    ImageResult,
    ModelCatalog,
    PollPacer,
    ProgressCallback,
    TaskStatus,
    VideoParams,
)
from framecast.values.service_requests import Priority, RequestKind

if TYPE_CHECKING:
    from framecast.config import Settings

__all__ = ["GenerationClient"]

log = logging.getLogger(__name__)

_REASON_MAX = 500  # a failed task's reason (stored with the job, shown to its member)


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
    unreadable poll answers in a row end a wait, and how many unreadable answers end a create.
    `resolver` is the DNS resolver behind the guard for foreign hosts (default: the system's).

    Every request is counted in `metrics` (None: not recorded) by what it was for and its status;
    `key_label` names the key there (:func:`~framecast.ops.metrics.key_label`, never the key).
    Whether the service answers at all is `outage`'s to track, one for every key's client (None:
    this client's own).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        base_url: str,
        api_key: Secret,
        budget: Budget,
        clock: Clock,
        request_timeout: float = 60,
        retry_max: int = 6,
        backoff_base: float = 2,
        backoff_max: float = 120,
        rng: random.Random | None = None,
        json_max_bytes: int = GEN_JSON_MAX_BYTES,
        image_json_max_bytes: int = GEN_IMAGE_JSON_MAX_BYTES,
        result_hosts: Iterable[str] = (),
        max_redirects: int = 3,
        malformed_polls: int = 3,
        resolver: AbstractResolver | None = None,
        metrics: Metrics | None = None,
        key_label: str = OPERATOR_KEY,
        outage: ServiceOutage | None = None,
    ) -> None:
        if not isinstance(api_key, Secret):
            raise TypeError("api_key must be a Secret")
        if retry_max < 1 or malformed_polls < 1:
            raise ValueError("retry_max and malformed_polls must be >= 1")
        if max_redirects < 0 or json_max_bytes < 1 or image_json_max_bytes < 1:
            raise ValueError("max_redirects must be >= 0 and the answer caps >= 1")
        if backoff_base <= 0 or backoff_max <= 0:
            raise ValueError("backoff_base and backoff_max must be > 0")
        self._base_url = base_url.rstrip("/")
        self._budget = budget
        self._clock = clock
        self._image_json_max_bytes = int(image_json_max_bytes)
        self._malformed_polls = int(malformed_polls)
        self._backoff_base, self._backoff_max = backoff_base, backoff_max
        self._rng = rng or random.Random()
        self._transport = Transport(
            session,
            base_url=self._base_url,
            api_key=api_key,
            budget=budget,
            clock=clock,
            request_timeout=request_timeout,
            retry_max=retry_max,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            rng=self._rng,
            json_max_bytes=json_max_bytes,
            metrics=metrics,
            key_label=key_label,
            outage=outage,
        )
        self._results = ResultFetcher(
            self._transport, result_hosts=result_hosts, max_redirects=max_redirects, resolver=resolver
        )
        self._progress_warned: OrderedDict[str, None] = OrderedDict()

    @classmethod
    def from_settings(
        cls,
        session: aiohttp.ClientSession,
        settings: Settings,
        budget: Budget,
        clock: Clock,
        *,
        metrics: Metrics | None = None,
        key_label: str = OPERATOR_KEY,
        outage: ServiceOutage | None = None,
    ) -> GenerationClient:
        """A client configured from :class:`~framecast.config.Settings` (the key: ``gen_api_key``)."""
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
            metrics=metrics,
            key_label=key_label,
            outage=outage,
        )

    def __repr__(self) -> str:
        return f"<GenerationClient base_url={self._base_url!r}>"

    @property
    def base_url(self) -> str:
        """The service's base URL (no trailing slash)."""
        return self._base_url

    @property
    def budget(self) -> Budget:
        """The request budget every call goes through."""
        return self._budget

    @property
    def service_down(self) -> bool:
        """Whether the service does not answer now (its outage is logged once, as it starts and ends):
        what fails meanwhile for that reason needs no warning of its own."""
        return self._transport.outage.down

    def reveals_key(self, text: str) -> bool:
        """Whether `text` carries this client's API key (raw or percent-encoded): a result link that
        does must never be shown to anyone."""
        return self._transport.reveals_key(text)

    async def close(self) -> None:
        """Close what this client opened itself (the session for foreign result hosts).

        The shared session given to the constructor is the caller's to close. Safe to call twice.
        """
        await self._results.close()

    # -- operations -----------------------------------------------------------------------------
    async def create_video(
        self, params: VideoParams, *, priority: Priority | int = Priority.NORMAL, gate: Gate | None = None
    ) -> str:
        """Create a video task (``POST /v1/videos``) and return its id.

        `gate` is awaited after each attempt's budget grant, right before the request (its
        exceptions propagate: the runner's lease check).

        An unreadable answer is sent again (:meth:`_create`); one of a shape it cannot use raises
        :class:`BadResponse` (again, it would likely start a second task for nothing). A refusal
        naming an unknown model raises :class:`~framecast.service.errors.UnknownModel`.
        """
        body = {
            "model": params.model,
            "prompt": params.prompt,
            "width": params.width,
            "height": params.height,
            "num_frames": params.num_frames,
            "frame_rate": params.frame_rate,
        }
        try:
            data = await self._create(
                "/v1/videos",
                body,
                what="create video",
                kind=RequestKind.CREATE_VIDEO,
                priority=priority,
                gate=gate,
            )
        except RequestRejected as exc:
            raise refused_model(exc, params.model) from None
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
        pacer: PollPacer | None = None,
        before_poll: Callable[[], Awaitable[None]] | None = None,
    ) -> TaskStatus:
        """Poll a video task every `interval` seconds until it ends; return the completed status.

        With a `pacer` (the key's planner), the pacer decides when each poll is sent and at which
        budget priority; without one, polls come every `interval` at high priority.

        The deadline is `timeout` seconds after `started_at` (the wall-clock time the task was
        created, ``clock.time()``; default now), so a restarted bot keeps the original deadline.
        The first poll comes one interval after `started_at`. `on_progress` is awaited after every
        pending poll (its exceptions propagate). A poll that fails transiently (the service
        unavailable or rate limiting after the client's own retries) does not end the wait, nor
        does an unreadable answer (too big, not JSON, too deep, of the wrong shape), which is not
        retried at once but polled again next interval: only ``malformed_polls`` of them in a
        row raise :class:`BadResponse`. Raises :class:`TaskFailed` or :class:`TaskTimedOut`.
        `before_poll` is awaited right before each poll is sent, after its budget grant (its
        exceptions propagate: the runner's lease check stops a process that lost the job, even
        after a long wait for the slot, before the request goes out).
        """
        return await self._wait(
            task_id, "video", interval, timeout, started_at, on_progress, pacer, before_poll
        )

    async def wait_image(
        self,
        task_id: str,
        *,
        interval: float,
        timeout: float,  # noqa: ASYNC109 -- a poll deadline in clock seconds, part of the contract
        started_at: float | None = None,
        on_progress: ProgressCallback | None = None,
        pacer: PollPacer | None = None,
        before_poll: Callable[[], Awaitable[None]] | None = None,
    ) -> TaskStatus:
        """Like :meth:`wait_video`, for an image task returned by :meth:`create_image`.

        The result URL may be in ``image_url``, ``url``, ``video_url``, ``result_url`` or
        ``data[0].url``.
        """
        return await self._wait(
            task_id, "image", interval, timeout, started_at, on_progress, pacer, before_poll
        )

    async def create_image(
        self, params: ImageParams, *, priority: Priority | int = Priority.NORMAL, gate: Gate | None = None
    ) -> ImageResult:
        """Create an image (``POST /v1/images/generations``).

        The response shape is not specified; see :func:`parse_image_answer`. The answer may be up
        to ``image_json_max_bytes`` (an inline base64 image). Raises :class:`TaskFailed` when the
        service says the image failed, :class:`BadResponse` for an answer it cannot use (an
        unreadable one is sent again first, as for :meth:`create_video`),
        :class:`~framecast.service.errors.UnknownModel` for a refusal naming an unknown model.
        `gate`: as for :meth:`create_video`.
        """
        body = {"model": params.model, "prompt": params.prompt, "size": params.size}
        try:
            data = await self._create(
                "/v1/images/generations",
                body,
                what="create image",
                kind=RequestKind.CREATE_IMAGE,
                priority=priority,
                gate=gate,
                max_bytes=self._image_json_max_bytes,
            )
        except RequestRejected as exc:
            raise refused_model(exc, params.model) from None
        try:
            return parse_image_answer(data, base_url=self._base_url)
        except TaskFailed as exc:
            raise TaskFailed(self._transport.shown(exc.reason, _REASON_MAX)) from None

    async def _create(
        self,
        path: str,
        body: dict[str, Any],
        *,
        what: str,
        kind: RequestKind,
        priority: Priority | int,
        gate: Gate | None,
        max_bytes: int | None = None,
    ) -> Any:
        """The JSON answer to a create POSTed to `path`, sent again after an unreadable one (cut off,
        not JSON, over its cap), up to ``malformed_polls`` unreadable answers in a row, as for a poll.
        Such an answer may have started a task the bot cannot name, and so may a create whose answer
        was lost on the way (retried by the transport): the service may run an extra task, the
        member gets the file."""
        streak = _Unreadable(what, self._malformed_polls, then="sending it again after a backoff")
        # Paced as the transport paces a 5xx: a garbled blip of a few milliseconds must not use up
        # every try at once.
        backoff = Backoff(base=self._backoff_base, cap=self._backoff_max, rng=self._rng)
        while True:
            try:
                return await self._transport.request_json(
                    "POST",
                    path,
                    json_body=body,
                    priority=priority,
                    what=what,
                    kind=kind,
                    max_bytes=max_bytes,
                    gate=gate,
                )
            except UnreadableAnswer as exc:
                streak.seen(exc)
                await self._clock.sleep(backoff.next())

    async def list_models(self, *, priority: Priority | int = Priority.LOW) -> ModelCatalog:
        """List the service's models (``GET /v1/models``), grouped into video, image and text."""
        data = await self._transport.request_json(
            "GET", "/v1/models", priority=priority, what="list models", kind=RequestKind.MODELS
        )
        catalog, skipped = parse_model_list(data)
        if skipped:
            log.warning("list models: skipped %d entries without a usable model id", skipped)
        # Ids are shown to every member (/models, autocomplete, refusals): never one naming a key.
        kept = ModelCatalog(
            *(
                tuple(model for model in ids if not self._transport.reveals_key(model))
                for ids in (catalog.video, catalog.image, catalog.text, catalog.other)
            )
        )
        if kept != catalog:
            log.warning(
                "list models: left out %d ids that carry an API key", len(catalog.all()) - len(kept.all())
            )
        return kept

    async def download(
        self,
        url: str,
        *,
        max_bytes: int,
        timeout: float,  # noqa: ASYNC109 -- passed to aiohttp as each request's total timeout
        priority: Priority | int = Priority.HIGH,
        gate: Gate | None = None,
    ) -> bytes:
        """Fetch a result URL, streaming, at most `max_bytes` bytes (after decompression).

        Only ``http(s)``. The service's own origin gets the key and goes through the budget; any
        other host gets neither, and is fetched only when it is in ``result_hosts`` or resolves
        to public addresses (checked where the connection is made). Redirects are followed by
        hand, at most ``max_redirects``, each checked like the first URL. Each request has
        `timeout` real seconds. Raises :class:`UnsafeResultURL` for a refused link (its message
        says why, never the URL), :class:`DownloadTooLarge` past the cap and
        :class:`DownloadError` for a dead or expired link (403/404/410), a timeout, broken
        compression, or a failure that persists after retries. `gate`: as for :meth:`create_video`
        (before every request, redirects included).
        """
        return await self._results.download(
            url, max_bytes=max_bytes, timeout=timeout, priority=priority, gate=gate
        )

    # -- polling ------------------------------------------------------------------------------------
    async def _poll(
        self, task_id: str, *, kind: str, priority: Priority | int, gate: Gate | None = None
    ) -> TaskStatus:
        what = f"poll task {task_id}"
        # One attempt: a failed poll is asked again by the wait loop an interval later, never
        # sooner, so no task is polled faster than the interval whatever the service does.
        data = await self._transport.request_json(
            "GET",
            "/svcapi",
            params={"video_id": task_id},
            priority=priority,
            what=what,
            kind=RequestKind.POLL,
            attempts=1,
            gate=gate,
        )
        try:
            status = parse_poll(data, kind=kind, base_url=self._base_url, task_id=task_id)
        except BadResponse as exc:
            raise BadResponse(f"{what}: {exc.message.removeprefix('poll: ')}") from None
        if status.progress is None and isinstance(data, dict) and data.get("progress") is not None:
            self._warn_progress(task_id, data["progress"])
        if status.error is not None:
            status = replace(status, error=self._transport.shown(status.error, _REASON_MAX))
        return status

    def _warn_progress(self, task_id: str, raw: object) -> None:
        if task_id in self._progress_warned:
            return
        self._progress_warned[task_id] = None
        if len(self._progress_warned) > 1000:  # a long-running bot must not grow this forever
            self._progress_warned.popitem(last=False)
        shown = clean_text(raw if isinstance(raw, str) else type_name(raw), 60)
        log.warning("task %s: unreadable progress %r; showing it as unknown", task_id, shown)

    async def _wait(
        self,
        task_id: str,
        kind: str,
        interval: float,
        timeout: float,  # noqa: ASYNC109
        started_at: float | None,
        on_progress: ProgressCallback | None,
        pacer: PollPacer | None,
        before_poll: Callable[[], Awaitable[None]] | None = None,
    ) -> TaskStatus:
        if interval <= 0 or timeout <= 0:
            raise ValueError("interval and timeout must be > 0")
        now_wall = self._clock.time()
        elapsed = max(0.0, now_wall - started_at) if started_at is not None else 0.0
        start = self._clock.monotonic()
        deadline = start + max(0.0, timeout - elapsed)
        if pacer is None:
            pacer = FixedPacer(interval, first=start + max(0.0, interval - elapsed))
        last_poll: float | None = None
        last_problem: ServiceError | None = None
        streak = _Unreadable(f"task {task_id}", self._malformed_polls, then="will poll again")
        while True:
            when, priority = pacer.next_poll(self._clock.monotonic(), last_poll)
            delay = min(when, deadline) - self._clock.monotonic()
            if delay > interval:
                # A far poll is planned from what was known then: ask the pacer again an interval
                # on (what the planner learned meanwhile may bring it sooner; never sooner than
                # an interval after the last poll, which the pacer keeps).
                await self._clock.sleep(interval)
                continue
            if delay > 0:
                await self._clock.sleep(delay)
            polled_at = self._clock.monotonic()
            status: TaskStatus | None = None
            try:
                status = await self._poll(task_id, kind=kind, priority=priority, gate=before_poll)
            except BadResponse as exc:
                # One garbled answer says little about the task: ask again next interval, and
                # give up only when the service keeps answering nonsense.
                last_problem = exc
                streak.seen(exc)
            except (ServiceUnavailable, RateLimited) as exc:
                # A long task must not fail because one poll met a bad minute: keep going until
                # the deadline. While the service is out, its one WARNING says why (not one per poll).
                last_problem = exc
                say = log.debug if self.service_down else log.warning
                say("task %s: poll failed (%s); will poll again", task_id, exc)
            # Measured from the answer, not the plan: a poll that waited for the budget still keeps
            # the next one a whole interval away at the service.
            last_poll = self._clock.monotonic()
            pacer.observed(status)
            if status is not None:
                last_problem = None
                streak.count = 0
                if status.state == "completed":
                    return status
                if status.state == "failed":
                    raise TaskFailed(status.error, task_id=task_id)
                if on_progress is not None:
                    await on_progress(status)
            now = self._clock.monotonic()
            if now >= deadline and polled_at < deadline - 1e-3:
                # The deadline passed while this side waited (its store out under `on_progress`):
                # the task is given up only on a poll sent at or after it, an interval after this one.
                deadline = max(now, last_poll + interval)
            elif now >= deadline:
                message = None
                if last_problem is not None:
                    message = f"generation task {task_id} did not finish within {timeout:g} s (last poll: {last_problem})"
                raise TaskTimedOut(message, task_id=task_id, timeout=timeout)


class FixedPacer:
    """Polls every `interval` seconds at high priority, the first poll at `first` (monotonic)."""

    def __init__(self, interval: float, *, first: float) -> None:
        self._interval = interval
        self._first = first

    def __repr__(self) -> str:
        return f"<FixedPacer every {self._interval:g}s>"

    def next_poll(self, now: float, last_poll: float | None) -> tuple[float, int]:
        """One interval after the previous poll (the first one at `first`)."""
        return (self._first if last_poll is None else last_poll + self._interval), Priority.HIGH

    def observed(self, status: TaskStatus | None) -> None:
        """A fixed pace learns nothing."""


class _Unreadable:
    """Unreadable answers in a row about one thing (a create, a task): the rule creates and polls
    share. Each is a warning and another try, until the `limit`-th, which fails with a
    :class:`BadResponse` saying so."""

    def __init__(self, what: str, limit: int, *, then: str) -> None:
        self.what, self.limit, self.then = what, limit, then
        self.count = 0

    def seen(self, exc: BadResponse) -> None:
        """Count `exc`; raise when it is the last one allowed."""
        self.count += 1
        if self.count >= self.limit:
            raise BadResponse(
                f"{self.what}: the service's answers were unreadable {self.count} times in a row"
                f" (last: {exc.message})",
                status=exc.status,
            ) from None
        log.warning(
            "%s: unreadable answer %d of %d in a row (%s); %s",
            self.what,
            self.count,
            self.limit,
            exc.message,
            self.then,
        )
