"""framecast.service.body: read_body's pace rule (the caps and inflation: test_answer_cost.py).

No network: the body is an aiohttp StreamReader this test feeds, on windows of tenths of a second.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import aiohttp
import pytest
from aiohttp.base_protocol import BaseProtocol
from multidict import CIMultiDict

from framecast.service.body import BodyStalled, BodyTooLarge, read_body


class Connected(BaseProtocol):
    """A connection that stays open, with no socket behind it (the test feeds the stream)."""

    @property
    def connected(self) -> bool:
        return True


class Body:
    """A response's headers and its body's stream, fed by the test."""

    def __init__(self, headers: dict[str, str] | None = None, length: int | None = None) -> None:
        loop = asyncio.get_running_loop()
        self.content = aiohttp.StreamReader(Connected(loop), 2**16, loop=loop)
        self.headers = CIMultiDict(headers or {})
        self.content_length = length

    @property
    def response(self) -> aiohttp.ClientResponse:
        return cast(aiohttp.ClientResponse, self)

    async def send(self, data: bytes, *, size: int, every: float, end: bool = True) -> None:
        """`data`, `size` bytes every `every` seconds, then the end of the body (with `end`)."""
        for offset in range(0, len(data), size):
            self.content.feed_data(data[offset : offset + size])
            await asyncio.sleep(every)
        if end:
            self.content.feed_eof()


@contextmanager
def sending(body: Body, data: bytes, *, size: int, every: float) -> Iterator[None]:
    task = asyncio.get_running_loop().create_task(body.send(data, size=size, every=every))
    try:
        yield
    finally:
        task.cancel()


async def test_a_trickle_fails_as_stalled_at_its_first_windows_end() -> None:
    body = Body()
    loop = asyncio.get_running_loop()
    began = loop.time()
    with sending(body, b"x" * 10_000, size=10, every=0.02), pytest.raises(BodyStalled) as info:
        await read_body(body.response, 10**6, pace=(0.2, 1000))  # 500 bytes a second: a tenth of it
    assert 0.19 < loop.time() - began < 0.39  # one window, judged when it ends
    reason = info.value.reason
    assert reason.startswith("the download stalled: ") and reason.endswith(
        " bytes in 0.2 s (at least 1000 needed)"
    )
    got = int(reason.split()[3])
    assert 0 < got < 1000
    assert str(info.value) == reason


async def test_silence_after_a_good_window_fails_at_the_next_windows_end() -> None:
    body = Body()
    body.content.feed_data(b"x" * 5000)  # came with the headers: it counts for the first window
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(BodyStalled, match=r"^the download stalled: no data for 0\.2 s$"):
        await read_body(body.response, 10**6, pace=(0.2, 1000))
    assert 0.38 < loop.time() - began < 0.59  # the first window passed, the second brought nothing


async def test_a_steady_slow_body_passes_window_after_window() -> None:
    body = Body()
    payload = bytes(range(256)) * 12  # 3 kB at 5 kB a second: three windows, ten times their floor
    with sending(body, payload, size=100, every=0.02):
        assert await read_body(body.response, 10**6, pace=(0.2, 100)) == payload


async def test_a_window_counts_the_bytes_off_the_wire() -> None:
    # Inflated, the trickle below would be a megabyte in the first window; on the wire it is not.
    packed = zlib.compress(b"\x00" * 10**6)
    assert len(packed) < 2000
    body = Body({"Content-Encoding": "deflate"})
    with sending(body, packed, size=10, every=0.02), pytest.raises(BodyStalled, match="bytes in 0.2 s"):
        await read_body(body.response, 10**7, pace=(0.2, 1000))
    # Fast enough, the same body arrives inflated.
    body = Body({"Content-Encoding": "deflate"})
    with sending(body, packed, size=500, every=0.02):
        assert await read_body(body.response, 10**7, pace=(0.2, 1000)) == b"\x00" * 10**6


async def test_the_caps_still_apply_with_a_pace() -> None:
    body = Body(length=5000)
    with pytest.raises(BodyTooLarge) as info:
        await read_body(body.response, 1000, pace=(0.2, 1))  # the declared length: before reading
    assert info.value.size == 5000
    body = Body()
    body.content.feed_data(b"x" * 5000)
    with pytest.raises(BodyTooLarge):
        await read_body(body.response, 1000, pace=(0.2, 1))


async def test_without_a_pace_a_pause_is_waited_out() -> None:
    body = Body()
    body.content.feed_data(b"a" * 10)
    reading = asyncio.get_running_loop().create_task(read_body(body.response, 10**6))
    await asyncio.sleep(0.3)  # no window: nothing to fail, however long nothing comes
    assert not reading.done()
    body.content.feed_data(b"b" * 10)
    body.content.feed_eof()
    assert await reading == b"a" * 10 + b"b" * 10
