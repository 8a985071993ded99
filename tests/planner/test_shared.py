"""Planners of one key in several processes share demand, tasks and pushback through a real Redis.

Each "process" is a planner with its own store, budget, queues, Redis connection and
SharedPlanState on one key id (unique per test, deleted after). Redis must answer on
127.0.0.1:6379, else the module is skipped. Refreshes are called by hand unless a test is about the
refresh task itself, so what each planner sees is exactly what was last published.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from framecast.clock import SystemClock
from framecast.jobs.queues import GuildQueues
from framecast.keys.budget import RequestBudget
from framecast.planner.planner import Planner, PlannerSettings
from framecast.planner.shared import KEY_PREFIX, Pushback, Share, SharedPlanState, SharedView
from framecast.storage import Store
from framecast.values import Job, JobState
from tests.fakes.clock import ManualClock
from tests.planner.jobs import add_job
from tests.planner.rigs import Rig
from tests.redis_server import REDIS_HOST, REDIS_PORT, requires_redis
from tests.workers import free_port

INTERVAL = 30.0
WINDOW = 60.0
LIMIT = 16


pytestmark = requires_redis


def _client(port: int = REDIS_PORT) -> aioredis.Redis:
    """A connection of its own, as each process has (redis-py's retries off, as in the bot)."""
    return aioredis.Redis(
        host=REDIS_HOST,
        port=port,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
    )


@dataclasses.dataclass
class Proc(Rig):
    """One process's planner on the shared key."""

    shared: SharedPlanState = dataclasses.field(init=False)
    redis: aioredis.Redis = dataclasses.field(init=False)

    async def run(self, n: int) -> list[Job]:
        """`n` tasks on the service (nothing learned: each needs 3 requests in the next window)."""
        jobs = [await self.job() for _ in range(n)]
        for job in jobs:
            self.planner.pacer(job)
        return jobs


ProcFactory = Callable[..., Awaitable[Proc]]


@pytest.fixture
async def key_id() -> AsyncIterator[str]:
    kid = f"test-{uuid.uuid4().hex[:12]}"
    yield kid
    client = _client()
    await client.delete(f"{KEY_PREFIX}{kid}")
    await client.aclose()


@pytest.fixture
async def proc(tmp_path: Path, key_id: str) -> AsyncIterator[ProcFactory]:
    """Make processes on `key_id` (closed after the test; a "dead" one may be closed early)."""
    made = 0

    async def make(*, port: int = REDIS_PORT, window: float = WINDOW, ceiling: int | None = None) -> Proc:
        nonlocal made
        clock = ManualClock()
        redis = _client(port)
        shared = SharedPlanState(redis=redis, key_id=key_id, clock=clock, window=window)
        name, made = f"p{made}.sqlite3", made + 1
        # The budget's window is the key's; the shared state's `window` may differ from it.
        opened = Proc.opened(
            tmp_path,
            name=name,
            limit=LIMIT,
            window=WINDOW,
            interval=INTERVAL,
            ceiling=ceiling,
            shared=shared,
            clock=clock,
        )
        p = await processes.enter_async_context(opened)
        p.shared, p.redis = shared, redis
        # Last in, first out: its shared state, then its connection, then its budget and store.
        processes.push_async_callback(redis.aclose)
        processes.push_async_callback(shared.aclose)
        return p

    async with contextlib.AsyncExitStack() as processes:
        yield make


async def refresh(*procs: Proc) -> None:
    """Each publishes, then each reads (twice round, so everyone sees everyone's latest)."""
    for _ in range(2):
        for p in procs:
            assert await p.shared.refresh()


async def test_the_others_demand_closes_admission(proc: ProcFactory) -> None:
    a, b = await proc(), await proc()
    await a.run(5)  # 15 requests in the next window of 16
    await b.run(1)  # 3 more
    assert a.planner.may_start(5) and b.planner.may_start(1)  # each alone has room
    await refresh(a, b)
    assert b.shared.view.processes == 1 and b.shared.view.demand == pytest.approx(15)
    assert a.shared.view.demand == pytest.approx(3)
    # 3 + 15 + 1 > 16; nor does the full window lend B a slot: A's demand, counted in each of the
    # next three windows, leaves no room in them (3 + 3 x 15 + 1 > 3 x 16).
    assert not b.planner.may_start(1)
    # A's next window is full too (B's demand counted), but the three windows from now have room
    # for A's tasks, B's demand in each and one more create: a full window lends it a slot.
    assert a.planner.demand() + a.shared.view.demand + 1 > a.budget.allowed
    assert a.planner.may_start(5)  # 15 + 3 x 3 + 1 <= 3 x 16
    # A's tasks end: once it publishes that, B admits again.
    for job_id in [t.job_id for t in a.planner.polls]:
        a.planner.forget(job_id)
    await refresh(a, b)
    assert b.shared.view.demand == 0 and b.planner.may_start(1)


async def test_a_process_with_nothing_on_the_key_may_start_one(proc: ProcFactory) -> None:
    a, b = await proc(), await proc()
    await a.run(6)  # 18 requests in the next window of 16: the key is overcommitted
    await refresh(a, b)
    # B's guilds are not shut out for as long as A has a backlog: one task, not two.
    assert b.planner.may_start(0)
    await b.run(1)
    assert not b.planner.may_start(1)


async def test_a_view_change_wakes_the_scheduler(proc: ProcFactory) -> None:
    a, b = await proc(), await proc()
    woken: list[int] = []
    b.planner.on_change(lambda: woken.append(1))
    await refresh(a, b)
    woken.clear()
    await a.run(2)
    await a.shared.refresh()
    await b.shared.refresh()
    assert woken  # B's admission may have changed: its scheduler asks again


async def test_a_dead_process_stops_counting(proc: ProcFactory, key_id: str) -> None:
    # A short window (in seconds of Redis' own clock): a silent field is stale after two windows.
    a, b = await proc(window=0.2), await proc(window=0.2)
    await a.run(5)
    await refresh(a, b)
    assert b.shared.view.demand == pytest.approx(15)
    # A dies without a word (kill -9): its field stays until it is stale.
    await a.redis.aclose()
    assert await b.shared.refresh() and b.shared.view.processes == 1
    await asyncio.sleep(a.shared.stale_after + 0.1)
    assert await b.shared.refresh()
    assert b.shared.view == SharedView()
    fields = await b.redis.hkeys(f"{KEY_PREFIX}{key_id}")
    assert fields == [b.shared.owner.encode()]  # the dead field is gone from Redis too


async def test_a_closed_process_withdraws_at_once(proc: ProcFactory, key_id: str) -> None:
    a, b = await proc(), await proc()
    await a.run(2)
    await refresh(a, b)
    assert b.shared.view.running == 2
    await a.shared.aclose()
    assert await b.shared.refresh()
    assert b.shared.view.processes == 0
    assert await b.redis.hkeys(f"{KEY_PREFIX}{key_id}") == [b.shared.owner.encode()]


async def test_pushback_in_one_lowers_the_others_ceiling_and_creates_anywhere_raise_it(
    proc: ProcFactory,
) -> None:
    a, b = await proc(), await proc()
    await a.run(3)
    await b.run(2)
    await refresh(a, b)
    assert a.planner.ceiling() is None and b.planner.ceiling() is None
    a.planner.create_finished(ok=False, pushed_back=True)
    # The service counts the key's five tasks: A may keep its three, B its two.
    assert a.planner.ceiling() == 3 and not a.planner.may_start(3)
    await refresh(a, b)
    assert b.planner.ceiling() == 2 and not b.planner.may_start(2)
    # A create of B goes through: the key-wide ceiling rises by one, for A as well.
    b.planner.create_finished(ok=True)
    assert b.planner.ceiling() == 3
    await refresh(a, b)
    assert a.planner.ceiling() == 4 and a.planner.may_start(3)
    # A concurrent change of the same revision: the lower ceiling wins everywhere.
    assert Pushback(4.0, 0, 7).newer_than(Pushback(9.0, 0, 7))
    assert not Pushback(9.0, 0, 7).newer_than(Pushback(4.0, 0, 7))


async def test_pushback_counts_against_a_local_max_running_too(proc: ProcFactory) -> None:
    a, b = await proc(ceiling=10), await proc(ceiling=2)
    await a.run(4)
    await refresh(a, b)
    a.planner.create_finished(ok=False, pushed_back=True)  # key-wide: 4 tasks
    await refresh(a, b)
    assert b.planner.ceiling() == 1  # min(2, 4 - 4) floored at one: a process is never shut out
    assert a.planner.ceiling() == 4


async def test_estimates_account_for_the_other_process(proc: ProcFactory) -> None:
    a, b = await proc(ceiling=4), await proc()
    await a.run(1)
    queued = await a.job(running=False)
    a.queues.push(queued)
    alone = a.planner.estimate(queued).starts_in
    assert alone is not None
    # B spends the same key: A's part of the rate halves, and the later start is what A promises.
    await b.run(1)
    await refresh(a, b)
    shared = a.planner.estimate(queued).starts_in
    assert shared == pytest.approx(2 * alone)
    # A key-wide pushback at 3 tasks with B running 2 more: A's one slot is taken, and its task's
    # end is not known yet, so no start time is claimed at all.
    await b.run(1)
    await refresh(a, b)
    b.planner.create_finished(ok=False, pushed_back=True)
    await refresh(a, b)
    assert a.planner.ceiling() == 1
    assert a.planner.estimate(queued).starts_in is None


async def test_the_refresh_task_publishes_on_its_own(tmp_path: Path, key_id: str) -> None:
    clock = SystemClock()
    budget = RequestBudget(LIMIT, 0.4, clock=clock)
    store = await Store.open(tmp_path / "db.sqlite3", clock=clock)
    redis_a, redis_b = _client(), _client()
    a = SharedPlanState(redis=redis_a, key_id=key_id, clock=clock, window=0.4)
    b = SharedPlanState(redis=redis_b, key_id=key_id, clock=clock, window=0.4)
    planner = await Planner.open(
        budget=budget,
        clock=clock,
        store=store,
        queues=GuildQueues(),
        settings=PlannerSettings(poll_interval=0.05, poll_max_interval=0.3),
        shared=a,
    )
    b.attach(lambda: Share(demand=16.0, running=2))
    try:
        a.start()
        b.start()
        assert a.period == pytest.approx(0.1)
        for _ in range(50):
            if a.view.running == 2 and b.view.processes == 1:
                break
            await asyncio.sleep(0.05)
        assert a.view.demand == 16.0 and a.view.running == 2 and a.view.active == 1
        assert b.view.processes == 1 and b.view.running == 0 and b.view.active == 0
        job = await add_job(store, 1)
        planner.pacer(dataclasses.replace(job, state=JobState.RUNNING, started_at=clock.time()))
        assert not planner.may_start(1)  # the other process's tasks need the whole window
        await b.aclose()
        for _ in range(50):
            if a.view.processes == 0:
                break
            await asyncio.sleep(0.05)
        assert planner.may_start(1)
    finally:
        await a.aclose()
        await b.aclose()
        await redis_a.aclose()
        await redis_b.aclose()
        budget.close()
        await store.close()


class _Relay:
    """A TCP relay to the real Redis that can be cut (listener and open connections) and restored."""

    def __init__(self) -> None:
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def up(self) -> None:
        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            writer.close()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_connection(REDIS_HOST, REDIS_PORT)
            self._writers |= {writer, up_writer}
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

        self._server = await asyncio.start_server(handle, "127.0.0.1", self.port)

    async def down(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in self._writers:
            writer.close()
        self._writers.clear()
        await asyncio.sleep(0.05)


async def test_without_redis_each_planner_plans_alone(
    proc: ProcFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="framecast.planner.shared")
    relay = _Relay()
    await relay.up()
    try:
        a, b = await proc(), await proc(port=relay.port)
        await a.run(5)
        await b.run(1)
        await refresh(a, b)
        assert not b.planner.may_start(1)  # A's demand counts while Redis answers
        await relay.down()
        # Redis is gone: B falls back to its own view at once, and says so once.
        assert not await b.shared.refresh()
        assert not await b.shared.refresh()
        assert b.shared.view == SharedView() and b.planner.may_start(1)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "Redis unreachable" in warnings[0].getMessage()
        await relay.up()
        assert await b.shared.refresh()
        assert b.shared.view.demand == pytest.approx(15) and not b.planner.may_start(1)
        assert any("reachable again" in r.getMessage() for r in caplog.records)
    finally:
        await relay.down()


async def test_a_cache_nobody_refreshed_for_two_windows_is_ignored(proc: ProcFactory) -> None:
    a, b = await proc(), await proc()
    await a.run(5)
    await b.run(1)
    await refresh(a, b)
    assert not b.planner.may_start(1)
    # The refresh task stalled (no answer, no error): after two windows the view is dropped.
    await b.clock.advance(b.shared.stale_after + 1)
    assert b.shared.view == SharedView()


def test_share_payload_round_trips_and_never_holds_a_key() -> None:
    share = Share(demand=4.5, running=3, pushback=Pushback(ceiling=6.0, successes=2, rev=5))
    assert Share.from_json(share.to_json()) == share
    assert Share.from_json(Share().to_json()) == Share()
    with pytest.raises(ValueError):
        Share.from_json("not json")
    with pytest.raises(ValueError):
        SharedPlanState(redis=aioredis.Redis(), key_id="has space", clock=SystemClock(), window=1.0)
