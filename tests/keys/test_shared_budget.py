"""The Redis-backed request budget against a real Redis on 127.0.0.1:6379 (skipped without one).

Several budgets on one key (separate connections, in this process and in separate OS processes)
must together never exceed N requests in any window; pauses are shared; priorities hold locally;
without Redis nothing is granted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import random
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from framecast.clock import Clock, ScaledClock, SystemClock
from framecast.config import Secret, load_settings
from framecast.keys.budget import RequestBudget
from framecast.keys.redis_names import connect
from framecast.keys.shared_budget import KEY_PREFIX, RedisBudget, budget_key_id, open_budget
from framecast.service.client import GenerationClient
from framecast.values.service_requests import Priority
from tests.e2e.servers import Relay
from tests.fakes.gen_service import FakeService
from tests.fakes.keys import TEST_REDIS_KEY_SECRET
from tests.redis_server import REDIS_HOST, REDIS_PORT, requires_redis
from tests.workers import free_port

ROOT = Path(__file__).resolve().parents[2]


pytestmark = requires_redis

Span = tuple[float, float]  # (granted, ended) in epoch seconds of this machine (the clock Redis uses too)


def max_in_window(times: list[float], window: float) -> int:
    """The most `times` in any half-open window [t, t + window) (a busiest window starts at a time)."""
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while j < len(times) and times[j] < t + window:
            j += 1
        best = max(best, j - i)
    return best


def check_spans(spans: list[Span], limit: int, window: float) -> None:
    """No window holds more than `limit` grants, nor `limit` "server receive" times (any point of a span)."""
    assert max_in_window([g for g, _ in spans], window) <= limit
    # The server receives a request somewhere between grant and end; the end-counted window covers any.
    assert max_in_window([(g + e) / 2 for g, e in spans], window) <= limit
    assert max_in_window([e for _, e in spans], window) <= limit


@pytest.fixture
async def key_id() -> AsyncIterator[str]:
    kid = f"test-{uuid.uuid4().hex[:12]}"
    yield kid
    client = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT)
    await client.delete(f"{KEY_PREFIX}{kid}", f"{KEY_PREFIX}{kid}:pause", f"{KEY_PREFIX}{kid}:epoch")
    await client.aclose()


def make(
    limit: int, window: float, key_id: str, port: int = REDIS_PORT, clock: Clock | None = None, **knobs: Any
) -> RedisBudget:
    """A budget on `key_id` with a Redis client of its own."""
    client = aioredis.Redis(
        host=REDIS_HOST,
        port=port,
        socket_timeout=2.0,
        socket_connect_timeout=2.0,
        retry=Retry(NoBackoff(), 0),
    )
    return RedisBudget(
        limit, window, clock=clock or SystemClock(), redis=client, key_id=key_id, owns_redis=True, **knobs
    )


@contextlib.asynccontextmanager
async def budgets(
    n: int, limit: int, window: float, key_id: str, **knobs: Any
) -> AsyncIterator[list[RedisBudget]]:
    """`n` budgets on one key, each with its own Redis connection pool."""
    made = [make(limit, window, key_id, **knobs) for _ in range(n)]
    try:
        yield made
    finally:
        for b in made:
            await b.aclose()


async def hammer(budget: RedisBudget, requests: int, spans: list[Span], rng: random.Random) -> None:
    for _ in range(requests):
        async with budget.slot(rng.choice(list(Priority))):
            granted = time.time()
            await asyncio.sleep(rng.uniform(0, 0.03))  # the request takes a while
            spans.append((granted, time.time()))


async def test_budgets_in_one_process_never_exceed_the_limit(key_id: str) -> None:
    limit, window = 5, 0.5
    spans: list[Span] = []
    rng = random.Random(11)
    t0 = time.monotonic()
    async with budgets(3, limit, window, key_id) as bs:
        await asyncio.gather(*(hammer(b, 4, spans, rng) for b in bs for _ in range(3)))  # 36 requests
        assert sum(b.granted_total for b in bs) == 36 and all(b.in_flight == 0 for b in bs)
    elapsed = time.monotonic() - t0
    check_spans(spans, limit, window)
    # 36 requests at 5 per 0.5 s need at least 7 windows (how few more: bench_sharedbudget's figure).
    assert elapsed >= 3.0, elapsed


async def test_scaled_clock_window_is_converted_for_redis(key_id: str) -> None:
    """Window and pauses are clock seconds; Redis counts real ones (ScaledClock(10): 4 s -> 0.4 s)."""
    spans: list[Span] = []
    budget = make(2, 4.0, key_id, clock=ScaledClock(10))
    try:
        t0 = time.monotonic()
        await asyncio.gather(*(hammer(budget, 2, spans, random.Random(i)) for i in range(3)))
        elapsed = time.monotonic() - t0
        check_spans(spans, 2, 0.4)
        assert elapsed >= 0.8, elapsed  # 6 requests, 2 per 0.4 real seconds: at least two windows
        assert 9.0 <= budget.penalize(retry_after=10.0) <= 11.0  # clock seconds: 1 real second
        probe = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT)
        left = 0
        for _ in range(100):
            if (left := await probe.pttl(budget.pause_key)) > 0:
                break
            await asyncio.sleep(0.01)
        assert 800 <= left <= 1100
        await probe.aclose()
    finally:
        await budget.aclose()


async def test_generation_clients_on_one_key_stay_under_the_service_limit(fake_service: FakeService) -> None:
    """Drop-in: two GenerationClients, each with its own RedisBudget on one key, as the server sees it."""
    fake_service.rate_limit = (4, 0.5)
    kid = budget_key_id(Secret(fake_service.api_key), TEST_REDIS_KEY_SECRET)
    budgets = [make(4, 0.5, kid, backoff_base=0.05, backoff_max=0.5) for _ in range(2)]
    try:
        async with aiohttp.ClientSession() as session:
            clients = [
                GenerationClient(
                    session,
                    base_url=fake_service.base_url,
                    api_key=Secret(fake_service.api_key),
                    budget=cast(RequestBudget, b),  # structurally the same interface
                    clock=SystemClock(),
                    request_timeout=5.0,
                    backoff_base=0.05,
                    backoff_max=0.5,
                )
                for b in budgets
            ]
            await asyncio.gather(*(c.list_models() for c in clients for _ in range(10)))
            for c in clients:
                await c.close()
        assert fake_service.count(status=429) == 0
        assert fake_service.max_in_window(0.5) <= 4
        assert sum(b.granted_total for b in budgets) == 20
    finally:
        for b in budgets:
            await b.aclose()
        cleanup = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT)
        await cleanup.delete(f"{KEY_PREFIX}{kid}", f"{KEY_PREFIX}{kid}:pause", f"{KEY_PREFIX}{kid}:epoch")
        await cleanup.aclose()


_WORKER = """
import asyncio, json, random, sys, time
sys.path.insert(0, sys.argv[1])
from framecast.keys.budget import RequestBudget
from framecast.values.service_requests import Priority
from framecast.clock import Clock, ScaledClock, SystemClock
from framecast.keys.shared_budget import RedisBudget
import redis.asyncio as aioredis

async def main(key_id, limit, window, start, seed):
    client = aioredis.Redis(host="127.0.0.1", port=6379)
    budget = RedisBudget(limit, window, clock=SystemClock(), redis=client, key_id=key_id, owns_redis=True)
    rng = random.Random(seed)
    spans = []
    async def task():
        for _ in range(6):
            async with budget.slot(rng.choice(list(Priority))):
                granted = time.time()
                await asyncio.sleep(rng.uniform(0, 0.02))
                spans.append((granted, time.time()))
    await asyncio.sleep(max(0.0, start - time.time()))
    await asyncio.gather(*(task() for _ in range(3)))
    await budget.aclose()
    print(json.dumps(spans))

asyncio.run(main(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])))
"""


async def test_three_processes_never_exceed_the_limit(key_id: str) -> None:
    limit, window = 6, 0.5
    start = time.time() + 1.0  # every process is up and connected before the race begins
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _WORKER,
            str(ROOT),
            key_id,
            str(limit),
            str(window),
            str(start),
            str(seed),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for seed in range(3)
    ]
    outs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), timeout=30)
    spans: list[Span] = []
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()
        spans.extend(tuple(s) for s in json.loads(out))  # type: ignore[misc]
    assert len(spans) == 3 * 3 * 6
    check_spans(spans, limit, window)
    assert min(g for g, _ in spans) >= start - 0.01
    # 54 requests at 6 per 0.5 s: at least 8 more windows after the first burst.
    assert max(e for _, e in spans) - start >= 8 * window


async def test_penalize_in_one_process_pauses_the_others(key_id: str) -> None:
    async with budgets(2, 10, 0.5, key_id, backoff_max=5.0) as (a, b):
        async with b.slot():
            pass  # b works before the 429
        delay = a.penalize(retry_after=1.0)
        assert 1.0 <= delay <= 1.1 and a.streak == 1
        probe = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT)
        for _ in range(100):  # the shared pause is written in the background
            if await probe.pttl(f"{KEY_PREFIX}{key_id}:pause") > 0:
                break
            await asyncio.sleep(0.01)
        await probe.aclose()
        t0 = time.monotonic()
        async with b.slot():
            waited = time.monotonic() - t0
        assert 0.85 <= waited <= 1.5, waited
        assert b.streak == 0  # the pause is shared, the streak (our own 429s) is not


async def test_a_429_pauses_other_processes_before_its_slot_frees(key_id: str) -> None:
    """The 429's pause reaches Redis before the slot that got it is released."""
    async with budgets(2, 1, 0.2, key_id, backoff_max=5.0) as (a, b):
        waiter_times: list[float] = []

        async def other() -> None:
            async with b.slot():
                waiter_times.append(time.monotonic())

        async with a.slot():
            task = asyncio.create_task(other())  # b waits for a's slot
            await asyncio.sleep(0.05)
            t0 = time.monotonic()
            a.penalize(retry_after=0.8)
        await asyncio.wait_for(task, timeout=5)
        assert waiter_times[0] - t0 >= 0.75


async def until(holds: Callable[[], bool]) -> None:
    """Wait until `holds()` (a state the budget reaches over Redis round trips, which a loaded
    machine slows: a fixed sleep lost that race); the test's own guard ends a wait that never does."""
    while not holds():  # noqa: ASYNC110 -- the budget signals no event for these states
        await asyncio.sleep(0.005)


async def test_priorities_are_respected_locally(key_id: str) -> None:
    async with budgets(1, 1, 0.2, key_id) as (budget,):
        order: list[str] = []
        gate = asyncio.Event()

        async def take(name: str, priority: Priority) -> None:
            async with budget.slot(priority):
                order.append(name)
                if name == "first":
                    await gate.wait()

        first = asyncio.create_task(take("first", Priority.NORMAL))
        await asyncio.wait_for(until(lambda: order == ["first"]), timeout=10)
        tasks = [
            asyncio.create_task(take(name, prio))
            for name, prio in [
                ("low", Priority.LOW),
                ("normal", Priority.NORMAL),
                ("high1", Priority.HIGH),
                ("progress", Priority.PROGRESS),
                ("high2", Priority.HIGH),
            ]
        ]
        await asyncio.wait_for(until(lambda: budget.waiting == 5), timeout=10)
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, *tasks), timeout=10)
        assert order == ["first", "high1", "high2", "normal", "progress", "low"]


async def test_cancelled_waiters_and_unused_grants_leave_no_trace(key_id: str) -> None:
    async with budgets(1, 2, 5.0, key_id) as (budget,):
        probe = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT)
        gate = asyncio.Event()

        async def hold() -> None:
            async with budget.slot():
                await gate.wait()

        holders = [asyncio.create_task(hold()) for _ in range(2)]
        await asyncio.wait_for(until(lambda: budget.in_flight == 2), timeout=10)
        waiter = asyncio.create_task(hold())
        await asyncio.wait_for(until(lambda: budget.waiting == 1), timeout=10)
        assert await probe.zcard(budget.key) == 2
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert budget.waiting == 0 and await probe.zcard(budget.key) == 2
        # Granted, then cancelled before the request ran: the slot goes back to Redis at once.
        for h in holders:
            h.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        await asyncio.wait_for(until(lambda: budget.in_flight == 0), timeout=10)
        assert await probe.zcard(budget.key) == 2  # they ran: ends count
        await probe.delete(budget.key)
        before = budget.granted_total
        late = asyncio.create_task(hold())
        while budget.granted_total == before:  # noqa: ASYNC110 -- cancel in the very step after the grant
            await asyncio.sleep(0)
        late.cancel()  # granted, cancelled before its request could start
        with pytest.raises(asyncio.CancelledError):
            await late
        assert budget.in_flight == 0
        for _ in range(100):
            if await probe.zcard(budget.key) == 0:
                break
            await asyncio.sleep(0.01)
        assert await probe.zcard(budget.key) == 0
        await probe.aclose()


async def test_long_request_keeps_its_slot_past_the_lease(key_id: str) -> None:
    """A request running longer than the lease keeps counting (heartbeat); a dead one's slot expires."""
    async with budgets(2, 1, 0.2, key_id, lease=0.3) as (a, b):
        release = asyncio.Event()

        async def long_request() -> float:
            async with a.slot():
                await release.wait()
            return time.monotonic()

        holder = asyncio.create_task(long_request())
        await asyncio.sleep(0.05)
        got = asyncio.create_task(b.slot().__aenter__())
        await asyncio.sleep(1.0)  # three leases
        assert not got.done()
        release.set()
        ended = await holder
        await asyncio.wait_for(got, timeout=2)
        assert time.monotonic() - ended >= 0.18  # one window after the end

        # A process that dies with a slot: no heartbeat, no release; the slot expires after lease + window.
        dead = make(1, 0.2, key_id, lease=0.3)
        probe = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT)
        await probe.delete(a.key)
        await dead.slot().__aenter__()
        dead.close()  # stops the heartbeat: as good as dead
        t0 = time.monotonic()
        async with a.slot():
            waited = time.monotonic() - t0
        assert 0.4 <= waited <= 1.2, waited
        await probe.aclose()
        await dead.aclose()


async def _proxy(port: int) -> asyncio.Server:
    """A TCP relay to the real Redis, to switch "Redis" on and off."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(REDIS_HOST, REDIS_PORT)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_server(handle, "127.0.0.1", port)


async def test_no_grant_without_redis_then_recovers(key_id: str, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    budget = make(5, 0.5, key_id, port=port, retry_base=0.05, retry_max=0.2)
    caplog.set_level(logging.INFO, logger="framecast.keys.shared_budget")
    granted = asyncio.Event()

    async def one() -> None:
        async with budget.slot():
            granted.set()

    task = asyncio.create_task(one())
    await until(lambda: budget.round_trips >= 4)  # several grants asked for, each refused
    assert not granted.is_set() and budget.granted_total == 0  # fail closed
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Redis unreachable" in warnings[0].getMessage()
    server = await _proxy(port)
    try:
        await asyncio.wait_for(task, timeout=5)
        assert granted.is_set()
        assert any("reachable again" in r.getMessage() for r in caplog.records)
    finally:
        await budget.aclose()
        server.close()


async def one_request(budget: RedisBudget) -> None:
    async with budget.slot():
        await asyncio.sleep(0)


async def test_after_an_outage_no_connection_from_before_it_fails_again(
    key_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    relay = Relay((REDIS_HOST, REDIS_PORT))
    await relay.start()
    client = aioredis.Redis(
        host=REDIS_HOST,
        port=relay.port,
        socket_timeout=2.0,
        socket_connect_timeout=2.0,
        retry=Retry(NoBackoff(), 0),
    )
    budget = RedisBudget(
        100,
        1.0,
        clock=SystemClock(),
        redis=client,
        key_id=key_id,
        owns_redis=True,
        retry_base=0.05,
        retry_max=0.2,
    )
    caplog.set_level(logging.INFO, logger="framecast.keys.shared_budget")
    try:
        await asyncio.gather(*(client.ping() for _ in range(6)))  # six pooled connections, idle
        await relay.cut()  # Redis goes away: every connection is reset
        waiting = asyncio.create_task(one_request(budget))
        while not any(r.levelno == logging.WARNING for r in caplog.records):  # noqa: ASYNC110 - a log has no event
            await asyncio.sleep(0.01)
        await relay.restore()
        await asyncio.wait_for(waiting, timeout=10)
        await asyncio.gather(*(one_request(budget) for _ in range(12)))  # every pooled connection in use
    finally:
        await budget.aclose()
        await relay.cut()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert sum("Redis unreachable" in m for m in said) == 1, said
    assert sum("reachable again" in m for m in said) == 1, said


def test_key_id_never_contains_the_key_and_is_no_plain_hash_of_it() -> None:
    key = "sk-live-" + "a1b2c3d4" * 4
    secret = "s" * 40
    kid = budget_key_id(Secret(key), Secret(secret))
    assert kid == budget_key_id(key, secret) and len(kid) == 32
    assert key not in kid and "a1b2c3d4" not in kid
    assert budget_key_id("other", secret) != kid
    # Whoever reads Redis cannot confirm a guessed key: the name is no plain hash of it, and under
    # another secret the same key gets another name.
    plain = {hashlib.new(name, key.encode()).hexdigest() for name in ("sha256", "sha1", "md5", "sha512")}
    assert not any(digest.startswith(kid[:24]) or kid.startswith(digest[:24]) for digest in plain)
    assert budget_key_id(key, "t" * 40) != kid
    assert kid == hmac.new(secret.encode(), key.encode(), hashlib.sha256).hexdigest()[:32]
    budget = RedisBudget(1, 1.0, clock=SystemClock(), redis=aioredis.Redis(), key_id=kid)
    assert budget.key == f"framecast:budget:{kid}" and key not in repr(budget)


@pytest.mark.parametrize(("limit", "window", "lease"), [(0, 1.0, 1.0), (1, 0.0, 1.0), (1, 1.0, 0.0)])
def test_rejects_bad_knobs(limit: int, window: float, lease: float) -> None:
    with pytest.raises(ValueError):
        RedisBudget(limit, window, clock=SystemClock(), redis=aioredis.Redis(), key_id="k", lease=lease)


async def test_open_budget_picks_redis_only_with_a_client(key_id: str) -> None:
    settings = load_settings(
        {
            "DISCORD_TOKEN": "t" * 40,
            "GEN_API_KEY": "sk-" + "k" * 30,
            "GEN_API_BASE_URL": "https://gen.example.com",
            "GEN_RATE_LIMIT": "7/3",
            "REDIS_URL": f"redis://{REDIS_HOST}:{REDIS_PORT}/0",
            "REDIS_KEY_SECRET": TEST_REDIS_KEY_SECRET,
        }
    )
    assert settings.redis_url is not None
    local = open_budget(settings, settings.gen_api_key, clock=SystemClock(), redis=None, spent=None)
    assert isinstance(local, RequestBudget) and (local.limit, local.window) == (7, 3.0)
    client = connect(settings.redis_url)
    try:
        shared = open_budget(settings, settings.gen_api_key, clock=SystemClock(), redis=client, spent=None)
        assert isinstance(shared, RedisBudget) and (shared.limit, shared.window) == (7, 3.0)
        assert shared.key_id == budget_key_id(settings.gen_api_key, TEST_REDIS_KEY_SECRET)
        shared.key = f"{KEY_PREFIX}{key_id}"  # keep the test's own key in Redis
        async with shared.slot():
            pass
        assert shared.granted_total == 1 and shared.round_trips == 2
        shared.close()
    finally:
        await client.aclose()


async def test_a_window_redis_lost_pauses_every_process_for_one_window(key_id: str) -> None:
    """Redis losing its data (a restart without persistence, a flush) empties the window while the
    key's last requests still count at the service: the process that used it finds its epoch gone,
    and nothing is granted to it or to the others until a window has passed."""
    window = 1.0
    async with budgets(2, 2, window, key_id) as (a, b):
        for _ in range(2):
            async with a.slot():
                pass
        probe = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT)
        await probe.delete(a.key, a.epoch_key)  # what a Redis restarted without its data holds
        lost = time.monotonic()
        async with a.slot():
            waited = time.monotonic() - lost
        # A lower bound only: a loaded machine can make the wait longer, never shorter. Without the
        # epoch the emptied window granted at once (a third request within the window).
        assert waited >= 0.9 * window, waited
        assert await probe.exists(a.epoch_key)
        await probe.delete(a.key)  # b's grant below waits for the pause, not for a's requests
        await probe.set(a.pause_key, "1", px=int(window * 1000))
        asked = time.monotonic()
        async with b.slot():
            assert time.monotonic() - asked >= 0.9 * window  # the pause is every process's
        await probe.aclose()


async def test_a_fresh_key_is_granted_at_once_and_its_epoch_kept(key_id: str) -> None:
    """A process that never saw the key's epoch (the first start, or the first on an empty Redis)
    starts one without a pause; the next processes adopt it and nothing pauses either."""
    async with budgets(2, 5, 10.0, key_id) as (a, b):
        async with a.slot():
            pass
        async with b.slot():
            pass
        probe = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT)
        assert await probe.pttl(a.pause_key) == -2  # no pause was ever written
        assert 0 < await probe.pttl(a.epoch_key)
        await probe.aclose()
        assert a.granted_total == b.granted_total == 1
