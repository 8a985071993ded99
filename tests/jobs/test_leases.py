"""Job leases between processes (framecast.jobs.leases.Leases) and the scheduler's use of them.

Every test runs against a real SQLite Store (a temporary file) and a real PostgreSQL Store (a
throw-away database from tests/pg.py; skipped, saying why, without a server). "Two processes" are
two store objects on the same database, each with its own :class:`Leases` under its own owner name,
sharing one :class:`ManualClock`: a lease lapses only when the test moves time.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import replace

import pytest
from sqlalchemy import exc as sa_exc

from framecast.jobs.leases import Leases
from framecast.jobs.outage import StoreOutage
from framecast.jobs.scheduler import Scheduler
from framecast.storage import Store
from framecast.values import Job, JobKind, JobState, NewJob
from tests.fakes.clock import ManualClock
from tests.stores import Backend

S = JobState
LEASE = 30.0
SERVED, FOREIGN = 4_194_304 * 2, 4_194_304 * 3  # shards 0 and 1 of 2: (id >> 22) % 2
CHANNEL, USER = 222_222_222_222_222_222, 333_333_333_333_333_333
WAIT = 5.0  # real seconds: a hang fails the test instead of blocking the run


def leases_of(
    backend: Backend, store: Store, owner: str, *, serves: Callable[[int], bool] | None = None
) -> Leases:
    """`owner`'s leases on `store`, on the backend's clock."""
    return Leases(store, owner=owner, lease_seconds=LEASE, clock=backend.clock, serves=serves)


async def add(store: Store, guild_id: int = SERVED) -> Job:
    new = NewJob(
        kind=JobKind.VIDEO,
        guild_id=guild_id,
        channel_id=CHANNEL,
        user_id=USER,
        locale="en-US",
        params={"model": "m", "prompt": "a cat"},
    )
    return await store.add(new, member_limit=None, guild_cap=None)


def only_served(guild_id: int) -> bool:
    return guild_id == SERVED


async def touch(store: Store, job: Job) -> Job:
    """A state change (as a running job makes): its updated_at moves to now."""
    job = await store.transition(job.id, S.SUBMITTING, expect=S.QUEUED)
    return await store.transition(job.id, S.RUNNING, expect=S.SUBMITTING, task_id=f"task-{job.id}")


# ---------------------------------------------------------------------- take, renew, lapse


async def test_take_renew_and_lapse(backend: Backend) -> None:
    one_store, two_store = await backend.open(), await backend.open()
    one, two = leases_of(backend, one_store, "p1"), leases_of(backend, two_store, "p2")
    clock = backend.clock
    job = await add(one_store)
    assert await one.take(job) is True
    assert one.held == {job.id}
    assert await one.take(job) is True  # its own lease again: still one holder
    assert await two.take(job) is False  # p1 is alive
    assert two.held == frozenset()

    await clock.advance(LEASE * 2 / 3)
    await one.renew()  # runs to now + LEASE
    await clock.advance(LEASE * 2 / 3)  # past the first lease, inside the renewed one
    assert await two.take(job) is False
    assert [j.id for j in await two_store.claimable(clock.time())] == []

    await clock.advance(LEASE / 3)  # p1 stopped renewing (it died): exactly at lease_until it lapses
    assert [j.id for j in await two_store.claimable(clock.time())] == [job.id]
    assert await two.take(job) is True
    assert two.held == {job.id}
    await one.renew()  # p1 comes back to life: its renewal finds the job gone and drops it
    assert one.held == frozenset()
    assert await one.take(job) is False

    # A finished job is dropped at the next renewal, and cannot be taken.
    await two_store.transition(job.id, S.CANCELLED)
    await two.renew()
    assert two.held == frozenset()
    assert await one.take(job) is False
    # done(): the job left this process; an unknown job is never taken.
    other = await add(one_store)
    assert await one.take(other) is True
    one.done(other.id)
    assert one.held == frozenset()
    assert await one.take(replace(other, id=10**9)) is False


# ---------------------------------------------------------------------- fencing: holds()


class CountingStore:
    """A lease store that counts the claims reaching the database."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.claims = 0

    async def claim(self, job_id: int, owner: str, until: float) -> bool:
        self.claims += 1
        return await self.store.claim(job_id, owner, until)

    async def claimable(self, now: float) -> list[Job]:
        return await self.store.claimable(now)


async def test_holds_asks_the_store_only_once_the_lease_it_wrote_may_have_lapsed(backend: Backend) -> None:
    store = CountingStore(await backend.open())
    leases = Leases(store, owner="p1", lease_seconds=LEASE, clock=backend.clock)
    job = await add(store.store)
    assert await leases.take(job)
    store.claims = 0
    # The check before every poll costs no database round trip while the lease is fresh.
    for _ in range(5):
        assert await leases.holds(job.id) is True
    await backend.clock.advance(LEASE * 2 / 3 - 1)
    assert await leases.holds(job.id) is True
    assert store.claims == 0
    # Under a third of a lease left (renewals late, or the process was paused): the store decides,
    # and the lease it renews makes the next checks free again.
    await backend.clock.advance(2)
    assert await leases.holds(job.id) is True
    assert store.claims == 1
    assert await leases.holds(job.id) is True
    assert store.claims == 1


@pytest.mark.parametrize("renewal_first", [False, True], ids=["check-first", "renewal-first"])
async def test_a_process_paused_past_its_lease_finds_the_job_taken_over_and_lets_it_go(
    backend: Backend, renewal_first: bool
) -> None:
    paused_store, other_store = await backend.open(), await backend.open()
    paused, other = leases_of(backend, paused_store, "paused"), leases_of(backend, other_store, "other")
    job = await touch(paused_store, await add(paused_store))
    assert await paused.take(job)
    assert await paused.holds(job.id) is True

    await backend.clock.advance(LEASE)  # SIGSTOP: no renewal while the lease runs out
    assert [j.id for j in await other.take_over()] == [job.id]
    # SIGCONT: the renewal timer and the job's task wake in either order; both see the loss.
    if renewal_first:
        await paused.renew()
        assert paused.held == frozenset()
    assert await paused.holds(job.id) is False
    assert paused.held == frozenset()
    assert await paused.holds(job.id) is False  # and it stays lost (no renewal brings it back)
    await paused.renew()
    assert await paused.holds(job.id) is False
    assert await other.holds(job.id) is True
    assert await paused_store.claimable(backend.clock.time()) == []  # other's lease runs


async def test_a_lapsed_lease_nobody_took_stays_with_the_process_that_held_it(backend: Backend) -> None:
    store, other_store = await backend.open(), await backend.open()
    mine, other = leases_of(backend, store, "p1"), leases_of(backend, other_store, "p2")
    job = await add(store)
    assert await mine.take(job)
    await backend.clock.advance(LEASE * 2)  # paused, but nobody came for the job meanwhile
    assert await mine.holds(job.id) is True  # claimed again, with the same compare-and-set...
    assert await other.take(job) is False  # ...so a takeover arriving now finds it held
    assert [j.id for j in await other.take_over()] == []


async def test_holds_is_false_for_an_ended_or_released_job(backend: Backend) -> None:
    store = await backend.open()
    leases = leases_of(backend, store, "p1")
    ended, left = await add(store), await add(store)
    assert await leases.take(ended) and await leases.take(left)
    await store.transition(ended.id, S.CANCELLED)  # e.g. cancelled through another process
    await backend.clock.advance(LEASE)
    assert await leases.holds(ended.id) is False
    leases.done(left.id)
    assert await leases.holds(left.id) is False
    assert await leases.holds(10**9) is False


# ---------------------------------------------------------------------- take_over


async def test_take_over_a_served_guilds_lapsed_job_at_once(backend: Backend) -> None:
    one_store, two_store = await backend.open(), await backend.open()
    one = leases_of(backend, one_store, "p1")
    two = leases_of(backend, two_store, "p2", serves=only_served)
    clock = backend.clock
    served, foreign = await add(one_store, SERVED), await add(one_store, FOREIGN)
    assert await one.take(served) and await one.take(foreign)
    await clock.advance(LEASE - 1)
    # Both jobs change just before p1 dies: they are "fresh", yet p1's leases lapse at LEASE.
    served, foreign = await touch(one_store, served), await touch(one_store, foreign)

    assert await two.take_over() == []  # p1's leases still run
    await clock.advance(1)
    taken = await two.take_over()
    assert [j.id for j in taken] == [served.id]  # this process's guild: at once
    assert two.held == {served.id}
    assert await one.take(served) is False

    # The other shard's job waits until it has not changed for a whole lease (its own shard may
    # still be about to pick it up), then it is taken over too.
    await clock.advance(LEASE - 2)
    assert await two.take_over() == []
    await clock.advance(1)
    assert [j.id for j in await two.take_over()] == [foreign.id]
    assert two.held == {served.id, foreign.id}
    assert await two.take_over() == []  # nothing twice


async def test_a_job_accepted_a_moment_ago_is_not_taken_before_its_own_claim(backend: Backend) -> None:
    # Between the store's insert and the intake's claim, the job has no lease at all: not even a
    # process of its own shard may take it then (it would queue it twice in the accepting process).
    store = await backend.open()
    mine = leases_of(backend, store, "p1", serves=only_served)
    other = leases_of(backend, await backend.open(), "p2", serves=only_served)
    clock = backend.clock
    await clock.advance(100)
    job = await add(store, SERVED)
    assert await mine.take_over() == [] and await other.take_over() == []
    assert await mine.take(job) is True  # the intake's claim
    # A job nobody ever claimed (its process died between insert and claim) is picked up later.
    orphan = await add(store, SERVED)
    await clock.advance(LEASE / 2)
    await mine.renew()
    await clock.advance(LEASE / 2)
    assert [j.id for j in await other.take_over()] == [orphan.id]


async def test_a_job_held_by_a_live_owner_is_never_taken(backend: Backend) -> None:
    one_store, two_store = await backend.open(), await backend.open()
    clock = backend.clock
    one = leases_of(backend, one_store, "p1")
    two = leases_of(backend, two_store, "p2")  # serves every guild: would take anything lapsed at once
    adopted: list[int] = []

    async def adopt(job: Job) -> None:
        adopted.append(job.id)

    async def lost(job_id: int) -> None:
        adopted.append(-job_id)  # a job held by its live owner is never lost either

    job = await add(one_store, SERVED)
    await clock.advance(LEASE)
    assert await one.take(job) is True
    one.start(adopt, lost)
    two.start(adopt, lost)
    try:
        # Ten leases long, both loops run every third of a lease: p1 renews, p2 looks for lapses.
        for _ in range(30):
            await advance_loops(clock, LEASE / 3, loops=2)
            assert adopted == []
            assert two.held == frozenset()
        assert one.held == {job.id}

        await one.close()  # p1 dies: no more renewals
        for _ in range(4):
            await advance_loops(clock, LEASE / 3, loops=1)
        await wait_until(lambda: adopted == [job.id])
        assert two.held == {job.id}
        for _ in range(6):
            await advance_loops(clock, LEASE / 3, loops=1)
        assert adopted == [job.id]  # adopted once; p2 now renews it
    finally:
        await one.close()
        await two.close()


async def advance_loops(clock: ManualClock, seconds: float, *, loops: int) -> None:
    """Move time, then wait (real time) until `loops` lease loops are parked in their sleep again."""
    await clock.advance(seconds)
    await wait_until(lambda: clock.sleepers >= loops)


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll `predicate` (the work it waits for is real I/O: a store's thread or a PostgreSQL answer)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"waited {WAIT:g}s in vain")
        await asyncio.sleep(0.005)


# ---------------------------------------------------------------------- the scheduler


class ParkedRunner:
    """A runner whose jobs never finish on their own (they wait until cancelled)."""

    def __init__(self) -> None:
        self.started: list[int] = []

    async def run(self, job: Job, *, release_service_slot: Callable[[], None]) -> None:
        self.started.append(job.id)
        await asyncio.Event().wait()

    def begin_shutdown(self) -> None:
        pass

    def in_critical_section(self, job_id: int) -> bool:
        return False

    async def wait_critical_done(self, job_ids: set[int]) -> None:
        pass


def scheduler(store: Store, leases: Leases, runner: ParkedRunner, clock: ManualClock) -> Scheduler:
    # No job may start: the queued ones stay in the queue, where position() finds them.
    return Scheduler(store=store, runner=runner, admission=0, clock=clock, leases=leases)


async def test_scheduler_start_restores_only_claimable_jobs_of_served_guilds(backend: Backend) -> None:
    before, other_store = await backend.open(), await backend.open()
    clock = backend.clock
    dead = leases_of(backend, before, "dead-process")
    alive = leases_of(backend, other_store, "live-process")
    free = await add(before, SERVED)
    held_by_live = await add(before, SERVED)
    foreign_free = await add(before, FOREIGN)
    lapsed = await add(before, SERVED)
    mine_running = await touch(before, await add(before, SERVED))
    assert await dead.take(lapsed)
    await clock.advance(LEASE)  # the dead process's lease of `lapsed` runs out
    assert await alive.take(held_by_live)
    mine_before = leases_of(backend, before, "me")
    assert await mine_before.take(mine_running)  # this process's previous life (same owner name)

    store = await backend.open()
    leases = leases_of(backend, store, "me", serves=only_served)
    runner = ParkedRunner()
    sched = scheduler(store, leases, runner, clock)
    try:
        restored = await sched.start()
        assert sorted(j.id for j in restored) == sorted([free.id, lapsed.id, mine_running.id])
        assert leases.held == {free.id, lapsed.id, mine_running.id}
        assert sched.position(free.id) is not None and sched.position(lapsed.id) is not None
        assert sched.position(held_by_live.id) is None and sched.position(foreign_free.id) is None
        await wait_until(lambda: runner.started == [mine_running.id])  # RUNNING: re-attached at once
        # Nobody took the others: they stay with the live process, or wait for their own shard.
        assert await alive.take(held_by_live) is True
        assert await leases_of(backend, other_store, "shard-1").take(foreign_free) is True
    finally:
        await sched.close(1.0)


async def test_scheduler_adopt_is_idempotent(backend: Backend) -> None:
    store = await backend.open()
    clock = backend.clock
    leases = leases_of(backend, store, "me")
    runner = ParkedRunner()
    sched = scheduler(store, leases, runner, clock)
    await sched.start()
    try:
        queued = await add(store)
        running = await touch(store, await add(store))
        finished = await add(store)
        await store.transition(finished.id, S.CANCELLED)
        for job in (queued, running, finished):
            assert await leases.take(job) is (job is not finished)

        first = await sched.adopt(queued)
        assert first is not None and first.id == queued.id
        assert await sched.adopt(queued) is None
        assert sched.position(queued.id) == 1  # queued once

        assert await sched.adopt(running) is not None
        await wait_until(lambda: runner.started == [running.id])
        assert await sched.adopt(running) is None
        assert await sched.adopt(finished) is None
        await asyncio.sleep(0.05)
        assert runner.started == [running.id]  # started once
        assert sched.position(queued.id) == 1
    finally:
        await sched.close(1.0)


# ---------------------------------------------------------------------- store outages


def disk_full() -> Exception:
    """A store outage as SQLAlchemy raises it (SQLite on a full disk)."""
    return sa_exc.OperationalError("UPDATE jobs", {}, sqlite3.OperationalError("database or disk is full"))


async def test_no_job_is_taken_over_in_an_outage_nor_for_a_lease_after_it(backend: Backend) -> None:
    # Every process met the outage: a lease that lapsed meanwhile belongs to a live process whose
    # renewals could not land (its task ids wait in memory), not to a dead one.
    one_store, two_store = await backend.open(), await backend.open()
    clock = backend.clock
    outage = StoreOutage(clock=clock)
    one = leases_of(backend, one_store, "p1")
    two = Leases(two_store, owner="p2", lease_seconds=LEASE, clock=clock, outage=outage)
    job = await add(one_store)
    assert await one.take(job)
    outage.met(disk_full())
    await clock.advance(LEASE + 1)  # the outage outlasts the lease
    assert await two.take_over() == []
    await clock.advance(outage.backoff().cap)
    outage.answered()  # the store answers again
    assert not outage.down
    assert await two.take_over() == []  # p1 gets a whole lease to renew...
    await one.renew()  # ...and does
    await clock.advance(LEASE - 1)
    assert await two.take_over() == []
    assert one.held == {job.id}
    # A process that really died is still taken over, a lease after the outage.
    await clock.advance(2)
    assert [j.id for j in await two.take_over()] == [job.id]


async def test_a_lapsed_job_the_scheduler_could_not_adopt_is_not_renewed(backend: Backend) -> None:
    dead_store, two_store = await backend.open(), await backend.open()
    dead = leases_of(backend, dead_store, "dead-process")
    two = leases_of(backend, two_store, "p2")
    job = await add(dead_store)
    assert await dead.take(job)
    await backend.clock.advance(LEASE + 1)

    async def adopt(_job: Job) -> None:
        raise disk_full()  # the scheduler's read of it met an outage: nobody runs it here

    async def lost(_job_id: int) -> None:
        raise AssertionError("no renewal runs here")

    two.start(adopt, lost)
    await two.close()  # only the handler matters here: take_over is called by hand
    with pytest.raises(sa_exc.OperationalError):
        await two.take_over()
    assert two.held == frozenset()  # its lease lapses again: the next round (or process) takes it


async def test_a_job_cancelled_or_taken_in_another_process_is_handed_to_lost_at_the_next_renewal(
    backend: Backend,
) -> None:
    """Its queue and its message here still showed it as this process knew it (a cancel clicked in
    the process that serves its server reverted to "Queued" there)."""
    mine, theirs = await backend.open(), await backend.open()
    here = leases_of(backend, mine, "p1")
    cancelled, kept = await add(mine), await add(mine)
    assert await here.take(cancelled) and await here.take(kept)
    lost: list[int] = []

    async def adopt(_job: Job) -> None:
        raise AssertionError("nothing lapsed")

    async def note_lost(job_id: int) -> None:
        lost.append(job_id)

    here.start(adopt, note_lost)
    await here.close()  # renewals are called by hand
    await theirs.transition(cancelled.id, S.CANCELLED, expect=S.QUEUED)  # another process's cancel
    await here.renew()
    assert lost == [cancelled.id] and here.held == {kept.id}
    await here.renew()
    assert lost == [cancelled.id]  # told once
