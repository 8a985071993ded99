"""Header-only checks of a result: what it declares, read without decoding anything.

:func:`check_result` makes sure a result is what the job asked for (a video, an image) and that its
declared pixel count is within a limit, so a small file declaring a huge picture (a decompression
bomb) is refused before it costs anything. :func:`image_dimensions` and :func:`video_dimensions`
are the header readers (PNG, JPEG, GIF, WebP, BMP; MP4/MOV, WebM/MKV).
"""

from __future__ import annotations

import struct
from typing import Literal

from framecast.media.sniff import sniff
from framecast.media.types import MediaError, MediaInfo
from framecast.service.errors import MediaTooLarge, NotMedia

__all__ = ["check_result", "image_dimensions", "video_dimensions"]


#: Boxes/elements visited at most by the container walkers: a file made of millions of tiny boxes
#: cannot keep a walker busy; what was not found by then counts as not declared.
_MAX_ELEMENTS = 20_000


def check_result(data: bytes, expected: Literal["video", "image"], max_pixels: int) -> MediaInfo:
    """What `data` is, after checking it is an `expected` within `max_pixels`, from headers only.

    Raises :class:`~framecast.service.errors.NotMedia` when the bytes are not a recognised `expected`
    (an HTML error page, an image for a video job, a PNG whose header is cut off...) and
    :class:`~framecast.service.errors.MediaTooLarge` when the declared width x height is over the limit.
    An image must declare its size; a video must declare a video track (MP4/MOV: a ``vide``
    handler; WebM/MKV: a video track), but one that declares no size passes (the decoders get the
    same limit if it is ever re-encoded).
    """
    info = sniff(data)
    if info is None or info.kind != expected:
        raise NotMedia(expected)
    try:
        size = image_dimensions(data) if info.kind == "image" else video_dimensions(data)
    except MediaError as exc:
        raise NotMedia(expected, f"the {expected} the service returned is broken ({exc})") from None
    if info.kind == "video" and not _declares_video_track(data, info.ext):
        # A container with only audio (an .m4a, a .weba), or no track list at all (an ftyp box in
        # front of anything): not a video, whatever its magic bytes say.
        raise NotMedia(expected)
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


def _mp4_sizes(data: bytes, tracks: list[bytes] | None = None) -> list[tuple[int, int]]:
    """The sizes the video tracks declare; `tracks` (when given) gets one entry per video track."""
    budget = [_MAX_ELEMENTS]
    sizes: list[tuple[int, int]] = []

    def children(kind: bytes, start: int, end: int) -> list[tuple[int, int]]:
        return [(s, e) for k, s, e in _mp4_boxes(data, start, end, budget) if k == kind]

    for moov in children(b"moov", 0, len(data)):
        for trak in children(b"trak", *moov):
            handlers = [
                data[s + 8 : s + 12] for mdia in children(b"mdia", *trak) for s, _ in children(b"hdlr", *mdia)
            ]
            if handlers and b"vide" not in handlers:
                continue  # an audio or text track
            if tracks is not None and (handlers or children(b"tkhd", *trak)):
                tracks.append(b"vide")
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
_MKV_TRACK_TYPE = 0x83  # 1: video, 2: audio, 17: subtitles
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


def _u64_at(data: bytes, start: int, end: int) -> int:
    """An EBML unsigned integer (its first 8 bytes at most; nothing else is copied)."""
    return int.from_bytes(data[start : min(end, start + 8)], "big")


def _mkv_sizes(data: bytes, tracks: list[bytes] | None = None) -> list[tuple[int, int]]:
    """The sizes the video tracks declare; `tracks` (when given) gets one entry per video track."""
    budget = [_MAX_ELEMENTS]
    sizes: list[tuple[int, int]] = []

    def children(element: int, start: int, end: int) -> list[tuple[int, int]]:
        return [(s, e) for k, s, e in _mkv_elements(data, start, end, budget) if k == element]

    for segment in children(_MKV_SEGMENT, 0, len(data)):
        for tracks_element in children(_MKV_TRACKS, *segment):
            for track in children(_MKV_TRACK, *tracks_element):
                entries = _mkv_elements(data, *track, budget)
                kind = next((_u64_at(data, s, e) for k, s, e in entries if k == _MKV_TRACK_TYPE), None)
                videos = [(s, e) for k, s, e in entries if k == _MKV_VIDEO]
                if tracks is not None and (kind == 1 or (kind is None and videos)):
                    tracks.append(b"vide")
                for video in videos:
                    fields = {k: _u64_at(data, s, e) for k, s, e in _mkv_elements(data, *video, budget)}
                    sizes.append((fields.get(_MKV_PIXEL_WIDTH, 0), fields.get(_MKV_PIXEL_HEIGHT, 0)))
    return sizes


def _declares_video_track(data: bytes, ext: str) -> bool:
    """Whether a video container (as :func:`sniff` named it) declares at least one video track."""
    tracks: list[bytes] = []
    if ext in ("webm", "mkv"):
        _mkv_sizes(data, tracks)
    else:
        _mp4_sizes(data, tracks)
    return bool(tracks)
