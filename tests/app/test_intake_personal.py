"""A person's own queue (user installs): named by their own id, with the operator's rules only.

A job asked outside a server that installed the app joins its requester's personal queue: no
server's settings, channels or key apply to it (servers' ids and users' ids never meet), its member
limit and quota are the operator's, counted per person, and nobody can give it server settings or a
server key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from framecast.app.intake import Intake, Limits, Requester, is_personal_queue
from framecast.app.problems import IntakeError, IntakeProblem
from framecast.app.settings_book import SettingsBook
from framecast.guilds.settings import Ceilings, GuildSettings, KeyStatus, Policy, resolve
from framecast.jobs.runner import JobRunner
from framecast.jobs.scheduler import Scheduler
from framecast.storage import Store
from framecast.values import JobKind
from tests.fakes.unused import unused

DORA, EVE = 1_200_000_000_000_000_001, 1_200_000_000_000_000_002
GUILD = 900_000_000_000_000_001
CEILINGS = Ceilings(member_jobs=2, queue_cap=25, daily_videos=3, daily_images=None)


def mine(user: int = DORA) -> Requester:
    return Requester.personal_queue(user_id=user, channel_id=77, locale="en-US")


def operator_policy(_queue: int) -> Policy:
    return resolve(GuildSettings(), CEILINGS)


def test_a_personal_queue_is_named_by_its_persons_own_id() -> None:
    who = mine()
    assert (who.guild_id, who.user_id, who.channel_id) == (DORA, DORA, 77)
    assert who.personal and is_personal_queue(DORA, DORA)
    server = Requester(guild_id=GUILD, channel_id=5, user_id=DORA, locale="en-US")
    assert not server.personal and not is_personal_queue(GUILD, DORA)


def test_no_server_key_refusal_ever_reaches_a_personal_queue() -> None:
    # Even a key store that answered "rejected" and "unreadable" for every id cannot refuse it:
    # a personal queue always runs on the operator's key.
    intake = Intake(
        store=unused(Store),
        scheduler=unused(Scheduler),
        limits=Limits(member_jobs=2, guild_queue=25, prompt_chars=200),
        policy_for=operator_policy,
        key_state=lambda _queue: KeyStatus.REJECTED,
        key_unreadable=lambda _queue: True,
    )
    intake.precheck(mine(), JobKind.VIDEO)
    with pytest.raises(IntakeError) as info:
        intake.precheck(Requester(guild_id=GUILD, channel_id=5, user_id=DORA, locale="en-US"))
    assert info.value.problem is IntakeProblem.GUILD_KEY_UNREADABLE


async def test_the_member_limit_counts_per_person_with_the_operators_value(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "db.sqlite3")
    scheduler = Scheduler(store=store, runner=unused(JobRunner), admission=1)  # never started
    intake = Intake(
        store=store,
        scheduler=scheduler,
        limits=Limits(member_jobs=2, guild_queue=25, prompt_chars=200),
        policy_for=operator_policy,
    )
    store.subscribe(intake.observe)
    try:
        for _ in range(2):
            await intake.accept(mine(), JobKind.IMAGE, {"prompt": "a fox", "size": "1024x1024"})
        with pytest.raises(IntakeError) as info:
            intake.precheck(mine(), JobKind.IMAGE)
        assert info.value.problem is IntakeProblem.MEMBER_LIMIT and info.value.params == {"limit": 2}
        intake.precheck(mine(EVE), JobKind.IMAGE)  # another person's queue is their own
        # The same person in a server is that server's member, with the server's own count.
        intake.precheck(Requester(guild_id=GUILD, channel_id=5, user_id=DORA, locale="en-US"))
        jobs = await store.active()
        assert {(j.guild_id, j.user_id) for j in jobs} == {(DORA, DORA)}
    finally:
        await store.close()  # the scheduler never started: nothing to stop


async def test_a_personal_queue_cannot_be_given_server_settings(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "db.sqlite3")
    try:
        book = SettingsBook(store, CEILINGS, {})
        with pytest.raises(ValueError, match="personal queue"):
            await book.update(DORA, by=DORA, member_jobs=1)
        assert book.settings(DORA) == GuildSettings()
        await book.update(GUILD, by=DORA, member_jobs=1)  # a server admin still can
        assert book.settings(GUILD).member_jobs == 1
    finally:
        await store.close()
