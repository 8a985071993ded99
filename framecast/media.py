"""Media sniffing and fitting under an upload size limit, with PyAV (FFmpeg from the wheel).

Everything here is synchronous and CPU-bound: callers run it with ``asyncio.to_thread``. Inputs
are untrusted bytes; anything FFmpeg cannot make sense of raises :class:`MediaError`.

* :func:`sniff` tells video from image by magic bytes.
* :func:`check_result` makes sure a result is what the job asked for (a video, an image) and that
  its declared pixel count is within a limit, reading only headers: nothing is decoded, so a
  small file declaring a huge picture (a decompression bomb) is refused before it costs anything.
  :func:`image_dimensions` and :func:`video_dimensions` are those header readers.
* :func:`probe_video` reads dimensions, frame count, duration, frame rate and audio presence.
* :func:`fit_video` re-encodes an oversized video to H.264/AAC MP4 under a byte limit: a target
  bitrate from the budget, a measured correction, then lower resolutions; every frame and its
  timestamp are kept, the first frame is a sharp keyframe.
* :func:`fit_image` re-compresses an oversized image: optimized PNG, then JPEG (WebP when the image
  has transparency) with falling quality, then smaller sizes.

Both ``fit_*`` functions return ``None`` when nothing fits, and never return more than ``limit``
bytes. Both take ``max_pixels`` (checked in the headers, and handed to FFmpeg's decoders as their
own limit, so a header that lies cannot make a decoder allocate more) and ``deadline`` (a
``time.monotonic()`` value checked between frames and encodes: :class:`ReencodeTimeout` past it).
"""

from __future__ import annotations

import io
import logging
import math
import struct
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, cast

import av
from av.video.codeccontext import VideoCodecContext
from av.video.frame import PictureType
from av.video.reformatter import ColorRange

from framecast.errors import MediaTooLarge, NotMedia

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

log = logging.getLogger(__name__)


class MediaError(Exception):
    """The data is not media we can decode (or re-encoding it failed)."""


class ReencodeTimeout(MediaError):
    """A re-encode ran past its deadline and was given up."""


def _check_deadline(deadline: float | None) -> None:
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


# --------------------------------------------------------------------------------------------
# Sniffing

_MP4 = MediaInfo("video", "mp4", "video/mp4")
_MOV = MediaInfo("video", "mov", "video/quicktime")
_WEBM = MediaInfo("video", "webm", "video/webm")
_MKV = MediaInfo("video", "mkv", "video/x-matroska")
_GIF = MediaInfo("image", "gif", "image/gif")
_PNG = MediaInfo("image", "png", "image/png")
_JPEG = MediaInfo("image", "jpg", "image/jpeg")
_WEBP = MediaInfo("image", "webp", "image/webp")
_BMP = MediaInfo("image", "bmp", "image/bmp")

# Top-level QuickTime atoms a .mov may start with instead of "ftyp".
_MOV_ATOMS = (b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot")
# ISO-BMFF brands of still-image formats (AVIF, HEIF): an "ftyp" box, but not a video we handle.
_STILL_BRANDS = (b"avif", b"avis", b"heic", b"heix", b"hevc", b"mif1", b"msf1")
# BMP info-header sizes (core, v1..v5): with the reserved zero bytes, "BM" alone is too weak a magic.
_BMP_HEADER_SIZES = (12, 40, 52, 56, 64, 108, 124)


def sniff(data: bytes) -> MediaInfo | None:
    """Recognise MP4/MOV, WebM/MKV, GIF, PNG, JPEG, WebP or BMP by their magic bytes; else ``None``.

    GIF counts as an image (Discord shows it inline like one), even when animated.
    """
    head = bytes(data[:64])
    if len(head) >= 12 and head[4:8] == b"ftyp":
        if head[8:12] in _STILL_BRANDS:
            return None
        return _MOV if head[8:12] == b"qt  " else _MP4
    if len(head) >= 8 and head[4:8] in _MOV_ATOMS:
        return _MOV
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return _WEBM if b"webm" in head else _MKV
    if head.startswith((b"GIF87a", b"GIF89a")):
        return _GIF
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return _PNG
    if head.startswith(b"\xff\xd8\xff"):
        return _JPEG
    if len(head) >= 12 and head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return _WEBP
    if (
        len(head) >= 18 and head.startswith(b"BM") and head[6:10] == b"\0\0\0\0"
        and int.from_bytes(head[14:18], "little") in _BMP_HEADER_SIZES
    ):
        return _BMP
    return None


# --------------------------------------------------------------------------------------------
# Header-only dimensions (nothing is decoded)

#: Boxes/elements visited at most by the container walkers: a file made of millions of tiny boxes
#: cannot keep a walker busy; what was not found by then counts as not declared.
_MAX_ELEMENTS = 20_000


def check_result(data: bytes, expected: Literal["video", "image"], max_pixels: int) -> MediaInfo:
    """What `data` is, after checking it is an `expected` within `max_pixels`, from headers only.

    Raises :class:`~framecast.errors.NotMedia` when the bytes are not a recognised `expected`
    (an HTML error page, an image for a video job, a PNG whose header is cut off...) and
    :class:`~framecast.errors.MediaTooLarge` when the declared width x height is over the limit.
    An image must declare its size; a video container that declares none passes (the decoders get
    the same limit if it is ever re-encoded).
    """
    info = sniff(data)
    if info is None or info.kind != expected:
        raise NotMedia(expected)
    try:
        size = image_dimensions(data) if info.kind == "image" else video_dimensions(data)
    except MediaError as exc:
        raise NotMedia(expected, f"the {expected} the service returned is broken ({exc})") from None
    if size is None and info.kind == "image":
        raise NotMedia(expected, "the image the service returned declares no size")
    if size is not None and size[0] * size[1] > max_pixels:
        raise MediaTooLarge(size[0], size[1], max_pixels)
    return info


def _u16be(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 2], "big")


def _u32be(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "big")


def _need(data: bytes, end: int, what: str) -> None:
    if len(data) < end:
        raise MediaError(f"truncated {what} header")


def _positive(width: int, height: int, what: str) -> tuple[int, int]:
    if width <= 0 or height <= 0:
        raise MediaError(f"{what} declares no size ({width}x{height})")
    return width, height


def image_dimensions(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` an image's header declares (PNG, JPEG, GIF, WebP, BMP); nothing decoded.

    ``None`` for data :func:`sniff` does not call an image. Raises :class:`MediaError` when the
    header is truncated, malformed or declares an empty picture.
    """
    info = sniff(data)
    if info is None or info.kind != "image":
        return None
    if info.ext == "png":
        # Signature, then the first chunk must be a 13-byte IHDR: width, height (big-endian).
        _need(data, 24, "PNG")
        if data[12:16] != b"IHDR" or _u32be(data, 8) != 13:
            raise MediaError("PNG without IHDR")
        return _positive(_u32be(data, 16), _u32be(data, 20), "PNG")
    if info.ext == "gif":
        # The logical screen: the canvas every frame is drawn on (little-endian).
        _need(data, 10, "GIF")
        width, height = struct.unpack_from("<HH", data, 6)
        return _positive(width, height, "GIF")
    if info.ext == "bmp":
        if int.from_bytes(data[14:18], "little") == 12:  # BITMAPCOREHEADER: 16-bit sizes
            _need(data, 22, "BMP")
            width, height = struct.unpack_from("<HH", data, 18)
        else:
            _need(data, 26, "BMP")
            width, height = struct.unpack_from("<ii", data, 18)  # height < 0: stored top-down
        return _positive(abs(width), abs(height), "BMP")
    if info.ext == "webp":
        return _webp_dimensions(data)
    return _jpeg_dimensions(data)


def _webp_dimensions(data: bytes) -> tuple[int, int]:
    _need(data, 30, "WebP")
    chunk = data[12:16]
    if chunk == b"VP8X":
        # Extended format: the canvas size, 24-bit little-endian, minus one.
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8 ":
        # Lossy: a keyframe's start code, then 14-bit width and height (2 bits of scaling each).
        if data[23:26] != b"\x9d\x01\x2a":
            raise MediaError("WebP VP8 without a keyframe start code")
        width, height = struct.unpack_from("<HH", data, 26)
        return _positive(width & 0x3FFF, height & 0x3FFF, "WebP")
    if chunk == b"VP8L":
        # Lossless: signature byte 0x2f, then 14 bits of width - 1 and 14 bits of height - 1.
        if data[20] != 0x2F:
            raise MediaError("WebP VP8L without its signature")
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    raise MediaError("WebP without an image chunk")


# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic...): not DHT, JPG, DAC.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_dimensions(data: bytes) -> tuple[int, int]:
    """The first start-of-frame's size; segments are skipped by their length (EXIF thumbnails too)."""
    pos = 2
    for _ in range(_MAX_ELEMENTS):
        while pos < len(data) and data[pos] == 0xFF:  # marker prefix and fill bytes
            pos += 1
        if pos >= len(data) or data[pos - 1] != 0xFF:
            break
        marker = data[pos]
        pos += 1
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # stand-alone markers: no length
            continue
        if marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header came first
            break
        _need(data, pos + 2, "JPEG")
        length = _u16be(data, pos)
        if length < 2:
            break
        if marker in _JPEG_SOF:
            _need(data, pos + 7, "JPEG")
            return _positive(_u16be(data, pos + 5), _u16be(data, pos + 3), "JPEG")
        pos += length
    raise MediaError("JPEG without a frame header")


def video_dimensions(data: bytes) -> tuple[int, int] | None:
    """The largest ``(width, height)`` a video container declares for its picture; nothing decoded.

    MP4/MOV: the video tracks' ``tkhd`` and sample descriptions (``stsd``). WebM/MKV: the tracks'
    ``PixelWidth``/``PixelHeight``. ``None`` when the container is not one of those or declares
    no size.
    """
    info = sniff(data)
    if info is None or info.kind != "video":
        return None
    sizes = _mkv_sizes(data) if info.ext in ("webm", "mkv") else _mp4_sizes(data)
    sizes = [(w, h) for w, h in sizes if w > 0 and h > 0]
    return max(sizes, key=lambda wh: wh[0] * wh[1]) if sizes else None


def _mp4_boxes(data: bytes, start: int, end: int, budget: list[int]) -> list[tuple[bytes, int, int]]:
    """``(type, payload_start, payload_end)`` of the boxes between `start` and `end`."""
    boxes = []
    pos = start
    while pos + 8 <= end and budget[0] > 0:
        budget[0] -= 1
        size, kind = _u32be(data, pos), data[pos + 4 : pos + 8]
        header = 8
        if size == 1:  # 64-bit size follows the type
            if pos + 16 > end:
                break
            size, header = int.from_bytes(data[pos + 8 : pos + 16], "big"), 16
        elif size == 0:  # extends to the end of its parent
            size = end - pos
        if size < header:
            break
        box_end = min(end, pos + size)
        boxes.append((kind, pos + header, box_end))
        pos = box_end
    return boxes


def _mp4_sizes(data: bytes) -> list[tuple[int, int]]:
    budget = [_MAX_ELEMENTS]
    sizes: list[tuple[int, int]] = []

    def children(kind: bytes, start: int, end: int) -> list[tuple[int, int]]:
        return [(s, e) for k, s, e in _mp4_boxes(data, start, end, budget) if k == kind]

    for moov in children(b"moov", 0, len(data)):
        for trak in children(b"trak", *moov):
            handlers = [data[s + 8 : s + 12] for mdia in children(b"mdia", *trak) for s, _ in children(b"hdlr", *mdia)]
            if handlers and b"vide" not in handlers:
                continue  # an audio or text track
            for start, end in children(b"tkhd", *trak):
                # Width and height are 16.16 fixed point at the end of the box (offset by version).
                at = start + (88 if data[start : start + 1] == b"\x01" else 76)
                if at + 8 <= end:
                    sizes.append((_u32be(data, at) >> 16, _u32be(data, at + 4) >> 16))
            for mdia in children(b"mdia", *trak):
                for minf in children(b"minf", *mdia):
                    for stbl in children(b"stbl", *minf):
                        for start, end in children(b"stsd", *stbl):
                            # version/flags and entry count, then one visual sample entry per codec.
                            for _kind, entry, entry_end in _mp4_boxes(data, start + 8, end, budget):
                                if entry + 28 <= entry_end:
                                    sizes.append((_u16be(data, entry + 24), _u16be(data, entry + 26)))
    return sizes


# Matroska element ids (with their length marker bits, as written in the file).
_MKV_SEGMENT, _MKV_TRACKS, _MKV_TRACK, _MKV_VIDEO = 0x18538067, 0x1654AE6B, 0xAE, 0xE0
_MKV_PIXEL_WIDTH, _MKV_PIXEL_HEIGHT = 0xB0, 0xBA
_MKV_CLUSTER = 0x1F43B675


def _vint(data: bytes, pos: int, *, keep_marker: bool) -> tuple[int, int, bool]:
    """An EBML variable-length integer at `pos`: ``(value, next_pos, all_ones)``."""
    if pos >= len(data) or data[pos] == 0:
        raise MediaError("bad EBML number")
    length = 9 - data[pos].bit_length()
    if pos + length > len(data):
        raise MediaError("truncated EBML number")
    raw = int.from_bytes(data[pos : pos + length], "big")
    mask = (1 << (7 * length)) - 1
    return (raw if keep_marker else raw & mask), pos + length, raw & mask == mask


def _mkv_elements(data: bytes, start: int, end: int, budget: list[int]) -> list[tuple[int, int, int]]:
    """``(id, payload_start, payload_end)`` of the EBML elements between `start` and `end`."""
    elements = []
    pos = start
    while pos < end and budget[0] > 0:
        budget[0] -= 1
        try:
            element, pos, _ = _vint(data, pos, keep_marker=True)
            size, pos, unknown = _vint(data, pos, keep_marker=False)
        except MediaError:
            break
        # Unknown size (live streams): the element runs to the end of its parent.
        payload_end = end if unknown else min(end, pos + size)
        elements.append((element, pos, payload_end))
        if element == _MKV_CLUSTER:
            break  # media data from here on: the tracks are declared before it
        pos = payload_end
    return elements


def _mkv_sizes(data: bytes) -> list[tuple[int, int]]:
    budget = [_MAX_ELEMENTS]
    sizes: list[tuple[int, int]] = []

    def children(element: int, start: int, end: int) -> list[tuple[int, int]]:
        return [(s, e) for k, s, e in _mkv_elements(data, start, end, budget) if k == element]

    for segment in children(_MKV_SEGMENT, 0, len(data)):
        for tracks in children(_MKV_TRACKS, *segment):
            for track in children(_MKV_TRACK, *tracks):
                for video in children(_MKV_VIDEO, *track):
                    fields = {k: int.from_bytes(data[s:e][:8], "big") for k, s, e in _mkv_elements(data, *video, budget)}
                    sizes.append((fields.get(_MKV_PIXEL_WIDTH, 0), fields.get(_MKV_PIXEL_HEIGHT, 0)))
    return sizes


# --------------------------------------------------------------------------------------------
# Probing


def _open_input(data: bytes, format: str | None = None, *, max_pixels: int | None = None) -> av.container.InputContainer:
    # max_pixels also bounds the decoders FFmpeg runs while probing the streams on open.
    options = {"max_pixels": str(max_pixels)} if max_pixels else {}
    try:
        return av.open(io.BytesIO(data), "r", format=format, options=options)
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        raise MediaError(f"cannot open media: {exc}") from exc


def _limit_decoder(stream: Any, max_pixels: int | None) -> None:
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
    container declaring a larger picture raises :class:`~framecast.errors.MediaTooLarge` before
    anything is decoded, and the decoder refuses larger pictures (:class:`MediaError`).
    """
    sniffed = sniff(data)
    if sniffed is not None and sniffed.kind == "image":
        raise MediaError(f"{sniffed.ext} is an image, not a video")
    _check_video_pixels(data, max_pixels)
    with _open_input(data, max_pixels=max_pixels) as container:
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
    _limit_decoder(stream, max_pixels)
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


# --------------------------------------------------------------------------------------------
# Video fitting

_X264_PRESET = "veryfast"
# Give frame 0 twice its share of bits: it is the poster Discord shows before playback.
_FIRST_FRAME_ZONE = "zones=0,0,b=2.0"
_MAX_ATTEMPTS = 8
_TRIES_PER_SIZE = 2
# Bits per pixel per frame: below _START_BPP we start at a smaller size; when the corrected bitrate
# falls below _FLOOR_BPP at some size we move on to the next one instead of trying it again.
_START_BPP = 0.04
_FLOOR_BPP = 0.015
# Ask x264 for a little less than the budget: one-pass ABR overshoots a few percent on short clips.
_ABR_BIAS = 0.95
_SHORT_SIDES = (720, 540, 360, 240)
_AUDIO_RATES = (128_000, 96_000, 64_000, 48_000, 32_000)
_AUDIO_SHARE = 0.10  # at most this much of the total bitrate goes to audio
_AAC_SAMPLE_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)


def _mp4_overhead(frames: int, audio_packets: int) -> int:
    """Generous estimate of MP4 + H.264 bytes that are not frame payload.

    ftyp/moov headers, sample tables (~12-20 bytes per sample), SPS/PPS and x264's version SEI.
    """
    return 2048 + 20 * frames + 10 * audio_packets


def _even(value: float) -> int:
    return max(2, round(value / 2) * 2)


def _ladder(width: int, height: int, min_height: int) -> list[tuple[int, int]]:
    """Output sizes to try, largest first: the source, 720p/540p/360p/240p, then ``min_height``.

    "p" counts the short side, so portrait videos shrink the same way. Sizes stay even (yuv420p)
    and keep the aspect ratio.
    """
    short = min(width, height)
    sizes = [(max(2, width // 2 * 2), max(2, height // 2 * 2))]  # never larger than the source
    for side in (*_SHORT_SIDES, min_height):
        # Each step must be a real one (at least ~10% fewer lines than the previous size).
        if side > min(sizes[-1]) * 0.9 or side < min_height or side < 2:
            continue
        scale = side / short
        sizes.append((_even(width * scale), _even(height * scale)))
    return sizes


@dataclass(frozen=True)
class _AudioPlan:
    bit_rate: int
    rate: int
    layout: str


def _reopen(buffer: io.BytesIO, flags: int) -> _SharedReader:
    if flags & 2:  # AVIO_FLAG_WRITE: the MP4 muxer only ever re-opens its output to read it
        raise OSError("unexpected re-open for writing")
    return _SharedReader(buffer)


class _SharedReader(io.RawIOBase):
    """A second, read-only view of the output buffer.

    ``movflags=faststart`` makes the MP4 muxer re-open its output to move the index to the front;
    this lets it do that on a ``BytesIO`` (with its own position, as a second file handle would).
    """

    def __init__(self, buffer: io.BytesIO) -> None:
        super().__init__()
        self._buffer = buffer
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        with self._buffer.getbuffer() as view, view[self._pos : self._pos + len(target)] as chunk:
            n = len(chunk)
            target[:n] = chunk
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = self._buffer.getbuffer().nbytes + offset
        return self._pos

    def tell(self) -> int:
        return self._pos


def _copy_color(src: Any, dst: Any) -> None:
    # Not color_range: the output is always limited ("MPEG") range, see _encode_video.
    for name in ("colorspace", "color_primaries", "color_trc"):
        value = getattr(src, name, None)
        if value:
            try:
                setattr(dst, name, value)
            except (AttributeError, TypeError, ValueError):
                pass


def _encode_video(
    data: bytes,
    info: VideoInfo,
    size: tuple[int, int],
    video_bps: int,
    audio: _AudioPlan | None,
    *,
    max_pixels: int | None = None,
    deadline: float | None = None,
) -> bytes:
    """One H.264/AAC MP4 encode of ``data`` at ``size`` and ``video_bps`` (average, one pass)."""
    out = io.BytesIO()
    with (
        _open_input(data, max_pixels=max_pixels) as src,
        av.open(
            out,
            "w",
            format="mp4",
            container_options={"movflags": "+faststart"},
            io_open=lambda url, flags, options: _reopen(out, flags),
        ) as dst,
    ):
        istream = src.streams.video[0]
        istream.thread_type = "AUTO"
        _limit_decoder(istream, max_pixels)
        rate: Fraction | None = istream.average_rate or istream.guessed_rate
        if not rate:
            rate = Fraction(info.fps).limit_denominator(1001)
        ostream = dst.add_stream("libx264", rate=rate)
        ostream.width, ostream.height = size
        ostream.pix_fmt = "yuv420p"
        # Same time base as the source: frame timestamps pass through untouched.
        time_base = istream.time_base or Fraction(1, 90_000)
        ostream.time_base = time_base
        ostream.codec_context.time_base = time_base
        ostream.bit_rate = int(video_bps)
        ostream.codec_context.options = {"preset": _X264_PRESET, "x264-params": _FIRST_FRAME_ZONE}
        _copy_color(istream.codec_context, ostream.codec_context)
        ostream.codec_context.color_range = ColorRange.MPEG

        streams: list[av.stream.Stream] = [istream]
        aout = None
        if audio is not None and src.streams.audio:
            ain = src.streams.audio[0]
            streams.append(ain)
            aout = dst.add_stream("aac", rate=audio.rate, layout=audio.layout)
            aout.bit_rate = audio.bit_rate

        first = True
        width, height = size
        for packet in src.demux(streams):
            _check_deadline(deadline)
            if packet.stream is istream:
                for frame in packet.decode():
                    if not isinstance(frame, av.VideoFrame):
                        continue
                    full_range = frame.color_range == ColorRange.JPEG or frame.format.name.startswith("yuvj")
                    if (frame.width, frame.height) != size or frame.format.name != "yuv420p" or full_range:
                        frame = frame.reformat(
                            width=width,
                            height=height,
                            format="yuv420p",
                            interpolation="BICUBIC",
                            src_color_range=ColorRange.JPEG if full_range else ColorRange.MPEG,
                            dst_color_range=ColorRange.MPEG,
                        )
                    # Decoded frames carry the source's I/P/B types, which x264 would obey: let it
                    # choose, except for frame 0, which must be a keyframe.
                    frame.pict_type = PictureType.I if first else PictureType.NONE
                    first = False
                    dst.mux(ostream.encode(frame))
            elif aout is not None:
                for aframe in packet.decode():
                    if isinstance(aframe, av.AudioFrame):
                        dst.mux(aout.encode(aframe))
        dst.mux(ostream.encode(None))
        if aout is not None:
            dst.mux(aout.encode(None))
    return out.getvalue()


def _plan_audio(info: VideoInfo, total_bps: float, data: bytes) -> _AudioPlan | None:
    """Pick an AAC bitrate within ``_AUDIO_SHARE`` of the total, or ``None`` to drop the audio."""
    if not info.has_audio:
        return None
    bit_rate = next((r for r in _AUDIO_RATES if r <= total_bps * _AUDIO_SHARE), None)
    if bit_rate is None:
        return None
    with _open_input(data) as container:
        stream = container.streams.audio[0]
        sample_rate = stream.rate or 48_000
        channels = stream.channels or 2
    if sample_rate not in _AAC_SAMPLE_RATES:
        sample_rate = 48_000 if sample_rate > 48_000 else 44_100
    layout = "mono" if channels == 1 or bit_rate <= 48_000 else "stereo"
    return _AudioPlan(bit_rate, sample_rate, layout)


def fit_video(
    data: bytes,
    limit: int,
    *,
    slack: float = 0.03,
    min_height: int = 144,
    max_pixels: int | None = None,
    deadline: float | None = None,
) -> bytes | None:
    """Return ``data`` if it is at most ``limit * (1 - slack)`` bytes, else a re-encode that is.

    The re-encode is an H.264 (yuv420p, faststart) MP4 with every source frame at its original
    timestamp, so frame count and duration don't change. Audio is re-encoded as AAC at a low bitrate
    or dropped when the budget is too small for it. Step by step:

    1. Budget ``limit * (1 - slack)``; subtract an MP4 overhead allowance and the audio, divide by
       the duration: that is the video bitrate.
    2. Start at the largest size of the ladder (source, 720p, 540p, 360p, 240p, ``min_height``;
       "p" is the short side) that gets at least ``_START_BPP`` bits per pixel per frame.
    3. Encode (one-pass ABR, frame 0 a keyframe with a double bit share). If it fits: done.
       Otherwise scale the bitrate by how much the encode overshot and try again; after two tries
       at one size (three if the second missed by less than 10%), or as soon as the corrected
       bitrate is below ``_FLOOR_BPP`` for that size, go one size down.
    4. At the smallest size, a last try drops the audio track.
    5. At most ``_MAX_ATTEMPTS`` encodes. ``None`` when none fits (a re-encode that fits under
       ``limit`` but not the slack is still returned rather than nothing). A budget too small for
       even the container and one skipped macroblock per frame returns ``None`` without encoding.

    ``min_height`` is the smallest short side tried. Data that already fits is returned as is,
    without being decoded; otherwise :class:`MediaError` when ``data`` is not a decodable video.
    ``max_pixels``: see :func:`probe_video`. ``deadline`` (``time.monotonic()``): checked between
    packets and attempts; past it :class:`ReencodeTimeout`.
    """
    if not 0 <= slack < 1:
        raise ValueError("slack must be in [0, 1)")
    budget = int(limit * (1 - slack))
    if len(data) <= budget:
        return data
    info = probe_video(data, max_pixels=max_pixels)
    duration = info.duration
    sizes = _ladder(info.width, info.height, min_height)

    audio_packets = math.ceil(duration * 48_000 / 1024) if info.has_audio else 0
    overhead = _mp4_overhead(info.frames, audio_packets)
    # A frame costs at least a handful of bytes even when x264 skips every macroblock.
    if budget < overhead + 8 * info.frames + 256:
        log.info("video cannot fit %d bytes (%d frames)", limit, info.frames)
        return None
    total_bps = (budget - overhead) * 8 / duration
    audio = _plan_audio(info, total_bps, data)
    audio_bps = audio.bit_rate * 1.05 if audio else 0.0
    nominal = total_bps - audio_bps
    if nominal <= 0:
        audio, audio_bps, nominal = None, 0.0, total_bps

    def bpp(size: tuple[int, int], bps: float) -> float:
        return bps / (size[0] * size[1] * info.fps)

    index = next((i for i, s in enumerate(sizes) if bpp(s, nominal) >= _START_BPP), len(sizes) - 1)
    bias = _ABR_BIAS
    tries = 0
    best: bytes | None = None
    for attempt in range(1, _MAX_ATTEMPTS + 1):
        size = sizes[index]
        request = max(1_000, int(nominal * bias))
        _check_deadline(deadline)
        try:
            out = _encode_video(data, info, size, request, audio, max_pixels=max_pixels, deadline=deadline)
        except MediaError:
            raise
        except Exception as exc:  # an FFmpeg failure half-way through untrusted input
            raise MediaError(f"cannot re-encode video: {exc}") from exc
        tries += 1
        log.debug(
            "fit_video attempt %d: %dx%d at %d b/s (audio %s) -> %d bytes (budget %d)",
            attempt, size[0], size[1], request, audio.bit_rate if audio else None, len(out), budget,
        )  # fmt: skip
        if len(out) <= budget:
            return out
        if len(out) <= limit and (best is None or len(out) < len(best)):
            best = out
        # How far one-pass ABR overshot: correct the next request by that ratio.
        audio_bytes = audio_bps * duration / 8
        payload = max(1.0, len(out) - overhead - audio_bytes)
        wanted = max(1.0, budget - overhead - audio_bytes)
        bias = bias * wanted / payload * 0.97
        last = index == len(sizes) - 1
        # Stay at this size while the overshoot is small (one more correction will likely do).
        done_here = tries >= _TRIES_PER_SIZE + 1 or (tries >= _TRIES_PER_SIZE and len(out) > budget * 1.1)
        if not last and (done_here or bpp(size, nominal * bias) < _FLOOR_BPP):
            index += 1
            tries = 0
            # Overshoot at a saturated size says little about the next one; don't over-correct.
            bias = min(_ABR_BIAS, max(bias, 0.5))
        elif last and done_here:
            if audio is None:
                break
            # Last resort: the smallest size without the audio track.
            audio, audio_bps, nominal = None, 0.0, total_bps
            tries = 0
            bias = min(_ABR_BIAS, max(bias, 0.5))
    return best


# --------------------------------------------------------------------------------------------
# Image fitting

_IMAGE_DEMUXERS = {"png": "png_pipe", "jpg": "jpeg_pipe", "webp": "webp_pipe", "gif": "gif", "bmp": "bmp_pipe"}
# mjpeg qscale (lower is better): 2 ~ JPEG quality 95, 12 ~ quality 55.
_JPEG_QSCALES = (2, 3, 4, 5, 6, 8, 10, 12)
_WEBP_QUALITIES = (92, 88, 84, 80, 74, 66, 58, 50)
# Below this (or a quarter of the original's short side) a picture is a thumbnail, not the result:
# the member is better served by the service's link.
_MIN_IMAGE_SIDE = 256
_MAX_SCALE_STEPS = 6


def _decode_image(data: bytes, ext: str, max_pixels: int | None) -> tuple[av.VideoFrame, bool]:
    """The first frame of an image, and whether there is a second one (animation)."""
    with _open_input(data, _IMAGE_DEMUXERS.get(ext), max_pixels=max_pixels) as container:
        try:
            if not container.streams.video:
                raise MediaError("no image stream")
            _limit_decoder(container.streams.video[0], max_pixels)
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
    _check_deadline(deadline)
    smallest = _lossy(frame, alpha, floor)
    if len(smallest) > budget:
        return None, len(smallest)
    best, lo, hi = smallest, 0, floor - 1  # search the best level in [lo, hi] that fits
    while lo <= hi:
        mid = (lo + hi) // 2
        _check_deadline(deadline)
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
    :class:`~framecast.errors.MediaTooLarge` before it is decoded (and the decoder gets the same
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


def _fit_frame(frame: av.VideoFrame, ext: str, budget: int, deadline: float | None) -> tuple[bytes, str] | None:
    alpha = _has_alpha(frame)
    if ext in ("png", "gif"):
        _check_deadline(deadline)
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
