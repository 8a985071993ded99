"""The generation-service errors: a small typed hierarchy callers can act on.

Every error has a machine-readable ``code`` (an :class:`~framecast.values.reasons.ErrorCode`, persisted with a failed job) and a ``str()`` that is
safe to log and to show to an operator: it never contains the API key, request headers or a
response body beyond the service's own short error message.
"""

from __future__ import annotations

import re
from typing import ClassVar

from framecast.values.reasons import ErrorCode

__all__ = [
    "AuthError",
    "BadResponse",
    "DownloadError",
    "DownloadTooLarge",
    "DownloadUnavailable",
    "MediaTooLarge",
    "ModelGone",
    "NotMedia",
    "RateLimited",
    "RequestRejected",
    "ServiceError",
    "ServiceUnavailable",
    "TaskFailed",
    "TaskTimedOut",
    "TooManyTasks",
    "UnknownModel",
    "UnreadableAnswer",
    "UnsafeResultURL",
    "refused_model",
    "says_too_many_tasks",
]


class ServiceError(Exception):
    """Base class of everything the generation-service client raises.

    ``code`` is machine-readable; ``status`` is the HTTP status involved, when there was one.
    """

    code: ClassVar[ErrorCode] = ErrorCode.SERVICE_ERROR
    default_message: ClassVar[str] = "the generation service failed"

    def __init__(self, message: str | None = None, *, status: int | None = None) -> None:
        self.message = message or self.default_message
        self.status = status
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class AuthError(ServiceError):
    """The service refused the API key (401/403). Never retried: an operator must fix the key."""

    code: ClassVar[ErrorCode] = ErrorCode.AUTH
    default_message: ClassVar[str] = "the generation service rejected the API key"

    def __init__(self, message: str | None = None, *, status: int | None = 401) -> None:
        super().__init__(message, status=status)


class RateLimited(ServiceError):
    """Still answered 429 after every retry. ``retry_after``: seconds the service asked to wait."""

    code: ClassVar[ErrorCode] = ErrorCode.RATE_LIMITED
    default_message: ClassVar[str] = "the generation service is rate limiting this key"

    def __init__(self, message: str | None = None, *, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message, status=429)


class TooManyTasks(RateLimited):
    """A create refused because the key already runs as many tasks as the service allows at once.

    A concurrency refusal, not a rate one: the service still answers polls, so the budget is not
    paused and the create is not retried at once (it would be refused until one of the key's tasks
    ends). Still a :class:`RateLimited` (same code): whoever does not tell them apart fails or
    defers the job as before. ``detail``: the service's own words, when it sent some.
    """

    def __init__(
        self, message: str | None = None, *, retry_after: float | None = None, detail: str | None = None
    ) -> None:
        self.detail = detail
        super().__init__(
            message or "the generation service runs as many of this key's tasks as it allows at once",
            retry_after=retry_after,
        )


# What a refusal says when the key has too many tasks at once rather than too many requests: the
# contract shows no error body, so any wording services use ("too many running tasks", "concurrency
# limit", "3 tasks already in progress", "parallel task limit", "limit of 3 active jobs",
# ``max_concurrent_tasks``...), in any casing, "_" or "-" for spaces. "Too many requests" and
# "rate limit" are not in it: those are the rate refusal's words.
_THINGS = r"(?:tasks?|jobs?|videos?|generations?|predictions?|renders?|requests?\s+in\s+progress)"
_RUNNING = r"(?:running|active|pending|queued|ongoing|unfinished|open|in\s+progress|in\s+flight|processing)"
_TOO_MANY_TASKS = re.compile(
    rf"concurren|parallel|simultaneous|{_THINGS}\s+(?:\w+\s+)?at\s+(?:once|(?:a|one)\s+time)"
    rf"|too\s+many\s+(?:{_RUNNING}\s+)?{_THINGS}"
    rf"|{_RUNNING}\s+{_THINGS}|{_THINGS}\s+(?:(?:are|is)\s+)?(?:already\s+|still\s+)?{_RUNNING}"
    rf"|(?:max(?:imum)?|limit)\s+(?:of\s+|number\s+of\s+|is\s+)?(?:\d+\s+)?(?:{_RUNNING}\s+)?{_THINGS}"
    r"|(?:task|job)s?\s+(?:limit|cap|slots?)|capacity|queue\s+(?:is\s+)?full",
    re.IGNORECASE,
)


def says_too_many_tasks(text: str | None) -> bool:
    """Whether a refusal's words say the key runs too many tasks at once (not too many requests)."""
    if not text:
        return False
    return bool(_TOO_MANY_TASKS.search(re.sub(r"[_\-]+", " ", text)))


class RequestRejected(ServiceError):
    """The service refused the request (a 4xx other than 401/403/429). Not retried.

    ``detail`` is the service's own message, when it sent one (fit to show to the member).
    """

    code: ClassVar[ErrorCode] = ErrorCode.REJECTED
    default_message: ClassVar[str] = "the generation service rejected the request"

    def __init__(self, message: str | None = None, *, status: int = 400, detail: str | None = None) -> None:
        self.detail = detail
        if message is None:
            message = f"the generation service rejected the request (HTTP {status})"
            if detail:
                message += f": {detail}"
        super().__init__(message, status=status)


class UnknownModel(RequestRejected):
    """The service refused a create because it does not know ``model`` (renamed or withdrawn).

    Still a :class:`RequestRejected` (same code): whoever does not handle it fails the job as before.
    """

    def __init__(self, refused: RequestRejected, *, model: str) -> None:
        self.model = model
        super().__init__(refused.message, status=refused.status or 400, detail=refused.detail)


# Statuses a service may use for "no such model" on a create (the contract says only "non-2xx").
_MODEL_STATUSES = frozenset({400, 404, 422})
# Words saying something does not exist (any casing, "_" or "-" for spaces: error codes too).
_MISSING = re.compile(
    r"does\s*n[o']?t\s+exist|not[\s_-]+exist|no[\s_-]+such|not[\s_-]+found|unknown|"
    r"not[\s_-]+(?:available|supported|recogni[sz]ed|listed|offered)|unavailable|unsupported|"
    r"invalid|deprecated|retired|withdrawn|decommissioned|removed",
    re.IGNORECASE,
)
_MODEL_WORD = re.compile(r"(?<![a-z])models?(?![a-z])", re.IGNORECASE)


def refused_model(refused: RequestRejected, model: str) -> RequestRejected:
    """`refused` as an :class:`UnknownModel` when it says the service does not know `model`.

    Lenient about the shape (the contract shows no error body): a 400 (or 404/422) whose message
    says something does not exist and names the model, or the word "model" (``model_not_found``,
    "The model `x` does not exist", "unknown model"). Anything else, a 400 for a bad size say, is
    returned unchanged. What the message claims is checked against the service's list before a job
    changes model, so a wrong guess here costs one list request, never a wrong job.
    """
    detail = refused.detail or ""
    if refused.status not in _MODEL_STATUSES or not _MISSING.search(detail):
        return refused
    if (model and model.lower() in detail.lower()) or _MODEL_WORD.search(detail.replace("_", " ")):
        return UnknownModel(refused, model=model)
    return refused


class ModelGone(ServiceError):
    """The member's model is no longer offered; ``listed``: the models of that kind offered now.

    ``detail`` lists them (comma-separated) for the member; empty when none is known.
    """

    code: ClassVar[ErrorCode] = ErrorCode.MODEL_GONE

    def __init__(self, model: str, listed: tuple[str, ...]) -> None:
        self.model = model
        self.listed = listed
        self.detail = ", ".join(listed) or None
        super().__init__(f"the generation service no longer offers the model {model}")


class ServiceUnavailable(ServiceError):
    """5xx, timeouts, connection errors or unreadable JSON, after every retry."""

    code: ClassVar[ErrorCode] = ErrorCode.UNAVAILABLE
    default_message: ClassVar[str] = "the generation service is unavailable"


class BadResponse(ServiceError):
    """An answer the client cannot use: valid JSON of a shape it cannot use (a missing id, an unknown
    status...), or no readable answer at all (:class:`UnreadableAnswer`)."""

    code: ClassVar[ErrorCode] = ErrorCode.BAD_RESPONSE
    default_message: ClassVar[str] = "the generation service sent a response of an unexpected shape"


class UnreadableAnswer(BadResponse):
    """An answer that could not be read at all (not JSON, cut off, its compression broken, over its
    size or cost cap): unlike a shape the client cannot use, the next answer may well be fine."""


class TaskFailed(ServiceError):
    """The service reported the task as ``failed``. ``reason`` is its ``error`` field, if any."""

    code: ClassVar[ErrorCode] = ErrorCode.TASK_FAILED

    def __init__(self, reason: str | None = None, *, task_id: str | None = None) -> None:
        self.reason = reason
        self.task_id = task_id
        what = f"generation task {task_id}" if task_id else "the generation task"
        message = f"{what} failed: {reason}" if reason else f"{what} failed (the service gave no reason)"
        super().__init__(message)


class TaskTimedOut(ServiceError):
    """The task reached no terminal state within the poll timeout."""

    code: ClassVar[ErrorCode] = ErrorCode.TIMEOUT

    def __init__(
        self, message: str | None = None, *, task_id: str | None = None, timeout: float | None = None
    ) -> None:
        self.task_id = task_id
        self.timeout = timeout
        if message is None:
            what = f"generation task {task_id}" if task_id else "the generation task"
            message = f"{what} did not finish"
            if timeout is not None:
                message += f" within {timeout:g} s"
        super().__init__(message)


class DownloadError(ServiceError):
    """The result could not be fetched: link dead or expired, too slow, connection broken."""

    code: ClassVar[ErrorCode] = ErrorCode.DOWNLOAD_FAILED
    default_message: ClassVar[str] = "the result could not be downloaded"


class DownloadUnavailable(DownloadError):
    """The result's host did not answer usably after every retry (5xx, 429, 408, a connection lost
    or broken off): the link may still work later, unlike an expired or refused one."""


class DownloadTooLarge(DownloadError):
    """The result is larger than the download cap ``limit`` (bytes)."""

    code: ClassVar[ErrorCode] = ErrorCode.DOWNLOAD_TOO_LARGE

    def __init__(self, message: str | None = None, *, limit: int, size: int | None = None) -> None:
        self.limit = limit
        self.size = size
        if message is None:
            message = f"the result is larger than the {limit}-byte download limit"
            if size is not None:
                message = f"the result ({size} bytes) is larger than the {limit}-byte download limit"
        super().__init__(message)


class UnsafeResultURL(ServiceError):
    """The service named a result location the bot refuses to fetch.

    Not ``http(s)``, or a host outside the service's origin and ``GEN_RESULT_HOSTS`` that resolves
    to a private, loopback, link-local or otherwise internal address (checked where the connection
    is made, redirects included). The URL itself is never shown or posted: only why it was refused.
    """

    code: ClassVar[ErrorCode] = ErrorCode.RESULT_REFUSED
    default_message: ClassVar[str] = "the service's result link points somewhere the bot does not fetch from"


class NotMedia(ServiceError):
    """The result's bytes are not what the job asked for (an HTML error page served as a video...).

    ``expected`` is ``"video"`` or ``"image"``.
    """

    code: ClassVar[ErrorCode] = ErrorCode.NOT_MEDIA

    def __init__(self, expected: str, message: str | None = None) -> None:
        self.expected = expected
        super().__init__(
            message
            or f"the service returned something that is not {'an' if expected == 'image' else 'a'} {expected}"
        )


class MediaTooLarge(ServiceError):
    """The result declares more pixels than ``IMAGE_MAX_PIXELS`` (a decompression bomb): never decoded."""

    code: ClassVar[ErrorCode] = ErrorCode.MEDIA_TOO_LARGE

    def __init__(self, width: int, height: int, limit: int) -> None:
        self.width = width
        self.height = height
        self.limit = limit
        super().__init__(f"the result is {width}x{height} pixels, more than the {limit}-pixel limit")
