"""Media sniffing and fitting under an upload size limit, with PyAV (FFmpeg from the wheel).

Everything here is synchronous and CPU-bound: callers run it with ``asyncio.to_thread``. Inputs
are untrusted bytes; anything FFmpeg cannot make sense of raises :class:`MediaError`.

* :func:`sniff` tells video from image by magic bytes (:mod:`~framecast.media.sniff`).
* :func:`check_result` makes sure a result is what the job asked for (a video, an image) and that
  its declared pixel count is within a limit, reading only headers: nothing is decoded, so a
  small file declaring a huge picture (a decompression bomb) is refused before it costs anything.
  :func:`image_dimensions` and :func:`video_dimensions` are those header readers
  (:mod:`~framecast.media.headers`).
* :func:`probe_video` reads dimensions, frame count, duration, frame rate and audio presence
  (:mod:`~framecast.media.probe`).
* :func:`fit_video` re-encodes an oversized video to H.264/AAC MP4 under a byte limit: a target
  bitrate from the budget, a measured correction, then lower resolutions; every frame and its
  timestamp are kept, the first frame is a sharp keyframe (:mod:`~framecast.media.videofit`).
* :func:`fit_image` re-compresses an oversized image: optimized PNG, then JPEG (WebP when the image
  has transparency) with falling quality, then smaller sizes (:mod:`~framecast.media.imagefit`).

Both ``fit_*`` functions return ``None`` when nothing fits, and never return more than ``limit``
bytes. Both take ``max_pixels`` (checked in the headers, and handed to FFmpeg's decoders as their
own limit, so a header that lies cannot make a decoder allocate more) and ``deadline`` (a
``time.monotonic()`` value checked between frames and encodes: :class:`ReencodeTimeout` past it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from framecast.media.headers import check_result, image_dimensions, video_dimensions
from framecast.media.sniff import sniff
from framecast.media.types import MediaError, MediaInfo, ReencodeTimeout, VideoInfo

if TYPE_CHECKING:
    from framecast.media.imagefit import fit_image
    from framecast.media.probe import probe_video
    from framecast.media.videofit import fit_video

__all__ = [
    "MediaError",
    "MediaInfo",
    "ReencodeTimeout",
    "VideoInfo",
    "check_result",
    "fit_image",
    "fit_video",
    "image_dimensions",
    "probe_video",
    "sniff",
    "video_dimensions",
]

# The functions that need PyAV load it on first use: most results fit as they are, and importing
# PyAV (FFmpeg's libraries) costs every start a few hundredths of a second of CPU.
_WITH_PYAV = {
    "fit_image": "framecast.media.imagefit",
    "fit_video": "framecast.media.videofit",
    "probe_video": "framecast.media.probe",
}


def __getattr__(name: str) -> Any:
    if name not in _WITH_PYAV:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WITH_PYAV[name]), name)
    globals()[name] = value  # found directly from now on
    return value
