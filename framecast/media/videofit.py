"""Fitting a video under an upload size limit: re-encoding to H.264/AAC MP4 (:func:`fit_video`)."""

from __future__ import annotations

import io
import logging
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import av
from av.video.frame import PictureType
from av.video.reformatter import ColorRange

from framecast.media.probe import limit_decoder, open_input, probe_video
from framecast.media.types import MediaError, VideoInfo, check_deadline

__all__ = ["fit_video"]

log = logging.getLogger(__name__)


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
        open_input(data, max_pixels=max_pixels) as src,
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
        limit_decoder(istream, max_pixels)
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
            check_deadline(deadline)
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
    with open_input(data) as container:
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
        check_deadline(deadline)
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
