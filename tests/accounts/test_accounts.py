"""Accounts: one budget, client and planner per API key, against the real fake service (over HTTP).

A real store (SQLite in ``tmp_path``), a real key vault (Fernet) and real clients; the fake service
accepts several keys, keeps a rate-limit window per key and records which key each request carried.
Jobs are run by the real :class:`JobRunner` with the recording chat side of ``test_runner``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.fernet import Fernet
from prometheus_client import generate_latest

from framecast.accounts import Accounts, KeyCheck
from framecast.clock import SystemClock
from framecast.config import RateLimit, Secret, Settings
from framecast.guilds.settings import KeyStatus
from framecast.jobs.queues import GuildQueues
from framecast.jobs.runner import JobRunner
from framecast.keys.vault import KeyVault
from framecast.ops.metrics import Metrics, key_label
from framecast.planner.planner import Planner, PlannerSettings
from framecast.service.errors import AuthError
from framecast.storage import Store
from framecast.values import Job, JobKind, JobState, NewJob
from framecast.values.reasons import ErrorCode
from tests.fakes.chat_side import RUNNER_SETTINGS, RecordingReporter
from tests.fakes.gen_service import FakeService
from tests.workers import free_port

GUILD, OTHER_GUILD, ADMIN = 501, 502, 77
SERVER_KEY = "server-own-key-0123456789abcd"
WINDOW = 3.0  # the rate-limit window, real seconds (GEN_RATE_LIMIT=16/60 scaled)


@dataclass
class Rig:
    fake: FakeService
    settings: Settings
    session: aiohttp.ClientSession
    store: Store
    queues: GuildQueues
    accounts: Accounts
    reporter: RecordingReporter
    tmp_path: Path

    async def reopen(self, *, secret: str | None = None, enabled: bool = True) -> Accounts:
        """A restart of the accounts (same store); `secret` replaces the vault's secret."""
        await self.accounts.close()
        vault = KeyVault(
            enabled=enabled,
            secret=Secret(secret) if secret is not None else self.settings.key_encryption_secret,
        )
        self.accounts = await open_accounts(self.settings, self.session, self.store, self.queues, vault)
        return self.accounts

    def runner(self) -> JobRunner:
        return JobRunner(
            store=self.store,
            reporter=self.reporter,
            clock=SystemClock(),
            settings=RUNNER_SETTINGS,
            results_dir=self.tmp_path / "results",
            accounts=self.accounts,
        )

    async def job(self, guild: int, prompt: str = "a lighthouse", kind: JobKind = JobKind.VIDEO) -> Job:
        params: dict[str, Any] = (
            {"model": "svc-video-v2.0", "prompt": prompt, "width": 64, "height": 64}
            | {"num_frames": 12, "frame_rate": 12}
            if kind is JobKind.VIDEO
            else {"model": "svc-image-2.1-flash", "prompt": prompt, "size": "64x64"}
        )
        new = NewJob(kind, guild, 10, 7, "en-US", params)
        return await self.store.add(new, member_limit=None, guild_cap=None)

    async def another_process(self) -> Accounts:
        """The accounts of another process on the same store (the caller closes them)."""
        vault = KeyVault(enabled=True, secret=self.settings.key_encryption_secret)
        return await open_accounts(self.settings, self.session, self.store, GuildQueues(), vault)

    async def running(self, guild: int, *, task_id: str = "v", key_last4: str | None = None) -> Job:
        """A job of `guild` whose task its server's key created, as the runner leaves it: RUNNING."""
        job = await self.store.transition(
            (await self.job(guild)).id, JobState.SUBMITTING, expect=JobState.QUEUED
        )
        return await self.store.transition(
            job.id,
            JobState.RUNNING,
            expect=JobState.SUBMITTING,
            task_id=task_id,
            key_owner=guild,
            key_last4=key_last4,
        )


async def open_accounts(
    settings: Settings,
    session: aiohttp.ClientSession,
    store: Store,
    queues: GuildQueues,
    vault: KeyVault,
    metrics: Metrics | None = None,
    ceiling: int | None = None,
) -> Accounts:
    return await Accounts.open(
        settings=settings,
        session=session,
        clock=SystemClock(),
        store=store,
        queues=queues,
        vault=vault,
        planner_settings=PlannerSettings(poll_interval=0.01, poll_max_interval=0.05, ceiling=ceiling),
        metrics=metrics,
    )


def settings_for(fake: FakeService, tmp_path: Path, **changes: Any) -> Settings:
    base = Settings(
        discord_token=Secret("discord-token-not-used-here"),
        gen_api_base_url=fake.base_url,
        gen_api_key=Secret(fake.api_key),
        gen_rate_limit=RateLimit(16, WINDOW),
        gen_poll_interval=0.01,
        gen_retry_max=2,
        gen_backoff_base=0.01,
        gen_backoff_max=0.05,
        gen_request_timeout=5,
        database_path=tmp_path / "data" / "framecast.sqlite3",
        key_encryption_secret=Secret(Fernet.generate_key().decode()),
    )
    return base.replace(**changes)


@pytest.fixture
async def rig(fake_service: FakeService, tmp_path: Path) -> AsyncIterator[Rig]:
    fake_service.api_keys.add(SERVER_KEY)
    settings = settings_for(fake_service, tmp_path)
    store = await Store.open(settings.database_path)
    session = aiohttp.ClientSession()
    queues = GuildQueues()
    vault = KeyVault(enabled=True, secret=settings.key_encryption_secret)
    accounts = await open_accounts(settings, session, store, queues, vault)
    r = Rig(fake_service, settings, session, store, queues, accounts, RecordingReporter(), tmp_path)
    try:
        yield r
    finally:
        await r.accounts.close()
        await session.close()
        await store.close()


def closed_port() -> int:
    return free_port()  # nothing listens there


# -- one budget per key ----------------------------------------------------------------------------


async def test_a_server_key_carries_its_own_key_and_has_its_own_budget_window(rig: Rig) -> None:
    rig.fake.rate_limit = (16, WINDOW)  # the service limits each key on its own
    await rig.accounts.set_guild_key(GUILD, f"  {SERVER_KEY}\n", by=ADMIN)
    own, operator = rig.accounts.for_guild(GUILD), rig.accounts.operator
    assert own is not operator and own.owner == GUILD and own.last4 == "abcd"
    assert rig.accounts.for_guild(OTHER_GUILD) is operator
    assert rig.accounts.guild_key_state(GUILD) is KeyStatus.OK
    assert rig.accounts.guild_key_state(OTHER_GUILD) is None
    assert own.budget is not operator.budget and own.planner is not operator.planner

    # A full window of each key at once: neither waits for the other's budget, nothing is refused.
    started = time.monotonic()
    await asyncio.gather(*(a.client.list_models() for a in (own, operator) for _ in range(16)))
    assert time.monotonic() - started < WINDOW
    assert rig.fake.count(status=429) == 0
    assert rig.fake.count(path="/v1/models", key=SERVER_KEY) == 16
    assert rig.fake.count(path="/v1/models", key=rig.fake.api_key) == 16
    assert rig.fake.max_in_window(WINDOW, key=SERVER_KEY) == 16
    # Each budget is spent now: the next request of either key would wait for its own window.
    assert own.budget.available() == 0 and operator.budget.available() == 0

    # Stored encrypted: the key is nowhere in the database's bytes in clear.
    files = list(rig.settings.database_path.parent.glob("framecast.sqlite3*"))
    assert files and not any(SERVER_KEY.encode() in f.read_bytes() for f in files)
    stored = await rig.store.guild_key(GUILD)
    assert stored is not None and stored.last4 == "abcd" and stored.set_by == ADMIN


async def test_a_link_carrying_any_key_held_is_revealing(rig: Rig) -> None:
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    cdn = "https://cdn.example.com/v.mp4"
    assert not rig.accounts.reveals_key(f"{cdn}?sig=abc")
    # The operator's key or a server's, whichever job the link came with.
    for key in (rig.fake.api_key, SERVER_KEY):
        assert rig.accounts.reveals_key(f"{cdn}?key={key}")
    await rig.accounts.remove_guild_key(GUILD, by=ADMIN)
    assert not rig.accounts.reveals_key(f"{cdn}?key={SERVER_KEY}")  # no longer held


async def test_check_key_asks_the_service_once(rig: Rig) -> None:
    assert await rig.accounts.check_key(SERVER_KEY) is KeyCheck.OK
    assert rig.fake.count(key=SERVER_KEY) == 1
    assert await rig.accounts.check_key("sk-not-a-key-the-service-knows") is KeyCheck.REJECTED
    assert rig.fake.count(status=401) == 1  # a 401 is not retried
    before = rig.fake.count()
    assert await rig.accounts.check_key("two words") is KeyCheck.REJECTED  # cannot be a bearer token
    assert await rig.accounts.check_key("   ") is KeyCheck.REJECTED
    assert rig.fake.count() == before


async def test_check_key_on_an_unreachable_service(rig: Rig) -> None:
    settings = rig.settings.replace(gen_api_base_url=f"http://127.0.0.1:{closed_port()}")
    vault = KeyVault(enabled=True, secret=settings.key_encryption_secret)
    accounts = await open_accounts(settings, rig.session, rig.store, rig.queues, vault)
    try:
        assert await accounts.check_key(SERVER_KEY) is KeyCheck.UNREACHABLE
    finally:
        await accounts.close()
    rig.fake.fail_next, rig.fake.fail_status = 10, 503
    assert await rig.accounts.check_key(SERVER_KEY) is KeyCheck.UNREACHABLE
    assert rig.fake.count(status=503) == rig.settings.gen_retry_max  # the client's usual retries only


# -- jobs on a server's key --------------------------------------------------------------------------


async def test_a_key_set_by_another_process_is_opened_before_a_takeover(rig: Rig) -> None:
    """Two processes on one store: the one that did not see the key being set loads it on demand."""
    other = await open_accounts(
        rig.settings,
        rig.session,
        rig.store,
        rig.queues,
        KeyVault(enabled=True, secret=rig.settings.key_encryption_secret),
    )
    try:
        await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)  # in "the other process"
        assert other.for_guild(GUILD).owner is None  # not known here yet
        await other.load_guild(GUILD)
        assert other.for_guild(GUILD).owner == GUILD
        assert other.guild_key_state(GUILD) is KeyStatus.OK
        await other.load_guild(OTHER_GUILD)  # no key stored: stays on the operator's
        assert other.for_guild(OTHER_GUILD).owner is None
    finally:
        await other.close()


async def test_two_servers_with_the_same_key_share_its_budget_and_planner(rig: Rig) -> None:
    """The service limits requests per key: a key set by two servers (or the operator's key set by a
    server) is one budget and one planner, closed only when the last server drops it."""
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    await rig.accounts.set_guild_key(OTHER_GUILD, SERVER_KEY, by=ADMIN)
    first, second = rig.accounts.for_guild(GUILD), rig.accounts.for_guild(OTHER_GUILD)
    assert (first.owner, second.owner) == (GUILD, OTHER_GUILD)
    assert first.budget is second.budget and first.planner is second.planner
    assert rig.accounts.admission_for(GUILD)[0] is rig.accounts.admission_for(OTHER_GUILD)[0]
    # Both servers' jobs share one window of the key, as the service counts it.
    runner = rig.runner()
    for guild in (GUILD, OTHER_GUILD):
        done = await runner.run(await rig.job(guild), release_service_slot=lambda: None)
        assert done.state is JobState.DELIVERED and done.key_owner == guild
    assert first.budget.granted_total == rig.fake.count(key=SERVER_KEY)
    await rig.accounts.remove_guild_key(GUILD, by=ADMIN)
    # Still open for the other server.
    again = await runner.run(await rig.job(OTHER_GUILD), release_service_slot=lambda: None)
    assert again.state is JobState.DELIVERED
    # The operator's key set by a server: the operator's budget.
    await rig.accounts.set_guild_key(GUILD, rig.fake.api_key, by=ADMIN)
    assert rig.accounts.for_guild(GUILD).budget is rig.accounts.operator.budget


async def test_a_servers_job_runs_on_its_key_and_records_it(rig: Rig) -> None:
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    runner = rig.runner()
    theirs = await runner.run(await rig.job(GUILD), release_service_slot=lambda: None)
    ours = await runner.run(await rig.job(OTHER_GUILD), release_service_slot=lambda: None)
    assert (theirs.state, ours.state) == (JobState.DELIVERED, JobState.DELIVERED)
    assert (theirs.key_owner, ours.key_owner) == (GUILD, None)
    stored = await rig.store.get(theirs.id)
    assert stored is not None and stored.key_owner == GUILD
    # Every request of the server's job carried its key: create, polls, the download.
    their_task = stored.task_id
    theirs_polled = [r for r in rig.fake.requests if r.query.get("video_id") == their_task]
    theirs_fetched = [r for r in rig.fake.requests if r.path.startswith(f"/files/{their_task}")]
    assert theirs_polled and theirs_fetched
    assert all(r.key == SERVER_KEY for r in theirs_polled + theirs_fetched)
    assert rig.fake.count(path="/v1/videos", key=SERVER_KEY) == 1
    assert rig.fake.count(path="/v1/videos", key=rig.fake.api_key) == 1
    assert [job_id for job_id, *_ in rig.reporter.files] == [theirs.id, ours.id]


async def test_a_rejected_server_key_fails_its_jobs_and_tells_its_admins_once(rig: Rig) -> None:
    told: list[int] = []

    async def tell_admins(guild_id: int) -> None:
        told.append(guild_id)

    rig.accounts.on_key_rejected(tell_admins)
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    rig.fake.revoke(SERVER_KEY)  # the service withdraws it later
    runner = rig.runner()
    first = await runner.run(await rig.job(GUILD), release_service_slot=lambda: None)
    creates_heard = rig.fake.count(path="/v1/images/generations", key=SERVER_KEY)
    second = await runner.run(await rig.job(GUILD, kind=JobKind.IMAGE), release_service_slot=lambda: None)
    assert first.state is JobState.FAILED and first.error_code == ErrorCode.GUILD_KEY_REJECTED
    assert second.state is JobState.FAILED and second.error_code == ErrorCode.GUILD_KEY_REJECTED
    # A job that waited behind the refusal fails without spending a request to hear it again.
    assert rig.fake.count(path="/v1/images/generations", key=SERVER_KEY) == creates_heard == 0
    assert told == [GUILD]  # once per key, however many jobs hit it
    stored = await rig.store.guild_key(GUILD)
    assert stored is not None and stored.status is KeyStatus.REJECTED
    assert rig.accounts.guild_key_state(GUILD) is KeyStatus.REJECTED
    # Never silently the operator's key: the server's jobs stay on its own (rejected) account.
    assert rig.accounts.for_guild(GUILD).owner == GUILD
    assert rig.fake.count(path="/v1/videos", key=rig.fake.api_key) == 0

    # The operator's own key rejected is the operator's problem, not a server's.
    other = await runner.run(await rig.job(OTHER_GUILD), release_service_slot=lambda: None)
    assert other.state is JobState.DELIVERED
    rig.fake.revoke(rig.fake.api_key)
    failed = await runner.run(await rig.job(OTHER_GUILD), release_service_slot=lambda: None)
    assert failed.error_code == ErrorCode.AUTH and told == [GUILD]

    # After a restart the key is still known as rejected, and nobody is told again.
    accounts = await rig.reopen()
    accounts.on_key_rejected(tell_admins)
    assert accounts.guild_key_state(GUILD) is KeyStatus.REJECTED
    with pytest.raises(AuthError):
        await accounts.for_guild(GUILD).client.list_models()
    await accounts.key_rejected(accounts.for_guild(GUILD))
    assert told == [GUILD]

    # A new key from an admin clears it.
    rig.fake.api_keys.add("a-fresh-server-key-5678")
    await accounts.set_guild_key(GUILD, "a-fresh-server-key-5678", by=ADMIN)
    assert accounts.guild_key_state(GUILD) is KeyStatus.OK


async def test_a_removed_key_keeps_serving_its_running_jobs_and_is_gone_after_a_restart(rig: Rig) -> None:
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    own = rig.accounts.for_guild(GUILD)
    job = await rig.running(GUILD, task_id="v-gone")
    rig.accounts.bind(job.id, own)  # a runner is polling it
    assert await rig.accounts.remove_guild_key(GUILD, by=ADMIN)
    assert rig.accounts.for_guild(GUILD) is rig.accounts.operator  # new jobs: the operator's key
    assert rig.accounts.for_job(job) is own  # the running job keeps polling with the key it used
    rig.accounts.unbind(job.id)
    assert not await rig.accounts.remove_guild_key(GUILD, by=ADMIN)  # nothing left to remove

    # After a restart no key may poll the task: the job fails instead of moving to another key.
    accounts = await rig.reopen()
    assert accounts.for_job(job) is None
    failed = await rig.runner().run(job, release_service_slot=lambda: None)
    assert failed.state is JobState.FAILED and failed.error_code == ErrorCode.KEY_REMOVED
    assert rig.fake.count(path="/svcapi") == 0


async def test_a_task_is_never_polled_with_the_key_that_replaced_its_own_after_a_restart(rig: Rig) -> None:
    """The service knows a task only by the key that created it: a key replaced while the task ran
    (then a restart) fails the job clearly instead of polling it with the new key (a 404, told as a
    refused request). The jobs of before the key's end was kept are polled as they were."""
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    assert rig.accounts.for_guild(GUILD).key_last4 == "abcd"
    job = await rig.running(GUILD, task_id="v-old", key_last4="abcd")
    unknown = await rig.store.update((await rig.job(GUILD, "of before")).id, key_owner=GUILD)
    rig.fake.api_keys.add("the-replacing-server-key-wxyz")
    await rig.accounts.set_guild_key(GUILD, "the-replacing-server-key-wxyz", by=ADMIN)

    accounts = await rig.reopen()
    assert accounts.for_job(job) is None
    assert accounts.for_job(unknown) is accounts.for_guild(GUILD)
    failed = await rig.runner().run(job, release_service_slot=lambda: None)
    assert failed.state is JobState.FAILED and failed.error_code == ErrorCode.KEY_REMOVED
    assert rig.fake.count(path="/svcapi") == 0
    # The operator's key changed across the restart likewise; a result's link is fetched as before.
    assert accounts.for_job(replace(job, key_owner=None, key_last4="0000")) is None
    assert accounts.for_job(replace(job, state=JobState.DELIVERING)) is accounts.for_guild(GUILD)


async def test_a_process_taking_over_a_servers_job_follows_what_another_process_did_to_its_key(
    rig: Rig,
) -> None:
    """Another process (the one serving the server) set, replaced, refused or removed its key after
    this one read it: before a takeover this one follows the store, so a queued job is created with
    the key the store holds and a running task is polled with the key that created it."""
    other = await rig.another_process()
    try:
        await other.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
        await rig.accounts.load_guild(GUILD)
        assert rig.accounts.for_guild(GUILD).key.reveal() == SERVER_KEY

        replacing = "the-replacing-server-key-wxyz"
        rig.fake.api_keys.add(replacing)
        await other.set_guild_key(GUILD, replacing, by=ADMIN)
        await rig.accounts.load_guild(GUILD)
        assert rig.accounts.for_guild(GUILD).key.reveal() == replacing
        job = await rig.running(GUILD, key_last4="wxyz")
        assert rig.accounts.for_job(job) is rig.accounts.for_guild(GUILD)

        await other.key_rejected(other.for_guild(GUILD))
        await rig.accounts.load_guild(GUILD)
        assert rig.accounts.guild_key_state(GUILD) is KeyStatus.REJECTED

        assert await other.remove_guild_key(GUILD, by=ADMIN)
        await rig.accounts.load_guild(GUILD)
        assert rig.accounts.for_guild(GUILD) is rig.accounts.operator
        assert rig.accounts.for_job(job) is None  # its key is gone: no other key polls its task
    finally:
        await other.close()


async def test_a_key_refused_in_two_processes_is_told_once_and_never_marks_the_key_that_replaced_it(
    rig: Rig,
) -> None:
    other = await rig.another_process()
    told: list[int] = []

    async def tell_admins(guild_id: int) -> None:
        told.append(guild_id)

    rig.accounts.on_key_rejected(tell_admins)
    other.on_key_rejected(tell_admins)
    try:
        await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
        await other.load_guild(GUILD)  # the other process took one of the server's jobs over
        # The key that replaced it is not marked by a process still polling with the old one.
        replacing = "the-replacing-server-key-wxyz"
        rig.fake.api_keys.add(replacing)
        await rig.accounts.set_guild_key(GUILD, replacing, by=ADMIN)
        await other.key_rejected(other.for_guild(GUILD))
        assert told == [] and (await rig.store.guild_key(GUILD)).status is KeyStatus.OK  # type: ignore[union-attr]
        # Both processes hear the 401 of the same key: its admins are told once.
        await other.load_guild(GUILD)
        await other.key_rejected(other.for_guild(GUILD))
        await rig.accounts.key_rejected(rig.accounts.for_guild(GUILD))
        assert told == [GUILD] and rig.accounts.guild_key_state(GUILD) is KeyStatus.REJECTED
    finally:
        await other.close()


async def test_a_key_removed_while_it_is_being_set_is_gone_for_the_jobs_too(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One admin sets the server's key while another removes it: whichever lands last, the jobs use
    what the store keeps (the removal came between the key's write and its account's opening, and
    the server's jobs went on with a key the store no longer had, until a restart)."""
    opening, go_on = asyncio.Event(), asyncio.Event()
    load = rig.store.load_durations

    async def held() -> Any:
        opening.set()  # the key is written; its account's planner reads what it learned
        await go_on.wait()
        return await load()

    monkeypatch.setattr(rig.store, "load_durations", held)
    setting = asyncio.ensure_future(rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN))
    await asyncio.wait_for(opening.wait(), 5)
    removing = asyncio.ensure_future(rig.accounts.remove_guild_key(GUILD, by=ADMIN))
    go_on.set()  # the removal's first step comes before the setting goes on
    await asyncio.wait_for(asyncio.gather(setting, removing), 5)
    stored = await rig.store.guild_key(GUILD)
    assert (stored is None) == (rig.accounts.for_guild(GUILD) is rig.accounts.operator)


async def test_a_key_the_vault_cannot_read_is_not_replaced_by_the_operators(rig: Rig) -> None:
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    accounts = await rig.reopen(secret=Fernet.generate_key().decode())  # the operator changed the secret
    assert accounts.key_unreadable(GUILD) and not accounts.key_unreadable(OTHER_GUILD)  # the intake refuses
    assert accounts.guild_key_state(GUILD) is KeyStatus.REJECTED
    queued = await rig.job(GUILD)
    assert accounts.for_job(queued) is None
    failed = await rig.runner().run(queued, release_service_slot=lambda: None)
    assert failed.error_code == ErrorCode.GUILD_KEY_UNREADABLE  # the reason, not "the key was removed"
    assert rig.fake.count(path="/v1/videos") == 0


async def test_with_server_keys_off_every_server_uses_the_operators_key(rig: Rig) -> None:
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    accounts = await rig.reopen(enabled=False)
    assert accounts.for_guild(GUILD) is accounts.operator
    assert accounts.guild_key_state(GUILD) is None
    with pytest.raises(RuntimeError):
        await accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)


async def test_estimates_and_admission_follow_the_key(rig: Rig) -> None:
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    woken: list[int] = []
    rig.accounts.on_admission_change(lambda: woken.append(1))
    # The operator's backlog of other guilds does not delay the server's job on its own key.
    backlog = [await rig.job(OTHER_GUILD) for _ in range(24)]  # more than a window of the key starts
    for job in backlog:
        rig.queues.push(job)
    mine = await rig.job(GUILD)
    rig.queues.push(mine)
    key, admission = rig.accounts.admission_for(GUILD)
    assert key is rig.accounts.for_guild(GUILD).parts and admission is rig.accounts.for_guild(GUILD).planner
    assert rig.accounts.admission_for(OTHER_GUILD)[0] is rig.accounts.operator.parts
    own_estimate = rig.accounts.estimate(mine).starts_in
    last_of_backlog = rig.accounts.estimate(backlog[-1]).starts_in
    assert own_estimate is not None and last_of_backlog is not None and own_estimate < last_of_backlog
    # A key opened later is heard by the scheduler too.
    rig.fake.api_keys.add("third-server-key-9999")
    await rig.accounts.set_guild_key(OTHER_GUILD, "third-server-key-9999", by=ADMIN)
    assert woken


async def test_a_keys_planner_moving_wakes_only_that_key(rig: Rig) -> None:
    # Every create and poll moves a planner: the scheduler is told which key's answer may have
    # changed, so it asks that key's guilds again and no other key (with hundreds of keys full,
    # asking them all on every move made each job cost as many questions as there are keys).
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    changed_keys: list[object] = []
    rekeyed: list[int] = []
    rig.accounts.on_key_change(changed_keys.append)
    rig.accounts.on_admission_change(lambda: rekeyed.append(1))
    own = rig.accounts.for_guild(GUILD)
    own.planner.create_deferred(12345)  # the service said "later": the key's admission moves
    assert changed_keys == [rig.accounts.admission_for(GUILD)[0]] and not rekeyed
    rig.accounts.operator.planner.create_resumed(777)  # not deferred: nothing moves
    rig.accounts.operator.planner.create_deferred(777)
    assert changed_keys == [own.parts, rig.accounts.operator.parts]
    # A guild's key set: every key may have changed (which guilds it serves), not one.
    await rig.accounts.remove_guild_key(GUILD, by=ADMIN)
    assert rekeyed


async def test_a_waiting_job_counts_for_the_key_its_server_is_on_now(rig: Rig) -> None:
    # The queues file each server's jobs under its key (each planner counts only its own): a key set
    # or removed while a job waits, or opened again after a restart, moves the job with its server.
    job = await rig.job(GUILD)
    rig.queues.push(job)

    def waiting(planner: Planner) -> int:
        return planner.view(running=0).videos_waiting

    operator = rig.accounts.operator.planner
    assert waiting(operator) == 1
    await rig.accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
    own = rig.accounts.for_guild(GUILD).planner
    assert (waiting(operator), waiting(own)) == (0, 1)
    accounts = await rig.reopen()
    reopened = accounts.for_guild(GUILD).planner
    assert (waiting(accounts.operator.planner), waiting(reopened)) == (0, 1)
    assert await accounts.remove_guild_key(GUILD, by=ADMIN)
    assert (waiting(accounts.operator.planner), waiting(reopened)) == (1, 0)


# -- metrics ------------------------------------------------------------------------------------------


async def test_each_keys_budget_and_planner_are_shown_under_its_label_never_the_key(rig: Rig) -> None:
    metrics = Metrics(process=False)
    vault = KeyVault(enabled=True, secret=rig.settings.key_encryption_secret)
    accounts = await open_accounts(
        rig.settings, rig.session, rig.store, rig.queues, vault, metrics, ceiling=3
    )

    def gauge(name: str, key: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"key": key})

    try:
        await accounts.operator.client.list_models()
        assert gauge("framecast_budget_used", "operator") == 1
        assert gauge("framecast_budget_limit", "operator") == 16
        assert gauge("framecast_budget_allowed", "operator") == 16
        assert gauge("framecast_budget_waiting", "operator") == 0
        assert gauge("framecast_planner_concurrency", "operator") == 0  # no task running

        await accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
        label = key_label(SERVER_KEY)
        own = accounts.for_guild(GUILD)
        await asyncio.gather(*(own.client.list_models() for _ in range(3)))
        assert gauge("framecast_budget_used", label) == 3 and gauge("framecast_budget_used", "operator") == 1
        requests = metrics.registry.get_sample_value(
            "framecast_service_requests_total", {"kind": "models", "status": "200"}
        )
        assert requests == 4
        text = generate_latest(metrics.registry).decode()
        assert SERVER_KEY not in text and rig.fake.api_key not in text and "abcd" not in text

        # The same key set again keeps its series; a removed key's series disappear.
        await accounts.set_guild_key(GUILD, SERVER_KEY, by=ADMIN)
        assert gauge("framecast_budget_limit", label) == 16
        assert await accounts.remove_guild_key(GUILD, by=ADMIN)
        assert gauge("framecast_budget_limit", label) is None
        assert gauge("framecast_planner_concurrency", label) is None
        assert gauge("framecast_budget_limit", "operator") == 16
    finally:
        await accounts.close()
    assert gauge("framecast_budget_limit", "operator") is None  # closed: nothing left to read


async def test_a_key_that_never_passes_its_check_adds_no_series_of_its_own(rig: Rig) -> None:
    """A typed key the service answers 429 and then refuses: its requests are counted, under the one
    label of unchecked keys, never under a label of its own (admins cannot grow /metrics)."""
    metrics = Metrics(process=False)
    vault = KeyVault(enabled=True, secret=rig.settings.key_encryption_secret)
    accounts = await open_accounts(rig.settings, rig.session, rig.store, rig.queues, vault, metrics)
    refused = "sk-typed-by-an-admin-0001"
    try:
        for n in range(3):
            rig.fake.api_keys.add(f"{refused}{n}")  # past the fake's own check: the script answers
            rig.fake.scripted = [
                (429, {"error": {"message": "Rate limit exceeded"}}, {"Retry-After": "0"}),
                (401, {"error": {"message": "Invalid API key"}}, {}),
            ]
            assert await accounts.check_key(f"{refused}{n}") is KeyCheck.REJECTED
    finally:
        await accounts.close()
    text = generate_latest(metrics.registry).decode()
    series = [line for line in text.splitlines() if line.startswith("framecast_service_429_total{")]
    assert series == ['framecast_service_429_total{key="unchecked"} 3.0'], series
    assert not any(key_label(f"{refused}{n}") in text for n in range(3))
