"""Names in Redis (framecast.keys.redis_names): an HMAC under the shared secret, and processes whose
secrets differ are stopped at start-up, with one line naming REDIS_KEY_SECRET."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from cryptography.fernet import Fernet
from redis.exceptions import RedisError

from framecast.accounts import Accounts
from framecast.clock import SystemClock
from framecast.config import ConfigError, Secret, Settings
from framecast.jobs.queues import GuildQueues
from framecast.keys.redis_names import SECRET_MARK, SecretMismatch, check_secret
from framecast.keys.vault import KeyVault
from framecast.planner.planner import PlannerSettings
from framecast.storage import Store
from tests.workers import redis_url

REDIS_URL = redis_url()  # this xdist worker's own database
ONE, OTHER = "one-" + "a" * 40, "other-" + "b" * 40


@pytest.fixture
async def redis() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
    try:
        await client.ping()
    except (RedisError, OSError):
        await client.aclose()
        pytest.skip(f"no Redis at {REDIS_URL}")
    await client.delete(SECRET_MARK)
    try:
        yield client
    finally:
        await client.delete(SECRET_MARK)
        await client.aclose()


async def test_processes_with_the_same_secret_agree_and_a_different_one_is_stopped(
    redis: aioredis.Redis,
) -> None:
    assert await check_secret(redis, Secret(ONE))
    assert await check_secret(redis, ONE)  # a second process with the same secret
    mark = await redis.get(SECRET_MARK)
    assert mark is not None and ONE.encode() not in mark and 0 < await redis.ttl(SECRET_MARK)
    with pytest.raises(SecretMismatch) as differs:
        await check_secret(redis, Secret(OTHER))
    assert isinstance(differs.value, ConfigError) and differs.value.variable == "REDIS_KEY_SECRET"
    assert str(differs.value).startswith("REDIS_KEY_SECRET: ") and len(str(differs.value).splitlines()) == 1
    assert ONE not in str(differs.value) and OTHER not in str(differs.value)
    # Changed everywhere at once: once the mark is gone, the new secret is accepted.
    await redis.delete(SECRET_MARK)
    assert await check_secret(redis, OTHER)


async def test_an_unreachable_redis_skips_the_check_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    try:
        assert not await check_secret(client, ONE)
    finally:
        await client.aclose()
    assert any("REDIS_KEY_SECRET check" in r.getMessage() for r in caplog.records)


async def test_accounts_refuse_to_open_beside_processes_with_another_secret(
    redis: aioredis.Redis, tmp_path: Path
) -> None:
    def settings(secret: str) -> Settings:
        return Settings(  # type: ignore[call-arg]
            discord_token=Secret("discord-token-not-used-here"),
            gen_api_base_url="https://gen.example.com",
            gen_api_key=Secret("sk-" + "k" * 30),
            database_path=tmp_path / "framecast.sqlite3",
            key_encryption_secret=Secret(Fernet.generate_key().decode()),
            redis_url=Secret(REDIS_URL),
            redis_key_secret=Secret(secret),
        )

    store = await Store.open(tmp_path / "framecast.sqlite3")
    session = aiohttp.ClientSession()

    async def open_accounts(secret: str) -> Accounts:
        s = settings(secret)
        return await Accounts.open(
            settings=s,
            session=session,
            clock=SystemClock(),
            store=store,
            queues=GuildQueues(),
            vault=KeyVault(enabled=True, secret=s.key_encryption_secret),
            planner_settings=PlannerSettings(poll_interval=0.01, poll_max_interval=0.05),
        )

    try:
        first = await open_accounts(ONE)
        await first.close()
        with pytest.raises(SecretMismatch):
            await open_accounts(OTHER)
    finally:
        await session.close()
        await store.close()
