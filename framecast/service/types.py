"""The values the generation-service client takes and gives (see ``SERVICE_API.md``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = [
    "ImageParams",
    "ImageResult",
    "ModelCatalog",
    "PollPacer",
    "ProgressCallback",
    "TaskState",
    "TaskStatus",
    "VideoParams",
]

TaskState = Literal["pending", "completed", "failed"]
#: Awaited by the ``wait_*`` methods after every poll that finds the task still pending.
ProgressCallback = Callable[["TaskStatus"], Awaitable[None]]


class PollPacer(Protocol):
    """Decides when a task is polled next, and how urgently (the planner implements it).

    Times are ``clock.monotonic()`` seconds. ``last_poll`` is when the previous poll of this task
    was sent (``None`` before the first one).
    """

    def next_poll(self, now: float, last_poll: float | None) -> tuple[float, int]:
        """``(when, priority)``: the monotonic time of the next poll and its budget priority."""
        ...

    def observed(self, status: TaskStatus | None) -> None:
        """The answer of the poll just made (``None``: it failed or was unreadable)."""
        ...


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
