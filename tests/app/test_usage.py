"""A server's usage for its dashboard (framecast.app.usage) on a real store."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framecast.app import Usage
from framecast.storage import Store
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
