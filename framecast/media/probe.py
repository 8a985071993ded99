"""Opening untrusted media with PyAV, and probing a video (:func:`probe_video`)."""

from __future__ import annotations

import io
from typing import Any

import av

from framecast.media.headers import video_dimensions
from framecast.media.sniff import sniff
from framecast.media.types import MediaError, VideoInfo
from framecast.service.errors import MediaTooLarge

__all__ = ["limit_decoder", "open_input", "probe_video"]


def open_input(
    data: bytes, format: str | None = None, *, max_pixels: int | None = None
) -> av.container.InputContainer:
    """`data` opened for reading with PyAV (`format`: a demuxer name, else guessed).

    Raises :class:`MediaError` when FFmpeg cannot open it.
    """
    # max_pixels also bounds the decoders FFmpeg runs while probing the streams on open.
    options = {"max_pixels": str(max_pixels)} if max_pixels else {}
    try:
        return av.open(io.BytesIO(data), "r", format=format, options=options)
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        raise MediaError(f"cannot open media: {exc}") from exc


def limit_decoder(stream: Any, max_pixels: int | None) -> None:
    """Make FFmpeg's decoder of `stream` refuse pictures over `max_pixels` (before allocating them).

    The header checks read what a file declares; this holds even when a header lies (an MP4 whose
    track says 64x64 around a bitstream that says 12000x12000).
    """
    if max_pixels:
        stream.codec_context.options = {**stream.codec_context.options, "max_pixels": str(max_pixels)}


def _check_video_pixels(data: bytes, max_pixels: int | None) -> None:
    if max_pixels:
        size = video_dimensions(data)
        if size is not None and size[0] * size[1] > max_pixels:
            raise MediaTooLarge(size[0], size[1], max_pixels)


def probe_video(data: bytes, *, max_pixels: int | None = None) -> VideoInfo:
    """Read a video's geometry, frame count, duration, frame rate and audio presence.

    The first frame is decoded, so data that only looks like a container raises
    :class:`MediaError` too, as does a still image (PNG, JPEG, WebP, GIF). With `max_pixels`, a
    container declaring a larger picture raises :class:`~framecast.service.errors.MediaTooLarge` before
    anything is decoded, and the decoder refuses larger pictures (:class:`MediaError`).
    """
    sniffed = sniff(data)
    if sniffed is not None and sniffed.kind == "image":
        raise MediaError(f"{sniffed.ext} is an image, not a video")
    _check_video_pixels(data, max_pixels)
    with open_input(data, max_pixels=max_pixels) as container:
        try:
            return _probe(container, max_pixels)
        except MediaError:
            raise
        except Exception as exc:  # FFmpeg errors and odd containers: untrusted input
            raise MediaError(f"cannot decode video: {exc}") from exc


def _probe(container: av.container.InputContainer, max_pixels: int | None) -> VideoInfo:
    if not container.streams.video:
        raise MediaError("no video stream")
    stream = container.streams.video[0]
    limit_decoder(stream, max_pixels)
    has_audio = bool(container.streams.audio)
    width, height = stream.codec_context.width, stream.codec_context.height

    first = next(container.decode(stream), None)
    if first is None:
        raise MediaError("no decodable video frame")
    width, height = width or first.width, height or first.height
    if width <= 0 or height <= 0:
        raise MediaError("video has no dimensions")

    frames = stream.frames
    if frames <= 0:
        # Some containers (WebM, MKV) don't store a frame count: count packets, don't decode.
        container.seek(0)
        frames = sum(1 for packet in container.demux(stream) if packet.size)

    duration = 0.0
    if stream.duration and stream.time_base:
        duration = float(stream.duration * stream.time_base)
    elif container.duration:
        duration = container.duration / av.time_base
    rate = stream.average_rate or stream.guessed_rate
    fps = float(rate) if rate else 0.0
    if duration <= 0 and fps > 0:
        duration = frames / fps
    if fps <= 0 and duration > 0:
        fps = frames / duration
    if frames <= 0 or duration <= 0 or fps <= 0:
        raise MediaError("video has no frames or no duration")
    return VideoInfo(width, height, frames, duration, fps, has_audio)
