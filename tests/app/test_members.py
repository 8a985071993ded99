"""The members' use cases (framecast.app.members), no Discord.

A real core: SQLite in ``tmp_path``, the real intake, scheduler and model list, against the fake
generation service (a real HTTP server on 127.0.0.1). The chat side only records what it was asked
to show. Finished jobs (delivered, failed) are written through the store, as the runner would.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from framecast.app import (
    Actor,
    FormInput,
    IntakeError,
    IntakeProblem,
    Job,
    JobAction,
    JobKind,
    JobOptions,
    JobRefused,
    JobState,
    PromptHidden,
    QueueViewer,
    Refusal,
    Requester,
    options_of,
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
from tests.fakes.gen_service import FakeService, TaskPlan

WAIT = 20.0
GUILD, OTHER_GUILD = 1, 2
ALICE, BOB, ADMIN = 11, 12, 13
FOREVER = 10**9  # a TaskPlan that stays pending
CHAT = {"application_id": 1, "token": "t", "token_expires_at": 0.0, "message_id": "@original"}


class RecordingChat:
    """A chat side that records which jobs it was asked to show (only videos run here: they stay
    pending on the fake service, so nothing is ever delivered)."""

    def __init__(self) -> None:
        self.shown: list[tuple[int, JobState, bool]] = []

    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        self.shown.append((job.id, job.state, urgent))

    async def upload_limit(self, job: Job, refused: int | None = None) -> int:
        return 25 * 1024 * 1024

    async def deliver(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no job runs to its end in these tests")

    async def was_delivered(self, job: Job) -> bool:
        return False

    def positions_changed(self, guild_id: int, queued: list[int]) -> None:
        pass

    def add_note(self, job: Job, note: Note) -> None:
        pass

    async def close(self) -> None:
        pass


def recording_chat(
    *, store: Store, positions: QueuePositions, estimates: Estimates, clock: Clock, metrics: Metrics
) -> RecordingChat:
    return RecordingChat()


def settings_for(service: FakeService, tmp_path: Path) -> Settings:
    return Settings(  # type: ignore[call-arg]
        discord_token=Secret("discord-token-not-used-here"),
        gen_api_base_url=service.base_url,
        gen_api_key=Secret(service.api_key),
        gen_max_running=1,
        database_path=tmp_path / "data" / "framecast.sqlite3",
        shutdown_timeout=2.0,
        key_encryption_secret=Secret(Fernet.generate_key().decode("ascii")),
    )


async def wait_until(predicate: Callable[[], bool]) -> None:
    async def _wait() -> None:
        while not predicate():  # noqa: ASYNC110  # the model list has no event to wait on
            await asyncio.sleep(0.02)

    await asyncio.wait_for(_wait(), WAIT)


@pytest.fixture
async def core(fake_service: FakeService, tmp_path: Path) -> AsyncIterator[Core[Any]]:
    # Every task stays pending: jobs queue and run, none finishes on its own.
    fake_service.default_plan = TaskPlan(polls=FOREVER)
    fake_service.models.append(("svc-video-v1.5", "video"))  # a second model a server may choose
    opened: Core[Any] = await asyncio.wait_for(
        Core.open(settings_for(fake_service, tmp_path), reporter=recording_chat), WAIT
    )
    try:
        await wait_until(lambda: opened.models.catalog is not None)
        yield opened
    finally:
        await opened.close()


def member(user_id: int, guild_id: int = GUILD, channel_id: int = 100) -> Requester:
    return Requester(guild_id=guild_id, channel_id=channel_id, user_id=user_id, locale="en-US")


def reading(user_id: int, *channels: int) -> QueueViewer:
    """`user_id` where they act, reading `channels` (the jobs here are asked in channel 100)."""
    return QueueViewer(user_id, readable_channels=frozenset(channels or (100,)))


async def finished(core: Core[Any], state: JobState, *, user_id: int = ALICE, **params: Any) -> Job:
    """A job of alice's that ended in `state` (written through the store, as the runner would)."""
    request = core.members.prepare(
        member(user_id), JobKind.VIDEO, JobOptions(prompt="a heron", size="vertical")
    )
    new = NewJob(
        kind=JobKind.VIDEO,
        guild_id=GUILD,
        channel_id=100,
        user_id=user_id,
        locale="en-US",
        params={**request.params, **params},
    )
    job = await core.store.add(new, member_limit=None, guild_cap=None)
    path = {
        JobState.FAILED: [JobState.FAILED],
        JobState.DELIVERING: [JobState.SUBMITTING, JobState.RUNNING, JobState.DELIVERING],
        JobState.DELIVERED: [JobState.SUBMITTING, JobState.RUNNING, JobState.DELIVERING, JobState.DELIVERED],
    }[state]
    for step in path:
        job = await core.store.transition(job.id, step)
    return job


# -- requesting ----------------------------------------------------------------------------------------
async def test_a_request_is_checked_without_io_then_persisted_queued_and_shown(core: Core[Any]) -> None:
    members = core.members
    request = members.prepare(member(ALICE), JobKind.VIDEO, JobOptions(prompt="a fox", size="square"))
    assert request.kind is JobKind.VIDEO and request.who.user_id == ALICE
    assert request.params["prompt"] == "a fox" and (request.params["width"], request.params["height"]) == (
        960,
        960,
    )
    assert request.params["model"] == core.models.default("video") and request.params["model_default"]
    started = await members.submit(request, CHAT)
    stored = await core.store.get(started.job.id)
    assert stored is not None and stored.user_id == ALICE and stored.discord["token"] == "t"
    assert started.position == 1
    assert (started.job.id, JobState.QUEUED, True) in core.reporter.shown  # shown at once


async def test_what_a_member_can_fix_is_refused_before_anything_is_written(core: Core[Any]) -> None:
    cases = (
        (JobOptions(prompt="   "), IntakeProblem.PROMPT_EMPTY),
        (JobOptions(prompt="a fox", size="enormous"), IntakeProblem.BAD_OPTION),
        (JobOptions(prompt="a fox", model="svc-video-v0"), IntakeProblem.UNLISTED_MODEL),
    )
    for options, problem in cases:
        with pytest.raises(IntakeError) as refused:
            core.members.prepare(member(ALICE), JobKind.VIDEO, options)
        assert refused.value.problem is problem
    assert await core.store.active() == []


async def test_the_member_limit_is_checked_before_the_acknowledgement(core: Core[Any]) -> None:
    members = core.members
    for number in range(core.settings.member_job_limit):
        prompt = f"job {number}"
        await members.submit(members.prepare(member(ALICE), JobKind.VIDEO, JobOptions(prompt)), CHAT)
    with pytest.raises(IntakeError) as refused:
        members.check(member(ALICE))
    assert refused.value.problem is IntakeProblem.MEMBER_LIMIT
    members.check(member(BOB))  # bob has none


# -- cancel ---------------------------------------------------------------------------------------------
async def test_who_may_cancel_is_decided_from_the_stored_job(core: Core[Any]) -> None:
    members = core.members
    job = (
        await members.submit(members.prepare(member(ALICE), JobKind.VIDEO, JobOptions("a kite")), CHAT)
    ).job
    for actor, refusal in (
        (Actor(BOB, GUILD), Refusal.NOT_ALLOWED),  # neither the requester nor a manager
        (Actor(BOB, OTHER_GUILD, manages_guild=True), Refusal.NOT_FOUND),  # a manager elsewhere
        (Actor(ALICE, OTHER_GUILD), Refusal.NOT_FOUND),  # the job is not in that server
    ):
        with pytest.raises(JobRefused) as refused:
            await members.cancel(actor, job.id)
        assert refused.value.refusal is refusal and refused.value.job_id == job.id
    assert (await members.authorize(Actor(ALICE, GUILD), job.id, JobAction.CANCEL)).id == job.id
    # A server manager may.
    result = await members.cancel(Actor(ADMIN, GUILD, manages_guild=True), job.id)
    assert result.job.state is JobState.CANCELLED and not result.already
    assert (job.id, JobState.CANCELLED, True) in core.reporter.shown
    # A second click shows it again; a finished job is too late to cancel.
    assert (await members.cancel(Actor(ALICE, GUILD), job.id)).already
    delivered = await finished(core, JobState.DELIVERED)
    with pytest.raises(JobRefused) as refused:
        await members.cancel(Actor(ALICE, GUILD), delivered.id)
    assert refused.value.refusal is Refusal.TOO_LATE_TO_CANCEL
    with pytest.raises(JobRefused) as refused:
        await members.cancel(Actor(ALICE, GUILD), 999_999)
    assert refused.value.refusal is Refusal.NOT_FOUND


# -- retry ----------------------------------------------------------------------------------------------
async def test_retry_is_the_requesters_job_once_and_a_default_model_is_the_default_of_now(
    core: Core[Any],
) -> None:
    members = core.members
    failed = await finished(core, JobState.FAILED, model="svc-video-v0.1-gone", model_default=True)
    with pytest.raises(JobRefused) as refused:
        await members.authorize(Actor(BOB, GUILD), failed.id, JobAction.RETRY, reading(BOB))
    assert refused.value.refusal is Refusal.NOT_ALLOWED
    # A manager who cannot read the job's channel: no such job (its prompt would show where they are).
    manager = Actor(ADMIN, GUILD, manages_guild=True)
    for viewer in (None, reading(ADMIN, 200)):
        with pytest.raises(JobRefused) as refused:
            await members.authorize(manager, failed.id, JobAction.RETRY, viewer)
        assert refused.value.refusal is Refusal.NOT_FOUND
    # A manager retries it: the new job is still the requester's, where the manager clicked.
    job = await members.authorize(manager, failed.id, JobAction.RETRY, reading(ADMIN, 100, 200))
    request = members.prepare_retry(member(ADMIN, channel_id=200), job)
    started = await members.retry(request, CHAT)
    new = started.job
    assert (new.user_id, new.channel_id, new.retry_of) == (ALICE, 200, failed.id)
    assert new.params["model"] == core.models.default("video") and new.params["model_default"]
    assert {k: v for k, v in new.params.items() if not k.startswith("model")} == {
        k: v for k, v in failed.params.items() if not k.startswith("model")
    }
    # A second retry of the same job (a double click) is refused by the store's one-retry rule.
    with pytest.raises(IntakeError) as again:
        await members.retry(members.prepare_retry(member(ALICE), job), CHAT)
    assert again.value.problem is IntakeProblem.ALREADY_RETRIED and again.value.params["id"] == new.id


async def test_a_managers_retry_at_the_members_limit_is_refused_in_the_members_name(core: Core[Any]) -> None:
    members = core.members
    failed = await finished(core, JobState.FAILED)
    manager = Actor(ADMIN, GUILD, manages_guild=True)
    job = await members.authorize(manager, failed.id, JobAction.RETRY, reading(ADMIN))
    # Prepared while alice had room; alice then fills her limit: the store refuses it at submission.
    late = members.prepare_retry(member(ADMIN), job)
    for number in range(core.settings.member_job_limit):
        await members.submit(members.prepare(member(ALICE), JobKind.VIDEO, JobOptions(f"job {number}")), CHAT)
    with pytest.raises(IntakeError) as stored:
        await members.retry(late, CHAT)
    # Before the acknowledgement, from memory.
    with pytest.raises(IntakeError) as checked:
        members.prepare_retry(member(ADMIN), job)
    for refused in (stored, checked):
        assert refused.value.problem is IntakeProblem.MEMBER_LIMIT
        assert refused.value.params == {"limit": core.settings.member_job_limit, "member": ALICE}
    # Alice's own retry is refused in her own name: no member to name.
    with pytest.raises(IntakeError) as own:
        members.prepare_retry(member(ALICE), job)
    assert own.value.params == {"limit": core.settings.member_job_limit}


async def test_only_a_failed_job_is_retried(core: Core[Any]) -> None:
    delivered = await finished(core, JobState.DELIVERED)
    request = core.members.prepare_retry(member(ALICE), delivered)
    with pytest.raises(JobRefused) as refused:
        await core.members.retry(request, CHAT)
    assert refused.value.refusal is Refusal.NOT_FOUND


# -- again and remix ------------------------------------------------------------------------------------
async def test_again_is_any_members_own_job_with_the_same_options(core: Core[Any]) -> None:
    delivered = await finished(core, JobState.DELIVERED)
    started = await core.members.again(member(BOB), reading(BOB), delivered.id, CHAT)
    assert started.job.user_id == BOB and started.job.retry_of is None
    assert options_of(started.job) == options_of(delivered)
    assert started.job.params == delivered.params
    # Only a delivered job of this server.
    queued = started.job
    for job_id, who in ((queued.id, member(BOB)), (delivered.id, member(BOB, guild_id=OTHER_GUILD))):
        with pytest.raises(JobRefused) as refused:
            await core.members.again(who, reading(BOB), job_id, CHAT)
        assert refused.value.refusal is Refusal.NOT_FOUND


async def test_again_and_remix_work_while_the_result_is_being_posted_delete_waits(core: Core[Any]) -> None:
    # The file shows a moment before DELIVERED is stored: a click in between finds the job
    # DELIVERING. Again and Remix only read its prompt; Delete would race the delivery itself.
    posting = await finished(core, JobState.DELIVERING)
    started = await core.members.again(member(BOB), reading(BOB), posting.id, CHAT)
    assert started.job.params == posting.params
    prefill = await core.members.remix_prefill(member(BOB), reading(BOB), posting.id)
    assert prefill.job_id == posting.id
    with pytest.raises(JobRefused) as refused:
        await core.members.authorize(Actor(ALICE, GUILD), posting.id, JobAction.DELETE)
    assert refused.value.refusal is Refusal.NOT_FOUND


async def test_again_and_remix_of_a_job_from_a_channel_the_member_cannot_read_are_refused(
    core: Core[Any],
) -> None:
    # The prompt would show where bob is (the new job's message, the form): as /queue hides it, it is
    # no such job; bob's own jobs show from anywhere.
    delivered = await finished(core, JobState.DELIVERED)
    with pytest.raises(JobRefused) as refused:
        await core.members.again(member(BOB, channel_id=200), reading(BOB, 200), delivered.id, CHAT)
    assert refused.value.refusal is Refusal.NOT_FOUND
    with pytest.raises(JobRefused) as refused:
        await core.members.remix_prefill(member(BOB, channel_id=200), reading(BOB, 200), delivered.id)
    assert refused.value.refusal is Refusal.NOT_FOUND
    own = await finished(core, JobState.DELIVERED, user_id=BOB)
    prefill = await core.members.remix_prefill(member(BOB, channel_id=200), reading(BOB, 200), own.id)
    assert prefill.job_id == own.id


async def test_remix_prefills_the_jobs_options_and_queues_the_edited_request(core: Core[Any]) -> None:
    delivered = await finished(core, JobState.DELIVERED)
    prefill = await core.members.remix_prefill(member(BOB), reading(BOB), delivered.id)
    assert (prefill.job_id, prefill.kind) == (delivered.id, JobKind.VIDEO)
    assert prefill.options == JobOptions(prompt="a heron", size="vertical", seconds=5, fps=24, model=None)
    assert prefill.default_model == core.models.default("video")
    assert prefill.prompt_max == core.settings.prompt_max_chars
    form = FormInput(prompt="a heron at dusk", size="960×960", length="3 s", fps="30 fps", model=" ")
    request = core.members.prepare_remix(member(BOB), JobKind.VIDEO, delivered.id, form)
    assert request.from_job == delivered.id
    assert (request.params["size_key"], request.params["seconds"], request.params["frame_rate"]) == (
        "square",
        3,
        30,
    )
    started = await core.members.submit(request, CHAT)
    assert started.job.user_id == BOB and started.job.params["prompt"] == "a heron at dusk"
    with pytest.raises(IntakeError) as refused:
        core.members.prepare_remix(
            member(BOB), JobKind.VIDEO, delivered.id, dataclasses.replace(form, length="forever")
        )
    assert refused.value.problem is IntakeProblem.BAD_OPTION and refused.value.params == {"option": "length"}


# -- looking around --------------------------------------------------------------------------------------
async def test_show_job_is_for_the_requester_and_server_managers(core: Core[Any]) -> None:
    members = core.members
    job = (
        await members.submit(members.prepare(member(ALICE), JobKind.VIDEO, JobOptions("a kite")), CHAT)
    ).job
    details = await members.show_job(Actor(ALICE, GUILD), QueueViewer(ALICE), job.id)
    assert details.job.id == job.id and details.poll_timeout == core.settings.gen_poll_timeout
    admin = QueueViewer(ADMIN, frozenset({100}))
    assert (await members.show_job(Actor(ADMIN, GUILD, manages_guild=True), admin, job.id)).job.id == job.id
    with pytest.raises(JobRefused) as refused:
        await members.show_job(Actor(BOB, GUILD), QueueViewer(BOB, frozenset({100})), job.id)
    assert refused.value.refusal is Refusal.NOT_ALLOWED


async def test_show_job_hides_what_queue_and_history_hide_from_everyone_but_the_requester(
    core: Core[Any],
) -> None:
    """A manager who cannot read the job's channel, or asks about an age-restricted one from
    elsewhere, gets no prompt, no styled prompt, no message and no result link: the one rule."""
    staff, adult, general = 100, 300, 200
    store = core.store
    job = await store.add(
        NewJob(
            kind=JobKind.IMAGE,
            guild_id=GUILD,
            channel_id=staff,
            user_id=ALICE,
            locale="en-US",
            params={"prompt": "staff secret", "styled_prompt": "noir: staff secret", "model": "m"},
            discord={"message_id": 555, "channel_message_id": 556},
        ),
        member_limit=None,
        guild_cap=None,
    )
    for step in (JobState.SUBMITTING, JobState.DELIVERING):
        job = await store.transition(job.id, step)
    job = await store.transition(job.id, JobState.DELIVERED, result_url="https://cdn.example/secret.png")
    manager = Actor(ADMIN, GUILD, manages_guild=True)

    outside = await core.members.show_job(manager, QueueViewer(ADMIN, frozenset({general})), job.id)
    assert outside.hidden is PromptHidden.CHANNEL_NOT_READABLE
    seen = outside.job
    assert seen.prompt == "" and "styled_prompt" not in seen.params
    assert seen.discord == {} and seen.result_url is None and not seen.result_local
    assert "staff secret" not in repr(dataclasses.asdict(seen)) and "secret.png" not in repr(
        dataclasses.asdict(seen)
    )

    # The same rule for an age-restricted channel: hidden from elsewhere, shown from one.
    adult_job = await store.update(job.id, channel_id=adult)
    readable = frozenset({general, adult})
    away = QueueViewer(ADMIN, readable, frozenset({adult}), in_age_restricted=False)
    there = QueueViewer(ADMIN, readable, frozenset({adult}), in_age_restricted=True)
    assert (await core.members.show_job(manager, away, adult_job.id)).hidden is PromptHidden.AGE_RESTRICTED
    shown = await core.members.show_job(manager, there, adult_job.id)
    assert shown.hidden is None and shown.job.result_url == "https://cdn.example/secret.png"
    # The requester sees their own job in full wherever they ask.
    own = await core.members.show_job(Actor(ALICE, GUILD), QueueViewer(ALICE), adult_job.id)
    assert own.hidden is None and own.job.prompt == "staff secret" and own.job.discord["message_id"] == 555


async def test_the_queue_lists_running_then_queued_in_order_with_the_viewers_own_marked(
    core: Core[Any], fake_service: FakeService
) -> None:
    members = core.members
    ids = []
    for who, prompt in ((ALICE, "first"), (BOB, "second"), (ALICE, "third")):
        started = await members.submit(members.prepare(member(who), JobKind.VIDEO, JobOptions(prompt)), CHAT)
        ids.append(started.job.id)
    # One runs at a time (GEN_MAX_RUNNING=1): wait for the first to hold the service's slot.
    await wait_until(lambda: len(fake_service.tasks) >= 1)
    view = await members.show_queue(GUILD, viewer=QueueViewer(BOB, frozenset({100})))
    assert [row.job.id for row in view.rows] == ids
    assert [row.position for row in view.rows] == [None, 1, 2]
    assert [row.mine for row in view.rows] == [False, True, False]
    assert [row.prompt for row in view.rows] == ["first", "second", "third"]
    assert (view.running, view.queued) == (1, 2)
    assert (await members.show_queue(OTHER_GUILD, viewer=QueueViewer(BOB, frozenset({100})))).rows == ()


async def test_the_queue_hides_prompts_from_channels_the_viewer_cannot_read_but_keeps_their_places(
    core: Core[Any], fake_service: FakeService
) -> None:
    members = core.members
    staff, adult, general = 200, 300, 100
    for who, prompt, channel in (
        (ALICE, "staff plans", staff),
        (ADMIN, "adult prompt", adult),
        (BOB, "bob's own, from staff", staff),
        (ALICE, "open prompt", general),
    ):
        request = members.prepare(member(who, channel_id=channel), JobKind.VIDEO, JobOptions(prompt))
        await members.submit(request, CHAT)
    await wait_until(lambda: len(fake_service.tasks) >= 1)
    # Bob reads #general and the age-restricted channel, not the staff channel; he asks from #general.
    bob = QueueViewer(BOB, frozenset({general, adult}), frozenset({adult}), in_age_restricted=False)
    view = await members.show_queue(GUILD, viewer=bob)
    assert [row.position for row in view.rows] == [None, 1, 2, 3]
    assert (view.running, view.queued) == (1, 3)
    assert [row.prompt for row in view.rows] == [None, None, "bob's own, from staff", "open prompt"]
    assert [row.hidden for row in view.rows] == [
        PromptHidden.CHANNEL_NOT_READABLE,
        PromptHidden.AGE_RESTRICTED,
        None,
        None,
    ]
    # The hidden rows do not even carry the prompt.
    assert all("prompt" not in row.job.params for row in view.rows[:2])
    # From an age-restricted channel, the age-restricted prompt shows; the staff one never does.
    from_adult = await members.show_queue(GUILD, viewer=dataclasses.replace(bob, in_age_restricted=True))
    assert [row.prompt for row in from_adult.rows][:2] == [None, "adult prompt"]


async def test_models_and_suggestions_follow_the_services_list(core: Core[Any]) -> None:
    listed = core.members.list_models(GUILD)
    assert listed is not None
    by_kind = {kinds.kind: kinds for kinds in listed.kinds}
    assert by_kind[JobKind.VIDEO].ids == core.models.ids("video")
    assert by_kind[JobKind.VIDEO].default == core.models.default("video")
    assert core.members.suggest_models(JobKind.VIDEO, "")[0] == core.models.default("video")
    assert core.members.suggest_models("image", "zzz-no-such") == core.models.suggest("image", "zzz-no-such")
    # The server's own default model, while the service lists it, is this server's default.
    other = next(m for m in core.models.ids("video") if m != core.models.default("video"))
    await core.book.update(GUILD, by=ADMIN, video_model=other)
    assert core.members.default_model(GUILD, JobKind.VIDEO) == other
    chosen = core.members.list_models(GUILD)
    assert chosen is not None
    assert {kinds.kind: kinds.default for kinds in chosen.kinds}[JobKind.VIDEO] == other
    assert core.members.default_model(OTHER_GUILD, JobKind.VIDEO) == core.models.default("video")


async def test_help_names_the_limits_and_when_quotas_reset(core: Core[Any]) -> None:
    limits = core.members.limits(GUILD)
    assert limits.policy.member_jobs == core.settings.member_job_limit and limits.quotas_reset_at is None
    await core.book.update(GUILD, by=ADMIN, daily_videos=2)
    limits = core.members.limits(GUILD)
    assert limits.policy.daily_quota(JobKind.VIDEO) == 2
    assert limits.quotas_reset_at is not None and limits.quotas_reset_at > core.clock.time()
