"""The one way a request reaches the network: a budget slot, retries with backoff, caps, errors.

Every request the client makes, API calls and result downloads alike, goes through
:class:`Transport`:

* :meth:`Transport.exchange` is one HTTP request: inside a slot of the shared
  :class:`~framecast.keys.budget.RequestBudget` when it carries the key, its body read with a cap counted
  after decompression (:func:`~framecast.service.body.read_body`), and a 429 pausing the budget
  while the slot is still held, unless it is a create refused for the key's tasks at once rather
  than its rate (:mod:`framecast.service.refusals`). It raises nothing of its own: what happened
  is in the :class:`Answer`.
* :meth:`Transport.retrying` is the retry loop: an attempt gives a value, raises an error that must
  not be retried, or returns a :class:`Retry`. The wait before the next attempt is the budget's
  pause after a 429, else the answer's ``Retry-After``, else
  :func:`~framecast.backoff.backoff_delay`.
* :meth:`Transport.request_json` is an API call on both: statuses mapped to the errors of
  :mod:`framecast.service.errors`, the answer parsed with :func:`~framecast.service.jsonread.load_json`.

The API key is put into each request's headers and nowhere else: never into a log line, an error
or a repr (:meth:`Transport.scrub` removes it from the service's own words). Every exchange is
counted in the process's :class:`~framecast.ops.metrics.Metrics` (when given) by what it was for
and its status, the key named only by its :func:`~framecast.ops.metrics.key_label`.

Whether the service answers at all is :class:`~framecast.service.outage.ServiceOutage`'s to say
(one WARNING as an outage starts, one INFO as it ends): every exchange with the service's own
origin is reported to it, and the retry loop's own lines are DEBUG, never a warning per attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote, unquote_plus

import aiohttp
import yarl

from framecast.backoff import backoff_delay
from framecast.clock import Clock
from framecast.config import Secret
from framecast.logsetup import mask, masked_secrets
from framecast.ops.metrics import OPERATOR_KEY, Metrics
from framecast.safetext import clean_text
from framecast.service.body import ACCEPT_ENCODING, BodyStalled, BodyTooLarge, BodyUndecodable, read_body
from framecast.service.budget import Budget
from framecast.service.errors import (
    AuthError,
    BadResponse,
    RateLimited,
    RequestRejected,
    ServiceError,
    ServiceUnavailable,
    TooManyTasks,
    UnreadableAnswer,
)
from framecast.service.fields import parse_retry_after
from framecast.service.jsonread import JSON_MAX_DEPTH, load_json
from framecast.service.jsonscan import JSON_MAX_ITEMS, JsonScan
from framecast.service.outage import ServiceOutage
from framecast.service.parsing import error_detail
from framecast.service.refusals import CreateRefusals
from framecast.values.service_requests import Priority, RefusalKind, RequestKind

__all__ = ["DETAIL_MAX", "Answer", "Gate", "Retry", "Transport", "budgeted_session"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Awaited after a request's budget grant, right before it is sent; what it raises stops the request.
Gate = Callable[[], Awaitable[None]]

#: The service's own words are shown to members: keep them short.
DETAIL_MAX = 300
_ERROR_BODY_MAX = 16 * 1024  # the beginning of an error body is all its message needs
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: What each kind of answer may carry, whatever the configured caps say: a create or a poll
#: answer is an id, a status, a URL and an error message (a few hundred bytes, a few values);
#: only a model list is long, and only an image create carries a large (base64) string.
_KIND_MAX_BYTES: dict[RequestKind, int] = {RequestKind.CREATE_VIDEO: 64 * 1024, RequestKind.POLL: 64 * 1024}
_KIND_MAX_ITEMS: dict[RequestKind, int] = {
    RequestKind.CREATE_VIDEO: 10_000,
    RequestKind.POLL: 10_000,
    RequestKind.CREATE_IMAGE: 10_000,
}
#: The requests a concurrency cap refuses (see framecast.service.refusals).
_CREATES = frozenset({RequestKind.CREATE_VIDEO, RequestKind.CREATE_IMAGE})
#: Answers larger than this are parsed in a worker thread, so the loop keeps its turns.
_PARSE_INLINE_MAX = 256 * 1024
_UNPARSED: Any = object()


@dataclass
class Answer:
    """What one :meth:`Transport.exchange` got.

    ``status`` is ``None`` when no answer came (``problem`` says why: a timeout, a connection
    error kept in ``failure``). A 2xx body is in ``body``, or ``unreadable`` says why it could not
    be read within the cap (or stalled, with a pace); of a 4xx, ``body`` holds the beginning (when
    asked for). ``penalty`` is the budget's pause after a 429 of a request that went through the
    budget; ``concurrency``: the 429 refused a create for the key's tasks at once (no pause then).
    """

    status: int | None = None
    retry_after: str | None = None  # the raw header; see Transport.retry_after
    location: str | None = None  # a redirect's target, as sent
    body: bytes = b""
    unreadable: BodyTooLarge | BodyUndecodable | BodyStalled | None = None
    refused: BadResponse | None = None  # the JSON answer's cost is over a cap, or it is no JSON
    parsed: Any = _UNPARSED  # the JSON answer, once parsed (see Transport.request_json)
    problem: str = ""
    timed_out: bool = False
    failure: aiohttp.ClientError | None = None
    penalty: float | None = None
    concurrency: bool = False

    @property
    def ok(self) -> bool:
        """A 2xx whose body was read to its end (or found unreadable) without a network problem."""
        return self.status is not None and 200 <= self.status < 300 and not self.problem


@dataclass(frozen=True)
class Retry:
    """An attempt that failed in a way another attempt may fix.

    `give_up` builds the error raised when it was the last attempt (it gets the number of attempts
    made). With `budget_pause`, the budget already holds every request back that long (a 429), so
    the loop does not wait on its own; otherwise it waits `retry_after` seconds (capped) or the
    backoff. `problem` is for the log line.
    """

    problem: str
    give_up: Callable[[int], ServiceError]
    retry_after: float | None = None
    budget_pause: float | None = None


def budgeted_session() -> aiohttp.ClientSession:
    """The HTTP session of the service's requests: each one it sends is one the budget granted.

    aiohttp sends an idempotent request (a poll, the model list, a download) a second time, unasked
    and unlogged, when its connection drops before the answer; a service that counted the first
    then meets one request the budget never saw, past its rate. The transport's own retries are
    granted; aiohttp's is turned off through its private ``_retry_connection`` (no public switch in
    aiohttp 3.14; its own test client does the same).
    """
    session = aiohttp.ClientSession()
    session._retry_connection = False
    return session


class Transport:
    """Requests to the service at `base_url` through `session` (shared, the caller's to close).

    `request_timeout` bounds one API request in real seconds; `retry_max` is the number of attempts
    for 429s and transient failures; the backoff between them grows from `backoff_base` to
    `backoff_max` seconds of `clock` time, with jitter drawn from `rng`. JSON answers are read with
    a cap of `json_max_bytes` unless a call says otherwise. Each exchange is recorded in `metrics`
    (None: not recorded), its 429s under `key_label` (a :func:`~framecast.ops.metrics.key_label`).
    Each exchange with the service's origin is reported to `outage`, the process's view of whether
    the service answers (shared by every key's client; None: one of this transport's own).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        base_url: str,
        api_key: Secret,
        budget: Budget,
        clock: Clock,
        request_timeout: float,
        retry_max: int,
        backoff_base: float,
        backoff_max: float,
        rng: random.Random,
        json_max_bytes: int,
        metrics: Metrics | None = None,
        key_label: str = OPERATOR_KEY,
        outage: ServiceOutage | None = None,
    ) -> None:
        self.session = session
        self.base_url = base_url
        self.budget = budget
        self.clock = clock
        self._api_key = api_key
        self._request_timeout = float(request_timeout)
        self._retry_max = int(retry_max)
        self._backoff_base = float(backoff_base)
        self._backoff_max = float(backoff_max)
        self._rng = rng
        self._json_max_bytes = int(json_max_bytes)
        self._metrics = metrics
        self._key_label = key_label
        #: Which kind of refusal this key's create 429s are (the evidence of its answers).
        self.refusals = CreateRefusals()
        #: Whether the service answers (one WARNING and one INFO per outage, for every key's client).
        self.outage = outage if outage is not None else ServiceOutage(base_url, clock=clock, metrics=metrics)

    # -- the key and the service's words ------------------------------------------------------------
    def headers(self) -> dict[str, str]:
        """The headers of a request to the service (built per request, never stored or logged)."""
        return {
            "Authorization": f"Bearer {self._api_key.reveal()}",
            "Accept": "application/json",
            "Accept-Encoding": ACCEPT_ENCODING,
        }

    def scrub(self, text: str) -> str:
        """`text` with the API key, and every other key the bot holds, replaced by ``***``.

        The service may name any key it was ever sent, in any answer: the operator's in a job run
        on a server's key, one server's in another's. The others are the keys the logs mask
        (:func:`~framecast.logsetup.masked_secrets`: every key an account holds).
        """
        key = self._api_key.reveal()
        if len(key) >= 4:
            text = text.replace(key, "***")
        return mask(text, masked_secrets())

    def reveals_key(self, text: str) -> bool:
        """Whether `text` (a link, say) carries the API key or another the bot holds (see
        :meth:`scrub`), as it is or percent-encoded."""
        key = self._api_key.reveal()
        held = masked_secrets()
        return any(
            (len(key) >= 4 and key in form) or bool(held.spans(form))
            for form in (text, unquote(text), unquote_plus(text))
        )

    def shown(self, text: str | None, limit: int) -> str | None:
        """Service text (already cleaned, maybe longer than `limit`) without the key, cut to `limit`.

        The key is scrubbed before cutting, so a cut can never leave part of it behind.
        """
        if not text:
            return None
        return clean_text(self.scrub(text), limit) or None

    def describe(self, exc: BaseException) -> str:
        """A connection error, fit for a message: scrubbed, short, nothing chained."""
        # aiohttp's messages name host and port at most, but scrub anyway; never chain the
        # original exception (response errors carry the request headers in request_info).
        return clean_text(self.scrub(f"{type(exc).__name__}: {exc}"), 200)

    def retry_after(self, answer: Answer) -> float | None:
        """The seconds the answer's ``Retry-After`` asks for, if it says."""
        return parse_retry_after(answer.retry_after, self.clock.time())

    # -- one exchange, and the retry loop -----------------------------------------------------------
    async def exchange(
        self,
        session: aiohttp.ClientSession,
        method: str,
        url: str | yarl.URL,
        *,
        headers: dict[str, str],
        kind: RequestKind,
        budgeted: bool,
        priority: Priority | int,
        timeout: float,  # noqa: ASYNC109 -- real seconds for the whole request, given to aiohttp
        max_bytes: int,
        error_body: bool = False,
        params: dict[str, str] | None = None,
        data: bytes | None = None,
        json_items: int | None = None,
        gate: Gate | None = None,
        pace: tuple[float, int] | None = None,
    ) -> Answer:
        """One HTTP request, redirects not followed, inside a budget slot when `budgeted`.

        `gate` is awaited once the slot is granted, right before the request is sent: what it
        raises stops the request (the runner's lease check, however long the wait for the slot).

        A 2xx body is read with the cap `max_bytes`; with `error_body`, the beginning of a 4xx body
        too. With `json_items`, the 2xx body is a JSON answer whose values are counted while it is
        read (:class:`~framecast.service.jsonscan.JsonScan`): past `json_items` values or
        :data:`JSON_MAX_DEPTH` levels, reading stops and ``refused`` says why. With `pace`
        (``(window, least)``: see :func:`~framecast.service.body.read_body`), the 2xx body must keep
        moving, else ``unreadable`` is its :class:`~framecast.service.body.BodyStalled` (a stalled
        host is no passing error). Timeouts and connection errors end up in the answer, not
        raised. The request is counted as `kind` with its status (none: no answer) once it is
        over, and, when `budgeted` (the service's own origin: results elsewhere are not the
        service), reported to :attr:`outage`.
        """
        answer = Answer()
        slot = self.budget.slot(priority) if budgeted else contextlib.nullcontext()
        async with slot:
            if gate is not None:
                await gate()
            sent = self.clock.monotonic()
            try:
                async with session.request(
                    method,
                    url,
                    params=params,
                    data=data,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=timeout),
                    allow_redirects=False,
                    auto_decompress=False,
                ) as resp:
                    answer.status = status = resp.status
                    answer.retry_after = resp.headers.get("Retry-After")
                    if status in _REDIRECTS:
                        answer.location = resp.headers.get("Location")
                    elif 200 <= status < 300:
                        scan = None
                        if json_items is not None:
                            scan = JsonScan(max_items=json_items, max_depth=JSON_MAX_DEPTH)
                        try:
                            answer.body = await read_body(resp, max_bytes, scan=scan, pace=pace)
                        except (BodyTooLarge, BodyUndecodable, BodyStalled) as exc:
                            answer.unreadable = exc
                        except BadResponse as exc:
                            answer.refused = exc
                    elif 400 <= status < 500 and error_body:
                        answer.body = await read_body(resp, _ERROR_BODY_MAX, truncate=True)
            except TimeoutError:
                answer.problem = f"no answer within {timeout:g} s"
                answer.timed_out = True
            except aiohttp.ClientError as exc:
                answer.problem = f"connection problem ({self.describe(exc)})"
                answer.failure = exc
            if budgeted:
                # Judged by the status line, before a broken-off body turns a 2xx into no answer:
                # the service did answer; the body's loss is this request's.
                if ServiceOutage.is_unreachable(answer.status):
                    self.outage.failed(sent, answer.problem or f"HTTP {answer.status}")
                else:
                    self.outage.answered(sent)
            if answer.problem and answer.status is not None and 200 <= answer.status < 300:
                # A success whose body broke off (a connection reset half-way) is no answer at
                # all: retried as a lost one, never judged by its status line (a download of half
                # a file was refused as "HTTP 200" and failed its job).
                answer.status = None
            if budgeted and kind not in _CREATES:
                self.refusals.answered(answer.status)
            if answer.status == 429 and budgeted:
                if kind in _CREATES and self.refusals.classify(answer.body) is RefusalKind.CONCURRENCY:
                    # The key's rate is not what was refused: its polls must go on (they free a slot).
                    answer.concurrency = True
                else:
                    # Paused while this request still holds its slot: releasing it first would let
                    # a waiting request slip out between the 429 and the pause, and a server that
                    # counts rejected requests would then never see the window drain.
                    answer.penalty = self.budget.penalize(self.retry_after(answer))
        if self._metrics is not None:
            self._metrics.service_request(kind, answer.status, key=self._key_label)
        return answer

    async def retrying(
        self, what: str, attempt: Callable[[], Awaitable[T | Retry]], *, attempts: int | None = None
    ) -> T:
        """Run `attempt` until it gives a value or raises, at most `attempts` (``retry_max``) times.

        Each retry is one DEBUG line: whether the service answers at all is :attr:`outage`'s to
        say, once, and a request that gives up raises for its caller to report (once).
        """
        limit = attempts if attempts is not None else self._retry_max
        for n in range(1, limit + 1):
            outcome = await attempt()
            if not isinstance(outcome, Retry):
                return outcome
            if n >= limit:
                raise outcome.give_up(n)
            if outcome.budget_pause is not None:
                # The budget's pause is the backoff: the next slot waits for it. DEBUG, as every retry:
                # the service's outage is said once (ServiceOutage), a request that gives up by its caller.
                log.debug(
                    "%s: %s; retry %d/%d after the budget's %.1fs pause",
                    what, outcome.problem, n + 1, limit, outcome.budget_pause,
                )  # fmt: skip
                continue
            if outcome.retry_after is not None:
                delay = min(self._backoff_max, outcome.retry_after)
            else:
                delay = backoff_delay(n, base=self._backoff_base, cap=self._backoff_max, rng=self._rng)
            log.debug("%s: %s; retry %d/%d in %.1fs", what, outcome.problem, n + 1, limit, delay)
            await self.clock.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- API calls ----------------------------------------------------------------------------------
    async def request_json(
        self,
        method: str,
        path: str,
        *,
        priority: Priority | int,
        what: str,
        kind: RequestKind,
        params: dict[str, str] | None = None,
        json_body: dict[str, Any] | None = None,
        max_bytes: int | None = None,
        attempts: int | None = None,
        gate: Gate | None = None,
    ) -> Any:
        """One API call with budget, retries and error mapping; returns the parsed JSON.

        `kind` names the call in the metrics. `attempts` caps the tries (default ``retry_max``): a
        poll makes one, since its wait loop asks again an interval later anyway (a quick retry would
        poll the task too often).

        429s, 5xx, 408, timeouts and connection errors are retried. An answer that cannot be read
        (larger than `max_bytes` after decompression, not UTF-8 JSON, too deep...) raises
        :class:`UnreadableAnswer` at once: the caller decides whether asking again is worth its
        budget (a poll asks next interval, a create is sent again a few times: each may have started
        a task). `gate`: see :meth:`exchange` (before every attempt's request).
        401/403 raise :class:`AuthError`, other 4xx
        :class:`RequestRejected` (with the service's message, scrubbed).
        """
        limit = max_bytes if max_bytes is not None else self._json_max_bytes
        limit = min(limit, _KIND_MAX_BYTES.get(kind, limit))  # what this kind of answer can carry
        items = _KIND_MAX_ITEMS.get(kind, JSON_MAX_ITEMS)
        url = self.base_url + path
        headers = self.headers()
        data = _json_bytes(json_body) if json_body is not None else None
        if data is not None:
            headers["Content-Type"] = "application/json; charset=utf-8"

        async def attempt() -> Any:
            answer = await self.exchange(
                self.session, method, url, headers=headers, kind=kind, budgeted=True, priority=priority,
                timeout=self._request_timeout, max_bytes=limit, error_body=True, params=params, data=data,
                json_items=items, gate=gate,
            )  # fmt: skip
            if answer.ok and answer.unreadable is None and answer.refused is None:
                await _parse(answer, items)
            return self._judge(answer, what, limit)

        return await self.retrying(what, attempt, attempts=attempts)

    def _judge(self, answer: Answer, what: str, limit: int) -> Any:
        """The parsed answer of an API call, or a :class:`Retry`; raises what must not be retried."""
        status = answer.status
        if status is None:
            failure = ServiceUnavailable(f"{what}: {answer.problem}")
            return Retry(answer.problem, lambda n: _exhausted(failure, n), self.retry_after(answer))
        if 200 <= status < 300:
            self.budget.reward()
            if isinstance(answer.unreadable, BodyTooLarge):
                unreadable = f"the answer is larger than the {limit}-byte limit"
            elif answer.unreadable is not None:
                unreadable = "the answer's compression is broken or unknown"
            elif answer.refused is not None:
                unreadable = answer.refused.message
            elif answer.parsed is not _UNPARSED:
                return answer.parsed
            else:
                try:
                    return load_json(answer.body)
                except BadResponse as exc:
                    unreadable = exc.message
            raise UnreadableAnswer(f"{what}: {unreadable} (HTTP {status})", status=status)
        if 300 <= status < 400:
            raise BadResponse(f"{what}: the service answered with a redirect (HTTP {status})", status=status)
        if status in (401, 403):
            raise AuthError(f"{what}: the service rejected the API key (HTTP {status})", status=status)
        if status == 429 and answer.concurrency:
            # Not retried: it would be refused until one of the key's tasks ends (the caller waits).
            detail = self.shown(error_detail(answer.body), DETAIL_MAX)
            raise TooManyTasks(
                f"{what}: the service runs as many of this key's tasks as it allows at once (HTTP 429)",
                retry_after=self.retry_after(answer),
                detail=detail,
            )
        if status == 429:
            retry_after = self.retry_after(answer)
            pause = answer.penalty
            assert pause is not None  # every API call goes through the budget

            def rate_limited(n: int) -> ServiceError:
                return RateLimited(
                    f"{what}: still rate limited after {n} attempts",
                    retry_after=retry_after if retry_after is not None else pause,
                )

            return Retry("rate limited (HTTP 429)", rate_limited, budget_pause=pause)
        if 400 <= status < 500 and status != 408:
            detail = self.shown(error_detail(answer.body), DETAIL_MAX)
            raise RequestRejected(
                f"{what}: the service rejected the request (HTTP {status})"
                + (f": {detail}" if detail else ""),
                status=status,
                detail=detail,
            )
        failure = ServiceUnavailable(f"{what}: the service answered HTTP {status}", status=status)
        return Retry(f"HTTP {status}", lambda n: _exhausted(failure, n), self.retry_after(answer))


async def _parse(answer: Answer, items: int) -> None:
    """Parse `answer`'s JSON body into ``parsed`` (or ``refused``); a large one in a worker thread.

    Its values were counted while it was read (so they are not counted again), and the parse is
    bounded; a thread still keeps a large answer's decoding (megabytes of base64) from holding
    the loop in one piece.
    """
    body = answer.body
    try:
        if len(body) > _PARSE_INLINE_MAX:
            answer.parsed = await asyncio.to_thread(load_json, body, max_items=items, counted=True)
        else:
            answer.parsed = load_json(body, max_items=items, counted=True)
    except BadResponse as exc:
        answer.refused = exc
    else:
        answer.body = b""  # the raw bytes are not needed any more: do not hold a large answer twice


def _exhausted(failure: ServiceUnavailable, attempts: int) -> ServiceError:
    return ServiceUnavailable(f"{failure.message} (after {attempts} attempts)", status=failure.status)


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
