"""Deleting a delivered result (framecast.app.deletion): who may, the order of removal and mark, repeats.

The core is the real one on a fake service; the chat side records which jobs' messages it was asked
to remove (and can be made to fail a removal, as Discord may).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from framecast.app import (
    Actor,
    Job,
    JobKind,
    JobRefused,
    JobState,
    Refusal,
    RefusedKeyNotice,
    ResultToDeliver,
)
from framecast.app.core import Core
from framecast.clock import Clock
from framecast.config import Secret, Settings
from framecast.jobs.queues import QueuePositions
from framecast.ops.metrics import Metrics
from framecast.planner.estimate import Estimates
from framecast.storage import Store
from framecast.values import NewJob
from framecast.values.reasons import Note
from tests.fakes.gen_service import FakeService

WAIT = 20.0
GUILD, OTHER_GUILD = 1, 2
ALICE, BOB, ADMIN = 11, 12, 13


class RemovingChat:
    """A chat side that only records removals (`fail`: the next removal raises, as a refusal would)."""

    def __init__(self) -> None:
        self.removed: list[int] = []
        self.fail = False

    async def remove_job_message(self, job: Job) -> None:
        if self.fail:
            self.fail = False
            raise RuntimeError("Discord refused the delete")
        self.removed.append(job.id)

    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        pass

    async def upload_limit(self, job: Job, refused: int | None = None) -> int:
        return 25 * 1024 * 1024

    async def deliver(self, job: Job, result: ResultToDeliver) -> Any:
        raise AssertionError("nothing runs here")

    async def was_delivered(self, job: Job) -> bool:
        return False

    async def delivery_pending(self, job: Job) -> None:
        pass

    def positions_changed(self, guild_id: int, queued: list[int]) -> None:
        pass

    def add_note(self, job: Job, note: Note) -> None:
        pass

    async def key_refused(self, notice: RefusedKeyNotice) -> None:
        pass

    async def close(self) -> None:
        pass


def removing_chat(
    *, store: Store, positions: QueuePositions, estimates: Estimates, clock: Clock, metrics: Metrics
) -> RemovingChat:
    return RemovingChat()


@pytest.fixture
async def core(fake_service: FakeService, tmp_path: Path) -> AsyncIterator[Core[RemovingChat]]:
    settings = Settings(  # type: ignore[call-arg]
        discord_token=Secret("discord-token-not-used-here"),
        gen_api_base_url=fake_service.base_url,
        gen_api_key=Secret(fake_service.api_key),
        database_path=tmp_path / "data" / "framecast.sqlite3",
        shutdown_timeout=2.0,
        key_encryption_secret=Secret(Fernet.generate_key().decode("ascii")),
    )
    opened = await asyncio.wait_for(Core.open(settings, reporter=removing_chat), WAIT)
    try:
        yield opened
    finally:
        await opened.close()


async def job_in(core: Core[Any], state: JobState, *, user_id: int = ALICE, guild_id: int = GUILD) -> Job:
    """A job of `user_id`'s that reached `state` (written through the store, as the runner would)."""
    new = NewJob(
        kind=JobKind.IMAGE,
        guild_id=guild_id,
        channel_id=100,
        user_id=user_id,
        locale="en-US",
        params={"prompt": "a heron", "model": "m", "size": "1024x1024"},
        discord={"message_id": 555},
    )
    job = await core.store.add(new, member_limit=None, guild_cap=None)
    path = {
        JobState.QUEUED: [],
        JobState.FAILED: [JobState.FAILED],
        JobState.DELIVERED: [JobState.SUBMITTING, JobState.DELIVERING, JobState.DELIVERED],
    }[state]
    for step in path:
        job = await core.store.transition(job.id, step)
    return job


async def test_the_requester_deletes_the_message_then_the_job_is_marked(core: Core[RemovingChat]) -> None:
    job = await job_in(core, JobState.DELIVERED)
    asked = await core.deletions.check(Actor(ALICE, GUILD), job.id)
    assert not asked.already and core.reporter.removed == []  # the question removes nothing

    deleted = await core.deletions.delete(Actor(ALICE, GUILD), job.id)

    assert core.reporter.removed == [job.id]
    assert not deleted.already and deleted.job.deleted is not None
    assert deleted.job.deleted.by == ALICE and deleted.job.deleted.at == pytest.approx(
        core.clock.time(), abs=5
    )
    stored = await core.store.get(job.id)
    assert stored is not None and stored.state is JobState.DELIVERED  # the job stays, in the history
    assert stored.deleted == deleted.job.deleted
    assert stored.discord["message_id"] == 555  # the chat side's own record is kept


async def test_a_manager_may_delete_anyones_result_another_member_may_not(core: Core[RemovingChat]) -> None:
    job = await job_in(core, JobState.DELIVERED)
    with pytest.raises(JobRefused) as refused:
        await core.deletions.check(Actor(BOB, GUILD), job.id)
    assert refused.value.refusal is Refusal.NOT_ALLOWED
    with pytest.raises(JobRefused):
        await core.deletions.delete(Actor(BOB, GUILD), job.id)
    # Manage Server counts only in the job's own server.
    with pytest.raises(JobRefused) as elsewhere:
        await core.deletions.delete(Actor(ADMIN, OTHER_GUILD, manages_guild=True), job.id)
    assert elsewhere.value.refusal is Refusal.NOT_FOUND
    assert core.reporter.removed == []

    deleted = await core.deletions.delete(Actor(ADMIN, GUILD, manages_guild=True), job.id)
    assert deleted.job.deleted is not None and deleted.job.deleted.by == ADMIN
    assert core.reporter.removed == [job.id]


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.FAILED])
async def test_only_a_delivered_result_can_be_deleted(core: Core[RemovingChat], state: JobState) -> None:
    job = await job_in(core, state)
    with pytest.raises(JobRefused) as refused:
        await core.deletions.delete(Actor(ALICE, GUILD), job.id)
    assert refused.value.refusal is Refusal.NOT_FOUND
    assert core.reporter.removed == []


async def test_a_second_confirm_removes_nothing_and_keeps_the_first_deleter(core: Core[RemovingChat]) -> None:
    job = await job_in(core, JobState.DELIVERED)
    first = await core.deletions.delete(Actor(ALICE, GUILD), job.id)
    again = await core.deletions.delete(Actor(ADMIN, GUILD, manages_guild=True), job.id)
    assert again.already and again.job.deleted == first.job.deleted
    assert (await core.deletions.check(Actor(ALICE, GUILD), job.id)).already
    assert core.reporter.removed == [job.id]


async def test_a_failed_removal_leaves_the_job_unmarked_and_a_new_confirm_works(
    core: Core[RemovingChat],
) -> None:
    job = await job_in(core, JobState.DELIVERED)
    core.reporter.fail = True
    with pytest.raises(RuntimeError):
        await core.deletions.delete(Actor(ALICE, GUILD), job.id)
    stored = await core.store.get(job.id)
    assert stored is not None and stored.deleted is None  # its result still shows: not "deleted"

    deleted = await core.deletions.delete(Actor(ALICE, GUILD), job.id)
    assert deleted.job.deleted is not None and core.reporter.removed == [job.id]


async def test_two_confirms_at_once_remove_once_and_the_first_deleter_sticks(
    core: Core[RemovingChat],
) -> None:
    job = await job_in(core, JobState.DELIVERED)
    gate = asyncio.Event()
    both_in = asyncio.Event()
    inside: list[int] = []

    async def held_removal(removed: Job) -> None:
        # Both Confirms pass the question and reach the removal before either marks the job.
        inside.append(removed.id)
        if len(inside) == 2:
            both_in.set()
        await gate.wait()

    core.reporter.remove_job_message = held_removal  # type: ignore[method-assign,assignment]
    requester = asyncio.ensure_future(core.deletions.delete(Actor(ALICE, GUILD), job.id))
    moderator = asyncio.ensure_future(core.deletions.delete(Actor(ADMIN, GUILD, manages_guild=True), job.id))
    await asyncio.wait_for(both_in.wait(), WAIT)
    gate.set()
    first, second = await asyncio.wait_for(asyncio.gather(requester, moderator), WAIT)

    # Exactly one of them marked the job; the other is told it was deleted already, by the first.
    assert sorted([first.already, second.already]) == [False, True]
    winner = second if first.already else first
    assert winner.job.deleted is not None
    stored = await core.store.get(job.id)
    assert stored is not None and stored.deleted == winner.job.deleted
    assert (first.job.deleted, second.job.deleted) == (stored.deleted, stored.deleted)
