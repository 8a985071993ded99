"""What a request to the generation service is for, and why the service refused one.

Shared by the budgets (``keys``), the service client (``service``), the planner, the runner and
the metrics (``ops``): each names a request's priority, kind or refusal the same way, so the
values sit below them all.
"""

from __future__ import annotations

import enum
from enum import IntEnum, StrEnum

__all__ = ["Priority", "RefusalKind", "RequestKind"]


class Priority(IntEnum):
    """What a request is for; lower values are served first."""

    #: The create of an image that has waited a whole window (short jobs first: it must not wait
    #: behind a batch's completions coming due together).
    FIRST = -1
    HIGH = 0  # polls likely to find a task finished, downloads of finished results, videos' creates
    NORMAL = 1  # creates (a planned video's goes at HIGH: Planner.create_priority)
    PROGRESS = 2  # polls that only refresh progress (the task is not expected to be done yet)
    LOW = 3  # model lists and other housekeeping


class RequestKind(StrEnum):
    """What a request to the generation service was for (the ``kind`` label)."""

    CREATE_VIDEO = "create_video"
    CREATE_IMAGE = "create_image"
    POLL = "poll"
    MODELS = "models"
    DOWNLOAD = "download"


class RefusalKind(enum.Enum):
    """Why the service refused a request with 429."""

    RATE = "rate"  # too many requests in the key's window: the budget pauses and backs off
    CONCURRENCY = "concurrency"  # a create while the key runs as many tasks as allowed at once
