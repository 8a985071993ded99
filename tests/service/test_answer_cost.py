"""What an answer of the service may cost: items and depth counted first.

(The pre-scan's own properties are in ``test_json_prescan.py``.)

A 48 KB gzip of ``{"data": [{},{},...]}`` just under the image answer's 48 MiB cap is 16 million
objects: it used to cost 1.5 GB and seconds of a blocked event loop. These tests prove that the
pre-scan counts exactly what the parser would build, that such answers are refused quickly and
cheaply, and that the loop keeps serving other requests while one is handled.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from framecast.clock import SystemClock
from framecast.service import GenerationClient
from framecast.service.errors import BadResponse
from framecast.service.jsonread import JSON_MAX_DEPTH, load_json
from tests.fakes.gen_service import POLL_PATH, FakeService
from tests.service.clients import IMAGE, VIDEO, new_client

# 48 MiB: three times GEN_IMAGE_JSON_MAX_BYTES' default, a cap an operator may well set; the bombs
# just under it are the worst an answer may be, and the client below is given that cap.
IMAGE_CAP = 50_331_648


def gzip_of_repeats(head: bytes, unit: bytes, tail: bytes, size: int) -> bytes:
    """The gzip of `head` + `unit`*n + `tail`, n as large as fits in `size` bytes, built in pieces."""
    count = (size - len(head) - len(tail)) // len(unit)
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [packer.compress(head)]
    block = unit * (1 << 16)
    whole, rest = divmod(count, 1 << 16)
    for _ in range(whole):
        out.append(packer.compress(block))
    out += [packer.compress(unit * rest + tail), packer.flush()]
    return b"".join(out)


def object_bomb(size: int = IMAGE_CAP - 16) -> bytes:
    """``{"data": [{},{},...,{}]}`` just under `size` bytes once inflated, gzip-compressed."""
    return gzip_of_repeats(b'{"data": [', b"{},", b"{}]}", size)


def list_bomb(size: int = IMAGE_CAP - 16) -> bytes:
    """``{"data": [[[[]]],[[[]]],...]}``: lists nested within the depth cap, just under `size`."""
    return gzip_of_repeats(b'{"data": [', b"[[[[]]]],", b"[]]}", size)


# -- bombs, one function at a time ----------------------------------------------------------------


@pytest.mark.parametrize("flat", [b"{}", b"[]", b"0", b'""'])
def test_a_flat_bomb_is_refused_by_the_item_cap(flat: bytes) -> None:
    body = b'{"data": [' + b",".join([flat] * 200_000) + b"]}"
    started = time.process_time()  # CPU spent, whatever else the machine runs
    with pytest.raises(BadResponse, match="more than 100000 JSON values"):
        load_json(body)
    assert time.process_time() - started < 1.0


def test_nested_lists_are_refused() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(BadResponse, match="nested deeper"):
        load_json(deep)
    wide = b"[" + b",".join([b"[[[[[[]]]]]]"] * 50_000) + b"]"
    with pytest.raises(BadResponse, match="more than"):
        load_json(wide)
    assert load_json(b"[" * JSON_MAX_DEPTH + b"]" * JSON_MAX_DEPTH) is not None


# -- through the client, with the fake service ----------------------------------------------------


@pytest.fixture
async def service() -> AsyncIterator[FakeService]:
    fake = FakeService()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def client(service: FakeService) -> AsyncIterator[GenerationClient]:
    clock = SystemClock()
    async with aiohttp.ClientSession() as session:
        made = new_client(
            service,
            session,
            clock=clock,
            request_timeout=30.0,
            image_json_max_bytes=IMAGE_CAP,
            retry_max=1,
            malformed_polls=1,  # one answer's cost is measured here: a create is not sent again
            backoff_base=0.01,
            backoff_max=0.05,
        )
        try:
            yield made
        finally:
            await made.close()


@pytest.mark.parametrize("bomb", [object_bomb, list_bomb], ids=["objects", "nested-lists"])
async def test_a_48kb_bomb_is_refused_quickly_and_cheaply(
    service: FakeService, client: GenerationClient, bomb: Any
) -> None:
    payload = bomb()
    assert len(payload) < 100_000  # a few dozen kilobytes on the wire
    service.path_scripted["/v1/images/generations"] = [(200, payload, {"Content-Encoding": "gzip"})]
    tracemalloc.start()
    try:
        started = time.process_time()  # CPU (the fake's side included): cheap, not just quick
        with pytest.raises(BadResponse, match="more than 10000 JSON values"):
            await client.create_image(IMAGE)
        elapsed = time.process_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 2.0
    assert peak < 16 * 1024 * 1024  # the old code built 16 million objects (over a gigabyte)


async def test_other_requests_are_served_while_a_bomb_is_handled(
    service: FakeService, client: GenerationClient
) -> None:
    service.path_scripted["/v1/images/generations"] = [(200, object_bomb(), {"Content-Encoding": "gzip"})]
    stalls: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            stalls.append(time.perf_counter() - before - 0.005)

    beat = asyncio.create_task(heartbeat())
    bomb = asyncio.create_task(client.create_image(IMAGE))
    await asyncio.sleep(0)  # the bomb's request goes first, the member's right after it
    started = time.perf_counter()
    task_id = await client.create_video(VIDEO)
    served_in = time.perf_counter() - started
    with pytest.raises(BadResponse):
        await bomb
    done.set()
    await beat
    assert task_id
    assert served_in < 1.0
    assert max(stalls) < 0.25, f"the loop stalled {max(stalls):.3f} s"


async def test_create_and_poll_answers_are_capped_at_what_they_can_carry(
    service: FakeService, client: GenerationClient
) -> None:
    # 100 KB of valid JSON: under GEN_JSON_MAX_BYTES (1 MiB), far over what a create answer holds.
    padded = b'{"video_id": "t1", "note": "' + b"x" * 100_000 + b'"}'
    service.path_scripted["/v1/videos"] = [(200, padded, None)]
    with pytest.raises(BadResponse, match="larger than the 65536-byte limit"):
        await client.create_video(VIDEO)
    service.path_scripted[POLL_PATH] = [(200, padded.replace(b"video_id", b"status"), None)]
    with pytest.raises(BadResponse, match="larger than the 65536-byte limit"):
        await client.poll_video("t1")
