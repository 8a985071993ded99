"""What the media functions give and raise, shared by every module of :mod:`framecast.media`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

__all__ = ["MediaError", "MediaInfo", "ReencodeTimeout", "VideoInfo", "check_deadline"]


class MediaError(Exception):
    """The data is not media we can decode (or re-encoding it failed)."""


class ReencodeTimeout(MediaError):
    """A re-encode ran past its deadline and was given up."""


def check_deadline(deadline: float | None) -> None:
    """Raise :class:`ReencodeTimeout` when ``time.monotonic()`` is past `deadline` (if any)."""
    if deadline is not None and time.monotonic() > deadline:
        raise ReencodeTimeout("re-encoding took longer than allowed")


@dataclass(frozen=True)
class MediaInfo:
    """What :func:`sniff` recognised: ``kind``, file extension (no dot) and MIME type."""

    kind: Literal["video", "image"]
    ext: str
    mime: str


@dataclass(frozen=True)
class VideoInfo:
    """What :func:`probe_video` read from a video. ``duration`` is in seconds."""

    width: int
    height: int
    frames: int
    duration: float
    fps: float
    has_audio: bool
