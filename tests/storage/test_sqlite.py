"""The store on SQLite: its file (WAL, fsync, permissions), the state machine, limits, concurrency and crash safety."""

from __future__ import annotations

import asyncio
import math
import shutil
import signal
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.exc import IntegrityError

from framecast.config import Secret
from framecast.guilds.settings import GuildSettings, KeyStatus, Setting
from framecast.keys.vault import KeyVault, last4
from framecast.safetext import clean_text
from framecast.storage import SettingsChange, Store, StoreClosed, StoreError, migrate
from framecast.storage.migrate import HEAD
from framecast.storage.schema import OPEN
from framecast.storage.store import _ACTIVE, _CHECKS, _CLAIMABLE, _GET
from framecast.values import (
    ACTIVE,
    TERMINAL,
    TRANSITIONS,
    AlreadyRetried,
    DailyQuotaReached,
    GuildQueueFull,
    InvalidTransition,
    Job,
    JobError,
    JobKind,
    JobLimitError,
    JobNotFound,
    JobState,
    MemberLimitReached,
    NewJob,
)
from framecast.values.durations import DurationRow
from tests.storage import _crash_child as crash_child

S = JobState
GUILD, CHANNEL, USER = 111_111_111_111_111_111, 222_222_222_222_222_222, 333_333_333_333_333_333

# Prompts that must come back byte for byte: several scripts, emoji with modifiers and ZWJ sequences,
# flags, combining marks (deliberately NOT normalised), bidi controls and C0/C1 control characters.
TRICKY_PROMPTS = [
    "一只猫在月球上跳舞，电影感，4K",
    "पहाड़ों पर सूर्योदय, धीमी गति",
    "قطة تطير فوق المدينة ليلاً",
    "🎬🐈‍⬛👩🏽‍🚀👨‍👩‍👧‍👦🏳️‍🌈🇯🇵 ❤️‍🔥",
    "e\u0301 vs \u00e9, a\u0308\u0323, Z\u0351\u0345\u036ba\u0350l\u0353g\u035co",
    "mixed \u202eRTL override\u202c and \u200f marks \u200d\u200c zero-width",
    "tabs\tnew\nlines\r\x01\x07\x1b[31m\x7f\x85\u2028\u2029 end",
    "with NUL \x00 inside",
    "quotes \" ' \\ backslash \\u0041 not an escape",
    "surrogate-free astral 𝕏 𐍈 𓀀 and BOM \ufeff",
    " leading and trailing spaces ",
    "",
]


class FakeClock:
    """Just enough of framecast.clock.Clock for the store: a settable wall clock."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def new_job(
    *,
    guild_id: int = GUILD,
    user_id: int = USER,
    prompt: str = "a cat",
    kind: JobKind = JobKind.VIDEO,
    discord: dict[str, Any] | None = None,
    retry_of: int | None = None,
    key_owner: int | None = None,
) -> NewJob:
    params: dict[str, Any] = {"model": "svc-video-v2.0", "prompt": prompt, "width": 1280, "height": 720}
    return NewJob(
        kind=kind,
        guild_id=guild_id,
        channel_id=CHANNEL,
        user_id=user_id,
        locale="en-US",
        params=params,
        retry_of=retry_of,
        key_owner=key_owner,
        discord=discord if discord is not None else {},
    )


async def add(store: Store, **kwargs: Any) -> Job:
    return await store.add(new_job(**kwargs), member_limit=None, guild_cap=None)


def wal_size(db: Path) -> int:
    wal = Path(f"{db}-wal")
    return wal.stat().st_size if wal.exists() else 0


async def on_worker(store: Store, sql: str, *args: Any) -> Any:
    """Run one statement on the store's own connection, as a statement of its own (autocommit)."""
    async with store._db.autocommit() as conn:
        result = await conn.exec_driver_sql(sql, args)
        return result.all() if result.returns_rows else []


async def count_active(store: Store, guild_id: int, user_id: int) -> int:
    """What ``member_limit`` counts: the member's non-terminal jobs in the guild."""
    sql = f"SELECT COUNT(*) FROM jobs WHERE guild_id = ? AND user_id = ? AND {OPEN.text}"
    return int((await on_worker(store, sql, guild_id, user_id))[0][0])


async def count_queued(store: Store, guild_id: int) -> int:
    """What ``guild_cap`` counts: the guild's QUEUED jobs."""
    return int(
        (
            await on_worker(
                store, "SELECT COUNT(*) FROM jobs WHERE guild_id = ? AND state = 'queued'", guild_id
            )
        )[0][0]
    )


async def queued_ids(store: Store, guild_id: int) -> list[int]:
    """The guild's QUEUED job ids in FIFO (id) order."""
    rows = await on_worker(
        store, f"SELECT id FROM jobs WHERE guild_id = {int(guild_id)} AND state = 'queued' ORDER BY id"
    )
    return [row[0] for row in rows]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "nested" / "dir" / "framecast.sqlite3"


@pytest.fixture
async def store(db_path: Path, clock: FakeClock) -> AsyncIterator[Store]:
    s = await Store.open(db_path, clock=clock)
    try:
        yield s
    finally:
        await s.close()


# ---------------------------------------------------------------------- opening and schema


async def test_open_creates_directory_wal_full_and_schema(store: Store, db_path: Path) -> None:
    assert await asyncio.to_thread(db_path.is_file)
    assert (await on_worker(store, "PRAGMA journal_mode"))[0][0] == "wal"
    assert (await on_worker(store, "PRAGMA synchronous"))[0][0] == 2  # FULL
    assert (await on_worker(store, "SELECT version_num FROM alembic_version"))[0][0] == HEAD
    # Past the old code's v4: an older Framecast refuses the file instead of using it.
    assert (await on_worker(store, "PRAGMA user_version"))[0][0] == migrate.SQLITE_FENCE == 5


async def test_every_statement_runs_on_one_thread_off_the_event_loop(store: Store) -> None:
    threads: list[int] = []
    async with store._db.autocommit() as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        assert driver is not None
        # sqlite3 calls it on the thread that runs each statement.
        await driver.set_trace_callback(lambda _sql: threads.append(threading.get_ident()))
    job = await add(store)
    await asyncio.gather(*(store.get(job.id) for _ in range(5)), store.transition(job.id, S.CANCELLED))
    assert len(threads) >= 7 and len(set(threads)) == 1 and threading.get_ident() not in threads


async def test_default_clock_is_wall_time(tmp_path: Path) -> None:
    import time

    before = time.time()
    async with await Store.open(tmp_path / "db.sqlite3") as s:
        job = await add(s)
    assert before <= job.created_at <= time.time()


async def test_schema_newer_than_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match="v99 is newer"):
        await Store.open(path)


async def test_queries_use_the_indexes(store: Store) -> None:
    values = {"id": 1, "guild_id": 1, "user_id": 2, "kind": "video", "since": 5.0, "retry_of": 3, "now": 1.0}
    async with store._db.autocommit() as conn:
        for stmt in (_ACTIVE, _CHECKS, _CLAIMABLE, _GET):
            compiled = stmt.compile(dialect=conn.dialect)
            params = compiled.construct_params(values)
            args = tuple(params[name] for name in compiled.positiontup or ())
            plan: list[Any] = list(await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", args))
            reads = [row[3] for row in plan if " jobs" in row[3]]
            # Every read of the table goes through an index (a partial one, or the rowid): no full scan.
            assert reads and all("INDEX" in r or "PRIMARY KEY" in r for r in reads), (str(compiled), reads)


# ---------------------------------------------------------------------- add / get


async def test_add_returns_the_persisted_queued_job(store: Store, clock: FakeClock) -> None:
    job = await add(store, discord={"message_id": 5, "token": "t"}, retry_of=None)
    assert job.id == 1
    assert job.state is S.QUEUED and job.kind is JobKind.VIDEO
    assert (job.guild_id, job.channel_id, job.user_id, job.locale) == (GUILD, CHANNEL, USER, "en-US")
    assert job.params == {"model": "svc-video-v2.0", "prompt": "a cat", "width": 1280, "height": 720}
    assert job.created_at == job.updated_at == clock.now
    assert job.task_id is job.started_at is job.progress is job.result_url is None
    assert job.error_code is job.error_detail is job.retry_of is None
    assert job.discord == {"message_id": 5, "token": "t"}
    assert await store.get(job.id) == job
    assert await store.get(999) is None
    second = await add(store, kind=JobKind.IMAGE, retry_of=job.id)
    assert second.id == 2 and second.kind is JobKind.IMAGE and second.retry_of == 1


async def test_add_validates_before_storing(store: Store) -> None:
    with pytest.raises(TypeError):
        await store.add(new_job(discord={"x": object()}), member_limit=None, guild_cap=None)
    with pytest.raises(ValueError):
        await store.add(NewJob("gif", 1, 2, 3, "en", {}), member_limit=None, guild_cap=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await store.add(NewJob(JobKind.VIDEO, "1", 2, 3, "en", {}), member_limit=None, guild_cap=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await store.add(new_job(prompt=float("nan")), member_limit=None, guild_cap=None)  # type: ignore[arg-type]
    assert await store.active() == []


@pytest.mark.parametrize("prompt", TRICKY_PROMPTS)
async def test_prompts_round_trip_byte_exact(db_path: Path, prompt: str) -> None:
    async with await Store.open(db_path) as s:
        job = await add(s, prompt=prompt, discord={"title": prompt, prompt: [prompt]})
        assert job.prompt.encode("utf-8") == prompt.encode("utf-8")
    async with await Store.open(db_path) as s:  # and after a restart
        again = await s.get(job.id)
    assert again is not None
    assert again.prompt.encode("utf-8") == prompt.encode("utf-8")
    assert again.discord == {"title": prompt, prompt: [prompt]}


async def test_non_ascii_is_stored_readably(store: Store, db_path: Path) -> None:
    await add(store, prompt="一只猫 🎬")
    raw = await on_worker(store, "SELECT params FROM jobs")
    assert "一只猫 🎬" in raw[0][0]  # ensure_ascii=False: no \\uXXXX escapes in the file


async def test_lone_surrogates_round_trip(store: Store) -> None:
    # json.loads() of a Discord payload can produce these; they cannot be encoded as UTF-8 as such.
    prompt = "broken \ud83c pair \udfac"
    job = await add(store, prompt=prompt)
    assert (await store.get(job.id)).prompt == prompt  # type: ignore[union-attr]


# ---------------------------------------------------------------------- transition


async def test_transition_walks_the_happy_path(store: Store, clock: FakeClock) -> None:
    job = await add(store)
    created = job.created_at
    clock.now += 5
    job = await store.transition(job.id, S.SUBMITTING, expect=S.QUEUED)
    assert job.state is S.SUBMITTING and job.updated_at == created + 5 and job.created_at == created
    clock.now += 5
    job = await store.transition(
        job.id, S.RUNNING, expect=[S.SUBMITTING], task_id="t-1", started_at=clock.now
    )
    assert (job.state, job.task_id, job.started_at) == (S.RUNNING, "t-1", clock.now)
    job = await store.transition(job.id, S.DELIVERING, result_url="https://r", progress=1)
    assert job.progress == 1.0 and isinstance(job.progress, float) and job.result_url == "https://r"
    job = await store.transition(job.id, "delivered")  # type: ignore[arg-type]
    assert job.state is S.DELIVERED and job.is_terminal
    assert await store.get(job.id) == job


@pytest.mark.parametrize("old", [s for s in JobState if s is not S.QUEUED])
async def test_every_illegal_transition_is_refused_and_changes_nothing(store: Store, old: JobState) -> None:
    job = await add(store)
    # Reach `old` along a legal path.
    path = {
        S.SUBMITTING: [S.SUBMITTING],
        S.RUNNING: [S.SUBMITTING, S.RUNNING],
        S.DELIVERING: [S.SUBMITTING, S.DELIVERING],
        S.DELIVERED: [S.SUBMITTING, S.DELIVERING, S.DELIVERED],
        S.FAILED: [S.FAILED],
        S.CANCELLED: [S.CANCELLED],
    }[old]
    for step in path:
        job = await store.transition(job.id, step)
    assert job.state is old
    for new in JobState:
        if new in TRANSITIONS[old]:
            continue
        with pytest.raises(InvalidTransition) as info:
            await store.transition(job.id, new, error_code="x")
        message = str(info.value)
        assert f"job {job.id}" in message and old.value in message and new.value in message
        assert (info.value.job_id, info.value.old, info.value.new) == (job.id, old, new)
    assert await store.get(job.id) == job


async def test_transition_checks_expect(store: Store) -> None:
    job = await add(store)
    job = await store.transition(job.id, S.SUBMITTING)
    # Legal move, but the caller thought the job was still queued.
    with pytest.raises(InvalidTransition) as info:
        await store.transition(job.id, S.CANCELLED, expect=S.QUEUED)
    assert (
        str(info.value)
        == f"job {job.id}: state is submitting, expected queued (requested submitting -> cancelled)"
    )
    with pytest.raises(InvalidTransition):
        await store.transition(job.id, S.CANCELLED, expect=(S.QUEUED, S.RUNNING))
    with pytest.raises(InvalidTransition):
        await store.transition(job.id, S.CANCELLED, expect=())
    assert (await store.get(job.id)).state is S.SUBMITTING  # type: ignore[union-attr]
    job = await store.transition(job.id, S.CANCELLED, expect={S.QUEUED, S.SUBMITTING, S.RUNNING})
    assert job.state is S.CANCELLED


async def test_transition_errors(store: Store) -> None:
    with pytest.raises(JobNotFound) as info:
        await store.transition(404, S.SUBMITTING)
    assert info.value.job_id == 404
    job = await add(store)
    with pytest.raises(ValueError):
        await store.transition(job.id, "nonsense")  # type: ignore[arg-type]
    for bad in ({"id": 3}, {"updated_at": 1.0}, {"colour": "red"}):
        with pytest.raises(ValueError):
            await store.transition(job.id, S.SUBMITTING, **bad)
    with pytest.raises(TypeError):
        await store.transition(job.id, S.SUBMITTING, task_id=12)
    assert await store.get(job.id) == job


async def test_restart_requeue_of_submitting(store: Store) -> None:
    job = await add(store)
    await store.transition(job.id, S.SUBMITTING)
    job = await store.transition(job.id, S.QUEUED, expect=S.SUBMITTING)
    assert job.state is S.QUEUED


async def test_concurrent_cancel_and_completion_only_one_wins(store: Store) -> None:
    jobs = []
    for _ in range(20):
        job = await add(store)
        await store.transition(job.id, S.SUBMITTING)
        jobs.append(await store.transition(job.id, S.RUNNING, task_id="t"))

    async def race(job: Job, cancel_first: bool) -> list[Any]:
        cancel = store.transition(job.id, S.CANCELLED, expect=(S.QUEUED, S.SUBMITTING, S.RUNNING))
        done = store.transition(job.id, S.DELIVERING, expect=S.RUNNING, result_url="u")
        order = [cancel, done] if cancel_first else [done, cancel]
        return await asyncio.gather(*order, return_exceptions=True)

    results = await asyncio.gather(*(race(job, i % 2 == 0) for i, job in enumerate(jobs)))
    for job, outcome in zip(jobs, results, strict=True):
        wins = [r for r in outcome if isinstance(r, Job)]
        losses = [r for r in outcome if isinstance(r, InvalidTransition)]
        assert len(wins) == 1 and len(losses) == 1
        stored = await store.get(job.id)
        assert stored == wins[0]
        assert stored.state in (S.CANCELLED, S.DELIVERING)  # type: ignore[union-attr]
        assert (stored.result_url == "u") == (stored.state is S.DELIVERING)  # type: ignore[union-attr]


# ---------------------------------------------------------------------- update


async def test_update_writes_fields_and_maintains_updated_at(store: Store, clock: FakeClock) -> None:
    job = await add(store)
    clock.now += 3
    updated = await store.update(job.id, progress=0.25, locale="hi-IN", params={"prompt": "new"})
    assert updated.progress == 0.25 and updated.locale == "hi-IN" and updated.prompt == "new"
    assert updated.updated_at == job.updated_at + 3 and updated.created_at == job.created_at
    assert updated.state is S.QUEUED
    cleared = await store.update(job.id, progress=None)
    assert cleared.progress is None


async def test_update_refuses_state_id_and_unknown_fields(store: Store) -> None:
    job = await add(store)
    refused: list[dict[str, Any]] = [{"state": S.RUNNING}, {"id": 5}, {"updated_at": 1.0}, {"nope": 1}]
    for bad in refused:
        with pytest.raises(ValueError):
            await store.update(job.id, **bad)
    mistyped: list[dict[str, Any]] = [
        {"progress": "half"},
        {"user_id": 1.5},
        {"guild_id": True},
        {"locale": None},
        {"discord": []},
    ]
    for bad in mistyped:
        with pytest.raises(TypeError):
            await store.update(job.id, **bad)
    with pytest.raises(ValueError):
        await store.update(job.id, progress=float("inf"))
    with pytest.raises(JobNotFound):
        await store.update(12345, progress=0.5)
    assert await store.get(job.id) == job


async def test_update_works_on_terminal_jobs(store: Store) -> None:
    job = await add(store)
    await store.transition(job.id, S.CANCELLED)
    job = await store.update(job.id, discord={"status_message_id": 9})
    assert job.state is S.CANCELLED and job.discord == {"status_message_id": 9}


async def test_patch_discord_merges_without_losing_updates(store: Store) -> None:
    job = await add(store, discord={"a": 1})
    await asyncio.gather(*(store.patch_discord(job.id, {f"k{i}": i}) for i in range(10)))
    job = await store.patch_discord(job.id, {"a": 2})
    assert job.discord == {"a": 2, **{f"k{i}": i for i in range(10)}}
    with pytest.raises(JobNotFound):
        await store.patch_discord(999, {"x": 1})


# ---------------------------------------------------------------------- queries


async def test_active_is_every_unfinished_job_in_id_order(store: Store) -> None:
    ids = [(await add(store, guild_id=g, user_id=u)).id for g, u in [(1, 1), (2, 1), (1, 2), (3, 3), (1, 1)]]
    await store.transition(ids[0], S.SUBMITTING)
    await store.transition(ids[0], S.RUNNING)
    await store.transition(ids[1], S.CANCELLED)
    await store.transition(ids[2], S.SUBMITTING)
    await store.transition(ids[2], S.DELIVERING)
    await store.transition(ids[2], S.DELIVERED)
    await store.transition(ids[3], S.SUBMITTING)
    active = await store.active()
    assert [j.id for j in active] == [ids[0], ids[3], ids[4]]
    assert all(j.state in ACTIVE for j in active)


async def test_counts_and_queued_ids(store: Store) -> None:
    a = await add(store)
    b = await add(store)
    c = await add(store, user_id=USER + 1)
    await add(store, guild_id=GUILD + 1)
    assert await count_active(store, GUILD, USER) == 2
    assert await count_queued(store, GUILD) == 3
    assert await queued_ids(store, GUILD) == [a.id, b.id, c.id]
    await store.transition(a.id, S.SUBMITTING)
    assert await queued_ids(store, GUILD) == [b.id, c.id]
    assert await count_active(store, GUILD, USER) == 2  # submitting still counts against the member
    await store.transition(a.id, S.QUEUED)  # back to the queue keeps its place (id order)
    assert await queued_ids(store, GUILD) == [a.id, b.id, c.id]
    await store.transition(b.id, S.CANCELLED)
    assert await count_active(store, GUILD, USER) == 1
    assert await queued_ids(store, GUILD + 5) == []


# ---------------------------------------------------------------------- limits


async def test_member_limit_counts_every_non_terminal_state(store: Store) -> None:
    limits: dict[str, Any] = {"member_limit": 2, "guild_cap": None}
    first = await store.add(new_job(), **limits)
    await store.transition(first.id, S.SUBMITTING)
    await store.transition(first.id, S.RUNNING)
    second = await store.add(new_job(), **limits)
    with pytest.raises(MemberLimitReached) as info:
        await store.add(new_job(), **limits)
    assert info.value.limit == 2 and isinstance(info.value, JobLimitError)
    await store.transition(first.id, S.DELIVERING)  # delivering still counts
    with pytest.raises(MemberLimitReached):
        await store.add(new_job(), **limits)
    # Other members and the same member in another guild are not affected.
    await store.add(new_job(user_id=USER + 1), **limits)
    await store.add(new_job(guild_id=GUILD + 1), **limits)
    await store.transition(first.id, S.DELIVERED)
    third = await store.add(new_job(), **limits)
    assert third.id > second.id
    assert await count_active(store, GUILD, USER) == 2


async def test_guild_cap_counts_queued_jobs_only(store: Store) -> None:
    limits: dict[str, Any] = {"member_limit": None, "guild_cap": 2}
    a = await store.add(new_job(user_id=1), **limits)
    await store.add(new_job(user_id=2), **limits)
    with pytest.raises(GuildQueueFull) as info:
        await store.add(new_job(user_id=3), **limits)
    assert info.value.cap == 2 and isinstance(info.value, JobLimitError)
    await store.add(new_job(user_id=3, guild_id=GUILD + 1), **limits)  # another guild
    await store.transition(a.id, S.SUBMITTING)  # no longer queued: frees a place
    await store.add(new_job(user_id=3), **limits)
    assert await count_queued(store, GUILD) == 2


async def test_member_limit_is_checked_before_guild_cap(store: Store) -> None:
    await store.add(new_job(), member_limit=1, guild_cap=1)
    with pytest.raises(MemberLimitReached):
        await store.add(new_job(), member_limit=1, guild_cap=1)
    with pytest.raises(GuildQueueFull):
        await store.add(new_job(user_id=USER + 1), member_limit=1, guild_cap=1)


async def test_refused_add_stores_nothing_and_burns_no_id(store: Store) -> None:
    await store.add(new_job(), member_limit=1, guild_cap=None)
    for _ in range(3):
        with pytest.raises(MemberLimitReached):
            await store.add(new_job(), member_limit=1, guild_cap=None)
    assert len(await store.active()) == 1
    assert (await add(store, user_id=5)).id == 2


async def test_zero_limits_refuse_everything(store: Store) -> None:
    with pytest.raises(MemberLimitReached):
        await store.add(new_job(), member_limit=0, guild_cap=None)
    with pytest.raises(GuildQueueFull):
        await store.add(new_job(), member_limit=None, guild_cap=0)


async def test_50_concurrent_adds_respect_the_member_limit(store: Store) -> None:
    results = await asyncio.gather(
        *(store.add(new_job(prompt=str(i)), member_limit=2, guild_cap=25) for i in range(50)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Job) for r in results) == 2
    assert sum(isinstance(r, MemberLimitReached) for r in results) == 48
    assert await count_active(store, GUILD, USER) == 2


async def test_50_concurrent_adds_respect_the_guild_cap(store: Store) -> None:
    results = await asyncio.gather(
        *(store.add(new_job(user_id=i), member_limit=2, guild_cap=25) for i in range(50)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Job) for r in results) == 25
    assert sum(isinstance(r, GuildQueueFull) for r in results) == 25
    assert await count_queued(store, GUILD) == 25


async def test_limits_hold_across_two_connections_to_one_file(db_path: Path) -> None:
    # Two stores = two connections on two threads: only BEGIN IMMEDIATE keeps them from overshooting.
    async with await Store.open(db_path) as one, await Store.open(db_path) as two:
        member = await asyncio.gather(
            *((one if i % 2 else two).add(new_job(), member_limit=2, guild_cap=None) for i in range(50)),
            return_exceptions=True,
        )
        guild = await asyncio.gather(
            *(
                (one if i % 2 else two).add(new_job(guild_id=7, user_id=i), member_limit=None, guild_cap=25)
                for i in range(50)
            ),
            return_exceptions=True,
        )
        assert sum(isinstance(r, Job) for r in member) == 2
        assert all(isinstance(r, (Job, MemberLimitReached)) for r in member)
        assert sum(isinstance(r, Job) for r in guild) == 25
        assert all(isinstance(r, (Job, GuildQueueFull)) for r in guild)
        assert await count_queued(one, 7) == 25


# ---------------------------------------------------------------------- close / restart


async def test_close_and_reopen_preserves_everything(db_path: Path, clock: FakeClock) -> None:
    store = await Store.open(db_path, clock=clock)
    discord = {"message_id": 123456789012345678, "token": "tok", "nested": {"list": [1, "二", None, True]}}
    jobs = [await add(store, discord=discord, prompt="🎬 один") for _ in range(3)]
    await store.transition(jobs[0].id, S.SUBMITTING)
    jobs[0] = await store.transition(jobs[0].id, S.RUNNING, task_id="task-0", started_at=clock.now - 10)
    jobs[0] = await store.update(jobs[0].id, progress=0.4)
    jobs[1] = await store.transition(jobs[1].id, S.FAILED, error_code="task_failed", error_detail="bad")
    before_active = await store.active()
    await store.close()
    assert await asyncio.to_thread(wal_size, db_path) == 0  # checkpointed into the main file

    reopened = await Store.open(db_path, clock=clock)
    try:
        for job in jobs:
            assert await reopened.get(job.id) == job
        assert await reopened.active() == before_active
        assert [j.id for j in before_active] == [jobs[0].id, jobs[2].id]
        assert (await reopened.get(jobs[2].id)).discord == discord  # type: ignore[union-attr]
        assert (await add(reopened)).id == 4  # ids keep increasing
    finally:
        await reopened.close()


async def test_close_is_idempotent_and_final(db_path: Path) -> None:
    store = await Store.open(db_path)
    pending = [asyncio.ensure_future(add(store)) for _ in range(5)]
    await asyncio.sleep(0)  # let them reach the worker queue
    await asyncio.gather(store.close(), store.close())
    await store.close()
    assert all(isinstance(p.result(), Job) for p in pending)  # submitted before close: completed
    with pytest.raises(StoreClosed):
        await store.get(1)
    with pytest.raises(StoreClosed):
        await add(store)
    async with await Store.open(db_path) as again:
        assert len(await again.active()) == 5


# ---------------------------------------------------------------------- crash safety


def _reachable(src: JobState) -> set[JobState]:
    seen, todo = {src}, [src]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("lines_before_kill", [1, 43, 160])
async def test_sigkill_loses_no_acknowledged_write(tmp_path: Path, lines_before_kill: int) -> None:
    db = tmp_path / "crash" / "framecast.sqlite3"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        crash_child.__file__,
        str(db),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    reported: dict[int, JobState] = {}
    try:
        assert proc.stdout is not None
        for _ in range(lines_before_kill):
            # A guard against a hung child, not a timing assert: the first line waits for the
            # interpreter and its imports, and every line for an fsync, which on a loaded two-core
            # machine (the whole suite beside it) took over 10 s once.
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
            if not line:
                stderr = await proc.stderr.read() if proc.stderr else b""
                pytest.fail(f"child exited early: {stderr.decode(errors='replace')}")
            id_text, state_text = line.decode().split()
            reported[int(id_text)] = JobState(state_text)  # later lines are later states of the job
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL

    conn = sqlite3.connect(db)  # also recovers the WAL left behind by the kill
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()

    async with await Store.open(db) as store:
        for job_id, state in reported.items():
            job = await store.get(job_id)
            assert job is not None, f"acknowledged job {job_id} lost"
            # The child may have committed more after its last line was read, never less.
            assert job.state in _reachable(state), (job_id, state, job.state)
            assert job.prompt.startswith(crash_child.PROMPT)
            if state is not S.QUEUED:
                assert job.task_id == f"task-{job_id}" or job.state in (S.SUBMITTING,)
        active = await store.active()
        assert [j.id for j in active] == sorted(j.id for j in active)
        assert all(j.state not in TERMINAL for j in active)


async def test_result_local_is_a_stored_flag(store: Store) -> None:
    job = await add(store, kind=JobKind.IMAGE)
    assert job.result_local is False
    await store.transition(job.id, S.SUBMITTING)
    done = await store.transition(job.id, S.DELIVERING, result_local=True)
    assert done.result_local is True and done.result_url is None
    with pytest.raises(TypeError):
        await store.update(job.id, result_local=1)


async def test_a_failed_job_is_retried_at_most_once(store: Store) -> None:
    first = await add(store)
    retry = await add(store, retry_of=first.id)
    with pytest.raises(AlreadyRetried) as info:
        await add(store, retry_of=first.id)
    assert isinstance(info.value, JobError)
    assert (info.value.retry_of, info.value.existing_id) == (first.id, retry.id)
    # Checked before the limits: the second click hears about the first retry, not about a limit.
    with pytest.raises(AlreadyRetried):
        await store.add(new_job(retry_of=first.id), member_limit=0, guild_cap=0)
    assert [j.id for j in await store.active()] == [first.id, retry.id]


async def test_concurrent_retries_of_one_job_create_exactly_one(db_path: Path) -> None:
    # Two connections (two processes' worth) and many clicks at once: the check and the insert are
    # one transaction, and the unique index is there too.
    async with await Store.open(db_path) as one, await Store.open(db_path) as two:
        failed = await add(one)
        results = await asyncio.gather(
            *(
                (one if i % 2 else two).add(new_job(retry_of=failed.id), member_limit=None, guild_cap=None)
                for i in range(40)
            ),
            return_exceptions=True,
        )
        created = [r for r in results if isinstance(r, Job)]
        assert len(created) == 1
        assert all(
            isinstance(r, AlreadyRetried) and r.existing_id == created[0].id
            for r in results
            if not isinstance(r, Job)
        )


async def test_the_unique_index_refuses_a_second_retry_written_behind_the_store(store: Store) -> None:
    first = await add(store)
    await add(store, retry_of=first.id)

    with pytest.raises(IntegrityError):
        await on_worker(
            store,
            "INSERT INTO jobs (kind, state, guild_id, channel_id, user_id, locale, params, created_at,"
            " updated_at, retry_of) VALUES ('video', 'queued', 1, 2, 3, 'en', '{}', 1, 1, ?)",
            first.id,
        )


async def test_database_wal_shm_and_directory_are_owner_only(db_path: Path) -> None:
    async with await Store.open(db_path) as store:
        await add(store)  # the WAL and the shared-memory file exist once something was written
        files = [db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")]
        assert all(f.exists() for f in files)
        assert {f.name: f.stat().st_mode & 0o777 for f in files} == {f.name: 0o600 for f in files}
        assert db_path.parent.stat().st_mode & 0o777 == 0o700  # created by the store


async def test_looser_existing_files_are_tightened_on_open(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    path = data / "framecast.sqlite3"
    shutil.copy(Path(__file__).with_name("fixtures") / "v4.sqlite3", path)  # written by the old store
    for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        f.touch()
        f.chmod(0o644)
    async with await Store.open(path) as store:
        assert await store.get(1) is not None
        for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            assert f.stat().st_mode & 0o777 == 0o600, f
    assert data.stat().st_mode & 0o777 == 0o755  # the operator's own directory is left alone


async def test_text_fields_refuse_lone_surrogates_with_a_clear_error(store: Store) -> None:
    job = await add(store)
    with pytest.raises(ValueError, match="error_detail"):
        await store.update(job.id, error_detail="policy \ud800 violation")
    assert (await store.get(job.id)).error_detail is None  # type: ignore[union-attr]


# What a hostile service puts in its text: lone surrogates, NUL, terminal escapes, bidi overrides.
HOSTILE_CHARS = ["\ud800", "\udfff", "\udc80", "\x00", "\x1b", "\u202e", "\u2028", "\ufeff", "\U0010ffff"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text(alphabet=st.one_of(st.characters(codec=None), st.sampled_from(HOSTILE_CHARS)), max_size=2000)
)
async def test_the_store_accepts_every_cleaned_text(store: Store, text: str) -> None:
    job = await add(store)
    cleaned = clean_text(text, 300)
    stored = await store.update(job.id, error_detail=cleaned, error_code=clean_text(text, 40))
    assert stored.error_detail == cleaned


# ---------------------------------------------------------------------- schema v3: learned durations


async def test_durations_upsert_and_survive_a_reopen(db_path: Path) -> None:
    first = DurationRow("video:27:svc-video-v2.0", 120.0, 60.0, 1, 100.0)
    image = DurationRow("image:20:svc-image-2.1-flash", 18.5, 4.0, 9, 101.0)
    async with await Store.open(db_path) as store:
        await store.save_duration(first)
        await store.save_duration(image)
        await store.save_duration(replace(first, mean=90.0, count=2, updated_at=102.0))
    async with await Store.open(db_path) as store:
        assert await store.load_durations() == [
            image,
            DurationRow("video:27:svc-video-v2.0", 90.0, 60.0, 2, 102.0),
        ]


@pytest.mark.parametrize(
    ("row", "error"),
    [
        (DurationRow("k", math.nan, 1.0, 1, 1.0), ValueError),
        (DurationRow("k", 1.0, math.inf, 1, 1.0), ValueError),
        (DurationRow("k", 1.0, 1.0, -1, 1.0), ValueError),
        (DurationRow("k", 1.0, 1.0, 1.5, 1.0), TypeError),  # type: ignore[arg-type]
        (DurationRow("k", "1", 1.0, 1, 1.0), TypeError),  # type: ignore[arg-type]
        (DurationRow(3, 1.0, 1.0, 1, 1.0), TypeError),  # type: ignore[arg-type]
        (DurationRow("k\ud800", 1.0, 1.0, 1, 1.0), ValueError),
    ],
)
async def test_save_duration_refuses_what_sqlite_would_store_wrongly(
    store: Store, row: DurationRow, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await store.save_duration(row)
    assert await store.load_durations() == []


# ---------------------------------------------------------------------- schema v4: key owners, daily quotas


async def test_key_owner_is_a_job_field(store: Store) -> None:
    assert (await add(store)).key_owner is None
    owned = await store.add(new_job(key_owner=GUILD), member_limit=None, guild_cap=None)
    assert owned.key_owner == GUILD
    job = await add(store)
    await store.transition(job.id, S.SUBMITTING, key_owner=GUILD)
    assert (await store.get(job.id)).key_owner == GUILD  # type: ignore[union-attr]
    assert (await store.update(job.id, key_owner=None)).key_owner is None
    with pytest.raises(TypeError):
        await store.update(job.id, key_owner=True)
    with pytest.raises(TypeError):
        await store.update(job.id, key_owner="123")


async def quota_add(store: Store, limit: int, since: float, **kwargs: Any) -> Job:
    return await store.add(new_job(**kwargs), member_limit=None, guild_cap=None, quota=(limit, since))


async def test_daily_quota_counts_the_members_jobs_of_one_kind_since_the_start(
    store: Store, clock: FakeClock
) -> None:
    since = clock.now
    clock.now = since - 0.001  # the previous period: does not count
    await add(store)
    clock.now = since  # exactly at the start: counts
    first = await quota_add(store, 2, since)
    clock.now = since + 10
    await quota_add(store, 2, since)
    with pytest.raises(DailyQuotaReached) as info:
        await quota_add(store, 2, since)
    assert info.value.limit == 2 and isinstance(info.value, JobLimitError)
    # Another kind, member or guild has its own count.
    await quota_add(store, 2, since, kind=JobKind.IMAGE)
    await quota_add(store, 2, since, user_id=USER + 1)
    await quota_add(store, 2, since, guild_id=GUILD + 1)
    # Failed jobs do not count, nor jobs cancelled before the service started them; finished,
    # running and cancelled running ones do.
    await store.transition(first.id, S.FAILED, error_code="internal")
    second = await quota_add(store, 2, since)
    with pytest.raises(DailyQuotaReached):
        await quota_add(store, 2, since)
    await store.transition(second.id, S.SUBMITTING)
    await store.transition(second.id, S.RUNNING, task_id="t-2", started_at=clock.now)
    await store.transition(second.id, S.CANCELLED)
    with pytest.raises(DailyQuotaReached):
        await quota_add(store, 2, since)
    clock.now = since + 20
    with pytest.raises(DailyQuotaReached):
        await quota_add(store, 2, since)
    # A new period starts with nothing used.
    clock.now += 100
    await quota_add(store, 1, clock.now)
    with pytest.raises(DailyQuotaReached):
        await quota_add(store, 1, clock.now)
    with pytest.raises(DailyQuotaReached):
        await quota_add(store, 0, since + 1_000_000)  # a zero quota refuses everything


async def test_quota_refusal_stores_nothing_and_comes_before_the_member_limit(store: Store) -> None:
    await store.add(new_job(), member_limit=1, guild_cap=None, quota=(1, 0.0))
    with pytest.raises(DailyQuotaReached):
        await store.add(new_job(), member_limit=1, guild_cap=None, quota=(1, 0.0))
    assert len(await store.active()) == 1
    assert (await add(store, user_id=5)).id == 2
    with pytest.raises(ValueError):
        await store.add(new_job(), member_limit=None, guild_cap=None, quota=(-1, 0.0))
    with pytest.raises(ValueError):
        await store.add(new_job(), member_limit=None, guild_cap=None, quota=(1, math.nan))


async def test_50_concurrent_adds_respect_the_daily_quota(store: Store) -> None:
    results = await asyncio.gather(
        *(quota_add(store, 3, 0.0, prompt=str(i)) for i in range(50)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Job) for r in results) == 3
    assert sum(isinstance(r, DailyQuotaReached) for r in results) == 47


async def test_guild_settings_default_save_log_and_survive_a_reopen(db_path: Path, clock: FakeClock) -> None:
    settings = GuildSettings(member_jobs=1, channels=(5, 6), blocklist=("café", "猫"), nsfw_only=True)
    async with await Store.open(db_path, clock=clock) as store:
        assert await store.all_guild_settings() == {}
        await store.save_guild_settings(
            GUILD, settings, by=USER, changed=[Setting.MEMBER_JOBS, Setting.CHANNELS, Setting.BLOCKLIST]
        )
        clock.now += 60
        other = GuildSettings(daily_videos=0)
        await store.save_guild_settings(GUILD + 1, other, by=USER + 1, changed=[Setting.DAILY_VIDEOS])
        clock.now += 60
        await store.save_guild_settings(
            GUILD, settings.replace(nsfw_only=False), by=USER + 2, changed=[Setting.NSFW_ONLY]
        )
    async with await Store.open(db_path, clock=clock) as store:
        assert await store.all_guild_settings() == {
            GUILD: settings.replace(nsfw_only=False),
            GUILD + 1: other,
        }
        log = await store.settings_log(GUILD)
        assert log == [
            SettingsChange(GUILD, USER + 2, Setting.NSFW_ONLY, clock.now),
            SettingsChange(GUILD, USER, Setting.BLOCKLIST, clock.now - 120),
            SettingsChange(GUILD, USER, Setting.CHANNELS, clock.now - 120),
            SettingsChange(GUILD, USER, Setting.MEMBER_JOBS, clock.now - 120),
        ]
        assert await store.settings_log(GUILD, limit=1) == log[:1]
        assert await store.settings_log(GUILD + 1) == [
            SettingsChange(GUILD + 1, USER + 1, Setting.DAILY_VIDEOS, clock.now - 60)
        ]
        # The log records which setting, never its value.
        rows = await on_worker(store, "SELECT * FROM settings_log")
        assert all("café" not in str(tuple(row)) for row in rows)


async def test_unreadable_stored_settings_fall_back_to_the_defaults(store: Store) -> None:
    await on_worker(
        store,
        "INSERT INTO guild_settings VALUES (?, ?, 1.0, 1), (?, ?, 1.0, 1)",
        GUILD,
        "{not json",
        GUILD + 1,
        '{"member_jobs": 2, "from_the_future": 1}',
    )
    assert await store.all_guild_settings() == {
        GUILD: GuildSettings(),
        GUILD + 1: GuildSettings(member_jobs=2),
    }


async def test_guild_keys_set_mark_delete_and_log(store: Store, clock: FakeClock) -> None:
    assert await store.guild_key(GUILD) is None
    await store.set_guild_key(GUILD, b"token-1", "abcd", by=USER)
    clock.now += 5
    await store.set_guild_key(GUILD + 1, b"token-2", "wxyz", by=USER + 1)
    key = await store.guild_key(GUILD)
    assert key is not None
    assert (key.guild_id, key.token, key.last4, key.status, key.set_by, key.set_at) == (
        GUILD,
        b"token-1",
        "abcd",
        KeyStatus.OK,
        USER,
        clock.now - 5,
    )
    assert "token-1" not in repr(key)
    assert not await store.mark_guild_key(GUILD, KeyStatus.REJECTED, last4="wxyz")  # another key's
    assert await store.mark_guild_key(GUILD, KeyStatus.REJECTED, last4="abcd")
    assert not await store.mark_guild_key(GUILD, KeyStatus.REJECTED, last4="abcd")  # known already
    assert [(k.guild_id, k.status) for k in await store.all_guild_keys()] == [
        (GUILD, KeyStatus.REJECTED),
        (GUILD + 1, KeyStatus.OK),
    ]
    # A new key replaces the old one and is OK again.
    await store.set_guild_key(GUILD, b"token-3", "efgh", by=USER + 2)
    key = await store.guild_key(GUILD)
    assert key is not None and (key.token, key.last4, key.status) == (b"token-3", "efgh", KeyStatus.OK)
    assert await store.delete_guild_key(GUILD, by=USER + 3) is True
    assert await store.delete_guild_key(GUILD, by=USER + 3) is False  # nothing to delete: not logged
    assert await store.guild_key(GUILD) is None
    assert [(c.user_id, c.setting) for c in await store.settings_log(GUILD)] == [
        (USER + 3, Setting.API_KEY),
        (USER + 2, Setting.API_KEY),
        (USER, Setting.API_KEY),
    ]
    with pytest.raises(TypeError):
        await store.set_guild_key(GUILD, "plain text", "abcd", by=USER)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await store.set_guild_key(GUILD, b"t", "abcde", by=USER)


async def test_the_database_file_never_holds_a_key_in_clear(db_path: Path) -> None:
    key = "sk-live-PLAINTEXT-needle-9f8e7d6c5b4a"
    vault = KeyVault(enabled=True, secret=Secret(Fernet.generate_key().decode()))
    async with await Store.open(db_path) as store:
        await store.set_guild_key(GUILD, vault.encrypt(key), last4(key), by=USER)
        await store.save_guild_settings(
            GUILD, GuildSettings(member_jobs=1), by=USER, changed=[Setting.MEMBER_JOBS]
        )
        assert await store.mark_guild_key(GUILD, KeyStatus.REJECTED, last4=last4(key))
        # While open: the main file and its WAL.
        files = [db_path, Path(f"{db_path}-wal")]
        blobs = [await asyncio.to_thread(p.read_bytes) for p in files if p.exists()]
        stored = await store.guild_key(GUILD)
    blobs.append(await asyncio.to_thread(db_path.read_bytes))  # after the checkpoint at close
    for blob in blobs:
        assert key.encode() not in blob
        assert b"PLAINTEXT-needle" not in blob
    assert any(b"5b4a" in blob for blob in blobs)  # last4 is the one plain part
    assert stored is not None and vault.decrypt(stored.token).reveal() == key
