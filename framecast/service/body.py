"""Reading an HTTP body with a size cap counted after decompression.

aiohttp's own decompression is off for everything the client fetches (``auto_decompress=False``):
depending on its version it may inflate a whole network chunk at once, and a 64 KiB chunk of a gzip
bomb is 64 MiB of output. :func:`read_body` inflates by itself, never producing much more than the
cap, and stops reading the moment the cap is passed.
"""

from __future__ import annotations

import zlib
from typing import Any

import aiohttp

__all__ = ["ACCEPT_ENCODING", "BodyTooLarge", "BodyUndecodable", "read_body"]

#: Only what :func:`read_body` inflates itself (no brotli or zstd, whose decoders it does not bound).
#: A body may stack them (``gzip, deflate``), up to three.
ACCEPT_ENCODING = "gzip, deflate"
_READ_CHUNK = 64 * 1024


class BodyTooLarge(Exception):
    """The body is larger than allowed (``size``: the declared length, when known)."""

    def __init__(self, size: int | None = None) -> None:
        self.size = size
        super().__init__(size)


class BodyUndecodable(Exception):
    """The body's Content-Encoding is unknown or its compressed data is broken."""


class _Inflater:
    """Inflates a ``gzip`` or ``deflate`` body, never producing more bytes than asked for.

    Each step stops one byte past the room left (see the module's docstring for why).
    """

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in ("gzip", "x-gzip")
        self._inflate: Any = None  # zlib's decompressobj type is not public

    def feed(self, data: bytes, room: int) -> bytes:
        """Inflate `data`; returns at most ``room + 1`` bytes (more than `room` means too large)."""
        out = bytearray()
        while data:
            if self._inflate is None:
                if self._gzip:
                    wbits = 16 + zlib.MAX_WBITS
                else:  # "deflate" is meant to be zlib-wrapped, but raw deflate is common too
                    wbits = zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS
                self._inflate = zlib.decompressobj(wbits)
            try:
                out += self._inflate.decompress(data, room - len(out) + 1)
            except zlib.error:
                raise BodyUndecodable() from None
            if len(out) > room:
                break
            data = b""
            if self._inflate.eof:
                data = self._inflate.unused_data
                if data and not self._gzip:
                    raise BodyUndecodable()  # bytes after the end of the deflate stream
                self._inflate = None  # a gzip body may hold several members
        return bytes(out)

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


async def read_body(resp: aiohttp.ClientResponse, limit: int, *, truncate: bool = False) -> bytes:
    """The body of `resp`, inflated, streaming, never holding much more than `limit` bytes.

    The cap counts the bytes after decompression, and the compressed bytes too (and, for stacked
    codings such as ``gzip, gzip``, the bytes between the layers). Past it, raises
    :class:`BodyTooLarge`, or with `truncate` returns the first `limit` bytes (error bodies, whose
    beginning is all a message needs). Raises :class:`BodyUndecodable` for an unknown or broken
    Content-Encoding (with `truncate`: returns what could be read).
    """
    layers = _layers(resp.headers.get("Content-Encoding", ""))
    if layers is None:
        if truncate:
            return b""
        raise BodyUndecodable()
    length = resp.content_length
    if length is not None and length > limit and not truncate:
        raise BodyTooLarge(length if not layers else None)
    buf = bytearray()
    wire = 0
    between = [0] * len(layers)  # bytes each layer has produced (the last one's are `buf`)
    try:
        async for chunk in resp.content.iter_chunked(_READ_CHUNK):
            wire += len(chunk)
            piece = chunk
            for index, layer in enumerate(layers):
                piece = layer.feed(piece, limit - between[index])
                between[index] += len(piece)
            buf += piece
            if len(buf) > limit or wire > limit or any(n > limit for n in between):
                # Stop reading at once: the rest may be gigabytes.
                if truncate:
                    return bytes(buf[:limit])
                raise BodyTooLarge()
        for layer in layers:
            layer.finish()
    except BodyUndecodable:
        if truncate:
            return bytes(buf[:limit])
        raise
    return bytes(buf)
