"""A result download must keep moving: one that stalls fails early with its reason, instead of
holding a results slot (``RESULTS_AT_ONCE``) until its total timeout; a slow one that keeps moving
arrives. Real HTTP to the fake service on 127.0.0.1, with small total timeouts (the stall windows
are a share of it: :func:`~framecast.service.download.stall_rule`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from framecast.service import GenerationClient
from framecast.service.download import STALL_MIN_RATE, STALL_WINDOW, stall_rule
from framecast.service.errors import DownloadError
from tests.fakes.gen_service import FakeService
from tests.service.clients import new_client


@pytest.fixture
async def client(fake_service: FakeService) -> AsyncIterator[GenerationClient]:
    async with aiohttp.ClientSession() as session:
        made = new_client(fake_service, session, result_hosts=("localhost",))
        try:
            yield made
        finally:
            await made.close()


def file_requests(fake: FakeService) -> int:
    return sum(1 for r in fake.requests if r.path.startswith("/files/"))


def test_the_rule_passes_a_slow_cdn_and_fails_a_trickle() -> None:
    # Production: GEN_DOWNLOAD_TIMEOUT=300 gives 30 s windows of at least 120 KiB (4 KiB/s).
    window, least = stall_rule(300.0)
    assert (window, least) == (STALL_WINDOW, STALL_MIN_RATE * 30)
    assert 20_000 * window >= 4 * least  # a slow CDN at 20 KB/s: four times the floor
    assert (1 / 0.3) * window < least / 1000  # a byte every 0.3 s: a thousandth of it
    # A short total timeout gets windows of a third of it, at the same floor.
    window, least = stall_rule(10.0)
    assert window == pytest.approx(10 / 3) and least == int(STALL_MIN_RATE * 10 / 3)


@pytest.mark.parametrize("foreign", [False, True])
async def test_a_trickling_download_fails_as_stalled_long_before_its_timeout(
    fake_service: FakeService, client: GenerationClient, foreign: bool
) -> None:
    fake_service.video_payload = b"\x01" * 50_000
    fake_service.file_trickle = (1, 0.05)  # 20 bytes a second, the whole length promised
    base = fake_service.alt_base_url if foreign else fake_service.base_url
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(DownloadError, match=r"^the download stalled: \d+ bytes in 1 s") as info:
        await client.download(base + "/files/x.mp4", max_bytes=10**6, timeout=3.0)  # windows of 1 s
    assert info.value.code == "download_failed"
    assert loop.time() - began < 2.0  # one window, not the 3 s total
    assert file_requests(fake_service) == 1  # failed, not fetched again


async def test_a_download_that_stops_sending_fails_as_stalled(
    fake_service: FakeService, client: GenerationClient
) -> None:
    fake_service.video_payload = b"\x01" * 200_000
    fake_service.file_stall = 3.0  # the first 64 kB, then nothing for 3 s
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(DownloadError, match=r"^the download stalled: no data for 0\.5 s$"):
        await client.download(fake_service.base_url + "/files/x.mp4", max_bytes=10**6, timeout=1.5)
    assert 0.9 < loop.time() - began < 1.4  # the first window brought 64 kB, the second nothing
    assert file_requests(fake_service) == 1


async def test_a_slow_download_that_keeps_moving_arrives(
    fake_service: FakeService, client: GenerationClient
) -> None:
    payload = bytes(range(256)) * 160  # 40 kB
    fake_service.video_payload = payload
    fake_service.file_trickle = (2048, 0.1)  # 20 kB a second: about 2 s, over a window and more
    data = await client.download(fake_service.base_url + "/files/x.mp4", max_bytes=10**6, timeout=4.0)
    assert data == payload
    assert file_requests(fake_service) == 1
