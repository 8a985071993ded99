"""Fitting an image under an upload size limit: re-compressing, then scaling (:func:`fit_image`)."""

from __future__ import annotations

import logging
import math
from typing import Any, cast

import av
from av.video.codeccontext import VideoCodecContext

from framecast.media.headers import image_dimensions
from framecast.media.probe import limit_decoder, open_input
from framecast.media.sniff import sniff
from framecast.media.types import MediaError, check_deadline
from framecast.service.errors import MediaTooLarge

__all__ = ["fit_image"]

log = logging.getLogger(__name__)


_IMAGE_DEMUXERS = {
    "png": "png_pipe",
    "jpg": "jpeg_pipe",
    "webp": "webp_pipe",
    "gif": "gif",
    "bmp": "bmp_pipe",
}
# mjpeg qscale (lower is better): 2 ~ JPEG quality 95, 12 ~ quality 55.
_JPEG_QSCALES = (2, 3, 4, 5, 6, 8, 10, 12)
_WEBP_QUALITIES = (92, 88, 84, 80, 74, 66, 58, 50)
# Below this (or a quarter of the original's short side) a picture is a thumbnail, not the result:
# the member is better served by the service's link.
_MIN_IMAGE_SIDE = 256
_MAX_SCALE_STEPS = 6


def _decode_image(data: bytes, ext: str, max_pixels: int | None) -> tuple[av.VideoFrame, bool]:
    """The first frame of an image, and whether there is a second one (animation)."""
    with open_input(data, _IMAGE_DEMUXERS.get(ext), max_pixels=max_pixels) as container:
        try:
            if not container.streams.video:
                raise MediaError("no image stream")
            limit_decoder(container.streams.video[0], max_pixels)
            frames = container.decode(container.streams.video[0])
            first = next(frames, None)
            if first is None:
                raise MediaError("no decodable image")
            animated = ext in ("gif", "webp") and next(frames, None) is not None
            return first, animated
        except MediaError:
            raise
        except Exception as exc:
            raise MediaError(f"cannot decode image: {exc}") from exc


def _has_alpha(frame: av.VideoFrame) -> bool:
    """True when some pixel is not fully opaque (an alpha channel of all 255 doesn't count)."""
    fmt = frame.format
    if not (fmt.name == "pal8" or any(c.is_alpha for c in fmt.components)):
        return False
    rgba = frame.reformat(format="rgba")
    plane = rgba.planes[0]
    row_bytes = rgba.width * 4
    buf = memoryview(plane).cast("B")
    for y in range(rgba.height):
        start = y * plane.line_size
        if bytes(buf[start + 3 : start + row_bytes : 4]).strip(b"\xff"):
            return True
    return False


def _encode_still(codec: str, frame: av.VideoFrame, pix_fmt: str, **settings: Any) -> bytes:
    ctx = cast(VideoCodecContext, av.CodecContext.create(codec, "w"))
    ctx.width, ctx.height, ctx.pix_fmt = frame.width, frame.height, pix_fmt
    options = settings.pop("options", {})
    for name, value in settings.items():
        setattr(ctx, name, value)
    ctx.options = options
    return b"".join(bytes(packet) for packet in (*ctx.encode(frame), *ctx.encode(None)))


def _png_pix_fmt(frame: av.VideoFrame, alpha: bool) -> str:
    name = frame.format.name
    if name in ("pal8", "monob"):
        return name
    if name.startswith("gray") or name.startswith("ya"):
        return "ya8" if alpha else "gray"
    return "rgba" if alpha else "rgb24"


def _png(frame: av.VideoFrame, alpha: bool) -> bytes:
    pix = _png_pix_fmt(frame, alpha)
    src = frame if frame.format.name == pix else frame.reformat(format=pix)
    return _encode_still("png", src, pix, options={"compression_level": "9", "pred": "mixed"})


def _lossy(frame: av.VideoFrame, alpha: bool, level: int) -> bytes:
    """JPEG (or WebP with alpha) at ``level`` (index into the quality ladders; 0 is best)."""
    if alpha:
        yuva = frame.reformat(format="yuva420p")
        return _encode_still("libwebp", yuva, "yuva420p", options={"quality": str(_WEBP_QUALITIES[level])})
    yuv = frame.reformat(format="yuv420p", dst_color_range="JPEG")
    q = _JPEG_QSCALES[level]
    return _encode_still("mjpeg", yuv, "yuv420p", color_range=2, qmin=q, qmax=q)


def _scaled(frame: av.VideoFrame, scale: float) -> av.VideoFrame:
    width = max(1, round(frame.width * scale))
    height = max(1, round(frame.height * scale))
    if (width, height) == (frame.width, frame.height):
        return frame
    return frame.reformat(width=width, height=height, interpolation="AREA")


def _fit_lossy(
    frame: av.VideoFrame, alpha: bool, budget: int, deadline: float | None
) -> tuple[bytes | None, int]:
    """Best quality on the ladder that fits ``budget`` at this size (or ``None``), and the size of
    the lowest-quality encode.

    The lowest quality is tried first (one encode decides whether this size can work); then a
    binary search over the rest.
    """
    floor = len(_JPEG_QSCALES) - 1
    check_deadline(deadline)
    smallest = _lossy(frame, alpha, floor)
    if len(smallest) > budget:
        return None, len(smallest)
    best, lo, hi = smallest, 0, floor - 1  # search the best level in [lo, hi] that fits
    while lo <= hi:
        mid = (lo + hi) // 2
        check_deadline(deadline)
        out = _lossy(frame, alpha, mid)
        if len(out) <= budget:
            best, hi = out, mid - 1
        else:
            lo = mid + 1
    return best, len(smallest)


def fit_image(
    data: bytes,
    limit: int,
    *,
    slack: float = 0.03,
    max_pixels: int | None = None,
    deadline: float | None = None,
) -> tuple[bytes, str] | None:
    """Return ``(data, ext)`` if it is at most ``limit * (1 - slack)`` bytes, else a smaller copy.

    Order: optimized PNG (PNG/GIF input only; lossless, 8-bit, drops an alpha channel that is
    fully opaque), then JPEG from quality ~95 down to ~55 (WebP 92..50 when the image has
    transparency), then the same at smaller sizes (scaled by how much it overshot, never below
    256 px, or a quarter of the original, on the short side). Metadata is not kept. Animated GIF/WebP can't be re-compressed
    without losing the animation: ``None``. Raises :class:`MediaError` for non-image or
    undecodable data. With ``max_pixels``, an image declaring more pixels raises
    :class:`~framecast.service.errors.MediaTooLarge` before it is decoded (and the decoder gets the same
    limit). ``deadline`` (``time.monotonic()``): checked before every encode; past it
    :class:`ReencodeTimeout`.
    """
    if not 0 <= slack < 1:
        raise ValueError("slack must be in [0, 1)")
    info = sniff(data)
    if info is None or info.kind != "image":
        raise MediaError("not an image (PNG, JPEG, WebP or GIF)")
    budget = int(limit * (1 - slack))
    if len(data) <= budget:
        return data, info.ext
    if max_pixels:
        width, height = image_dimensions(data) or (0, 0)
        if width * height > max_pixels:
            raise MediaTooLarge(width, height, max_pixels)
    frame, animated = _decode_image(data, info.ext, max_pixels)
    if animated:
        log.info("animated %s over %d bytes: not re-compressed", info.ext, limit)
        return None
    try:
        return _fit_frame(frame, info.ext, budget, deadline)
    except MediaError:
        raise
    except Exception as exc:
        raise MediaError(f"cannot re-encode image: {exc}") from exc


def _fit_frame(
    frame: av.VideoFrame, ext: str, budget: int, deadline: float | None
) -> tuple[bytes, str] | None:
    alpha = _has_alpha(frame)
    if ext in ("png", "gif"):
        check_deadline(deadline)
        png = _png(frame, alpha)
        if len(png) <= budget:
            return png, "png"
    if budget < 256:  # smaller than any JPEG/WebP headers
        return None
    lossy_ext = "webp" if alpha else "jpg"
    if frame.format.name not in ("rgb24", "rgba", "yuv420p", "yuva420p", "yuvj420p"):
        frame = frame.reformat(format="rgba" if alpha else "rgb24")
    out, smallest = _fit_lossy(frame, alpha, budget, deadline)
    short = min(frame.width, frame.height)
    floor = min(short, max(_MIN_IMAGE_SIDE, short // 4))
    scale = 1.0
    for _ in range(_MAX_SCALE_STEPS):
        if out is not None:
            return out, lossy_ext
        if short * scale <= floor:
            break
        # Bytes grow roughly with the area: aim the next size at the budget, at least 15% smaller.
        step = min(0.85, math.sqrt(budget / smallest) * 0.95)
        scale = max(floor / short, scale * step)
        out, smallest = _fit_lossy(_scaled(frame, scale), alpha, budget, deadline)
    return (out, lossy_ext) if out is not None else None
