"""What a job sends to the service, and what of the service's words it keeps or posts.

The runner's translations between a stored :class:`~framecast.values.Job` and the service: the
parameters of its create (the member's prompt inside its style, if it has one), the service's own
failure text made safe for the member, and a result's link made safe to post.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from framecast.safetext import clean_text
from framecast.service import ImageParams, VideoParams
from framecast.service.errors import ServiceError
from framecast.values import Job

__all__ = [
    "DETAIL_CHARS",
    "failure_detail",
    "image_params",
    "shareable_link",
    "video_params",
    "without_credentials",
]

#: Characters of the service's own failure text kept for the member.
DETAIL_CHARS = 300


def video_params(job: Job) -> VideoParams:
    """The video create's parameters of `job`."""
    p: dict[str, Any] = job.params
    return VideoParams(
        model=p["model"],
        prompt=job.service_prompt,  # the member's prompt inside its style, if it has one
        width=int(p["width"]),
        height=int(p["height"]),
        num_frames=int(p["num_frames"]),
        frame_rate=int(p["frame_rate"]),
    )


def image_params(job: Job) -> ImageParams:
    """The image create's parameters of `job`."""
    p: dict[str, Any] = job.params
    return ImageParams(model=p["model"], prompt=job.service_prompt, size=str(p["size"]))


def failure_detail(exc: ServiceError) -> str | None:
    """The service's own words for a failure, when it gave any (shown to the member), made safe."""
    for attr in ("reason", "detail"):
        value = getattr(exc, attr, None)
        if isinstance(value, str):
            cleaned = clean_text(value, DETAIL_CHARS)
            if cleaned:
                return cleaned
    return None


def without_credentials(url: str) -> str:
    """`url` with any ``user:password@`` removed: a link posted in a channel must not carry secrets."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def shareable_link(url: str | None, reveals_key: Callable[[str], bool]) -> str | None:
    """A result's link as anyone may be shown it (posted in a channel, or in /job), or None.

    Credentials (``user:password@``) are dropped. A link that still carries one of the bot's API
    keys (`reveals_key`: in its path or query, as some services sign their links) is never shown:
    without the key it would not open, and with it anyone could spend the key.
    """
    if not url:
        return None
    link = without_credentials(url)
    return None if reveals_key(link) else link
