"""Reading an HTTP body with a size cap counted after decompression.

aiohttp's own decompression is off for everything the client fetches (``auto_decompress=False``):
depending on its version it may inflate a whole network chunk at once, and a 64 KiB chunk of a gzip
bomb is 64 MiB of output. :func:`read_body` inflates by itself, never producing much more than the
cap, and stops reading the moment the cap is passed. A pace rule, when given, fails a body that
stops moving (:class:`BodyStalled`).
"""

from __future__ import annotations

import asyncio
import io
import zlib
from collections.abc import Iterator
from typing import Any, Protocol

import aiohttp

__all__ = [
    "ACCEPT_ENCODING",
    "INFLATE_STEP",
    "BodyScan",
    "BodyStalled",
    "BodyTooLarge",
    "BodyUndecodable",
    "read_body",
]

#: Only what :func:`read_body` inflates itself (no brotli or zstd, whose decoders it does not bound).
#: A body may stack them (``gzip, deflate``), up to three.
ACCEPT_ENCODING = "gzip, deflate"
_READ_CHUNK = 64 * 1024
#: Most bytes inflated in one step. Between steps the reader checks its caps and the answer's
#: scan, and gives the event loop a turn: a bomb never holds the loop for more than a step.
INFLATE_STEP = 1024 * 1024


class BodyTooLarge(Exception):
    """The body is larger than allowed (``size``: the declared length, when known)."""

    def __init__(self, size: int | None = None) -> None:
        self.size = size
        super().__init__(size)


class BodyUndecodable(Exception):
    """The body's Content-Encoding is unknown or its compressed data is broken."""


class BodyStalled(Exception):
    """The body stopped moving: a window of the pace rule brought too few bytes (``reason`` says)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class _Pace:
    """The pace rule on one body: every `window` seconds from now, at least `least` bytes.

    A window is judged at its end: when the wait for a chunk reaches it, or when a chunk is read
    after it (read late, the reader busy inflating: it counts for the window that ended).
    """

    def __init__(self, window: float, least: int) -> None:
        self.window = window
        self.least = least
        self._loop = asyncio.get_running_loop()
        self._end = self._loop.time() + window
        self._got = 0  # the bytes the current window brought

    async def read(self, content: aiohttp.StreamReader) -> bytes:
        """The next chunk of `content` (``b""`` at its end); raises :class:`BodyStalled`."""
        while True:
            timer = asyncio.timeout_at(self._end)
            try:
                async with timer:
                    chunk = await content.read(_READ_CHUNK)
            except TimeoutError:
                if not timer.expired():
                    raise  # not this window's (a read timeout of the connection's own)
                self._judge()
                continue
            if chunk:
                self._got += len(chunk)
                if self._loop.time() >= self._end:
                    self._judge()
            return chunk

    def _judge(self) -> None:
        """End the window: raise if it brought too little, else start the next one."""
        got = self._got
        if got == 0:
            raise BodyStalled(f"the download stalled: no data for {self.window:.3g} s")
        if got < self.least:
            raise BodyStalled(
                f"the download stalled: {got} bytes in {self.window:.3g} s (at least {self.least} needed)"
            )
        self._got = 0
        self._end = self._loop.time() + self.window


class _Inflater:
    """Inflates a ``gzip`` or ``deflate`` body, never producing more bytes than asked for.

    Each step stops one byte past the room left (see the module's docstring for why).
    """

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in ("gzip", "x-gzip")
        self._inflate: Any = None  # zlib's decompressobj type is not public
        self.produced = 0  # bytes this layer has put out so far (counted by the reader)

    def feed(self, data: bytes, room: int) -> Iterator[bytes]:
        """Inflate `data` in pieces of at most :data:`INFLATE_STEP` bytes, ``room + 1`` in all at most.

        More than `room` bytes in all means too large. Stepping bounds what one call holds, and
        lets the reader hand the loop back (and refuse what it has seen) between pieces.
        """
        produced = 0
        while True:
            if self._inflate is None:
                if not data:
                    return
                if self._gzip:
                    wbits = 16 + zlib.MAX_WBITS
                else:  # "deflate" is meant to be zlib-wrapped, but raw deflate is common too
                    wbits = zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS
                self._inflate = zlib.decompressobj(wbits)
            want = min(room - produced + 1, INFLATE_STEP)
            try:
                out = self._inflate.decompress(data, want)
            except zlib.error:
                raise BodyUndecodable() from None
            produced += len(out)
            if out:
                yield out
            if produced > room:
                return
            if self._inflate.eof:
                data = self._inflate.unused_data
                if data and not self._gzip:
                    raise BodyUndecodable()  # bytes after the end of the deflate stream
                self._inflate = None  # a gzip body may hold several members
            else:
                data = self._inflate.unconsumed_tail
                if not data and len(out) < want:
                    return  # all input taken and no output held back: wait for more

    def finish(self) -> None:
        """Raise :class:`BodyUndecodable` if the body ended inside a compressed stream."""
        if self._inflate is not None and not self._inflate.eof:
            raise BodyUndecodable()


#: Most codings one body may stack (``Content-Encoding: gzip, gzip``): each layer is capped alone.
_MAX_LAYERS = 3


def _layers(header: str) -> list[_Inflater] | None:
    """The inflaters that undo `header`'s codings, last applied first; ``None`` if one is unknown."""
    codings = [c.strip().lower() for c in header.split(",")]
    codings = [c for c in codings if c not in ("", "identity")]
    if len(codings) > _MAX_LAYERS or any(c not in ("gzip", "x-gzip", "deflate") for c in codings):
        return None
    return [_Inflater(c) for c in reversed(codings)]


class BodyScan(Protocol):
    """Looks at a body while it is read, and may refuse it by raising (see :class:`~framecast.service.jsonscan.JsonScan`)."""

    def feed(self, data: bytes | bytearray | memoryview, *, final: bool = False) -> None:
        """Look at `data`, the body so far (the previous call's with more appended)."""

    def finish(self, data: bytes | bytearray | memoryview) -> object:
        """Look at the complete body `data`."""


def _steps(layers: list[_Inflater], data: bytes, limit: int) -> Iterator[bytes]:
    """`data` through every layer, in steps; raises :class:`BodyTooLarge` when a layer passes `limit`."""
    if not layers:
        if data:
            yield data
        return
    head, rest = layers[0], layers[1:]
    for piece in head.feed(data, limit - head.produced):
        head.produced += len(piece)
        if head.produced > limit:
            raise BodyTooLarge()
        if rest:
            yield from _steps(rest, piece, limit)
        else:
            yield piece


async def read_body(
    resp: aiohttp.ClientResponse,
    limit: int,
    *,
    truncate: bool = False,
    scan: BodyScan | None = None,
    pace: tuple[float, int] | None = None,
) -> bytes:
    """The body of `resp`, inflated, streaming, never holding much more than `limit` bytes.

    The cap counts the bytes after decompression, and the compressed bytes too (and, for stacked
    codings such as ``gzip, gzip``, the bytes between the layers). Past it, raises
    :class:`BodyTooLarge`, or with `truncate` returns the first `limit` bytes (error bodies, whose
    beginning is all a message needs). Raises :class:`BodyUndecodable` for an unknown or broken
    Content-Encoding (with `truncate`: returns what could be read).

    Inflation goes in steps of :data:`INFLATE_STEP` bytes, the loop given a turn after each full
    step. `scan`, when given, sees the body after every step and once complete: whatever it
    raises (a JSON answer holding too many values) stops the reading at once and propagates.

    `pace`, when given, is ``(window, least)``: each `window` seconds from the start of reading
    (the headers are in) must bring at least `least` bytes off the wire, else the reading stops
    with :class:`BodyStalled` (curl's ``--speed-time``/``--speed-limit``; never truncated).
    """
    layers = _layers(resp.headers.get("Content-Encoding", ""))
    if layers is None:
        if truncate:
            return b""
        raise BodyUndecodable()
    length = resp.content_length
    if length is not None and length > limit and not truncate:
        raise BodyTooLarge(length if not layers else None)
    # A BytesIO, not a bytearray: its getvalue() hands over the buffer without a copy, so a
    # large answer is held once, not twice.
    buf = io.BytesIO()
    size = 0
    wire = 0
    paced = _Pace(*pace) if pace is not None else None
    try:
        while True:
            if paced is None:
                chunk = await resp.content.read(_READ_CHUNK)
            else:
                chunk = await paced.read(resp.content)
            if not chunk:
                break
            wire += len(chunk)
            for piece in _steps(layers, chunk, limit):
                buf.write(piece)
                size += len(piece)
                if size > limit:
                    raise BodyTooLarge()
                if scan is not None:
                    with buf.getbuffer() as view:
                        scan.feed(view)
                if len(piece) >= INFLATE_STEP:
                    await asyncio.sleep(0)  # a turn for everyone else between big steps
            if wire > limit:
                raise BodyTooLarge()  # stop reading at once: the rest may be gigabytes
        for layer in layers:
            layer.finish()
    except (BodyTooLarge, BodyUndecodable):
        if truncate:
            return buf.getvalue()[:limit]
        raise
    if scan is not None:
        with buf.getbuffer() as view:
            scan.finish(view)
    return buf.getvalue()
