"""Telling video from image by magic bytes (:func:`sniff`): nothing is decoded."""

from __future__ import annotations

from framecast.media.types import MediaInfo

__all__ = ["sniff"]


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
        len(head) >= 18
        and head.startswith(b"BM")
        and head[6:10] == b"\0\0\0\0"
        and int.from_bytes(head[14:18], "little") in _BMP_HEADER_SIZES
    ):
        return _BMP
    return None
