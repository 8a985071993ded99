"""A server's usage for its dashboard (framecast.app.usage) on a real store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framecast.app import Usage
from framecast.app.usage import USAGE_TTL
from framecast.storage import Store, UsageRow
from framecast.values import JobKind, JobState, NewJob
from tests.fakes.clock import ManualClock
from tests.pg import fresh_database

GUILD, OTHER = 1, 2

DAY = 86400.0


@pytest.fixture
async def clock() -> ManualClock:
    return ManualClock(wall_start=1_700_006_400.0)  # a UTC midnight


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> AsyncIterator[Store]:
    """A store on either database (the queries are written once for both)."""
    async with contextlib.AsyncExitStack() as stack:
        where = str(tmp_path / "jobs.sqlite3")
        if request.param == "postgres":
            where = await stack.enter_async_context(fresh_database())
        opened = await Store.open(where, clock=clock)
        try:
            yield opened
        finally:
            await opened.close()


async def job(
    store: Store, clock: ManualClock, user: int, kind: JobKind, *, guild: int = GUILD, fail: str | None = None
) -> None:
    made = await store.add(
        NewJob(kind, guild, 5, user, "en", {"prompt": "p"}), member_limit=None, guild_cap=None
    )
    await store.transition(made.id, JobState.SUBMITTING)
    if fail is not None:
        await store.transition(made.id, JobState.FAILED, error_code=fail)
    else:
        await store.transition(made.id, JobState.RUNNING, task_id="t", started_at=clock.time() + 30.0)


async def test_usage_counts_days_by_kind_failures_waits_and_top_members(
    store: Store, clock: ManualClock
) -> None:
    await job(store, clock, 1, JobKind.VIDEO)  # 31 days ago: outside the window
    await clock.advance(DAY)
    await job(store, clock, 1, JobKind.IMAGE)  # the window's first day
    await clock.advance(29 * DAY + 3600)
    await job(store, clock, 2, JobKind.VIDEO)
    await job(store, clock, 2, JobKind.VIDEO, fail="service_error")
    await job(store, clock, 3, JobKind.IMAGE, guild=OTHER)
    usage = await Usage(store.web, clock).of_server(GUILD)
    assert len(usage.days) == 30
    assert (usage.days[0].videos, usage.days[0].images) == (0, 1)
    assert (usage.days[-1].videos, usage.days[-1].images) == (2, 0)
    assert sum(d.videos + d.images for d in usage.days) == 3
    assert usage.failures == (("service_error", 1),)
    assert usage.top_members == ((2, 2), (1, 1))
    assert usage.wait_median == 30.0  # each started 30 s after it was asked
    # Whole-second times come back as floats from both databases (read as stored, not converted).
    rows = await store.web.usage(GUILD, since=0.0)
    types = {(type(r.user_id), type(r.created_at), type(r.started_at)) for r in rows}
    assert types == {(int, float, float), (int, float, type(None))}


class GatedReads:
    """The store's usage query, counted, each read held until `open` is set."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.reads = 0
        self.started = asyncio.Event()
        self.open = asyncio.Event()

    async def usage(self, guild_id: int, *, since: float) -> list[UsageRow]:
        self.reads += 1
        self.started.set()
        await self.open.wait()
        return await self._store.web.usage(guild_id, since=since)


async def test_a_servers_count_is_made_once_at_a_time_and_reused_a_minute(
    store: Store, clock: ManualClock
) -> None:
    # Each count of a busy server walks up to 200,000 rows on the event loop: a dashboard reloaded
    # many times at once (or in a loop) must not count again for every view.
    await job(store, clock, 1, JobKind.IMAGE)
    reads = GatedReads(store)
    usage = Usage(reads, clock)
    views = [asyncio.ensure_future(usage.of_server(GUILD)) for _ in range(5)]
    await reads.started.wait()  # the views started in order: all have asked by the first read
    reads.open.set()
    counted = await asyncio.gather(*views)
    assert reads.reads == 1 and all(c == counted[0] for c in counted)
    assert sum(d.images for d in counted[0].days) == 1
    await job(store, clock, 2, JobKind.IMAGE)
    assert await usage.of_server(GUILD) == counted[0] and reads.reads == 1  # reused
    assert sum(d.images for d in (await usage.of_server(OTHER)).days) == 0 and reads.reads == 2
    await clock.advance(USAGE_TTL)
    assert sum(d.images for d in (await usage.of_server(GUILD)).days) == 2 and reads.reads == 3
