"""A server key's check is charged to the budget the key then uses, in one process and through Redis.

``/settings key set`` checks a key with one model-list call before its account opens. That request
must count in the key's window like every later one, or the first window holds one request more
than the key's limit and the service answers 429 a moment later. The same holds for a key removed
and set again within a window. Against the real fake service (over HTTP), which keeps a rate-limit
window per key and records every request.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from cryptography.fernet import Fernet

from framecast.accounts import Accounts, KeyCheck
from framecast.clock import SystemClock
from framecast.config import RateLimit, Secret, Settings
from framecast.jobs.queues import GuildQueues
from framecast.keys.budget import KeptBudgets, RequestBudget
from framecast.keys.shared_budget import KEY_PREFIX, budget_key_id
from framecast.keys.vault import KeyVault
from framecast.planner.planner import PlannerSettings
from framecast.storage import Store
from tests.fakes.clock import ManualClock
from tests.fakes.gen_service import FakeService
from tests.fakes.keys import TEST_REDIS_KEY_SECRET
from tests.redis_server import REDIS_HOST, REDIS_MISSING, REDIS_PORT, redis_answers

GUILD, ADMIN = 601, 78
LIMIT, WINDOW = 4, 1.0  # the key's limit: 4 requests per rolling second (the service's and ours)


def settings_for(fake: FakeService, tmp_path: Path, redis_url: str | None) -> Settings:
    return Settings(
        discord_token=Secret("discord-token-not-used-here"),
        gen_api_base_url=fake.base_url,
        gen_api_key=Secret(fake.api_key),
        gen_rate_limit=RateLimit(LIMIT, WINDOW),
        gen_retry_max=3,
        gen_backoff_base=0.01,
        gen_backoff_max=0.05,
        gen_request_timeout=5,
        database_path=tmp_path / "data" / "framecast.sqlite3",
        key_encryption_secret=Secret(Fernet.generate_key().decode()),
        redis_url=Secret(redis_url) if redis_url is not None else None,
        redis_key_secret=Secret(TEST_REDIS_KEY_SECRET) if redis_url is not None else None,
    )


@pytest.fixture(params=["in-process", "redis"])
async def accounts(
    request: pytest.FixtureRequest, fake_service: FakeService, tmp_path: Path
) -> AsyncIterator[Accounts]:
    """Accounts whose budgets live in this process, or in Redis (skipped without one)."""
    redis_url = None
    if request.param == "redis":
        if not redis_answers():
            pytest.skip(REDIS_MISSING)
        redis_url = f"redis://{REDIS_HOST}:{REDIS_PORT}/0"
    settings = settings_for(fake_service, tmp_path, redis_url)
    store = await Store.open(settings.database_path)
    session = aiohttp.ClientSession()
    opened = await Accounts.open(
        settings=settings,
        session=session,
        clock=SystemClock(),
        store=store,
        queues=GuildQueues(),
        vault=KeyVault(enabled=True, secret=settings.key_encryption_secret),
        planner_settings=PlannerSettings(poll_interval=0.01, poll_max_interval=0.05),
    )
    try:
        yield opened
    finally:
        await opened.close()
        await session.close()
        await store.close()


@pytest.fixture
async def server_key(fake_service: FakeService) -> AsyncIterator[str]:
    """A key the fake service accepts, new for each test (its Redis window starts empty)."""
    key = f"sk-server-{uuid.uuid4().hex}"
    fake_service.api_keys.add(key)
    fake_service.rate_limit = (LIMIT, WINDOW)
    yield key
    if redis_answers():
        client = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT)
        try:
            kid = budget_key_id(key, TEST_REDIS_KEY_SECRET)
            await client.delete(f"{KEY_PREFIX}{kid}", f"{KEY_PREFIX}{kid}:pause", f"{KEY_PREFIX}{kid}:epoch")
        finally:
            await client.aclose()


async def set_key(accounts: Accounts, key: str) -> None:
    """What ``/settings key set`` does (framecast.app.admins.Admins.set_key): check, then store and use."""
    assert await accounts.check_key(key) is KeyCheck.OK
    await accounts.set_guild_key(GUILD, key, by=ADMIN)


async def burst(accounts: Accounts, n: int) -> None:
    client = accounts.for_guild(GUILD).client
    await asyncio.gather(*(client.list_models() for _ in range(n)))


async def test_a_keys_check_counts_in_its_first_window_so_a_burst_right_after_gets_no_429(
    accounts: Accounts, fake_service: FakeService, server_key: str
) -> None:
    await set_key(accounts, server_key)
    await burst(accounts, LIMIT)  # a full window's worth, demanded at once
    assert fake_service.count(status=429) == 0
    assert fake_service.count(key=server_key) == 1 + LIMIT
    assert fake_service.max_in_window(WINDOW, key=server_key) <= LIMIT


async def test_a_key_removed_and_set_again_within_a_window_keeps_counting_its_requests(
    accounts: Accounts, fake_service: FakeService, server_key: str
) -> None:
    await set_key(accounts, server_key)
    await burst(accounts, LIMIT - 1)  # with the check: the window is full
    assert await accounts.remove_guild_key(GUILD, by=ADMIN)
    await set_key(accounts, server_key)  # its check waits for the window, as the next request would
    await burst(accounts, LIMIT)
    assert fake_service.count(status=429) == 0
    assert fake_service.count(key=server_key) == 2 + 2 * LIMIT - 1
    assert fake_service.max_in_window(WINDOW, key=server_key) <= LIMIT


async def test_a_refused_keys_budget_is_not_kept_past_its_window() -> None:
    clock = ManualClock()
    kept: KeptBudgets[str] = KeptBudgets(clock)
    budget = kept.get("k", lambda: RequestBudget(LIMIT, 10.0, clock=clock))
    assert kept.get("k", lambda: RequestBudget(LIMIT, 10.0, clock=clock)) is budget  # one per key
    async with budget.slot():
        pass
    await clock.advance(9.0)
    assert len(kept) == 1  # its request still counts
    await clock.advance(20.0)
    assert len(kept) == 0 and kept.take("k") is None
    # A kept budget handed over to an account is the account's: never closed from here.
    other = kept.get("j", lambda: RequestBudget(LIMIT, 10.0, clock=clock))
    assert kept.take("j") is other and len(kept) == 0
    kept.close()
