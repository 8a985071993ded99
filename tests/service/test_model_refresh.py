"""The model list read at once after a refused model: at most once a minute per key, on that key.

:meth:`ModelCache.refresh_now` runs between the periodic refreshes when a create names a model the
service no longer knows. Each read is a ``GET /v1/models`` with the job's key, through that key's
budget; a burst of refused creates on one key shares one read.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from framecast.config import Secret
from framecast.keys.budget import RequestBudget
from framecast.service import GenerationClient
from framecast.service.model_list import REFRESH_GAP, ModelCache
from tests.fakes.clock import ManualClock
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL, FakeService

OTHER_KEY = "server-own-key"


@pytest.fixture
async def clients(
    fake_service: FakeService,
) -> AsyncIterator[tuple[ManualClock, Callable[[str], GenerationClient]]]:
    """A manual clock, and a client per API key (each with its own budget)."""
    clock = ManualClock()
    session = aiohttp.ClientSession()
    made: list[GenerationClient] = []
    fake_service.api_keys.add(OTHER_KEY)

    def client(key: str) -> GenerationClient:
        made.append(
            GenerationClient(
                session,
                base_url=fake_service.base_url,
                api_key=Secret(key),
                budget=RequestBudget(100, 60.0, clock=clock, backoff_base=0.01, backoff_max=0.1),
                clock=clock,
                request_timeout=5,
                retry_max=1,
                backoff_base=0.01,
                backoff_max=0.1,
                rng=random.Random(1),
            )
        )
        return made[-1]

    try:
        yield clock, client
    finally:
        for c in made:
            await c.close()
        await session.close()


def cache(client: GenerationClient, clock: ManualClock) -> ModelCache:
    return ModelCache(
        client,
        clock=clock,
        refresh_every=600,
        default_video=VIDEO_MODEL,
        default_image=IMAGE_MODEL,
    )


def list_calls(fake: FakeService, key: str) -> int:
    return sum(1 for r in fake.requests if r.path == "/v1/models" and r.key == key)


async def test_a_refresh_is_read_at_most_once_a_minute_per_key(
    fake_service: FakeService, clients: tuple[ManualClock, Callable[[str], GenerationClient]]
) -> None:
    clock, client = clients
    operator, server = client(fake_service.api_key), client(OTHER_KEY)
    models = cache(operator, clock)
    assert REFRESH_GAP == 60.0
    fake_service.rename_model(VIDEO_MODEL, "svc-video-v2.1")
    assert await models.refresh_now(operator) is True
    assert models.ids("video") == ("svc-video-v2.1",) and models.default("video") == "svc-video-v2.1"
    await clock.advance(59)
    assert await models.refresh_now(operator) is False  # within the minute: the list as it is
    # Another key has its own minute, and pays for its own read.
    assert await models.refresh_now(server) is True
    assert (list_calls(fake_service, fake_service.api_key), list_calls(fake_service, OTHER_KEY)) == (1, 1)
    await clock.advance(1)
    assert await models.refresh_now(operator) is True
    assert list_calls(fake_service, fake_service.api_key) == 2
    assert await models.refresh_now(server) is False  # 1 s after its read


async def test_the_gap_is_configurable(
    fake_service: FakeService, clients: tuple[ManualClock, Callable[[str], GenerationClient]]
) -> None:
    clock, client = clients
    operator = client(fake_service.api_key)
    models = ModelCache(
        operator, clock=clock, refresh_every=600, default_video="v", default_image="i", refresh_gap=5
    )
    assert await models.refresh_now(operator) is True
    await clock.advance(5)
    assert await models.refresh_now(operator) is True
    assert list_calls(fake_service, fake_service.api_key) == 2


async def test_a_burst_of_refusals_on_one_key_shares_one_read(
    fake_service: FakeService, clients: tuple[ManualClock, Callable[[str], GenerationClient]]
) -> None:
    clock, client = clients
    operator = client(fake_service.api_key)
    models = cache(operator, clock)
    fake_service.rename_model(VIDEO_MODEL, "svc-video-v3")
    read = await asyncio.gather(*(models.refresh_now(operator) for _ in range(5)))
    assert sorted(read) == [False] * 4 + [True]
    assert list_calls(fake_service, fake_service.api_key) == 1
    assert models.ids("video") == ("svc-video-v3",)  # every waiter finds the new list


async def test_a_failed_read_keeps_the_list_and_still_counts_for_the_minute(
    fake_service: FakeService, clients: tuple[ManualClock, Callable[[str], GenerationClient]]
) -> None:
    clock, client = clients
    operator = client(fake_service.api_key)
    models = cache(operator, clock)
    assert await models.refresh_now(operator) is True
    await clock.advance(60)
    fake_service.path_scripted["/v1/models"] = [(401, {"error": "bad key"}, None)]
    assert await models.refresh_now(operator) is False
    assert models.ids("video") == (VIDEO_MODEL,)
    assert await models.refresh_now(operator) is False  # no second request within the minute
    assert list_calls(fake_service, fake_service.api_key) == 2
