"""Migrations at start-up: a new database through the Alembic chain, yesterday's databases upgraded in place.

The fixtures (``fixtures/README.md``) were written by the two hand-written stores of commit 0493314
(schema v4 on SQLite, v1 on PostgreSQL): every job, setting, key, log row and learned duration in them
must come through the upgrade untouched, and the store must work on them at once.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from framecast.config import Secret
from framecast.guilds.settings import GuildSettings, KeyStatus, Setting
from framecast.keys.vault import KeyVault
from framecast.storage import Store, StoreError
from framecast.storage.migrate import BASELINE, HEAD, PG_FENCE, SQLITE_FENCE, alembic_config
from framecast.storage.schema import metadata
from framecast.values import Job, JobKind, JobState, NewJob
from framecast.values.durations import DurationRow
from tests.fakes.clock import ManualClock
from tests.pg import fresh_database

FIXTURES = Path(__file__).with_name("fixtures")
TABLES = ("jobs", "guild_settings", "guild_keys", "settings_log", "durations")
G1, G2 = 111_111_111_111_111_111, 444_444_444_444_444_444
U1, U2, ADMIN = 333_333_333_333_333_333, 555_555_555_555_555_555, 666_666_666_666_666_666
#: The fixture's Fernet key (base64 of b"framecast-test-fixture-key-32by!"): a test value, not a secret.
FIXTURE_KEY = "ZnJhbWVjYXN0LXRlc3QtZml4dHVyZS1rZXktMzJieSE="
#: A clock shortly after the fixture's jobs were written: its leases still run.
AT_FIXTURE_TIME = ManualClock(wall_start=1_760_000_800.0)


@pytest.fixture(params=["sqlite", "postgres"])
async def empty(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """Where an empty database of either kind is (a file path, or a URL)."""
    if request.param == "sqlite":
        yield str(tmp_path / "new.sqlite3")
    else:
        async with fresh_database() as dsn:
            yield dsn


def sqlite_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in TABLES}
    finally:
        conn.close()


async def pg_rows(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = await asyncpg.connect(dsn)
    try:
        return {t: [tuple(r) for r in await conn.fetch(f"SELECT * FROM {t} ORDER BY 1")] for t in TABLES}
    finally:
        await conn.close()


def with_key_last4(rows: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """`rows` as upgraded: each job gains ``key_last4``, unknown (NULL), and keeps every other field."""
    return {**rows, "jobs": [(*job, None) for job in rows["jobs"]]}


async def load_pg_fixture(dsn: str) -> None:
    """The plain-SQL dump, minus psql's own backslash commands (asyncpg runs the rest as is)."""
    text = (FIXTURES / "v4.postgres.sql").read_text(encoding="utf-8")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("\n".join(line for line in text.splitlines() if not line.startswith("\\")))
    finally:
        await conn.close()


def ours(name: str | None, type_: str, parent: object) -> bool:
    return not (type_ == "table" and name == "schema_version")  # the legacy marker (the fence)


async def schema_difference(store: Store) -> tuple[list[Any], str | None]:
    """How the store's database differs from ``schema.py`` (Alembic's comparison), and its revision."""
    async with store._db.autocommit() as conn:
        diff = await conn.run_sync(
            lambda c: compare_metadata(MigrationContext.configure(c, opts={"include_name": ours}), metadata)
        )
        current = await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())
    return diff, current


def test_the_code_knows_the_chains_head() -> None:
    """``migrate.HEAD`` (what a new database is stamped with, without loading Alembic) is the chain's head."""
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == HEAD


async def test_the_chain_builds_exactly_what_the_tables_say(empty: str) -> None:
    """Every revision applied to an empty database gives the tables, indexes and types of ``schema.py``."""
    store = await Store.open(empty)
    try:
        async with store._db.autocommit() as conn:
            # Start again from nothing, and build the schema through the Alembic chain alone.
            await conn.run_sync(lambda c: metadata.drop_all(c))
            await conn.exec_driver_sql("DROP TABLE alembic_version")
            await conn.run_sync(lambda c: command.upgrade(alembic_config(c), "head"))
        diff, current = await schema_difference(store)
        assert current == HEAD
        assert diff == []  # migrations and schema.py describe the same tables, indexes and types
    finally:
        await store.close()


async def test_a_new_database_is_created_at_head_exactly_as_the_tables_say(empty: str) -> None:
    store = await Store.open(empty)
    try:
        diff, current = await schema_difference(store)
        assert current == HEAD
        assert diff == []
        job = await store.add(
            NewJob(JobKind.VIDEO, G1, 2, U1, "en-US", {"p": 1}), member_limit=1, guild_cap=1
        )
        assert job.id == 1 and job.state is JobState.QUEUED
    finally:
        await store.close()
    again = await Store.open(empty)  # found at head: nothing to do
    await again.close()


async def check_fixture_through_the_store(store: Store) -> None:
    """What the fixture script wrote, read back through the new store's API."""
    jobs = {j.id: j for j in await store.active()}
    assert sorted(jobs) == [1, 2, 3, 4, 7]
    assert jobs[1].discord == {"interaction_token": "tok-a", "status_message_id": 1234567890123456789}
    assert jobs[1].prompt == "一只猫 🎬 queued"
    assert (jobs[2].state, jobs[2].key_owner) == (JobState.SUBMITTING, G1)
    running = jobs[3]
    assert (running.state, running.task_id, running.progress, running.started_at) == (
        JobState.RUNNING,
        "task-c",
        0.25,
        1_760_000_100.0,
    )
    assert running.discord == {"channel_message": 42, "progress_message": 77, "locale_hint": "हिन्दी"}
    assert (jobs[4].kind, jobs[4].state, jobs[4].result_local) == (JobKind.IMAGE, JobState.DELIVERING, True)
    assert jobs[7].retry_of == 6
    failed, delivered = await store.get(6), await store.get(5)
    assert failed is not None and (failed.error_code, failed.error_detail) == (
        "service_rejected",
        "HTTP 400: prompt refused",
    )
    assert delivered is not None and delivered.result_url == "https://example.invalid/e.mp4"
    assert delivered.discord == {"delivered_message": 99}
    cancelled = await store.get(9)
    assert cancelled is not None and (cancelled.state, cancelled.error_code) == (
        JobState.CANCELLED,
        "cancelled",
    )
    # Leases: job 1 is held by shards-0 until 1_760_000_900, job 3 by shards-1 until 1_760_000_950.
    assert [j.id for j in await store.claimable(1_760_000_800.0)] == [2, 4, 7]
    assert [j.id for j in await store.claimable(1_760_000_920.0)] == [1, 2, 4, 7]
    assert not await store.claim(3, "framecast-shards-0", 1_760_001_000.0)
    assert await store.claim(3, "framecast-shards-1", 1_760_001_000.0)
    # Guild settings, key (decryptable with the fixture's secret), log, durations.
    assert await store.all_guild_settings() == {
        G1: GuildSettings(member_jobs=3, queue_cap=10, daily_videos=5, blocklist=("gore", "блок")),
        G2: GuildSettings(nsfw_only=True, channels=(222_222_222_222_222_222,)),
    }
    key = await store.guild_key(G1)
    assert key is not None and (key.last4, key.status, key.set_by) == ("1234", KeyStatus.REJECTED, ADMIN)
    vault = KeyVault(enabled=True, secret=Secret(FIXTURE_KEY))
    assert vault.decrypt(key.token).reveal() == "sk-fixture-key-1234"
    assert [(c.user_id, c.setting) for c in await store.settings_log(G1)] == [
        (ADMIN, Setting.API_KEY),
        (U1, Setting.BLOCKLIST),
        (ADMIN, Setting.QUEUE_CAP),
        (ADMIN, Setting.MEMBER_JOBS),
    ]
    assert await store.load_durations() == [
        DurationRow("svc-image-v1|1024", 8.25, 0.2, 40, 1_760_000_310.0),
        DurationRow("svc-video-v2.0|720p", 61.5, 0.35, 12, 1_760_000_300.0),
    ]
    # New rows continue after the old ones: ids are never reused.
    new = await store.add(NewJob(JobKind.VIDEO, G1, 2, U2, "en-US", {}), member_limit=None, guild_cap=None)
    assert new.id == 10
    await store.save_guild_settings(G2, GuildSettings(), by=ADMIN, changed=[Setting.NSFW_ONLY])
    assert (await store.settings_log(G2, limit=1))[0].setting is Setting.NSFW_ONLY


async def test_a_v4_sqlite_database_of_the_old_store_upgrades_in_place_with_every_row(tmp_path: Path) -> None:
    path = tmp_path / "framecast.sqlite3"
    shutil.copy(FIXTURES / "v4.sqlite3", path)
    before = sqlite_rows(path)
    assert sum(map(len, before.values())) == 20  # 9 jobs, 2 settings, 1 key, 6 log rows, 2 durations
    async with await Store.open(path) as store:
        pass
    assert sqlite_rows(path) == with_key_last4(before)
    conn = sqlite3.connect(path)
    try:
        # Adopted at the baseline, then upgraded along the chain.
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(HEAD,)]
        assert (
            conn.execute("PRAGMA user_version").fetchone()[0] == SQLITE_FENCE
        )  # the old code refuses it now
    finally:
        conn.close()
    async with await Store.open(path, clock=AT_FIXTURE_TIME) as store:
        await check_fixture_through_the_store(store)


async def test_a_v4_postgres_database_of_the_old_store_upgrades_in_place_with_every_row() -> None:
    async with fresh_database() as dsn:
        await load_pg_fixture(dsn)
        before = await pg_rows(dsn)
        assert sum(map(len, before.values())) == 20  # 9 jobs, 2 settings, 1 key, 6 log rows, 2 durations
        store = await Store.open(dsn)
        await store.close()
        assert await pg_rows(dsn) == with_key_last4(before)
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval("SELECT version_num FROM alembic_version") == HEAD
            assert await conn.fetchval("SELECT version FROM schema_version") == PG_FENCE
        finally:
            await conn.close()
        store = await Store.open(dsn, clock=AT_FIXTURE_TIME)
        try:
            await check_fixture_through_the_store(store)
        finally:
            await store.close()


#: What each revision after the baseline added, undone: a database of an older release is this
#: code's, with the revisions after its own undone (newest first).
UNDO = {
    "0002_styles": ["DROP TABLE guild_styles"],
    "0003_web": ["DROP TABLE web_sessions", "DROP INDEX jobs_delivered", "DROP INDEX jobs_user"],
    "0004_key_last4": ["ALTER TABLE jobs DROP COLUMN key_last4"],
}


@asynccontextmanager
async def upgraded_from(where: str, revision: str, job: NewJob) -> AsyncIterator[tuple[Store, Job]]:
    """A database of the release at `revision`, holding `job`, opened by this code: the store at head
    (checked against ``schema.py``) and the job, read back unchanged."""
    store = await Store.open(where)
    added = await store.add(job, member_limit=1, guild_cap=1)
    later = list(UNDO)[list(UNDO).index(revision) + 1 :] if revision in UNDO else list(UNDO)
    async with store._db.write() as conn:
        for undone in reversed(later):
            for statement in UNDO[undone]:
                await conn.exec_driver_sql(statement)
        await conn.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{revision}'")
    await store.close()
    store = await Store.open(where)
    try:
        diff, current = await schema_difference(store)
        assert (current, diff) == (HEAD, [])
        assert await store.get(added.id) == added
        yield store, added
    finally:
        await store.close()


async def test_a_database_of_the_previous_release_gains_the_styles_table_and_keeps_its_rows(
    empty: str,
) -> None:
    """A database at ``0001_baseline`` (the release before styles) is upgraded in place at start-up."""
    job = NewJob(JobKind.VIDEO, G1, 2, U1, "en-US", {"prompt": "猫"})
    async with upgraded_from(empty, BASELINE, job) as (store, _):
        assert await store.styles.all() == {}


async def test_a_database_of_the_styles_release_gains_the_web_sessions_and_the_gallery_index(
    empty: str,
) -> None:
    """A database at ``0002_styles`` (the release before the web pages) is upgraded in place."""
    job = NewJob(JobKind.IMAGE, G1, 2, U1, "en-US", {"prompt": "x"})
    async with upgraded_from(empty, "0002_styles", job) as (store, _):
        assert await store.web.sessions.user_of("nothing", now=0.0) is None


async def test_a_database_of_the_web_release_gains_the_key_of_each_task_and_keeps_its_jobs(
    empty: str,
) -> None:
    """A database at ``0003_web`` is upgraded in place: its jobs keep every field, with no key's end
    known (they are polled with their owner's key, as before)."""
    job = NewJob(JobKind.VIDEO, G1, 2, U1, "en-US", {"prompt": "x"})
    async with upgraded_from(empty, "0003_web", job) as (store, added):
        assert added.key_last4 is None
        assert (await store.update(added.id, key_last4="wxyz")).key_last4 == "wxyz"


async def test_a_database_of_a_newer_framecast_is_refused_with_one_line(empty: str) -> None:
    store = await Store.open(empty)
    async with store._db.write() as conn:
        await conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    await store.close()
    with pytest.raises(
        StoreError, match="revision 9999_from_the_future is newer than this Framecast"
    ) as refused:
        await Store.open(empty)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_an_sqlite_database_older_than_v4_is_refused_with_one_line(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, state TEXT)")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    with pytest.raises(StoreError, match=f"schema v{version} is too old to upgrade here") as refused:
        await Store.open(path)
    assert "\n" not in str(refused.value)
    conn = sqlite3.connect(path)
    try:  # refused means untouched
        assert conn.execute("PRAGMA user_version").fetchone()[0] == version
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'alembic_version'").fetchall() == []
    finally:
        conn.close()


async def test_a_legacy_postgres_marker_newer_than_v1_is_refused(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(
            "CREATE TABLE jobs (id BIGINT); CREATE TABLE schema_version (version INTEGER NOT NULL)"
        )
        await conn.execute("INSERT INTO schema_version VALUES (7)")
    finally:
        await conn.close()
    with pytest.raises(StoreError, match="schema v7 is newer than this Framecast"):
        await Store.open(pg_dsn)
