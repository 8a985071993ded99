"""A member's jobs a page at a time (Store.member_jobs), on SQLite and PostgreSQL alike.

The PostgreSQL runs use a throw-away database (tests/pg.py) and skip, saying why, when no server
answers on 127.0.0.1:5432.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framecast.storage import Store
from framecast.values import JobKind, NewJob
from tests.fakes.clock import ManualClock
from tests.pg import fresh_database

GUILD, OTHER_GUILD = 111_111_111_111_111_111, 444_444_444_444_444_444
USER, OTHER_USER = 333_333_333_333_333_333, 555_555_555_555_555_555


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    clock = ManualClock()
    if request.param == "sqlite":
        opened = await Store.open(tmp_path / "jobs.sqlite3", clock=clock)
        try:
            yield opened
        finally:
            await opened.close()
    else:
        async with fresh_database() as dsn:
            opened = await Store.open(dsn, clock=clock)
            try:
                yield opened
            finally:
                await opened.close()


async def add(store: Store, *, guild_id: int = GUILD, user_id: int = USER, prompt: str = "p") -> int:
    job = NewJob(
        kind=JobKind.IMAGE,
        guild_id=guild_id,
        channel_id=1,
        user_id=user_id,
        locale="en-US",
        params={"prompt": prompt},
    )
    return (await store.add(job, member_limit=None, guild_cap=None)).id


async def members_jobs(store: Store, count: int) -> list[int]:
    """`count` jobs of USER's in GUILD, oldest first, mixed with other members' and servers' jobs."""
    mine = []
    for n in range(count):
        mine.append(await add(store, prompt=f"mine {n}"))
        if n % 4 == 0:
            await add(store, user_id=OTHER_USER)
            await add(store, guild_id=OTHER_GUILD)  # the same member in another server
    return mine


async def test_pages_go_newest_first_ten_at_a_time_and_back(store: Store) -> None:
    mine = await members_jobs(store, 23)
    newest_first = mine[::-1]

    first = await store.member_jobs(GUILD, USER)
    assert [j.id for j in first.jobs] == newest_first[:10]
    assert (first.has_newer, first.has_older, first.total, first.newer) == (False, True, 23, 0)
    assert all(j.guild_id == GUILD and j.user_id == USER for j in first.jobs)

    second = await store.member_jobs(GUILD, USER, before=first.jobs[-1].id)
    assert [j.id for j in second.jobs] == newest_first[10:20]
    assert (second.has_newer, second.has_older, second.newer) == (True, True, 10)

    last = await store.member_jobs(GUILD, USER, before=second.jobs[-1].id)
    assert [j.id for j in last.jobs] == newest_first[20:]
    assert (last.has_newer, last.has_older, last.newer) == (True, False, 20)

    back = await store.member_jobs(GUILD, USER, after=last.jobs[0].id)
    assert [j.id for j in back.jobs] == newest_first[10:20] and back.newer == 10
    back_to_first = await store.member_jobs(GUILD, USER, after=back.jobs[0].id)
    assert [j.id for j in back_to_first.jobs] == newest_first[:10] and not back_to_first.has_newer


async def test_a_page_size_and_an_exact_multiple(store: Store) -> None:
    mine = await members_jobs(store, 20)
    page = await store.member_jobs(GUILD, USER, limit=10)
    second = await store.member_jobs(GUILD, USER, before=page.jobs[-1].id, limit=10)
    assert [j.id for j in second.jobs] == mine[9::-1] and not second.has_older
    small = await store.member_jobs(GUILD, USER, limit=3)
    assert [j.id for j in small.jobs] == mine[:-4:-1]
    with pytest.raises(ValueError, match="limit"):
        await store.member_jobs(GUILD, USER, limit=0)


async def test_jobs_added_between_clicks_never_shift_a_page(store: Store) -> None:
    mine = await members_jobs(store, 15)
    first = await store.member_jobs(GUILD, USER)
    newer = [await add(store) for _ in range(3)]
    # Next from the page seen before: still the jobs right after it, not ones seen already.
    second = await store.member_jobs(GUILD, USER, before=first.jobs[-1].id)
    assert [j.id for j in second.jobs] == mine[4::-1]
    # Previous from there: the ten just newer; the three new ones are newer still.
    back = await store.member_jobs(GUILD, USER, after=second.jobs[0].id)
    assert [j.id for j in back.jobs] == mine[:4:-1] and back.has_newer and back.newer == 3
    top = await store.member_jobs(GUILD, USER, after=back.jobs[0].id)
    # Fewer than a page is newer: the newest page, whole.
    assert [j.id for j in top.jobs] == (mine + newer)[:-11:-1] and not top.has_newer


async def test_no_jobs_and_outdated_cursors(store: Store) -> None:
    empty = await store.member_jobs(GUILD, USER)
    assert (empty.jobs, empty.total, empty.has_older, empty.has_newer) == ((), 0, False, False)
    mine = await members_jobs(store, 4)
    # Older than the oldest (an outdated message): the newest page instead of an empty one.
    stale = await store.member_jobs(GUILD, USER, before=mine[0])
    assert [j.id for j in stale.jobs] == mine[::-1]
    huge = await store.member_jobs(GUILD, USER, after=2**63 - 2)
    assert [j.id for j in huge.jobs] == mine[::-1]
    assert (await store.member_jobs(GUILD, OTHER_USER)).total == 1
    assert (await store.member_jobs(OTHER_GUILD, USER)).total == 1
