"""Planners of one key in several processes share demand, tasks and pushback through a real Redis.

Each "process" is a planner with its own store, budget, queues, Redis connection and
SharedPlanState on one key id (unique per test, deleted after). Redis must answer on
127.0.0.1:6379, else the module is skipped. Refreshes are called by hand unless a test is about the
refresh task itself, so what each planner sees is exactly what was last published. The transport
alone (staleness, withdrawal, outages) is tested in tests/keys/test_shared_plan.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from framecast.clock import SystemClock
from framecast.jobs.queues import GuildQueues
from framecast.keys.budget import RequestBudget
from framecast.keys.shared_plan import SharedPlanState
from framecast.planner.planner import Planner, PlannerSettings
from framecast.planner.shared import Pushback, Share, SharedView, summed
from framecast.storage import Store
from framecast.values import Job, JobState
from tests.e2e.servers import Relay
from tests.fakes.clock import ManualClock
from tests.planner.jobs import add_job
from tests.planner.rigs import Rig
from tests.redis_server import REDIS_HOST, REDIS_PORT, own_connection, refresh_all, requires_redis

INTERVAL = 30.0
WINDOW = 60.0
LIMIT = 16


pytestmark = requires_redis


@dataclasses.dataclass
class Proc(Rig):
    """One process's planner on the shared key."""

    shared: SharedPlanState[SharedView] = dataclasses.field(init=False)
    redis: aioredis.Redis = dataclasses.field(init=False)

    async def run(self, n: int) -> list[Job]:
        """`n` tasks on the service (nothing learned: each needs 3 requests in the next window)."""
        jobs = [await self.job() for _ in range(n)]
        for job in jobs:
            self.planner.pacer(job)
        return jobs


ProcFactory = Callable[..., Awaitable[Proc]]


@pytest.fixture
async def proc(tmp_path: Path, plan_key_id: str) -> AsyncIterator[ProcFactory]:
    """Make processes on `plan_key_id` (closed after the test; a "dead" one may be closed early)."""
    made = 0

    async def make(*, port: int = REDIS_PORT, window: float = WINDOW, ceiling: int | None = None) -> Proc:
        nonlocal made
        clock = ManualClock()
        redis = own_connection(port)
        shared = SharedPlanState(
            redis=redis, key_id=plan_key_id, clock=clock, window=window, read=summed, nobody=SharedView()
        )
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
    """Each publishes, then each reads, until everyone saw everyone's latest."""
    await refresh_all(*(p.shared for p in procs))


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


async def test_the_refresh_task_carries_each_planner_s_share_on_its_own(
    tmp_path: Path, plan_key_id: str
) -> None:
    clock = SystemClock()
    budget = RequestBudget(LIMIT, 0.4, clock=clock)
    store = await Store.open(tmp_path / "db.sqlite3", clock=clock)
    redis_a, redis_b = own_connection(), own_connection()
    a = SharedPlanState(
        redis=redis_a, key_id=plan_key_id, clock=clock, window=0.4, read=summed, nobody=SharedView()
    )
    b = SharedPlanState(
        redis=redis_b, key_id=plan_key_id, clock=clock, window=0.4, read=summed, nobody=SharedView()
    )
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


async def test_without_redis_each_planner_plans_alone(proc: ProcFactory) -> None:
    relay = Relay((REDIS_HOST, REDIS_PORT))
    await relay.start()
    try:
        a, b = await proc(), await proc(port=relay.port)
        await a.run(5)
        await b.run(1)
        await refresh(a, b)
        assert not b.planner.may_start(1)  # A's demand counts while Redis answers
        await relay.cut()
        # Redis is gone: B falls back to its own view at once (logged once: tests/keys).
        assert not await b.shared.refresh()
        assert b.shared.view == SharedView() and b.planner.may_start(1)
        await relay.restore()
        assert await b.shared.refresh()
        assert b.shared.view.demand == pytest.approx(15) and not b.planner.may_start(1)
    finally:
        await relay.cut()


def test_share_payload_round_trips_and_never_holds_a_key() -> None:
    share = Share(demand=4.5, running=3, pushback=Pushback(ceiling=6.0, successes=2, rev=5))
    assert Share.from_json(share.to_json()) == share
    assert Share.from_json(Share().to_json()) == Share()
    with pytest.raises(ValueError):
        Share.from_json("not json")


def test_the_others_shares_are_summed_and_payloads_not_understood_are_skipped() -> None:
    old = Pushback(ceiling=3.0, successes=1, rev=4)
    new = Pushback(ceiling=6.0, successes=0, rev=5)
    payloads = [
        Share(demand=4.5, running=2, pushback=old).to_json(),
        "not json",
        '{"r": 1}',  # no demand
        Share(demand=1.0, running=0, pushback=new).to_json(),
        Share().to_json(),
    ]
    assert summed(payloads) == SharedView(demand=5.5, running=2, processes=3, active=2, pushback=new)
    assert summed([]) == SharedView()
