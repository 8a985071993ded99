"""Real, small media files made with PyAV at test time (no downloads, no system ffmpeg).

Everything here is deterministic (fixed seeds) and cached, because tests and the fake generation
service ask for the same files over and over. Frames are built from plain ``bytes`` written into
the frame planes, so numpy is not needed.
"""

from __future__ import annotations

import functools
import io
import math
import random
import zlib
from array import array

import av

__all__ = ["make_mp4", "make_png", "make_large_mp4", "make_large_png", "make_png_bomb"]

_AUDIO_RATE = 48_000


def _fill(plane: av.video.plane.VideoPlane, rows: list[bytes]) -> None:
    """Write ``rows`` (each ``plane.width`` bytes) into ``plane``, honouring its line padding."""
    pad = plane.line_size - len(rows[0])
    if pad:
        filler = bytes(pad)
        rows = [row + filler for row in rows]
    plane.update(b"".join(rows))


def _ramp(length: int) -> bytes:
    """0, 1, ..., 255, 0, 1, ... of at least ``length`` bytes (a sliding window gives a moving ramp)."""
    return bytes(range(256)) * (length // 256 + 2)


def _pattern_planes(width: int, height: int, index: int) -> list[list[bytes]]:
    """Rows of a moving diagonal gradient (Y, Cb, Cr): compresses well, but every frame differs."""
    base = _ramp(width + height + 4 * index)
    shift = (4 * index) % 256
    luma = [base[(y + shift) % 256 : (y + shift) % 256 + width] for y in range(height)]
    cw, ch = (width + 1) // 2, (height + 1) // 2
    cb = [base[(2 * index) % 256 : (2 * index) % 256 + cw]] * ch
    cr = [bytes([(96 + y) % 256]) * cw for y in range(ch)]
    return [luma, cb, cr]


def _frame(width: int, height: int, index: int, rng: random.Random, noise: int) -> av.VideoFrame:
    """A yuv420p frame: gradient (``noise=0``), uniform noise (255), or gradient plus grain.

    Grain is added without numpy: the gradient is squeezed into ``0..255-noise`` and the noise into
    ``0..noise``, so adding the planes as big integers never carries from one byte to the next.
    """
    frame = av.VideoFrame(width, height, "yuv420p")
    if noise >= 255:
        for plane in frame.planes:
            plane.update(rng.randbytes(plane.line_size * plane.height))
        return frame
    for plane, rows in zip(frame.planes, _pattern_planes(width, height, index), strict=True):
        _fill(plane, rows)
    if noise <= 0:
        return frame
    squeeze = bytes(v * (255 - noise) // 255 for v in range(256))
    spread = bytes(v * (noise + 1) >> 8 for v in range(256))
    for plane in frame.planes:
        size = plane.buffer_size
        clean = int.from_bytes(bytes(plane).translate(squeeze), "little")
        grain = int.from_bytes(rng.randbytes(size).translate(spread), "little")
        plane.update((clean + grain).to_bytes(size, "little"))
    return frame


def _tone(seconds: float, channels: int = 2) -> list[bytes]:
    """A 440 Hz sine (one float32 plane per channel)."""
    count = max(1, round(seconds * _AUDIO_RATE))
    step = 2 * math.pi * 440 / _AUDIO_RATE
    samples = array("f", (0.2 * math.sin(step * i) for i in range(count))).tobytes()
    return [samples] * channels


def _encode_mp4(
    width: int,
    height: int,
    frames: int,
    fps: int,
    *,
    noise: int,
    audio: bool,
    codec_options: dict[str, str],
    seed: int = 0,
) -> bytes:
    if width % 2 or height % 2 or width <= 0 or height <= 0:
        raise ValueError("width and height must be positive and even")
    if frames < 1 or fps < 1:
        raise ValueError("frames and fps must be positive")
    buf = io.BytesIO()
    rng = random.Random(seed)
    with av.open(buf, "w", format="mp4") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.codec_context.options = dict(codec_options)
        astream = None
        if audio:
            astream = container.add_stream("aac", rate=_AUDIO_RATE, layout="stereo")
            astream.bit_rate = 96_000
        for index in range(frames):
            frame = _frame(width, height, index, rng, noise)
            frame.pts = index
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
        if astream is not None:
            planes = _tone(frames / fps)
            total = len(planes[0]) // 4
            chunk = 1024
            for start in range(0, total, chunk):
                n = min(chunk, total - start)
                aframe = av.AudioFrame(format="fltp", layout="stereo", samples=n)
                aframe.sample_rate = _AUDIO_RATE
                aframe.pts = start
                for plane, data in zip(aframe.planes, planes, strict=True):
                    plane.update(data[start * 4 : (start + n) * 4].ljust(plane.buffer_size, b"\0"))
                container.mux(astream.encode(aframe))
            container.mux(astream.encode(None))
    return buf.getvalue()


@functools.lru_cache(maxsize=32)
def make_mp4(
    width: int = 320,
    height: int = 240,
    frames: int = 24,
    fps: int = 24,
    *,
    noise: bool = False,
    audio: bool = False,
) -> bytes:
    """A real H.264 (yuv420p) MP4: a moving gradient, or uniform noise; optional AAC tone."""
    options = {"preset": "ultrafast", "crf": "30" if noise else "23"}
    return _encode_mp4(
        width, height, frames, fps, noise=255 if noise else 0, audio=audio, codec_options=options
    )


@functools.lru_cache(maxsize=16)
def make_large_mp4(
    target_bytes: int,
    *,
    width: int = 320,
    height: int = 240,
    fps: int = 24,
    seconds: float | None = None,
    noise: int = 255,
) -> bytes:
    """A noisy H.264 MP4 of at least ``target_bytes``.

    ``noise`` is the noise amplitude: 255 is uniform noise (the worst case for an encoder), a
    smaller value is a moving gradient with grain of that amplitude (closer to real footage).

    With ``seconds=None`` the clip is encoded near-lossless (QP 4) and is as long as it needs to be
    (at least one frame). With ``seconds`` the frame count is fixed (``round(seconds * fps)``) and
    the bitrate is raised until the file is large enough; ``ValueError`` if even near-lossless
    noise of that length cannot reach ``target_bytes``.
    """
    if target_bytes < 1:
        raise ValueError("target_bytes must be positive")
    noise = max(1, min(255, noise))
    base = {"preset": "ultrafast", "tune": "zerolatency"}
    if seconds is None:
        # Near-lossless noise costs ~1.6x the raw yuv420p frame size at QP 4 (CAVLC, ultrafast).
        per_frame = int(width * height * 1.5 * 1.6)
        frames = max(1, math.ceil(target_bytes / per_frame))
        while True:
            data = _encode_mp4(
                width, height, frames, fps, noise=noise, audio=False, codec_options={**base, "qp": "4"}
            )
            if len(data) >= target_bytes:
                return data
            frames = math.ceil(frames * target_bytes / len(data)) + 1
    frames = max(1, round(seconds * fps))
    duration = frames / fps
    bitrate = target_bytes * 8 * 1.15 / duration
    for _ in range(3):
        data = _encode_mp4(
            width, height, frames, fps, noise=noise, audio=False,
            codec_options={**base, "b": str(int(bitrate))},
        )  # fmt: skip
        if len(data) >= target_bytes:
            return data
        bitrate *= 1.5 * target_bytes / len(data)
    data = _encode_mp4(
        width, height, frames, fps, noise=noise, audio=False, codec_options={**base, "qp": "1"}
    )
    if len(data) >= target_bytes:
        return data
    raise ValueError(f"{frames} frames of {width}x{height} cannot reach {target_bytes} bytes")


def _encode_png(frame: av.VideoFrame) -> bytes:
    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = frame.width, frame.height, frame.format.name
    return b"".join(bytes(packet) for packet in [*codec.encode(frame), *codec.encode(None)])


@functools.lru_cache(maxsize=32)
def make_png(width: int = 256, height: int = 256, *, noise: bool = False) -> bytes:
    """A real RGB PNG: a smooth gradient, or uniform noise (incompressible)."""
    if width <= 0 or height <= 0:
        raise ValueError("width and height must be positive")
    frame = av.VideoFrame(width, height, "rgb24")
    plane = frame.planes[0]
    if noise:
        rows = [random.Random(1).randbytes(3 * width * height)]
        rows = [rows[0][y * 3 * width : (y + 1) * 3 * width] for y in range(height)]
    else:
        red = bytes(x * 255 // max(1, width - 1) for x in range(width))
        row = bytearray(3 * width)
        row[0::3] = red
        row[2::3] = b"\x80" * width
        rows = []
        for y in range(height):
            row[1::3] = bytes([y * 255 // max(1, height - 1)]) * width
            rows.append(bytes(row))
    _fill(plane, rows)
    return _encode_png(frame)


@functools.lru_cache(maxsize=8)
def make_large_png(target_bytes: int) -> bytes:
    """A square RGB noise PNG of at least ``target_bytes`` (noise costs ~3 bytes per pixel)."""
    if target_bytes < 1:
        raise ValueError("target_bytes must be positive")
    side = max(16, math.ceil(math.sqrt(target_bytes / 3)))
    while True:
        data = make_png(side, side, noise=True)
        if len(data) >= target_bytes:
            return data
        side = math.ceil(side * 1.05) + 1


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return len(data).to_bytes(4, "big") + kind + data + crc.to_bytes(4, "big")


@functools.lru_cache(maxsize=4)
def make_png_bomb(width: int = 12_000, height: int = 12_000) -> bytes:
    """A valid, all-black RGB PNG of `width` x `height` that compresses ~1000:1 (a decompression bomb).

    12000x12000 is ~410 KB on disk and 432 MB of pixels once decoded. Built row by row with zlib, so
    making it never holds the decoded picture.
    """
    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])  # 8-bit RGB
    # Every row is filter type 0 then black pixels: the whole raw image is zero bytes, fed in blocks.
    remaining = (1 + 3 * width) * height
    block = bytes(min(remaining, 1 << 24))
    packer = zlib.compressobj(9)
    parts = []
    while remaining > 0:
        parts.append(packer.compress(block[:remaining]))
        remaining -= len(block)
    parts.append(packer.flush())
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", b"".join(parts))
        + _png_chunk(b"IEND", b"")
    )
