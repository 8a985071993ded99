"""The service client the service tests drive: real HTTP to the fake service, and its requests.

Every test of ``framecast.service`` builds its client here, so a new constructor argument is one
change; each test overrides only what it is about (the budget's limit, the retries, the caps).
"""

from __future__ import annotations

import random
from typing import Any

import aiohttp

from framecast.clock import Clock, SystemClock
from framecast.config import Secret
from framecast.keys.budget import RequestBudget
from framecast.service import GenerationClient, ImageParams, VideoParams
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL, FakeService

#: The product's default video and image: what a test creates when the request is not its subject.
VIDEO = VideoParams(model=VIDEO_MODEL, prompt="a cat", width=1152, height=768, num_frames=121, frame_rate=24)
IMAGE = ImageParams(model=IMAGE_MODEL, prompt="a cat", size="1024x1024")


def new_client(
    fake: FakeService,
    session: aiohttp.ClientSession,
    *,
    clock: Clock | None = None,
    limit: int = 1000,
    window: float = 1.0,
    key: str | None = None,
    retry_max: int = 4,
    backoff_base: float = 0.02,
    backoff_max: float = 0.5,
    request_timeout: float = 5.0,
    base_url: str | None = None,
    **options: Any,
) -> GenerationClient:
    """A client of `fake` on `session`, with its own budget (`limit` requests a `window`, which
    binds only when a test lowers it) and seeded jitter; the caller closes it."""
    clock = clock or SystemClock()
    budget = RequestBudget(
        limit, window, clock=clock, backoff_base=backoff_base, backoff_max=backoff_max, rng=random.Random(1)
    )
    return GenerationClient(
        session,
        base_url=base_url or fake.base_url,
        api_key=Secret(key if key is not None else fake.api_key),
        budget=budget,
        clock=clock,
        request_timeout=request_timeout,
        retry_max=retry_max,
        backoff_base=backoff_base,
        backoff_max=backoff_max,
        rng=random.Random(2),
        **options,
    )
