"""framecast.media: sniffing, probing, and fitting videos/images under upload limits (real PyAV)."""

from __future__ import annotations

import io
import math
import struct
import time
from pathlib import Path
from typing import Any, cast

import av
import pytest
from av.audio.stream import AudioStream
from av.video.codeccontext import VideoCodecContext
from av.video.stream import VideoStream
from hypothesis import given, settings
from hypothesis import strategies as st

from framecast import media
from framecast.media import MediaError, MediaInfo, VideoInfo, fit_image, fit_video, probe_video, sniff
from framecast.media.videofit import _ladder
from framecast.service.errors import MediaTooLarge, NotMedia
from tests.fakes import media as mediagen

# -------------------------------------------------------------------------------------------
# helpers


def _encode_still(codec: str, frame: av.VideoFrame, pix_fmt: str, **options: str) -> bytes:
    ctx = cast(VideoCodecContext, av.CodecContext.create(codec, "w"))
    ctx.width, ctx.height, ctx.pix_fmt = frame.width, frame.height, pix_fmt
    ctx.options = options
    frame = frame.reformat(format=pix_fmt)
    return b"".join(bytes(p) for p in (*ctx.encode(frame), *ctx.encode(None)))


def _png_frame(data: bytes) -> av.VideoFrame:
    with av.open(io.BytesIO(data), "r", format="png_pipe") as container:
        return next(container.decode(video=0))


def _jpeg(width: int = 64, height: int = 48, *, noise: bool = False) -> bytes:
    frame = _png_frame(mediagen.make_png(width, height, noise=noise))
    return _encode_still("mjpeg", frame.reformat(format="yuvj420p"), "yuvj420p")


def _webp(width: int = 64, height: int = 48) -> bytes:
    return _encode_still("libwebp", _png_frame(mediagen.make_png(width, height)), "yuv420p")


def _rgba_png(width: int, height: int) -> bytes:
    """Noise RGB with a left-to-right alpha ramp (some pixels really are transparent)."""
    rgb = _png_frame(mediagen.make_png(width, height, noise=True)).reformat(format="rgba")
    plane = rgb.planes[0]
    buf = bytearray(bytes(plane))
    ramp = bytes(x * 255 // max(1, width - 1) for x in range(width))
    for y in range(height):
        start = y * plane.line_size
        buf[start + 3 : start + 4 * width : 4] = ramp
    plane.update(bytes(buf))
    return _encode_still("png", rgb, "rgba")


def _decode_video(data: bytes) -> dict[str, Any]:
    """Decode everything: geometry, frame count, duration, streams, the first frame."""
    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        assert stream.duration is not None and stream.time_base is not None
        return {
            "width": stream.codec_context.width,
            "height": stream.codec_context.height,
            "frames": len(frames),
            "duration": float(stream.duration * stream.time_base),
            "audio": bool(container.streams.audio),
            "first": frames[0],
            "codec": stream.codec_context.name,
        }


def _luma(frame: av.VideoFrame) -> bytes:
    gray = frame.reformat(format="gray")
    plane = gray.planes[0]
    raw = bytes(plane)
    return b"".join(raw[y * plane.line_size : y * plane.line_size + gray.width] for y in range(gray.height))


def _psnr(a: bytes, b: bytes) -> float:
    mse = sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) / len(a)
    return 99.0 if mse == 0 else 10 * math.log10(255**2 / mse)


def _decode_image(data: bytes) -> av.VideoFrame:
    info = sniff(data)
    assert info is not None and info.kind == "image"
    fmt = {"png": "png_pipe", "jpg": "jpeg_pipe", "webp": "webp_pipe"}[info.ext]
    with av.open(io.BytesIO(data), "r", format=fmt) as container:
        return next(container.decode(video=0))


# -------------------------------------------------------------------------------------------
# sniff


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00isomiso2", MediaInfo("video", "mp4", "video/mp4")),
        (b"\x00\x00\x00\x14ftypqt  \x00\x00\x00\x00", MediaInfo("video", "mov", "video/quicktime")),
        (b"\x00\x00\x00\x08wide\x00\x00\x00\x00mdat", MediaInfo("video", "mov", "video/quicktime")),
        (b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\x82\x84webm", MediaInfo("video", "webm", "video/webm")),
        (
            b"\x1a\x45\xdf\xa3\xa3\x42\x86\x81\x01\x42\x82\x88matroska",
            MediaInfo("video", "mkv", "video/x-matroska"),
        ),
        (b"GIF89a\x01\x00\x01\x00", MediaInfo("image", "gif", "image/gif")),
        (b"GIF87a\x01\x00\x01\x00", MediaInfo("image", "gif", "image/gif")),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", MediaInfo("image", "png", "image/png")),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", MediaInfo("image", "jpg", "image/jpeg")),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 ", MediaInfo("image", "webp", "image/webp")),
        (b"RIFF\x24\x00\x00\x00WAVEfmt ", None),
        (b"<!DOCTYPE html><html>", None),
        (b"", None),
        (b"\x00\x00", None),
    ],
)
def test_sniff_magic(head: bytes, expected: MediaInfo | None) -> None:
    assert sniff(head) == expected


def test_sniff_real_files() -> None:
    assert sniff(mediagen.make_mp4()) == MediaInfo("video", "mp4", "video/mp4")
    assert sniff(mediagen.make_png()) == MediaInfo("image", "png", "image/png")
    assert sniff(_jpeg()) == MediaInfo("image", "jpg", "image/jpeg")
    assert sniff(_webp()) == MediaInfo("image", "webp", "image/webp")


# -------------------------------------------------------------------------------------------
# probe_video


def test_probe_video() -> None:
    info = probe_video(mediagen.make_mp4(320, 240, 24, 24))
    assert info == VideoInfo(width=320, height=240, frames=24, duration=1.0, fps=24.0, has_audio=False)


def test_probe_video_with_audio() -> None:
    info = probe_video(mediagen.make_mp4(160, 120, 12, 12, audio=True))
    assert (info.width, info.height, info.frames, info.fps, info.has_audio) == (160, 120, 12, 12.0, True)
    assert info.duration == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"garbage" * 100,
        b"\x00\x00\x00\x20ftypisom" + b"\x00" * 500,  # looks like MP4, isn't
        mediagen.make_mp4()[:2000],  # truncated (moov at the end is gone)
        mediagen.make_png(),  # an image is not a video
    ],
)
def test_probe_video_rejects_undecodable(data: bytes) -> None:
    with pytest.raises(MediaError):
        probe_video(data)


# -------------------------------------------------------------------------------------------
# fit_video


def test_fit_video_returns_input_when_it_fits() -> None:
    data = mediagen.make_mp4()
    assert fit_video(data, 10 * 1024 * 1024) is data
    assert fit_video(data, math.ceil(len(data) / 0.97)) is data


def test_fit_video_slack_zero_accepts_exact_limit() -> None:
    data = mediagen.make_mp4()
    assert fit_video(data, len(data), slack=0) is data


@pytest.fixture(scope="module")
def noisy_clip() -> bytes:
    data = mediagen.make_large_mp4(3 * 1024 * 1024, width=256, height=192)
    assert len(data) >= 3 * 1024 * 1024
    return data


@pytest.mark.parametrize("limit", [1024 * 1024, 300_000])
def test_fit_video_shrinks_oversized(noisy_clip: bytes, limit: int) -> None:
    src = probe_video(noisy_clip)
    out = fit_video(noisy_clip, limit)
    assert out is not None
    assert len(out) <= limit
    assert sniff(out) == MediaInfo("video", "mp4", "video/mp4")
    got = _decode_video(out)
    assert got["codec"] == "h264"
    assert abs(got["frames"] - src.frames) <= 1
    assert got["duration"] == pytest.approx(src.duration, abs=1 / src.fps + 1e-6)
    assert got["width"] % 2 == 0 and got["height"] % 2 == 0
    assert got["width"] <= src.width and got["height"] <= src.height
    assert got["width"] / got["height"] == pytest.approx(src.width / src.height, rel=0.05)
    first = got["first"]
    assert first.key_frame and first.pict_type == av.video.frame.PictureType.I
    # faststart: the index comes before the media data
    assert out.find(b"moov") < out.find(b"mdat")
    # the result is what probe_video says too
    info = probe_video(out)
    assert abs(info.frames - src.frames) <= 1


def test_fit_video_impossible_limit_returns_none(noisy_clip: bytes) -> None:
    started = time.perf_counter()
    assert fit_video(noisy_clip, 2048) is None
    assert time.perf_counter() - started < 5


def test_fit_video_never_exceeds_limit_across_limits() -> None:
    data = mediagen.make_mp4(320, 240, 48, 24, noise=True)
    for limit in (len(data) - 1, len(data) // 2, 120_000, 40_000, 12_000, 4_000):
        out = fit_video(data, limit)
        if out is not None:
            assert len(out) <= limit
            assert _decode_video(out)["frames"] == 48


def test_fit_video_keeps_first_frame_sharp() -> None:
    """Frame 0 is the poster Discord shows: it gets more bits than an average frame."""
    data = mediagen.make_large_mp4(1_500_000, width=320, height=240, seconds=2, noise=48)
    limit = 160_000
    out = fit_video(data, limit)
    assert out is not None and len(out) <= limit
    with av.open(io.BytesIO(data), "r") as a, av.open(io.BytesIO(out), "r") as b:
        pairs = list(zip(a.decode(video=0), b.decode(video=0), strict=True))
    assert (pairs[0][1].width, pairs[0][1].height) == (320, 240)
    first = _psnr(_luma(pairs[0][0]), _luma(pairs[0][1]))
    later = [_psnr(_luma(x), _luma(y)) for x, y in pairs[12::12]]
    assert first > sum(later) / len(later)


def test_fit_video_keeps_or_drops_audio() -> None:
    data = mediagen.make_mp4(320, 240, 48, 24, noise=True, audio=True)
    roomy = fit_video(data, len(data) // 2)
    assert roomy is not None and len(roomy) <= len(data) // 2
    got = _decode_video(roomy)
    assert got["audio"] and got["frames"] == 48
    with av.open(io.BytesIO(roomy), "r") as container:
        assert container.streams.audio[0].codec_context.name == "aac"
    tight = fit_video(data, 30_000)
    assert tight is not None and len(tight) <= 30_000
    assert _decode_video(tight)["frames"] == 48


@pytest.mark.parametrize(
    "data",
    [
        b"\x00" * 5000,
        b"\x00\x00\x00\x20ftypisom" + b"\xab" * 5000,
        mediagen.make_mp4(noise=True)[:60_000],
    ],
)
def test_fit_video_garbage_raises_media_error(data: bytes) -> None:
    with pytest.raises(MediaError):
        fit_video(data, 1000)


def test_fit_video_bad_slack() -> None:
    with pytest.raises(ValueError):
        fit_video(mediagen.make_mp4(), 1000, slack=1.0)


def test_ladder_is_even_and_shrinking() -> None:
    sizes = _ladder(1152, 768, 144)
    assert sizes == [(1152, 768), (810, 540), (540, 360), (360, 240), (216, 144)]
    portrait = _ladder(768, 1152, 144)
    assert portrait[1] == (540, 810)
    assert _ladder(321, 241, 144) == [(320, 240), (192, 144)]
    assert _ladder(160, 120, 144) == [(160, 120)]


# -------------------------------------------------------------------------------------------
# fit_image


def test_fit_image_returns_input_when_it_fits() -> None:
    data = mediagen.make_png()
    out = fit_image(data, 1024 * 1024)
    assert out is not None and out[0] is data and out[1] == "png"
    jpeg = _jpeg()
    assert fit_image(jpeg, 1024 * 1024) == (jpeg, "jpg")


@pytest.fixture(scope="module")
def large_png() -> bytes:
    data = mediagen.make_large_png(1024 * 1024)
    assert len(data) >= 1024 * 1024
    return data


@pytest.mark.parametrize("limit", [500_000, 60_000])
def test_fit_image_shrinks_oversized_png(large_png: bytes, limit: int) -> None:
    out = fit_image(large_png, limit)
    assert out is not None
    data, ext = out
    assert len(data) <= limit
    info = sniff(data)
    assert info is not None and info.ext == ext == "jpg"
    frame = _decode_image(data)
    src = _png_frame(large_png)
    assert frame.width <= src.width
    assert frame.width / frame.height == pytest.approx(src.width / src.height, rel=0.05)
    # never a thumbnail: at least 256 px (or a quarter of the original) on the short side
    assert min(frame.width, frame.height) >= min(
        min(src.width, src.height), max(256, min(src.width, src.height) // 4)
    )


def test_fit_image_gives_up_rather_than_return_a_thumbnail(large_png: bytes) -> None:
    # 5 kB could only hold a few dozen pixels of noise: the link serves the member better.
    assert fit_image(large_png, 5_000) is None


def test_fit_image_prefers_lossless_png_when_it_fits() -> None:
    # A gradient the ffmpeg PNG encoder stores without prediction compresses a lot with it.
    src = _png_frame(mediagen.make_png(512, 512))
    plain = _encode_still("png", src, "rgb24", pred="none", compression_level="1")
    optimized = fit_image(plain, len(plain) - 1)
    assert optimized is not None
    data, ext = optimized
    assert ext == "png" and len(data) < len(plain)
    assert _luma(_decode_image(data)) == _luma(src)


def test_fit_image_transparent_png_goes_webp() -> None:
    data = _rgba_png(256, 256)
    out = fit_image(data, 40_000)
    assert out is not None
    webp, ext = out
    assert ext == "webp" and len(webp) <= 40_000
    frame = _decode_image(webp)
    assert frame.format.name == "yuva420p"


def test_fit_image_jpeg_stays_jpeg() -> None:
    data = _jpeg(640, 480, noise=True)
    out = fit_image(data, len(data) // 3)
    assert out is not None
    jpeg, ext = out
    assert ext == "jpg" and len(jpeg) <= len(data) // 3
    assert _decode_image(jpeg).width > 0


def _gif(path: Path, frames: int) -> bytes:
    """A noisy GIF (the GIF muxer needs a real file)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("gif", rate=10)
        stream.width, stream.height, stream.pix_fmt = 128, 96, "rgb8"
        for index in range(frames):
            frame = _png_frame(mediagen.make_png(128, 96 + index, noise=True))
            frame = frame.reformat(height=96, format="rgb8")
            frame.pts = index
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path.read_bytes()


def test_fit_image_gif(tmp_path: Path) -> None:
    still = _gif(tmp_path / "still.gif", 1)
    assert sniff(still) == MediaInfo("image", "gif", "image/gif")
    out = fit_image(still, len(still) // 2)
    assert out is not None and len(out[0]) <= len(still) // 2 and out[1] in ("png", "jpg")
    animated = _gif(tmp_path / "animated.gif", 3)
    assert fit_image(animated, len(animated) * 2) == (animated, "gif")
    # Re-compressing would lose the animation: let the caller post the link instead.
    assert fit_image(animated, len(animated) // 2) is None


def test_fit_image_16_bit_png_becomes_8_bit_png() -> None:
    frame = _png_frame(mediagen.make_png(120, 80, noise=True))
    deep = _encode_still("png", frame, "rgb48be")
    out = fit_image(deep, len(deep) - 1)
    assert out is not None and out[1] == "png" and len(out[0]) < len(deep) // 1.5
    assert _luma(_decode_image(out[0])) == _luma(frame)


def test_fit_image_impossible_returns_none(large_png: bytes) -> None:
    assert fit_image(large_png, 200) is None


@pytest.mark.parametrize(
    "data",
    [
        b"garbage" * 100,
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 3000,
        b"\xff\xd8\xff" + b"\x17" * 3000,
        mediagen.make_mp4(),
    ],
)
def test_fit_image_garbage_raises_media_error(data: bytes) -> None:
    with pytest.raises(MediaError):
        fit_image(data, 1000)


# -------------------------------------------------------------------------------------------
# mediagen


def test_mediagen_is_deterministic_and_sized() -> None:
    assert mediagen.make_mp4.__wrapped__(64, 48, 4, 4) == mediagen.make_mp4.__wrapped__(64, 48, 4, 4)
    assert mediagen.make_png.__wrapped__(32, 32, noise=True) == mediagen.make_png.__wrapped__(
        32, 32, noise=True
    )
    big = mediagen.make_large_mp4(200_000, width=128, height=96, seconds=1.0)
    assert len(big) >= 200_000 and probe_video(big).frames == 24
    assert len(mediagen.make_large_png(100_000)) >= 100_000


# -------------------------------------------------------------------------------------------
# header-only dimensions and result checks (not media, decompression bombs)


def _still(codec: str, pix_fmt: str, width: int = 200, height: int = 100, **options: str) -> bytes:
    return _encode_still(codec, _png_frame(mediagen.make_png(width, height)), pix_fmt, **options)


def _video(fmt: str, codec: str, width: int = 176, height: int = 144) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as container:
        stream = cast(VideoStream, container.add_stream(codec, rate=12))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index in range(3):
            frame = av.VideoFrame(width, height, "yuv420p")
            for plane in frame.planes:
                plane.update(bytes([index * 40]) * (plane.line_size * plane.height))
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return buf.getvalue()


def _lying_mp4(width: int, height: int) -> bytes:
    """A real 320x240 H.264 MP4 whose track header and sample description claim `width` x `height`."""
    data = bytearray(mediagen.make_mp4(320, 240, 6, 6))
    tkhd = data.index(b"tkhd") + 4  # payload start (version 0 in PyAV's output)
    data[tkhd + 76 : tkhd + 84] = (width << 16).to_bytes(4, "big") + (height << 16).to_bytes(4, "big")
    avc1 = data.index(b"avc1", data.index(b"stsd")) + 4
    data[avc1 + 24 : avc1 + 28] = width.to_bytes(2, "big") + height.to_bytes(2, "big")
    return bytes(data)


BMP_CORE = (
    b"BM"
    + bytes(4)
    + bytes(4)
    + (26).to_bytes(4, "little")
    + (12).to_bytes(4, "little")
    + struct.pack("<HH", 300, 20)
)
HTML_502 = b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body><center><h1>502 Bad Gateway</h1></center></body></html>"


def test_sniff_bmp_and_still_image_brands() -> None:
    assert sniff(_still("bmp", "bgr24")) == MediaInfo("image", "bmp", "image/bmp")
    assert sniff(b"BM and then some text that is not a bitmap") is None
    assert sniff(b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1") is None  # AVIF: not a video


@pytest.mark.parametrize(
    ("codec", "pix_fmt", "options"),
    [
        ("png", "rgb24", {}),
        ("mjpeg", "yuvj420p", {}),
        ("libwebp", "yuv420p", {}),  # lossy: "VP8 "
        ("libwebp", "yuv420p", {"lossless": "1"}),  # "VP8L"
        ("libwebp", "yuva420p", {}),  # with alpha: "VP8X"
        ("bmp", "bgr24", {}),
    ],
)
def test_image_dimensions_of_real_files(codec: str, pix_fmt: str, options: dict[str, str]) -> None:
    data = _still(codec, pix_fmt, 200, 100, **options)
    assert media.image_dimensions(data) == (200, 100)


def test_image_dimensions_of_gif_jpeg_with_exif_and_core_bmp(tmp_path: Path) -> None:
    assert media.image_dimensions(_gif(tmp_path / "a.gif", 1)) == (128, 96)
    jpeg = _jpeg(64, 48)
    # An APP1 segment carrying a fake thumbnail's SOF marker: skipped by its length.
    app1 = b"Exif\x00\x00" + b"\xff\xc0\x00\x11\x08\x99\x99\x99\x99" + bytes(20)
    with_exif = jpeg[:2] + b"\xff\xe1" + (len(app1) + 2).to_bytes(2, "big") + app1 + jpeg[2:]
    assert media.image_dimensions(with_exif) == (64, 48)
    assert media.image_dimensions(b"\xff\xd8\xff\xff\xff" + jpeg[3:]) == (64, 48)  # fill bytes
    assert media.image_dimensions(BMP_CORE) == (300, 20)
    top_down = bytearray(_still("bmp", "bgr24", 40, 30))
    top_down[22:26] = (-30).to_bytes(4, "little", signed=True)
    assert media.image_dimensions(bytes(top_down)) == (40, 30)


def test_image_dimensions_of_a_bomb_without_decoding() -> None:
    bomb = mediagen.make_png_bomb()
    assert len(bomb) < 500_000
    started = time.process_time()  # this process's CPU: what decoding would cost, whatever the load
    assert media.image_dimensions(bomb) == (12_000, 12_000)
    assert time.process_time() - started < 0.1


@pytest.mark.parametrize(
    "data",
    [
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00",  # cut inside IHDR
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIDAT" + bytes(13),  # no IHDR first
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + bytes(13),  # 0 x 0
        b"\xff\xd8\xff\xe0\x00\x10JFIF\x00",  # JPEG cut before any frame header
        b"\xff\xd8\xff\xda\x00\x08" + bytes(20),  # scan data before a frame header
        b"\xff\xd8\xff\xe0\x00\x01" + bytes(20),  # segment length below 2
        b"GIF89a\x01",
        b"GIF89a\x00\x00\x00\x00",
        b"RIFF\x24\x00\x00\x00WEBPVP8 " + bytes(14),  # no key frame start code
        b"RIFF\x24\x00\x00\x00WEBPVP8L" + bytes(14),  # no signature byte
        b"RIFF\x24\x00\x00\x00WEBPALPH" + bytes(14),
        b"RIFF\x24\x00\x00\x00WEBPVP8X",
        BMP_CORE[:20],
        BMP_CORE[:18] + bytes(4),  # 0 x 0
    ],
)
def test_image_dimensions_refuse_broken_headers(data: bytes) -> None:
    assert sniff(data) is not None and sniff(data).kind == "image"  # type: ignore[union-attr]
    with pytest.raises(MediaError):
        media.image_dimensions(data)


@pytest.mark.parametrize(
    ("fmt", "codec"), [("mp4", "libx264"), ("mov", "libx264"), ("webm", "libvpx"), ("matroska", "libx264")]
)
def test_video_dimensions_of_real_containers(fmt: str, codec: str) -> None:
    data = _video(fmt, codec, 176, 144)
    assert media.video_dimensions(data) == (176, 144)


def test_video_dimensions_with_audio_and_odd_boxes() -> None:
    clip = mediagen.make_mp4(160, 120, 12, 12, audio=True)
    assert media.video_dimensions(clip) == (160, 120)  # the audio track's zero size is ignored
    # A 64-bit "free" box in front of the rest, and a last box whose size 0 means "to the end".
    ftyp_end = int.from_bytes(clip[:4], "big")
    free64 = (1).to_bytes(4, "big") + b"free" + (24).to_bytes(8, "big") + bytes(8)
    tail = (0).to_bytes(4, "big") + b"skip" + bytes(16)
    assert media.video_dimensions(clip[:ftyp_end] + free64 + clip[ftyp_end:] + tail) == (160, 120)
    assert media.video_dimensions(_lying_mp4(16, 16)) == (16, 16)  # what the container says
    assert media.video_dimensions(mediagen.make_png()) is None
    assert media.video_dimensions(b"\x00\x00\x00\x20ftypisom" + bytes(24)) is None  # no moov: undeclared


def test_container_walkers_stop_on_a_flood_of_tiny_boxes() -> None:
    flood = b"\x00\x00\x00\x14ftypisom\x00\x00\x02\x00isom" + b"\x00\x00\x00\x08free" * 1_000_000
    started = time.process_time()  # CPU spent walking, not the wall clock of a loaded machine
    assert media.video_dimensions(flood) is None
    assert time.process_time() - started < 2.0


@settings(max_examples=300, deadline=None)
@given(
    magic=st.sampled_from(
        [
            b"\x89PNG\r\n\x1a\n",
            b"\xff\xd8\xff",
            b"GIF89a",
            b"RIFF\x00\x00\x00\x00WEBPVP8X",
            b"RIFF\x00\x00\x00\x00WEBPVP8 ",
            b"RIFF\x00\x00\x00\x00WEBPVP8L",
            b"BM\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x28\x00\x00\x00",
            b"\x00\x00\x00\x18ftypisom",
            b"\x00\x00\x00\x08moov",
            b"\x1a\x45\xdf\xa3",
            b"<html>",
            b"",
        ]
    ),
    rest=st.binary(max_size=300),
    limit=st.integers(min_value=1, max_value=10**9),
)
def test_header_readers_raise_only_their_documented_errors(magic: bytes, rest: bytes, limit: int) -> None:
    data = magic + rest
    for reader in (media.image_dimensions, media.video_dimensions):
        try:
            size = reader(data)
        except MediaError:
            continue
        assert size is None or (size[0] > 0 and size[1] > 0)
    for expected in ("video", "image"):
        try:
            info = media.check_result(data, expected, limit)  # type: ignore[arg-type]
        except (NotMedia, MediaTooLarge):
            continue
        assert info.kind == expected


def test_check_result_wants_the_kind_the_job_asked_for() -> None:
    clip, picture = mediagen.make_mp4(), mediagen.make_png()
    assert media.check_result(clip, "video", 40_000_000).ext == "mp4"
    assert media.check_result(picture, "image", 40_000_000).ext == "png"
    with pytest.raises(NotMedia, match="not a video"):
        media.check_result(HTML_502, "video", 40_000_000)
    with pytest.raises(NotMedia, match="not a video"):
        media.check_result(picture, "video", 40_000_000)
    with pytest.raises(NotMedia, match="not an image"):
        media.check_result(clip, "image", 40_000_000)
    with pytest.raises(NotMedia, match="broken"):
        media.check_result(b"\x89PNG\r\n\x1a\n\x00\x00", "image", 40_000_000)


def test_check_result_refuses_pictures_over_the_pixel_limit() -> None:
    with pytest.raises(MediaTooLarge) as info:
        media.check_result(mediagen.make_png_bomb(), "image", 40_000_000)
    assert (info.value.width, info.value.height, info.value.limit) == (12_000, 12_000, 40_000_000)
    with pytest.raises(MediaTooLarge):
        media.check_result(mediagen.make_mp4(320, 240), "video", 320 * 240 - 1)
    assert media.check_result(mediagen.make_mp4(320, 240), "video", 320 * 240).kind == "video"


def test_fit_refuses_a_bomb_before_decoding_it() -> None:
    bomb, clip = mediagen.make_png_bomb(), mediagen.make_large_mp4(200_000, seconds=1.0)
    started = time.process_time()  # CPU (all threads): decoding either would cost seconds of it
    with pytest.raises(MediaTooLarge):
        fit_image(bomb, 100_000, max_pixels=40_000_000)
    with pytest.raises(MediaTooLarge):
        fit_video(clip, 100_000, max_pixels=1000)
    assert time.process_time() - started < 1.0


def test_decoders_enforce_the_limit_when_a_header_lies() -> None:
    liar = _lying_mp4(16, 16)  # 256 pixels declared, 320x240 in the bitstream
    assert probe_video(liar).width == 320  # without a limit it decodes fine
    with pytest.raises(MediaError) as info:
        probe_video(liar, max_pixels=1000)
    assert not isinstance(info.value, MediaTooLarge)  # the decoder refused, not the header check
    with pytest.raises(MediaError):
        fit_video(liar, len(liar) // 2, max_pixels=1000)


def test_reencode_deadline_in_the_past_stops_before_encoding(noisy_clip: bytes, large_png: bytes) -> None:
    with pytest.raises(media.ReencodeTimeout):
        fit_video(noisy_clip, len(noisy_clip) // 2, deadline=time.monotonic() - 1)
    with pytest.raises(media.ReencodeTimeout):
        fit_image(large_png, len(large_png) // 2, deadline=time.monotonic() - 1)
    assert issubclass(media.ReencodeTimeout, MediaError)  # the runner's "fit failed" path handles it


def test_reencode_deadline_ends_a_long_encode_midway(noisy_clip: bytes) -> None:
    unlimited = time.monotonic()
    fit_video(noisy_clip, 200_000)
    full = time.monotonic() - unlimited
    started = time.monotonic()
    with pytest.raises(media.ReencodeTimeout):
        fit_video(noisy_clip, 200_000, deadline=started + full / 10)
    assert time.monotonic() - started < full / 2


def _audio_only(fmt: str, codec: str) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as container:
        stream = cast(AudioStream, container.add_stream(codec, rate=48_000, layout="stereo"))
        for start in range(0, 48_000, 1024):
            frame = av.AudioFrame(format="fltp", layout="stereo", samples=1024)
            frame.sample_rate = 48_000
            frame.pts = start
            for plane in frame.planes:
                plane.update(bytes(plane.buffer_size))
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return buf.getvalue()


@pytest.mark.parametrize(
    ("fmt", "codec"), [("mp4", "aac"), ("ipod", "aac"), ("matroska", "aac"), ("webm", "libopus")]
)
def test_a_container_without_a_video_track_is_not_a_video(fmt: str, codec: str) -> None:
    # An .m4a or a .weba has a video container's magic bytes, but nothing to watch: never uploaded
    # as framecast-N.mp4 (it would be, being small enough to need no re-encode).
    sound = _audio_only(fmt, codec)
    assert sniff(sound) is not None and sniff(sound).kind == "video"  # type: ignore[union-attr]
    with pytest.raises(NotMedia, match="not a video"):
        media.check_result(sound, "video", 40_000_000)


def test_a_container_with_no_track_list_is_not_a_video() -> None:
    ftyp = b"\x00\x00\x00\x14ftypisom\x00\x00\x02\x00isom"
    for data in (ftyp + b"<html>502 Bad Gateway</html>", ftyp + b"\x00\x00\x00\x08free" * 100):
        with pytest.raises(NotMedia, match="not a video"):
            media.check_result(data, "video", 40_000_000)
    # Real videos of every container still pass, with or without sound.
    assert media.check_result(mediagen.make_mp4(160, 120, 12, 12, audio=True), "video", 40_000_000)
    for fmt, codec in (("mov", "libx264"), ("webm", "libvpx"), ("matroska", "libx264")):
        assert media.check_result(_video(fmt, codec, 176, 144), "video", 40_000_000).kind == "video"
