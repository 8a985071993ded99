"""The core assembled by framecast.app.core: opens, runs a job to the chat side, restores, closes. No Discord.

A real store (SQLite in ``tmp_path``), the real client against the fake service, and a recording
chat side in place of the Discord reporter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from framecast.accounts import KeyCheck
from framecast.app.admins import RefusedKeyNotice
from framecast.app.chat import Delivered, DeliveryOutcome, ResultFile, ResultToDeliver
from framecast.app.core import Core
from framecast.app.intake import IntakeError, IntakeProblem, Requester
from framecast.clock import Clock
from framecast.config import Secret, Settings
from framecast.guilds.settings import Setting, SettingsError
from framecast.jobs.queues import QueuePositions
from framecast.ops.metrics import Metrics
from framecast.planner.estimate import Estimates
from framecast.storage import Store, StoreClosed, StoreError
from framecast.values import Job, JobKind, JobState, NewJob
from framecast.values.reasons import ErrorCode, Note
from tests.fakes.gen_service import IMAGE_MODEL, FakeService
from tests.pg import fresh_database

WAIT = 20.0
WHO = Requester(guild_id=1, channel_id=10, user_id=7, locale="en-US")
ADMIN = 77


class RecordingChat:
    """A chat side that records what the core tells it and accepts every file."""

    def __init__(self, store: Store, positions: QueuePositions) -> None:
        self.store = store
        self.positions = positions
        self.changes: list[tuple[int, JobState, bool]] = []
        self.notes: list[tuple[int, Note]] = []
        self.files: list[tuple[int, str, int]] = []  # (job id, filename, size)
        self.links: list[tuple[int, str]] = []
        self.moves: list[tuple[int, list[int]]] = []
        self.removed: list[int] = []  # job ids whose messages the core had removed
        self.closed = False
        self.changed = asyncio.Event()

    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        self.changes.append((job.id, job.state, urgent))
        self.changed.set()

    async def upload_limit(self, job: Job, refused: int | None = None) -> int:
        return 25 * 1024 * 1024

    async def delivery_pending(self, job: Job) -> None:
        pass

    async def deliver(self, job: Job, result: ResultToDeliver) -> DeliveryOutcome:
        if isinstance(result, ResultFile):
            self.files.append((job.id, result.filename, len(result.data)))
        else:
            self.links.append((job.id, result.url))
        self.changed.set()
        return Delivered()

    async def was_delivered(self, job: Job) -> bool:
        return any(job_id == job.id for job_id, _, _ in self.files)

    def positions_changed(self, guild_id: int, queued: list[int]) -> None:
        self.moves.append((guild_id, queued))

    def add_note(self, job: Job, note: Note) -> None:
        self.notes.append((job.id, note))

    async def remove_job_message(self, job: Job) -> None:
        self.removed.append(job.id)

    async def key_refused(self, notice: RefusedKeyNotice) -> None:
        pass

    async def close(self) -> None:
        self.closed = True

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async def _wait() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(_wait(), WAIT)


class Factory:
    """The chat-side factory handed to Core.open; keeps what it built (or fails on purpose)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.built: RecordingChat | None = None
        self.store: Store | None = None

    def __call__(
        self, *, store: Store, positions: QueuePositions, estimates: Estimates, clock: Clock, metrics: Metrics
    ) -> RecordingChat:
        self.store = store
        self.estimates = estimates
        if self.fail:
            raise RuntimeError("the chat side could not be built")
        self.built = RecordingChat(store, positions)
        return self.built


def settings_for(service: FakeService, tmp_path: Path) -> Settings:
    return Settings(
        discord_token=Secret("discord-token-not-used-here"),
        gen_api_base_url=service.base_url,
        gen_api_key=Secret(service.api_key),
        gen_poll_interval=0.05,
        gen_backoff_base=0.05,
        gen_backoff_max=0.2,
        database_path=tmp_path / "data" / "framecast.sqlite3",
        shutdown_timeout=2.0,
    )


async def opened(settings: Settings, factory: Factory) -> Core[RecordingChat]:
    return await asyncio.wait_for(Core.open(settings, reporter=factory), WAIT)


async def test_the_core_opens_on_a_fresh_database_and_closes(
    fake_service: FakeService, tmp_path: Path
) -> None:
    settings = settings_for(fake_service, tmp_path)
    factory = Factory()
    core = await opened(settings, factory)
    try:
        assert factory.built is core.reporter and factory.store is core.store
        assert core.restored == []
        assert settings.database_path.is_file()
        await fake_service.wait_for(lambda: fake_service.count(path="/v1/models") >= 1)  # the refresh started
    finally:
        await core.close()
    assert core.reporter.closed and core.session.closed
    with pytest.raises(StoreClosed):
        await core.store.ping()
    await core.close()  # twice is fine


async def test_a_job_goes_from_the_intake_to_the_chat_side(fake_service: FakeService, tmp_path: Path) -> None:
    core = await opened(settings_for(fake_service, tmp_path), Factory())
    chat = core.reporter
    try:
        params = core.intake.video_params(
            guild_id=WHO.guild_id,
            prompt="a cat on the moon",
            model=None,
            size=None,
            seconds=None,
            frame_rate=None,
            known_models=core.models.ids("video"),
            default_model=core.models.default("video"),
        )
        delivered = asyncio.Event()
        core.store.subscribe(lambda changed: delivered.set() if changed.state is JobState.DELIVERED else None)
        job, position = await core.intake.accept(WHO, JobKind.VIDEO, params)
        assert position == 1
        await chat.wait_for(lambda: bool(chat.files))
        assert chat.files[0][:2] == (job.id, f"framecast-{job.id}.mp4")
        await asyncio.wait_for(delivered.wait(), WAIT)
        states = [state for job_id, state, _ in chat.changes if job_id == job.id]
        assert JobState.RUNNING in states
        # The member's limit follows the store: the job no longer counts once it is done.
        core.intake.precheck(WHO)
    finally:
        await core.close()


async def test_unfinished_jobs_are_restored_with_a_resumed_note(
    fake_service: FakeService, tmp_path: Path
) -> None:
    settings = settings_for(fake_service, tmp_path)
    store = await Store.open(settings.database_path)
    new = NewJob(
        kind=JobKind.IMAGE,
        guild_id=1,
        channel_id=10,
        user_id=7,
        locale="de",
        params={"model": IMAGE_MODEL, "prompt": "ein Hund", "size": "1024x1024"},
    )
    waiting = await store.add(new, member_limit=None, guild_cap=None)
    await store.close()

    core = await opened(settings, Factory())
    try:
        assert [j.id for j in core.restored] == [waiting.id]
        assert core.reporter.notes == [(waiting.id, Note.RESUMED)]
        assert (waiting.id, JobState.QUEUED, True) in core.reporter.changes
        # Restored jobs count against the member's limit at once (limit 2: one more is fine).
        core.intake.precheck(WHO)
    finally:
        await core.close()


async def test_a_failed_open_closes_what_it_had_opened(fake_service: FakeService, tmp_path: Path) -> None:
    factory = Factory(fail=True)
    with pytest.raises(RuntimeError, match="could not be built"):
        await opened(settings_for(fake_service, tmp_path), factory)
    assert factory.store is not None
    with pytest.raises(StoreClosed):
        await factory.store.ping()


async def test_a_second_process_on_the_same_sqlite_file_is_refused(
    fake_service: FakeService, tmp_path: Path
) -> None:
    """Its leases would name the same owner: both would run the same jobs, twice each."""
    settings = settings_for(fake_service, tmp_path)
    first = await opened(settings, Factory())
    try:
        with pytest.raises(StoreError, match="already uses the job store"):
            await opened(settings, Factory())
    finally:
        await first.close()
    again = await opened(settings, Factory())  # the lock went with the first process's end
    await again.close()


async def test_a_second_process_whose_shards_overlap_a_live_ones_is_refused(
    fake_service: FakeService, tmp_path: Path
) -> None:
    """Both would get the shared shard's events and answer its commands twice."""
    async with fresh_database() as dsn:
        base = settings_for(fake_service, tmp_path).replace(database_url=Secret(dsn), shard_count=3)
        first = await opened(base.replace(shard_ids=(0,)), Factory())
        try:
            with pytest.raises(StoreError, match="already connects shard 0"):
                await opened(base.replace(shard_ids=(1, 0)), Factory())
            other = await opened(base.replace(shard_ids=(1, 2)), Factory())  # no shard in common
            await other.close()
        finally:
            await first.close()


async def test_server_settings_are_validated_saved_logged_and_cached_across_a_restart(
    fake_service: FakeService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(fake_service, tmp_path)
    core = await opened(settings, Factory())
    try:
        assert core.book.policy(WHO.guild_id).member_jobs == settings.member_job_limit
        with pytest.raises(SettingsError):
            await core.book.update(WHO.guild_id, by=ADMIN, member_jobs=settings.member_job_limit + 1)
        # The one writer of settings logs who changed what (framecast/app/settings_book.py).
        with caplog.at_level(logging.INFO, logger="framecast.app.settings_book"):
            changed, _ = await core.book.update(WHO.guild_id, by=ADMIN, member_jobs=1, nsfw_only=True)
        assert changed.member_jobs == 1 and core.guild_settings(WHO.guild_id) == changed
        assert core.book.policy(WHO.guild_id).member_jobs == 1
        assert core.book.policy(WHO.guild_id + 1).member_jobs == settings.member_job_limit
        assert f"guild {WHO.guild_id}: user {ADMIN} changed member_jobs, nsfw_only" in caplog.text
        log_rows = await core.store.settings_log(WHO.guild_id)
        assert sorted(r.setting for r in log_rows) == [Setting.MEMBER_JOBS, Setting.NSFW_ONLY]
        # The intake applies the server's policy (NSFW-only here) from the cache.
        with pytest.raises(IntakeError) as refused:
            core.intake.precheck(WHO)
        assert refused.value.problem is IntakeProblem.NSFW_ONLY
        # Setting the same value again changes nothing and logs nothing.
        await core.book.update(WHO.guild_id, by=ADMIN, member_jobs=1)
        assert len(await core.store.settings_log(WHO.guild_id)) == 2
    finally:
        await core.close()
    core = await opened(settings, Factory())
    try:
        assert core.guild_settings(WHO.guild_id) == changed  # read back at open
    finally:
        await core.close()


async def test_a_servers_own_key_runs_its_jobs_and_a_rejected_one_refuses_new_ones(
    fake_service: FakeService, tmp_path: Path
) -> None:
    server_key = "a-servers-own-key-4242"
    fake_service.api_keys.add(server_key)
    settings = settings_for(fake_service, tmp_path).replace(
        key_encryption_secret=Secret(Fernet.generate_key().decode())
    )
    factory = Factory()
    core = await opened(settings, factory)
    try:
        assert factory.estimates is core.accounts  # the chat side asks each key's planner
        assert await core.accounts.check_key(server_key) is KeyCheck.OK
        await core.accounts.set_guild_key(WHO.guild_id, server_key, by=ADMIN)
        params = core.intake.video_params(
            guild_id=WHO.guild_id,
            prompt="a fox in the snow",
            model=None,
            size=None,
            seconds=None,
            frame_rate=None,
            known_models=core.models.ids("video"),
            default_model=core.models.default("video"),
        )
        job, _ = await core.intake.accept(WHO, JobKind.VIDEO, params)
        chat = core.reporter
        await chat.wait_for(lambda: any(f[0] == job.id for f in chat.files))
        done = await core.store.get(job.id)
        assert done is not None and done.key_owner == WHO.guild_id
        assert fake_service.count(path="/v1/videos", key=server_key) == 1
        assert fake_service.count(path="/v1/videos", key=fake_service.api_key) == 0

        fake_service.revoke(server_key)
        job, _ = await core.intake.accept(WHO, JobKind.VIDEO, params)
        await chat.wait_for(lambda: (job.id, JobState.FAILED, True) in chat.changes)
        failed = await core.store.get(job.id)
        assert failed is not None and failed.error_code == ErrorCode.GUILD_KEY_REJECTED
        with pytest.raises(IntakeError) as refused:
            core.intake.precheck(WHO)
        assert refused.value.problem is IntakeProblem.GUILD_KEY_REJECTED
    finally:
        await core.close()
