"""One contract, two databases: every test here runs the one store (framecast.storage) on SQLite and PostgreSQL.

The PostgreSQL runs use a fresh throw-away database per test (tests/pg.py) and skip, saying why, when
no server answers on 127.0.0.1:5432. "Two processes" are two store objects on the same database: two
SQLite connections to one file, two connection pools; everything the store promises across processes
(limits, retry uniqueness, compare-and-set, leases) must hold between them.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from framecast.config import Secret, Settings
from framecast.guilds.settings import GuildSettings, KeyStatus, Setting
from framecast.storage import Store, StoreClosed, StoreError, open_store, redact_dsn
from framecast.values import (
    AlreadyRetried,
    DailyQuotaReached,
    GuildQueueFull,
    InvalidTransition,
    Job,
    JobKind,
    JobNotFound,
    JobState,
    MemberLimitReached,
    NewJob,
)
from framecast.values.durations import DurationRow
from tests.fakes.clock import ManualClock
from tests.pg import fresh_database
from tests.stores import Backend

S = JobState
GUILD, OTHER_GUILD = 111_111_111_111_111_111, 444_444_444_444_444_444
CHANNEL, USER, OTHER_USER = 222_222_222_222_222_222, 333_333_333_333_333_333, 555_555_555_555_555_555
ADMIN = 666_666_666_666_666_666

# Text both stores must give back exactly (PostgreSQL text holds no NUL: a JSON string may, escaped).
TRICKY = [
    "一只猫在月球上跳舞，电影感，4K",
    "पहाड़ों पर सूर्योदय, धीमी गति",
    "قطة تطير فوق المدينة ليلاً",
    "🎬🐈‍⬛👩🏽‍🚀👨‍👩‍👧‍👦🏳️‍🌈🇯🇵 ❤️‍🔥",
    "e\u0301 vs \u00e9, mixed \u202eRTL\u202c \u200d\u200c, tabs\tnew\nlines\r\x01\x1b[31m",
    "quotes \" ' \\ backslash \\u0041 not an escape, NUL \x00 in JSON",
    "",
]


@pytest.fixture
async def store(backend: Backend) -> Store:
    return await backend.open()


def new_job(
    *,
    guild_id: int = GUILD,
    user_id: int = USER,
    kind: JobKind = JobKind.VIDEO,
    prompt: str = "a cat",
    retry_of: int | None = None,
    key_owner: int | None = None,
    discord: dict[str, Any] | None = None,
) -> NewJob:
    return NewJob(
        kind=kind,
        guild_id=guild_id,
        channel_id=CHANNEL,
        user_id=user_id,
        locale="en-US",
        params={"model": "m", "prompt": prompt, "width": 832, "nested": {"list": [1, 2.5, None, True]}},
        retry_of=retry_of,
        key_owner=key_owner,
        discord=discord or {},
    )


async def add(store: Store, job: NewJob | None = None, **limits: Any) -> Job:
    limits.setdefault("member_limit", None)
    limits.setdefault("guild_cap", None)
    return await store.add(job or new_job(), **limits)


async def failed_job(store: Store) -> Job:
    job = await add(store)
    return await store.transition(job.id, S.FAILED, error_code="boom")


# ---------------------------------------------------------------------- add / get / active


async def test_add_round_trips_every_field(store: Store, backend: Backend) -> None:
    for prompt in TRICKY:
        discord = {"token": "secret-token", "message": 123, "text": prompt, "deep": {"a": [prompt]}}
        job = await add(store, new_job(prompt=prompt, key_owner=OTHER_GUILD, discord=discord))
        assert job.state is S.QUEUED
        assert job.prompt == prompt
        assert job.created_at == job.updated_at == backend.clock.time()
        assert job.key_owner == OTHER_GUILD
        assert job.discord == discord
        assert job.params["nested"] == {"list": [1, 2.5, None, True]}
        assert await store.get(job.id) == job


async def test_ids_grow_and_active_is_fifo_without_terminal_jobs(store: Store) -> None:
    jobs = [await add(store) for _ in range(4)]
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)
    await store.transition(jobs[1].id, S.CANCELLED)
    assert [j.id for j in await store.active()] == [jobs[0].id, jobs[2].id, jobs[3].id]
    assert await store.get(10**12) is None


async def test_add_refuses_bad_values_and_stores_nothing(store: Store) -> None:
    with pytest.raises(TypeError):
        await add(store, NewJob(JobKind.VIDEO, GUILD, CHANNEL, USER, None, {}))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await add(store, replace_params({"x": object()}))
    with pytest.raises(ValueError):
        await add(store, replace_params({"x": math.nan}))
    with pytest.raises(ValueError):
        await add(store, quota=(-1, 0.0))
    assert await store.active() == []


def replace_params(params: dict[str, Any]) -> NewJob:
    job = new_job()
    job.params = params
    return job


async def test_listeners_see_adds_and_state_changes_only(store: Store) -> None:
    seen: list[tuple[int, JobState]] = []

    def broken(job: Job) -> None:
        raise RuntimeError("a listener bug must not break the store")

    store.subscribe(broken)
    store.subscribe(lambda job: seen.append((job.id, job.state)))
    job = await add(store)
    await store.update(job.id, progress=0.5)
    await store.patch_discord(job.id, {"a": 1})
    await store.transition(job.id, S.SUBMITTING)
    assert seen == [(job.id, S.QUEUED), (job.id, S.SUBMITTING)]


# ---------------------------------------------------------------------- limits


async def test_member_limit_guild_cap_and_their_order(store: Store) -> None:
    await add(store, member_limit=2, guild_cap=3)
    await add(store, member_limit=2, guild_cap=3)
    with pytest.raises(MemberLimitReached) as member:
        await add(store, member_limit=2, guild_cap=0)  # both exceeded: the member limit is told
    assert member.value.limit == 2
    await add(store, new_job(user_id=OTHER_USER), member_limit=2, guild_cap=3)
    with pytest.raises(GuildQueueFull) as full:
        await add(store, new_job(user_id=OTHER_USER), member_limit=2, guild_cap=3)
    assert full.value.cap == 3
    # Other guilds are not affected; non-QUEUED jobs free the queue, terminal ones the member limit.
    await add(store, new_job(guild_id=OTHER_GUILD), member_limit=1, guild_cap=1)
    first = (await store.active())[0]
    await store.transition(first.id, S.SUBMITTING)
    await add(store, new_job(user_id=OTHER_USER), member_limit=3, guild_cap=3)
    await store.transition(first.id, S.CANCELLED)
    assert len(await store.active()) == 4


async def test_retry_is_unique_and_checked_before_limits(store: Store) -> None:
    failed = await failed_job(store)
    retry = await add(store, new_job(retry_of=failed.id), member_limit=5)
    assert retry.retry_of == failed.id
    with pytest.raises(AlreadyRetried) as again:
        await add(store, new_job(retry_of=failed.id), member_limit=0, guild_cap=0, quota=(0, 0.0))
    assert (again.value.retry_of, again.value.existing_id) == (failed.id, retry.id)


async def test_daily_quota_counts_this_kind_guild_and_period_but_not_failures(
    store: Store, backend: Backend
) -> None:
    since = backend.clock.time()
    old = await add(store)  # at `since`: counts
    await backend.clock.advance(10)
    await add(store, new_job(kind=JobKind.IMAGE))  # other kind
    await add(store, new_job(guild_id=OTHER_GUILD))  # other guild
    await add(store, new_job(user_id=OTHER_USER))  # other member
    failed = await failed_job(store)  # failed: does not count
    dropped = await add(store)
    await store.transition(dropped.id, S.CANCELLED)  # cancelled while queued: cost nothing, does not count
    cancelled = await add(store)
    await store.transition(cancelled.id, S.SUBMITTING)
    await store.transition(cancelled.id, S.RUNNING, task_id="t-1", started_at=backend.clock.time())
    await store.transition(cancelled.id, S.CANCELLED)  # cancelled on the service: counts
    quota = (3, since)
    await add(store, quota=quota)
    with pytest.raises(DailyQuotaReached) as reached:
        await add(store, quota=quota)
    assert reached.value.limit == 3
    # Quota before member limit (store.py's order): both exceeded, the quota is told.
    with pytest.raises(DailyQuotaReached):
        await add(store, quota=quota, member_limit=0)
    with pytest.raises(DailyQuotaReached):
        await add(store, quota=(0, since))
    # The next period: jobs created before its start no longer count.
    await backend.clock.advance(10)
    await add(store, quota=(1, backend.clock.time()))
    with pytest.raises(DailyQuotaReached):
        await add(store, quota=(1, backend.clock.time()))
    assert (await store.get(old.id), await store.get(failed.id)) == (old, failed)


async def test_twenty_concurrent_adds_from_two_processes_respect_the_member_limit(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    results = await asyncio.gather(
        *(add(one if i % 2 else two, member_limit=2, guild_cap=50) for i in range(20)),
        return_exceptions=True,
    )
    stored = [r for r in results if isinstance(r, Job)]
    refused = [r for r in results if isinstance(r, MemberLimitReached)]
    assert (len(stored), len(refused)) == (2, 18), results
    assert len(await one.active()) == 2


async def test_concurrent_quota_and_guild_cap_are_never_overshot(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    since = backend.clock.time()
    results = await asyncio.gather(
        *(add(one if i % 2 else two, quota=(3, since)) for i in range(12)), return_exceptions=True
    )
    assert sum(isinstance(r, Job) for r in results) == 3
    assert sum(isinstance(r, DailyQuotaReached) for r in results) == 9
    members = [new_job(guild_id=OTHER_GUILD, user_id=1000 + i) for i in range(12)]
    results = await asyncio.gather(
        *(add(one if i % 2 else two, job, guild_cap=4) for i, job in enumerate(members)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Job) for r in results) == 4
    assert sum(isinstance(r, GuildQueueFull) for r in results) == 8


async def test_concurrent_retries_of_one_job_store_exactly_one(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    failed = await failed_job(one)
    results = await asyncio.gather(
        *(add(one if i % 2 else two, new_job(retry_of=failed.id)) for i in range(10)), return_exceptions=True
    )
    winners = [r for r in results if isinstance(r, Job)]
    losers = [r for r in results if isinstance(r, AlreadyRetried)]
    assert len(winners) == 1 and len(losers) == 9, results
    assert {e.existing_id for e in losers} == {winners[0].id}


# ---------------------------------------------------------------------- transitions and updates


async def test_transitions_follow_the_state_machine_and_write_fields(store: Store, backend: Backend) -> None:
    job = await add(store)
    await backend.clock.advance(5)
    job = await store.transition(job.id, S.SUBMITTING, expect=S.QUEUED)
    assert job.updated_at == backend.clock.time() and job.updated_at > job.created_at
    job = await store.transition(
        job.id, S.RUNNING, expect=[S.SUBMITTING], task_id="t-1", started_at=12.5, key_owner=OTHER_GUILD
    )
    assert (job.task_id, job.started_at, job.key_owner) == ("t-1", 12.5, OTHER_GUILD)
    job = await store.transition(job.id, S.DELIVERING, result_url="https://x/y.mp4", progress=1)
    job = await store.transition(job.id, S.DELIVERED, result_local=True, result_url=None)
    assert (job.state, job.result_local, job.result_url, job.progress) == (S.DELIVERED, True, None, 1.0)
    assert await store.get(job.id) == job
    with pytest.raises(InvalidTransition) as illegal:
        await store.transition(job.id, S.FAILED)
    assert (illegal.value.old, illegal.value.new) == (S.DELIVERED, S.FAILED)


async def test_transition_refusals_change_nothing(store: Store) -> None:
    job = await add(store)
    with pytest.raises(InvalidTransition) as wrong:
        await store.transition(job.id, S.CANCELLED, expect=S.RUNNING, error_code="x")
    assert wrong.value.expected == frozenset({S.RUNNING})
    with pytest.raises(InvalidTransition):
        await store.transition(job.id, S.DELIVERED)
    with pytest.raises(JobNotFound):
        await store.transition(10**12, S.CANCELLED)
    bad: dict[str, Any]
    for bad in ({"state": "failed"}, {"id": 5}, {"updated_at": 1.0}, {"nope": 1}, {"progress": math.inf}):
        with pytest.raises(ValueError):
            await store.transition(job.id, S.CANCELLED, **bad)
    for bad in ({"task_id": 5}, {"result_local": 1}, {"guild_id": True}, {"params": []}):
        with pytest.raises(TypeError):
            await store.transition(job.id, S.CANCELLED, **bad)
    assert await store.get(job.id) == job


async def test_racing_transitions_from_two_processes_have_one_winner(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    jobs = [await add(one) for _ in range(5)]
    for job in jobs:
        results = await asyncio.gather(
            one.transition(job.id, S.CANCELLED, expect=S.QUEUED),
            two.transition(job.id, S.SUBMITTING, expect=S.QUEUED),
            return_exceptions=True,
        )
        assert sum(isinstance(r, Job) for r in results) == 1, results
        assert sum(isinstance(r, InvalidTransition) for r in results) == 1, results


async def test_update_writes_fields_of_any_job_but_never_the_state(store: Store, backend: Backend) -> None:
    job = await add(store)
    await store.transition(job.id, S.CANCELLED)
    await backend.clock.advance(3)
    updated = await store.update(job.id, error_detail="détail ✓", discord={"k": "v"}, key_owner=None)
    assert (updated.state, updated.error_detail, updated.discord) == (S.CANCELLED, "détail ✓", {"k": "v"})
    assert updated.updated_at == backend.clock.time()
    with pytest.raises(ValueError):
        await store.update(job.id, state=S.QUEUED)
    with pytest.raises(JobNotFound):
        await store.update(10**12, progress=0.1)


async def test_concurrent_discord_patches_from_two_processes_all_land(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    job = await add(one, new_job(discord={"keep": True}))
    await asyncio.gather(*((one if i % 2 else two).patch_discord(job.id, {f"k{i}": i}) for i in range(12)))
    patched = await two.get(job.id)
    assert patched is not None
    assert patched.discord == {"keep": True, **{f"k{i}": i for i in range(12)}}
    with pytest.raises(JobNotFound):
        await one.patch_discord(10**12, {"a": 1})
    with pytest.raises(TypeError):
        await one.patch_discord(job.id, {"a": object()})


async def test_a_once_patch_from_two_processes_at_once_lands_only_the_first(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    job = await add(one, new_job(discord={"keep": True}))
    results = await asyncio.gather(
        *(
            (one if i % 2 else two).patch_discord_once(
                job.id, {"deleted_at": float(i), "deleted_by": i}, unless="deleted_at"
            )
            for i in range(8)
        )
    )
    wrote = [patched for patched, written in results if written]
    assert len(wrote) == 1  # exactly one writer, whatever the interleaving
    winner = wrote[0].discord
    stored = await one.get(job.id)
    assert stored is not None and stored.discord == winner and winner["keep"] is True
    assert all(patched.discord == winner for patched, _ in results)  # the losers read the first's record
    # A record whose key is null counts as unset; an unknown job is refused.
    other = await add(one, new_job(discord={"deleted_at": None}))
    assert (await two.patch_discord_once(other.id, {"deleted_at": 1.0}, unless="deleted_at"))[1]
    with pytest.raises(JobNotFound):
        await one.patch_discord_once(10**12, {"a": 1}, unless="a")


# ---------------------------------------------------------------------- durations


async def test_durations_round_trip_replace_and_validate(store: Store) -> None:
    assert await store.load_durations() == []
    rows = [DurationRow("video|m|b", 3.5, 0.25, 4, 100.0), DurationRow("image|m|a", 1.0, 0.5, 1, 90.0)]
    for row in rows:
        await store.save_duration(row)
    await store.save_duration(DurationRow("video|m|b", 4.0, 0.2, 5, 110.0))
    assert await store.load_durations() == [rows[1], DurationRow("video|m|b", 4.0, 0.2, 5, 110.0)]
    for bad in (DurationRow("k", math.nan, 0, 1, 0), DurationRow("k", 1, 1, -1, 0)):
        with pytest.raises(ValueError):
            await store.save_duration(bad)
    with pytest.raises(TypeError):
        await store.save_duration(DurationRow(5, 1, 1, 1, 0))  # type: ignore[arg-type]


# ---------------------------------------------------------------------- guild settings and keys


async def test_guild_settings_round_trip_with_an_audit_log(store: Store, backend: Backend) -> None:
    assert await store.all_guild_settings() == {}
    mine = GuildSettings(
        member_jobs=2, daily_videos=0, channels=(CHANNEL, 7), nsfw_only=True, blocklist=("猫", "bad word")
    )
    await store.save_guild_settings(GUILD, mine, by=ADMIN, changed=[Setting.MEMBER_JOBS, Setting.BLOCKLIST])
    await backend.clock.advance(60)
    theirs = GuildSettings(video_model="m2")
    await store.save_guild_settings(OTHER_GUILD, theirs, by=USER, changed=[Setting.VIDEO_MODEL])
    mine = mine.replace(queue_cap=9)
    await store.save_guild_settings(GUILD, mine, by=USER, changed=[Setting.QUEUE_CAP])
    assert await store.all_guild_settings() == {GUILD: mine, OTHER_GUILD: theirs}
    log = await store.settings_log(GUILD)
    # Newest first; rows of one save in reverse order of `changed` (id order, descending).
    assert [(c.user_id, c.setting) for c in log] == [
        (USER, Setting.QUEUE_CAP),
        (ADMIN, Setting.BLOCKLIST),
        (ADMIN, Setting.MEMBER_JOBS),
    ]
    assert log[0].at == backend.clock.time() and log[-1].at == backend.clock.time() - 60
    assert all(c.guild_id == GUILD for c in log)
    assert len(await store.settings_log(GUILD, limit=1)) == 1


async def test_guild_keys_keep_ciphertext_bytes_exactly(store: Store, backend: Backend) -> None:
    assert await store.guild_key(GUILD) is None
    token = bytes(range(256)) + b"\x00gAAAA"  # any bytes, NUL and non-UTF-8 included
    await store.set_guild_key(GUILD, token, "wxyz", by=ADMIN)
    await store.set_guild_key(OTHER_GUILD, b"other", "abcd", by=USER)
    key = await store.guild_key(GUILD)
    assert key is not None
    assert (key.token, key.last4, key.status, key.set_by, key.set_at) == (
        token,
        "wxyz",
        KeyStatus.OK,
        ADMIN,
        backend.clock.time(),
    )
    assert await store.mark_guild_key(GUILD, KeyStatus.REJECTED, last4="wxyz")
    assert [(k.guild_id, k.status) for k in await store.all_guild_keys()] == [
        (GUILD, KeyStatus.REJECTED),
        (OTHER_GUILD, KeyStatus.OK),
    ]
    await store.set_guild_key(GUILD, b"new", "1234", by=ADMIN)  # a new key is OK again
    assert (await store.guild_key(GUILD)) == replace(key, token=b"new", last4="1234", status=KeyStatus.OK)
    assert await store.delete_guild_key(GUILD, by=USER) is True
    assert await store.delete_guild_key(GUILD, by=USER) is False
    assert await store.guild_key(GUILD) is None
    log = await store.settings_log(GUILD)
    assert [(c.user_id, c.setting) for c in log] == [
        (USER, Setting.API_KEY),
        (ADMIN, Setting.API_KEY),
        (ADMIN, Setting.API_KEY),
    ]
    with pytest.raises(TypeError):
        await store.set_guild_key(GUILD, "not bytes", "1234", by=ADMIN)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await store.set_guild_key(GUILD, b"x", "12345", by=ADMIN)


# ---------------------------------------------------------------------- leases


async def test_leases_between_two_owners_expire_by_the_clock(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    clock = backend.clock
    a, b, c = await add(one), await add(one, new_job(guild_id=OTHER_GUILD)), await add(one)
    assert [j.id for j in await two.claimable(clock.time())] == [a.id, b.id, c.id]
    assert await one.claim(a.id, "p1", clock.time() + 30) is True
    assert await two.claim(a.id, "p2", clock.time() + 30) is False  # p1's lease runs
    assert await one.claim(a.id, "p1", clock.time() + 60) is True  # renewal
    assert await two.claim(b.id, "p2", clock.time() + 30) is True
    assert [j.id for j in await two.claimable(clock.time())] == [c.id]
    later = await one.claimable(clock.time() + 45)
    assert [j.id for j in later] == [b.id, c.id]  # p2's lease of b is over at +45; a's (p1) is not
    await clock.advance(45)
    assert await one.claim(b.id, "p1", clock.time() + 30) is True  # p2 died: its lease expired
    assert await two.claim(a.id, "p2", clock.time() + 30) is False  # renewed to +60: still running
    await clock.advance(15)
    assert await two.claim(a.id, "p2", clock.time() + 30) is True  # exactly at lease_until: expired
    await one.transition(c.id, S.CANCELLED)
    assert await one.claim(c.id, "p1", clock.time() + 30) is False  # finished jobs are not run
    assert [j.id for j in await two.claimable(clock.time())] == []
    assert await one.claim(10**12, "p1", clock.time()) is False  # no such job: nothing to run
    with pytest.raises(TypeError):
        await one.claim(a.id, "", clock.time())
    with pytest.raises(ValueError):
        await one.claim(a.id, "p1", math.nan)


async def test_concurrent_claims_of_a_free_job_have_one_winner(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    job = await add(one)
    until = backend.clock.time() + 30
    results = await asyncio.gather(
        *((one if i % 2 else two).claim(job.id, f"p{i}", until) for i in range(10))
    )
    assert sum(results) == 1


async def test_leases_do_not_touch_the_job(backend: Backend) -> None:
    store = await backend.open()
    job = await add(store)
    seen: list[Job] = []
    store.subscribe(seen.append)
    await backend.clock.advance(5)
    await store.claim(job.id, "p1", backend.clock.time() + 5)
    await store.claim(job.id, "p1", backend.clock.time() + 10)
    assert await store.get(job.id) == job and seen == []


# ---------------------------------------------------------------------- lifecycle


async def test_reopen_keeps_everything_and_close_is_final(backend: Backend) -> None:
    first = await backend.open()
    job = await add(first)
    await first.save_duration(DurationRow("k", 1.0, 0.1, 1, 5.0))
    await first.close()
    await first.close()  # idempotent
    with pytest.raises(StoreClosed):
        await first.get(job.id)
    again = await backend.open()  # the schema is found, not created twice
    assert await again.get(job.id) == job
    assert await again.load_durations() == [DurationRow("k", 1.0, 0.1, 1, 5.0)]


async def test_two_processes_opening_a_new_database_together(backend: Backend) -> None:
    stores = await asyncio.gather(backend.open(), backend.open(), backend.open())
    job = await add(stores[0])
    assert await stores[2].get(job.id) == job


# ---------------------------------------------------------------------- PostgreSQL only


async def test_pg_errors_never_show_the_password() -> None:
    dsn = "postgresql://framecast:hunter2-secret@127.0.0.1:1/framecast"
    with pytest.raises(StoreError) as failure:
        await Store.open(dsn)
    assert "hunter2" not in str(failure.value)
    assert failure.value.__cause__ is None and failure.value.__suppress_context__
    assert "framecast@127.0.0.1:1/framecast" in str(failure.value)
    assert redact_dsn(dsn) == "postgresql://framecast@127.0.0.1:1/framecast"


async def test_text_fields_refuse_nul_on_both_databases(store: Store) -> None:
    job = await add(store)
    with pytest.raises(ValueError, match="NUL"):
        await store.update(job.id, error_detail="a\x00b")
    with pytest.raises(ValueError, match="NUL"):
        await store.claim(job.id, "owner\x00", 1.0)
    assert await store.get(job.id) == job


async def test_integers_beyond_64_bits_are_refused_on_both_databases(store: Store) -> None:
    with pytest.raises(ValueError, match="64-bit"):
        await add(store, new_job(guild_id=2**63))
    job = await add(store)
    with pytest.raises(ValueError, match="64-bit"):
        await store.update(job.id, key_owner=-(2**63) - 1)
    with pytest.raises(ValueError, match="64-bit"):
        await store.save_duration(DurationRow("k", 1.0, 0.1, 2**64, 5.0))
    with pytest.raises(ValueError, match="64-bit"):
        await store.guild_key(2**64)
    assert await store.get(job.id) == job and await store.load_durations() == []
    edge = await add(store, new_job(guild_id=2**63 - 1, user_id=-(2**63)))
    assert (edge.guild_id, edge.user_id) == (2**63 - 1, -(2**63))


async def test_an_id_beyond_64_bits_names_no_job_and_no_member_on_both_databases(store: Store) -> None:
    # Ids a member can send (a forged button's custom id) are read, not written: past what a column
    # holds they find nothing, as an unknown id does, and a /history cursor past every id is the
    # newest page, as one past the member's newest job is.
    job = await add(store)
    for huge in (2**63, 10**20 - 1, -(2**64)):
        assert await store.get(huge) is None
        assert await store.web.job(huge) is None
        assert (await store.member_jobs(job.guild_id, huge)).total == 0
        for cursor in ({"before": huge}, {"after": huge}):
            page = await store.member_jobs(job.guild_id, job.user_id, **cursor)
            assert [j.id for j in page.jobs] == [job.id], (huge, cursor)


async def test_open_store_chooses_postgres_only_with_a_database_url(tmp_path: Path) -> None:
    base = Settings(
        discord_token=Secret("t"),
        gen_api_base_url="http://127.0.0.1:1",
        gen_api_key=Secret("k"),
        database_path=tmp_path / "db.sqlite3",
    )
    sqlite = await open_store(base, clock=ManualClock())
    await sqlite.close()
    assert (tmp_path / "db.sqlite3").is_file()
    (tmp_path / "db.sqlite3").unlink()
    async with fresh_database() as dsn:
        pg = await open_store(base.replace(database_url=Secret(dsn)), clock=ManualClock())
        try:
            job = await add(pg)
            async with await Store.open(dsn) as same:
                assert await same.get(job.id) == job
        finally:
            await pg.close()
    assert not (tmp_path / "db.sqlite3").exists()


async def test_a_lease_owner_name_is_held_by_one_live_process_at_a_time(backend: Backend) -> None:
    """Two processes started with the same shards must not both run their jobs: the second is refused
    while the first lives, and the name is free again once the first is gone."""
    first = await backend.open()
    second = await backend.open()
    assert await first.hold_owner("framecast-shards-1")
    assert await first.hold_owner("framecast-shards-1")  # asking again is harmless
    if backend.name == "postgres":
        assert not await second.hold_owner("framecast-shards-1")
        assert await second.hold_owner("framecast-shards-0")  # other shards are other names
        await first.close()
        assert await second.hold_owner("framecast-shards-1")
    else:  # one process per SQLite file: nothing to hold against
        assert await second.hold_owner("framecast-shards-1")


async def test_calls_cancelled_mid_write_never_cost_a_later_acknowledged_write(backend: Backend) -> None:
    """A cancelled call may or may not have written; every write acknowledged after it is durable."""
    store = await backend.open()
    target = await add(store)
    acknowledged: list[int] = []
    for round_no in range(30):
        doomed = asyncio.ensure_future(store.patch_discord(target.id, {"round": round_no}))
        for _ in range(round_no % 7):
            await asyncio.sleep(0)  # cancel at a different point of the call each round
        doomed.cancel()
        await asyncio.gather(doomed, return_exceptions=True)
        job = await add(store, new_job(user_id=round_no))
        await store.update(job.id, progress=0.5)
        acknowledged.append(job.id)
    await store.close()
    again = await backend.open()
    for job_id in acknowledged:
        found = await again.get(job_id)
        assert found is not None and found.progress == 0.5
