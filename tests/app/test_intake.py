"""Intake: prompt checks, /video and /image options, model ids, limits, and accept's durability.

The limit tests use a real Store and a real Scheduler, wired as bot.py wires them (the store's
subscription feeds the intake's in-memory index). The runner is a stand-in that moves a job through
the store when the test says so.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from framecast.app.intake import Intake, IntakeError, IntakeProblem, Limits, Requester, clean_prompt
from framecast.config import Settings
from framecast.guilds.settings import Ceilings, GuildSettings, KeyStatus, Policy, check_change, resolve
from framecast.jobs.leases import Leases
from framecast.jobs.scheduler import Scheduler
from framecast.storage import Store, StoreUnavailable
from framecast.values import Job, JobKind, JobState, presets
from tests.fakes.clock import ManualClock
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL
from tests.fakes.unused import unused

S = JobState
WAIT = 5.0
GUILD, OTHER_GUILD = 900_000_000_000_000_001, 900_000_000_000_000_002
# What /video uses when no model is picked.
DEFAULT_VIDEO_MODEL: str = Settings.model_fields["gen_video_model"].default
DEFAULT_IMAGE_MODEL: str = Settings.model_fields["gen_image_model"].default
VIDEO_MODELS = (DEFAULT_VIDEO_MODEL, "svc-video-v1.5")
IMAGE_MODELS = (DEFAULT_IMAGE_MODEL, "svc-image-2.0")


def who(user: int = 1, guild: int = GUILD, locale: str = "en-US") -> Requester:
    return Requester(guild_id=guild, channel_id=guild + 7, user_id=user, locale=locale)


def expect_error(problem: IntakeProblem, **params: Any) -> Callable[[IntakeError], None]:
    def check(err: IntakeError) -> None:
        assert err.problem is problem
        assert err.params == params

    return check


def bare_intake(prompt_chars: int = 200) -> Intake:
    """An Intake for the pure validation methods (they touch neither store nor scheduler)."""
    return Intake(
        store=unused(Store),
        scheduler=unused(Scheduler),
        limits=Limits(member_jobs=2, guild_queue=25, prompt_chars=prompt_chars),
    )


# ---------------------------------------------------------------------- clean_prompt


@pytest.mark.parametrize(
    "prompt",
    [
        None,
        "",
        " ",
        " \t\n\r  ",
        "\u200b",  # zero-width space
        "\u200b\u200c\u200d\u2060",  # ZWSP, ZWNJ, ZWJ, word joiner
        "\ufeff",  # byte-order mark
        "\u00a0\u3000\u2003",  # no-break, ideographic and em spaces
        "\u2028\u2029",  # line and paragraph separators
        " \u200b \u200d\n\ufeff ",
        "\x00\x07\x1b",  # control characters only
    ],
    ids=repr,
)
def test_empty_prompts_are_refused(prompt: str | None) -> None:
    with pytest.raises(IntakeError) as info:
        clean_prompt(prompt, 100)
    expect_error(IntakeProblem.PROMPT_EMPTY)(info.value)


def test_too_long_prompt_names_the_limit_and_the_length() -> None:
    with pytest.raises(IntakeError) as info:
        clean_prompt("x" * 101, 100)
    expect_error(IntakeProblem.PROMPT_TOO_LONG, max=100, length=101)(info.value)
    assert str(info.value) == "prompt_too_long"
    # Spaces count: the length judged is the length of what the member typed.
    with pytest.raises(IntakeError) as info:
        clean_prompt("   " + "x" * 98, 100)
    expect_error(IntakeProblem.PROMPT_TOO_LONG, max=100, length=101)(info.value)


def test_prompt_at_the_limit_is_accepted() -> None:
    prompt = "y" * 100
    assert clean_prompt(prompt, 100) == prompt


@pytest.mark.parametrize(
    "prompt",
    [
        "a cat",
        "  leading and trailing spaces  ",
        "\ttabs\tand\nnew lines\n",
        "一只猫在月球上跳舞，电影感",
        "قطة تطير فوق المدينة ليلاً",
        "🎬🐈‍⬛👩🏽‍🚀🏳️‍🌈🇯🇵",
        "e\u0301 and \u00e9 stay as typed (no normalisation)",
        "\u200bzero width inside\u200d the text\ufeff",
        "<@123> @everyone **bold** `code` ||spoiler||",
        "quotes \" ' and \\ backslashes",
    ],
    ids=repr,
)
def test_valid_prompts_come_back_byte_for_byte(prompt: str) -> None:
    cleaned = clean_prompt(prompt, 200)
    assert cleaned == prompt
    assert cleaned.encode("utf-8") == prompt.encode("utf-8")


def test_video_and_image_params_keep_the_prompt_exact() -> None:
    intake = bare_intake()
    prompt = "  Ein Hund 🐕 am Strand, e\u0301  "
    video = intake.video_params(
        guild_id=GUILD,
        prompt=prompt,
        model=DEFAULT_VIDEO_MODEL,
        size=None,
        seconds=None,
        frame_rate=None,
        known_models=(),
        default_model=DEFAULT_VIDEO_MODEL,
    )
    image = intake.image_params(
        guild_id=GUILD,
        prompt=prompt,
        model=DEFAULT_IMAGE_MODEL,
        size=None,
        known_models=(),
        default_model=DEFAULT_IMAGE_MODEL,
    )
    assert video["prompt"].encode() == prompt.encode()
    assert image["prompt"].encode() == prompt.encode()


def test_params_apply_the_intake_prompt_limit() -> None:
    intake = bare_intake(prompt_chars=10)
    with pytest.raises(IntakeError) as info:
        intake.video_params(
            guild_id=GUILD,
            prompt="z" * 11,
            model=DEFAULT_VIDEO_MODEL,
            size=None,
            seconds=None,
            frame_rate=None,
            known_models=(),
            default_model=DEFAULT_VIDEO_MODEL,
        )
    expect_error(IntakeProblem.PROMPT_TOO_LONG, max=10, length=11)(info.value)
    with pytest.raises(IntakeError) as info:
        intake.image_params(
            guild_id=GUILD,
            prompt="\u200b ",
            model=DEFAULT_IMAGE_MODEL,
            size=None,
            known_models=(),
            default_model=DEFAULT_IMAGE_MODEL,
        )
    expect_error(IntakeProblem.PROMPT_EMPTY)(info.value)


# ---------------------------------------------------------------------- /video options


def test_video_defaults_follow_the_services_sample_request() -> None:
    params = bare_intake().video_params(
        guild_id=GUILD,
        prompt="a cat",
        model=None,
        size=None,
        seconds=None,
        frame_rate=None,
        known_models=VIDEO_MODELS,
        default_model=DEFAULT_VIDEO_MODEL,
    )
    assert params == {
        "model": VIDEO_MODEL,
        "model_default": True,
        "prompt": "a cat",
        "width": 1152,
        "height": 768,
        "num_frames": 121,
        "frame_rate": 24,
        "seconds": 5,
        "size_key": "landscape",
    }


def test_video_presets_stay_within_the_720p_class() -> None:
    assert presets.MAX_VIDEO_PIXELS == 921_600
    assert len(presets.VIDEO_SIZES) >= 2
    for key, preset in presets.VIDEO_SIZES.items():
        assert preset.key == key
        assert preset.width * preset.height <= 1280 * 720, key
    assert presets.VIDEO_SIZES[presets.DEFAULT_VIDEO_SIZE].size == "1152x768"


@pytest.mark.parametrize("size", sorted(presets.VIDEO_SIZES))
@pytest.mark.parametrize("seconds", presets.VIDEO_SECONDS)
@pytest.mark.parametrize("fps", presets.FRAME_RATES)
def test_every_video_preset_combination(size: str, seconds: int, fps: int) -> None:
    params = bare_intake().video_params(
        guild_id=GUILD,
        prompt="p",
        model=DEFAULT_VIDEO_MODEL,
        size=size,
        seconds=seconds,
        frame_rate=fps,
        known_models=(),
        default_model=DEFAULT_VIDEO_MODEL,
    )
    preset = presets.VIDEO_SIZES[size]
    assert (params["width"], params["height"]) == (preset.width, preset.height)
    assert params["width"] * params["height"] <= 1280 * 720
    assert params["num_frames"] == seconds * fps + 1
    assert (params["seconds"], params["frame_rate"], params["size_key"]) == (seconds, fps, size)


def test_num_frames_examples() -> None:
    assert presets.num_frames(5, 24) == 121
    assert presets.num_frames(3, 16) == 49
    assert presets.num_frames(8, 30) == 241


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"size": "huge"}, "size"),
        ({"size": "LANDSCAPE"}, "size"),
        ({"size": "1920x1080"}, "size"),
        ({"seconds": 4}, "length"),
        ({"seconds": 60}, "length"),
        ({"seconds": -5}, "length"),
        ({"frame_rate": 25}, "fps"),
        ({"frame_rate": 60}, "fps"),
        ({"frame_rate": 1}, "fps"),
    ],
)
def test_video_options_outside_the_choices_are_refused(options: dict[str, Any], option: str) -> None:
    kwargs: dict[str, Any] = {"size": None, "seconds": None, "frame_rate": None, **options}
    with pytest.raises(IntakeError) as info:
        bare_intake().video_params(
            guild_id=GUILD,
            prompt="p",
            model=DEFAULT_VIDEO_MODEL,
            known_models=(),
            default_model=DEFAULT_VIDEO_MODEL,
            **kwargs,
        )
    expect_error(IntakeProblem.BAD_OPTION, option=option)(info.value)


# ---------------------------------------------------------------------- models


def test_unknown_model_is_refused_when_the_service_list_is_known() -> None:
    intake = bare_intake()
    with pytest.raises(IntakeError) as info:
        intake.video_params(
            guild_id=GUILD,
            prompt="p",
            model="svc-video-v9",
            size=None,
            seconds=None,
            frame_rate=None,
            known_models=VIDEO_MODELS,
            default_model=DEFAULT_VIDEO_MODEL,
        )
    # Refused with the service's list, so the member can pick again.
    expect_error(IntakeProblem.UNLISTED_MODEL, model="svc-video-v9", models="svc-video-v2.0, svc-video-v1.5")(
        info.value
    )
    with pytest.raises(IntakeError) as info:
        intake.image_params(
            guild_id=GUILD,
            prompt="p",
            model=DEFAULT_VIDEO_MODEL,
            size=None,
            known_models=IMAGE_MODELS,
            default_model=DEFAULT_IMAGE_MODEL,
        )
    expect_error(
        IntakeProblem.UNLISTED_MODEL, model=DEFAULT_VIDEO_MODEL, models="svc-image-2.1-flash, svc-image-2.0"
    )(info.value)
    assert (
        intake.video_params(
            guild_id=GUILD,
            prompt="p",
            model="svc-video-v1.5",
            size=None,
            seconds=None,
            frame_rate=None,
            known_models=VIDEO_MODELS,
            default_model=DEFAULT_VIDEO_MODEL,
        )["model"]
        == "svc-video-v1.5"
    )


@pytest.mark.parametrize(
    "model",
    ["svc-video-v9", "vendor/model-name:latest", "a", "Model_1.2", "x" * 100, "org/sub/model:tag-1"],
)
def test_any_well_formed_model_is_accepted_without_a_list(model: str) -> None:
    params = bare_intake().video_params(
        guild_id=GUILD,
        prompt="p",
        model=model,
        size=None,
        seconds=None,
        frame_rate=None,
        known_models=(),
        default_model=DEFAULT_VIDEO_MODEL,
    )
    assert params["model"] == model


def test_model_id_is_trimmed() -> None:
    params = bare_intake().image_params(
        guild_id=GUILD,
        prompt="p",
        model=f"  {DEFAULT_IMAGE_MODEL}\n",
        size=None,
        known_models=IMAGE_MODELS,
        default_model=DEFAULT_IMAGE_MODEL,
    )
    assert params["model"] == DEFAULT_IMAGE_MODEL


def test_no_pick_means_the_default_the_bot_chose_unchecked() -> None:
    # The default is the configured model or its stand-in from the service's own list
    # (framecast.service.model_list): the member picked nothing, so there is nothing to refuse.
    params = bare_intake().video_params(
        guild_id=GUILD,
        prompt="p",
        model=None,
        size=None,
        seconds=None,
        frame_rate=None,
        known_models=("svc-video-v2.1",),
        default_model="svc-video-v2.1",
    )
    assert (params["model"], params["model_default"]) == ("svc-video-v2.1", True)
    image = bare_intake().image_params(
        guild_id=GUILD, prompt="p", model=None, size=None, known_models=(), default_model=DEFAULT_IMAGE_MODEL
    )
    assert (image["model"], image["model_default"]) == (DEFAULT_IMAGE_MODEL, True)


def test_a_picked_model_is_marked_as_picked() -> None:
    params = bare_intake().video_params(
        guild_id=GUILD,
        prompt="p",
        model="svc-video-v1.5",
        size=None,
        seconds=None,
        frame_rate=None,
        known_models=VIDEO_MODELS,
        default_model=DEFAULT_VIDEO_MODEL,
    )
    assert (params["model"], params["model_default"]) == ("svc-video-v1.5", False)


def test_the_list_shown_on_refusal_is_bounded() -> None:
    listed = tuple(f"svc-video-v{i}.0" for i in range(40))
    with pytest.raises(IntakeError) as info:
        bare_intake().video_params(
            guild_id=GUILD,
            prompt="p",
            model="nope",
            size=None,
            seconds=None,
            frame_rate=None,
            known_models=listed,
            default_model=listed[0],
        )
    assert info.value.params["models"].split(", ") == list(listed[:15])


@pytest.mark.parametrize(
    "model",
    [
        "",
        "   ",
        "two words",
        "-leading-dash",
        ".hidden",
        "semi;colon",
        "quote'd",
        "new\nline",
        "mödel",
        "x" * 101,
        "<@123>",
        "../../etc/passwd?",
    ],
    ids=repr,
)
def test_malformed_model_ids_are_refused_even_without_a_list(model: str) -> None:
    intake = bare_intake()
    for known in ((), VIDEO_MODELS):
        with pytest.raises(IntakeError) as info:
            intake.video_params(
                guild_id=GUILD,
                prompt="p",
                model=model,
                size=None,
                seconds=None,
                frame_rate=None,
                known_models=known,
                default_model=DEFAULT_VIDEO_MODEL,
            )
        assert info.value.problem is IntakeProblem.UNKNOWN_MODEL
        assert info.value.params["model"] == model.strip()[:100]


# ---------------------------------------------------------------------- /image options


def test_image_defaults() -> None:
    params = bare_intake().image_params(
        guild_id=GUILD,
        prompt="a cat",
        model=DEFAULT_IMAGE_MODEL,
        size=None,
        known_models=IMAGE_MODELS,
        default_model=DEFAULT_IMAGE_MODEL,
    )
    assert params == {
        "model": IMAGE_MODEL,
        "model_default": False,
        "prompt": "a cat",
        "size": "1024x1024",
        "size_key": "square",
    }


@pytest.mark.parametrize("size", sorted(presets.IMAGE_SIZES))
def test_every_image_preset(size: str) -> None:
    params = bare_intake().image_params(
        guild_id=GUILD,
        prompt="p",
        model=DEFAULT_IMAGE_MODEL,
        size=size,
        known_models=(),
        default_model=DEFAULT_IMAGE_MODEL,
    )
    preset = presets.IMAGE_SIZES[size]
    assert params["size"] == f"{preset.width}x{preset.height}"
    assert params["size_key"] == size


def test_bad_image_size_is_refused() -> None:
    with pytest.raises(IntakeError) as info:
        bare_intake().image_params(
            guild_id=GUILD,
            prompt="p",
            model=DEFAULT_IMAGE_MODEL,
            size="small",
            known_models=(),
            default_model=DEFAULT_IMAGE_MODEL,
        )
    expect_error(IntakeProblem.BAD_OPTION, option="size")(info.value)


# ---------------------------------------------------------------------- limits, accept, durability


class StandInRunner:
    """Moves a started job to RUNNING, then waits for the test to finish it (DELIVERING -> DELIVERED)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.started: list[int] = []
        self._finish: dict[int, asyncio.Event] = {}

    def gate(self, job_id: int) -> asyncio.Event:
        return self._finish.setdefault(job_id, asyncio.Event())

    async def run(self, job: Job, *, release_service_slot: Callable[[], None]) -> None:
        self.started.append(job.id)
        await self.store.transition(job.id, S.SUBMITTING, expect=S.QUEUED)
        await self.store.transition(job.id, S.RUNNING, expect=S.SUBMITTING, task_id=f"task-{job.id}")
        await self.gate(job.id).wait()
        await self.store.transition(job.id, S.DELIVERING, expect=S.RUNNING)
        release_service_slot()
        await self.store.transition(job.id, S.DELIVERED, expect=S.DELIVERING)

    def begin_shutdown(self) -> None:
        pass

    def in_critical_section(self, job_id: int) -> bool:
        return False

    async def wait_critical_done(self, ids: set[int]) -> None:
        return None


class World:
    def __init__(self, store: Store, limits: Limits, max_running: int, **intake_options: Any) -> None:
        self.store = store
        self.runner = StandInRunner(store)
        self.scheduler = Scheduler(store=store, runner=self.runner, admission=max_running)
        self.intake = Intake(store=store, scheduler=self.scheduler, limits=limits, **intake_options)
        store.subscribe(self.intake.observe)  # as framecast.app.core wires it
        self.states: dict[int, JobState] = {}
        self._changed = asyncio.Event()
        store.subscribe(self._seen)

    def _seen(self, job: Job) -> None:
        self.states[job.id] = job.state
        self._changed.set()

    async def wait_state(self, job_id: int, state: JobState) -> None:
        async def _wait() -> None:
            while self.states.get(job_id) is not state:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(_wait(), WAIT)

    async def accept(
        self, requester: Requester, prompt: str = "a cat", kind: JobKind = JobKind.VIDEO
    ) -> tuple[Job, int]:
        if kind is JobKind.IMAGE:
            image = self.intake.image_params(
                guild_id=requester.guild_id,
                prompt=prompt,
                model=None,
                size=None,
                known_models=(),
                default_model=DEFAULT_IMAGE_MODEL,
            )
            return await self.intake.accept(requester, kind, image)
        params = self.intake.video_params(
            guild_id=requester.guild_id,
            prompt=prompt,
            model=DEFAULT_VIDEO_MODEL,
            size=None,
            seconds=None,
            frame_rate=None,
            known_models=(),
            default_model=DEFAULT_VIDEO_MODEL,
        )
        return await self.intake.accept(requester, JobKind.VIDEO, params)


@pytest.fixture
def limits() -> Limits:
    return Limits(member_jobs=2, guild_queue=3, prompt_chars=200)


@pytest.fixture
async def world(tmp_path: Path, limits: Limits) -> AsyncIterator[World]:
    store = await Store.open(tmp_path / "db.sqlite3")
    w = World(store, limits, max_running=1)
    try:
        yield w
    finally:
        await w.scheduler.close(timeout=1.0)
        await store.close()


async def test_member_limit_is_refused_from_memory_after_accepts(world: World) -> None:
    # The scheduler is not started: accepted jobs stay queued.
    first, pos1 = await world.accept(who(user=1))
    second, pos2 = await world.accept(who(user=1))
    assert (pos1, pos2) == (1, 2)
    assert first.state is S.QUEUED and second.state is S.QUEUED
    with pytest.raises(IntakeError) as info:
        world.intake.precheck(who(user=1))  # synchronous: no I/O before the acknowledgement
    expect_error(IntakeProblem.MEMBER_LIMIT, limit=2)(info.value)
    world.intake.precheck(who(user=2))  # another member of the same guild
    world.intake.precheck(who(user=1, guild=OTHER_GUILD))  # the same member elsewhere
    # accept() itself enforces the limit in the store's transaction, even when precheck was skipped.
    with pytest.raises(IntakeError) as info:
        await world.accept(who(user=1))
    expect_error(IntakeProblem.MEMBER_LIMIT, limit=2)(info.value)
    assert len(await world.store.active()) == 2


async def test_guild_queue_cap_is_refused_from_memory_after_accepts(world: World) -> None:
    positions = [(await world.accept(who(user=u)))[1] for u in (1, 2, 3)]
    assert positions == [1, 2, 3]
    with pytest.raises(IntakeError) as info:
        world.intake.precheck(who(user=4))
    expect_error(IntakeProblem.GUILD_QUEUE_FULL, cap=3)(info.value)
    world.intake.precheck(who(user=4, guild=OTHER_GUILD))
    with pytest.raises(IntakeError) as info:
        await world.accept(who(user=4))
    expect_error(IntakeProblem.GUILD_QUEUE_FULL, cap=3)(info.value)
    # The member limit is checked first.
    await world.accept(who(user=1, guild=OTHER_GUILD))
    await world.accept(who(user=1, guild=OTHER_GUILD))
    with pytest.raises(IntakeError) as info:
        world.intake.precheck(who(user=1, guild=OTHER_GUILD))
    assert info.value.problem is IntakeProblem.MEMBER_LIMIT


async def test_the_store_subscription_keeps_the_index_in_step(world: World) -> None:
    await world.scheduler.start()
    first, _ = await world.accept(who(user=1))
    await world.wait_state(first.id, S.RUNNING)  # holds the only slot
    second, _ = await world.accept(who(user=1))
    await world.accept(who(user=2))
    await world.accept(who(user=3))
    # Member 1: one running + one queued; the guild: three queued.
    with pytest.raises(IntakeError) as info:
        world.intake.precheck(who(user=1))
    assert info.value.problem is IntakeProblem.MEMBER_LIMIT
    with pytest.raises(IntakeError) as info:
        world.intake.precheck(who(user=4))
    assert info.value.problem is IntakeProblem.GUILD_QUEUE_FULL

    world.runner.gate(first.id).set()  # the runner finishes `first` through the store
    await world.wait_state(first.id, S.DELIVERED)
    await world.wait_state(second.id, S.RUNNING)
    assert world.runner.started == [first.id, second.id]
    # Only the store's notifications told the intake: the finished job no longer counts for member 1,
    # and `second` left the queue, so the guild has room again.
    world.intake.precheck(who(user=1))
    world.intake.precheck(who(user=4))
    world.runner.gate(second.id).set()
    await world.wait_state(second.id, S.DELIVERED)


async def test_cancelled_job_frees_the_members_place(world: World) -> None:
    await world.scheduler.start()
    first, _ = await world.accept(who(user=1))
    await world.wait_state(first.id, S.RUNNING)
    second, _ = await world.accept(who(user=1))
    with pytest.raises(IntakeError):
        world.intake.precheck(who(user=1))
    await world.scheduler.cancel(second.id)
    world.intake.precheck(who(user=1))
    world.runner.gate(first.id).set()
    await world.wait_state(first.id, S.DELIVERED)


async def test_accept_persists_before_returning(world: World, tmp_path: Path) -> None:
    requester = who(user=42, locale="de")
    params = world.intake.video_params(
        guild_id=GUILD,
        prompt="  Ein Hund 🐕 e\u0301  ",
        model=DEFAULT_VIDEO_MODEL,
        size="portrait",
        seconds=8,
        frame_rate=30,
        known_models=(),
        default_model=DEFAULT_VIDEO_MODEL,
    )
    job, position = await world.intake.accept(
        requester, JobKind.VIDEO, params, discord={"application_id": 5}, retry_of=None
    )
    assert position == 1
    assert world.scheduler.position(job.id) == 1

    # A second connection sees the committed job right away (nothing waits in a buffer)...
    other = await Store.open(tmp_path / "db.sqlite3")
    try:
        seen = await other.get(job.id)
    finally:
        await other.close()
    # ...and so does a store reopened after the first one is closed.
    await world.scheduler.close(timeout=1.0)
    await world.store.close()
    reopened = await Store.open(tmp_path / "db.sqlite3")
    try:
        again = await reopened.get(job.id)
    finally:
        await reopened.close()
    for found in (seen, again):
        assert found is not None
        assert found.state is S.QUEUED
        assert found.kind is JobKind.VIDEO
        assert (found.guild_id, found.channel_id, found.user_id, found.locale) == (
            requester.guild_id,
            requester.channel_id,
            42,
            "de",
        )
        assert found.params == params
        assert found.params["prompt"].encode() == "  Ein Hund 🐕 e\u0301  ".encode()
        assert found.discord == {"application_id": 5}


async def test_a_job_is_retried_at_most_once_even_by_simultaneous_clicks(world: World) -> None:
    failed, _ = await world.accept(who(user=1))
    params = dict(failed.params)
    # Two Retry clicks at the same moment (two members here, so no per-member limit interferes).
    results = await asyncio.gather(
        *(world.intake.accept(who(user=u), JobKind.VIDEO, params, retry_of=failed.id) for u in (2, 3)),
        return_exceptions=True,
    )
    retries = [r for r in results if isinstance(r, tuple)]
    refused = [r for r in results if isinstance(r, IntakeError)]
    assert len(retries) == 1 and len(refused) == 1, results
    [(retry, _)] = retries
    expect_error(IntakeProblem.ALREADY_RETRIED, job=failed.id, id=retry.id)(refused[0])
    # Later clicks too, and nothing extra was stored or queued.
    with pytest.raises(IntakeError) as info:
        await world.intake.accept(who(user=2), JobKind.VIDEO, params, retry_of=failed.id)
    expect_error(IntakeProblem.ALREADY_RETRIED, job=failed.id, id=retry.id)(info.value)
    assert [j.id for j in await world.store.active()] == [failed.id, retry.id]


async def test_accept_survives_a_cancelled_caller(world: World) -> None:
    """accept() is shielded: a caller cancelled mid-way still leaves a job that is stored AND queued."""
    params = world.intake.video_params(
        guild_id=GUILD,
        prompt="p",
        model=DEFAULT_VIDEO_MODEL,
        size=None,
        seconds=None,
        frame_rate=None,
        known_models=(),
        default_model=DEFAULT_VIDEO_MODEL,
    )
    task = asyncio.create_task(world.intake.accept(who(user=9), JobKind.VIDEO, params))
    await asyncio.sleep(0)  # one yield: the caller is now waiting on the shielded step
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await world.wait_state(1, S.QUEUED)  # the shielded step went on and stored the job...
    assert world.scheduler.position(1) == 1  # ...and queued it in the same step
    assert [j.id for j in await world.store.active()] == [1]


# ---------------------------------------------------------------------- per-guild policy


CEILINGS = Ceilings(member_jobs=5, queue_cap=10, daily_videos=None, daily_images=None)
DAY = 86_400.0
MIDNIGHT = 19_675 * DAY  # a UTC midnight (2023-11-14)


class WallClock:
    """A settable wall clock shared by the store (created_at) and the intake (quota windows)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


class Book:
    """Guild settings as the core keeps them in memory: ``policy_for`` reads this."""

    def __init__(self, ceilings: Ceilings = CEILINGS) -> None:
        self.ceilings = ceilings
        self.guilds: dict[int, GuildSettings] = {}
        self.keys: dict[int, KeyStatus] = {}

    def set(self, guild_id: int = GUILD, **changes: Any) -> None:
        current = self.guilds.get(guild_id, GuildSettings())
        self.guilds[guild_id] = check_change(current, self.ceilings, **changes)

    def policy_for(self, guild_id: int) -> Policy:
        return resolve(self.guilds.get(guild_id, GuildSettings()), self.ceilings)

    def key_state(self, guild_id: int) -> KeyStatus | None:
        return self.keys.get(guild_id)


def guild_intake(book: Book, prompt_chars: int = 200) -> Intake:
    """An Intake with a policy, for the validation methods (no store or scheduler touched)."""
    return Intake(
        store=unused(Store),
        scheduler=unused(Scheduler),
        limits=Limits(member_jobs=2, guild_queue=25, prompt_chars=prompt_chars),
        policy_for=book.policy_for,
        key_state=book.key_state,
    )


def where(
    channel: int, *, parent: int | None = None, nsfw: bool = False, user: int = 1, guild: int = GUILD
) -> Requester:
    return Requester(
        guild_id=guild, channel_id=channel, user_id=user, locale="en-US", parent_id=parent, nsfw=nsfw
    )


@pytest.fixture
def book() -> Book:
    return Book()


@pytest.fixture
def wall() -> WallClock:
    return WallClock(MIDNIGHT + 3_600.0)


@pytest.fixture
async def guild_world(tmp_path: Path, limits: Limits, book: Book, wall: WallClock) -> AsyncIterator[World]:
    store = await Store.open(tmp_path / "db.sqlite3", clock=wall)
    w = World(
        store,
        limits,
        max_running=1,
        policy_for=book.policy_for,
        clock=wall,
        quota_period=DAY,
        key_state=book.key_state,
    )
    try:
        yield w
    finally:
        await w.scheduler.close(timeout=1.0)
        await store.close()


def test_channels_restrict_where_members_generate(book: Book) -> None:
    intake = guild_intake(book)
    intake.precheck(where(555))  # no list: everywhere
    book.set(channels=[10, 20])
    with pytest.raises(IntakeError) as info:
        intake.precheck(where(555))
    expect_error(IntakeProblem.CHANNEL_NOT_ALLOWED, channels=[10, 20])(info.value)
    intake.precheck(where(10))
    intake.precheck(where(777, parent=20))  # a thread of an allowed channel
    with pytest.raises(IntakeError):
        intake.precheck(where(777, parent=30))  # a thread elsewhere
    intake.precheck(where(555, guild=OTHER_GUILD))  # another server's rules are its own


def test_nsfw_only_servers_generate_only_in_age_restricted_channels(book: Book) -> None:
    intake = guild_intake(book)
    intake.precheck(where(1))
    book.set(nsfw_only=True)
    with pytest.raises(IntakeError) as info:
        intake.precheck(where(1))
    expect_error(IntakeProblem.NSFW_ONLY)(info.value)
    intake.precheck(where(1, nsfw=True))
    intake.precheck(where(1, guild=OTHER_GUILD))


def test_a_rejected_server_key_is_refused_first(book: Book) -> None:
    intake = guild_intake(book)
    book.set(channels=[10])
    book.keys[GUILD] = KeyStatus.OK
    intake.precheck(where(10))
    book.keys[GUILD] = KeyStatus.REJECTED
    with pytest.raises(IntakeError) as info:
        intake.precheck(where(555))  # the channel is wrong too: the key problem is named first
    expect_error(IntakeProblem.GUILD_KEY_REJECTED)(info.value)
    intake.precheck(where(1, guild=OTHER_GUILD))


def test_a_zero_quota_is_refused_before_any_io(book: Book, wall: WallClock) -> None:
    intake = Intake(
        store=unused(Store),
        scheduler=unused(Scheduler),
        limits=Limits(member_jobs=2, guild_queue=25, prompt_chars=200),
        policy_for=book.policy_for,
        clock=wall,
        quota_period=DAY,
    )
    book.set(daily_videos=0)
    with pytest.raises(IntakeError) as info:
        intake.precheck(where(1), JobKind.VIDEO)
    expect_error(IntakeProblem.DAILY_QUOTA, kind=JobKind.VIDEO, limit=0, resets_at=MIDNIGHT + DAY)(info.value)
    intake.precheck(where(1), JobKind.IMAGE)
    intake.precheck(where(1))  # without a kind, no quota is judged


def test_the_quota_period_must_be_positive() -> None:
    for period in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            Intake(
                store=unused(Store),
                scheduler=unused(Scheduler),
                limits=Limits(member_jobs=2, guild_queue=25, prompt_chars=200),
                quota_period=period,
            )


@pytest.mark.parametrize(
    "prompt",
    ["a CAFÉ at night", "un cafe", "cafe\u0301 au lait", "ＣＡＦＥ", "the  Café\u200b latte"],
)
def test_blocked_prompts_are_refused_without_echoing_the_term(book: Book, prompt: str) -> None:
    intake = guild_intake(book)
    book.set(blocklist=["café", "猫"])
    for call in (
        lambda: intake.check_prompt(GUILD, prompt),
        lambda: intake.video_params(
            guild_id=GUILD,
            prompt=prompt,
            model=None,
            size=None,
            seconds=None,
            frame_rate=None,
            known_models=(),
            default_model=DEFAULT_VIDEO_MODEL,
        ),
        lambda: intake.image_params(
            guild_id=GUILD, prompt=prompt, model=None, size=None, known_models=(), default_model="m"
        ),
    ):
        with pytest.raises(IntakeError) as info:
            call()
        expect_error(IntakeProblem.PROMPT_BLOCKED)(info.value)
        assert "caf" not in str(info.value).lower()
    assert intake.check_prompt(OTHER_GUILD, prompt) == prompt  # not this server's list


def test_blocklist_scripts_in_intake(book: Book) -> None:
    intake = guild_intake(book)
    book.set(blocklist=["猫", "राम"])
    with pytest.raises(IntakeError):
        intake.check_prompt(GUILD, "一只猫在月球上")
    with pytest.raises(IntakeError):
        intake.check_prompt(GUILD, "राम और सीता")
    assert intake.check_prompt(GUILD, "रामायण की कहानी") == "रामायण की कहानी"  # a different word
    assert intake.check_prompt(GUILD, "a classic scene") == "a classic scene"


def test_prompt_shape_is_judged_before_the_blocklist(book: Book) -> None:
    intake = guild_intake(book, prompt_chars=10)
    book.set(blocklist=["cat"])
    with pytest.raises(IntakeError) as info:
        intake.check_prompt(GUILD, " \u200b ")
    expect_error(IntakeProblem.PROMPT_EMPTY)(info.value)
    with pytest.raises(IntakeError) as info:
        intake.check_prompt(GUILD, "cat " * 5)
    expect_error(IntakeProblem.PROMPT_TOO_LONG, max=10, length=20)(info.value)
    assert intake.check_prompt(GUILD, " dog 🐕 ") == " dog 🐕 "  # unchanged, byte for byte


def video(intake: Intake, known: tuple[str, ...] = VIDEO_MODELS, **options: Any) -> dict[str, Any]:
    given: dict[str, Any] = {"model": None, "size": None, "seconds": None, "frame_rate": None}
    return intake.video_params(
        guild_id=GUILD,
        prompt="p",
        known_models=known,
        default_model=DEFAULT_VIDEO_MODEL,
        **(given | options),
    )


def image(intake: Intake, known: tuple[str, ...] = IMAGE_MODELS, **options: Any) -> dict[str, Any]:
    given: dict[str, Any] = {"model": None, "size": None}
    return intake.image_params(
        guild_id=GUILD, prompt="p", known_models=known, default_model=DEFAULT_IMAGE_MODEL, **(given | options)
    )


def test_server_defaults_fill_what_the_member_left_out(book: Book) -> None:
    intake = guild_intake(book)
    book.set(video_size="vertical", video_seconds=8, video_fps=16, video_model="svc-video-v1.5")
    book.set(image_size="widescreen", image_model="svc-image-2.0")
    params = video(intake)
    assert (params["width"], params["height"], params["seconds"], params["frame_rate"]) == (720, 1280, 8, 16)
    assert params["num_frames"] == 8 * 16 + 1 and params["size_key"] == "vertical"
    assert (params["model"], params["model_default"]) == ("svc-video-v1.5", False)
    assert image(intake) | {"prompt": "p"} == {
        "model": "svc-image-2.0",
        "model_default": False,
        "model_server_default": True,  # Again and Remix follow the server's default of their moment
        "prompt": "p",
        "size": "1280x720",
        "size_key": "widescreen",
    }
    # The member's own choices win over the server's.
    mine = video(intake, size="square", seconds=3, frame_rate=30, model=DEFAULT_VIDEO_MODEL)
    assert (mine["size_key"], mine["seconds"], mine["frame_rate"], mine["model"]) == (
        "square",
        3,
        30,
        DEFAULT_VIDEO_MODEL,
    )
    # Another server keeps the operator's presets.
    other = intake.video_params(
        guild_id=OTHER_GUILD,
        prompt="p",
        model=None,
        size=None,
        seconds=None,
        frame_rate=None,
        known_models=VIDEO_MODELS,
        default_model=DEFAULT_VIDEO_MODEL,
    )
    assert (other["size_key"], other["seconds"], other["model"], other["model_default"]) == (
        presets.DEFAULT_VIDEO_SIZE,
        presets.DEFAULT_VIDEO_SECONDS,
        DEFAULT_VIDEO_MODEL,
        True,
    )


def test_a_server_default_model_the_service_dropped_falls_back_to_the_default(book: Book) -> None:
    intake = guild_intake(book)
    book.set(video_model="svc-video-v0.9", image_model="svc-image-0.1")
    params = video(intake)
    assert (params["model"], params["model_default"]) == (DEFAULT_VIDEO_MODEL, True)
    assert (image(intake)["model"], image(intake)["model_default"]) == (DEFAULT_IMAGE_MODEL, True)
    # Without the service's list (not fetched yet) the server's pick stands, as a member's would.
    assert (video(intake, known=())["model"], video(intake, known=())["model_default"]) == (
        "svc-video-v0.9",
        False,
    )


def test_stale_server_defaults_give_way_to_the_operators_presets(book: Book) -> None:
    intake = guild_intake(book)
    # As loaded from a database written when other presets existed (from_json does not validate).
    stale = GuildSettings.from_json(
        {"video_size": "imax", "video_seconds": 60, "video_fps": 120, "image_size": "x"}
    )
    book.guilds[GUILD] = stale
    params = video(intake)
    assert (params["size_key"], params["seconds"], params["frame_rate"]) == (
        presets.DEFAULT_VIDEO_SIZE,
        presets.DEFAULT_VIDEO_SECONDS,
        presets.DEFAULT_FRAME_RATE,
    )
    assert image(intake)["size_key"] == presets.DEFAULT_IMAGE_SIZE


async def test_the_servers_limits_replace_the_fixed_ones(guild_world: World, book: Book) -> None:
    book.set(member_jobs=1, queue_cap=2)
    await guild_world.accept(who(user=1))
    with pytest.raises(IntakeError) as info:
        guild_world.intake.precheck(who(user=1))
    expect_error(IntakeProblem.MEMBER_LIMIT, limit=1)(info.value)
    with pytest.raises(IntakeError) as info:
        await guild_world.accept(who(user=1))  # the store's transaction enforces it too
    expect_error(IntakeProblem.MEMBER_LIMIT, limit=1)(info.value)
    await guild_world.accept(who(user=2))
    with pytest.raises(IntakeError) as info:
        guild_world.intake.precheck(who(user=3))
    expect_error(IntakeProblem.GUILD_QUEUE_FULL, cap=2)(info.value)
    with pytest.raises(IntakeError) as info:
        await guild_world.accept(who(user=3))
    expect_error(IntakeProblem.GUILD_QUEUE_FULL, cap=2)(info.value)
    # A cap lowered below the queue: the refusal counts the jobs waiting, not the cap.
    await guild_world.accept(who(user=1, guild=OTHER_GUILD))
    book.set(member_jobs=1, queue_cap=1)
    with pytest.raises(IntakeError) as info:
        guild_world.intake.precheck(who(user=3))
    expect_error(IntakeProblem.GUILD_QUEUE_FULL, cap=2)(info.value)
    # And a member limit lowered below a member's jobs: the jobs they have.
    await guild_world.accept(who(user=1, guild=OTHER_GUILD))
    book.set(OTHER_GUILD, member_jobs=1, queue_cap=10)
    with pytest.raises(IntakeError) as info:
        guild_world.intake.precheck(who(user=1, guild=OTHER_GUILD))
    expect_error(IntakeProblem.MEMBER_LIMIT, limit=2)(info.value)
    book.guilds.pop(OTHER_GUILD)
    # The other server has the operator's ceilings (5 per member, 10 queued), not the fixed Limits.
    for _ in range(1):
        await guild_world.accept(who(user=1, guild=OTHER_GUILD))
    guild_world.intake.precheck(who(user=1, guild=OTHER_GUILD))


async def test_a_daily_quota_refuses_the_next_job_until_the_period_ends(
    guild_world: World, book: Book, wall: WallClock
) -> None:
    book.set(daily_videos=2, daily_images=1)
    first, _ = await guild_world.accept(who(user=1))
    await guild_world.accept(who(user=1))
    with pytest.raises(IntakeError) as info:
        await guild_world.accept(who(user=1))
    expect_error(IntakeProblem.DAILY_QUOTA, kind=JobKind.VIDEO, limit=2, resets_at=MIDNIGHT + DAY)(info.value)
    # Images have their own quota; other members and other servers theirs.
    await guild_world.accept(who(user=1), kind=JobKind.IMAGE)
    with pytest.raises(IntakeError) as info:
        await guild_world.accept(who(user=1), kind=JobKind.IMAGE)
    expect_error(IntakeProblem.DAILY_QUOTA, kind=JobKind.IMAGE, limit=1, resets_at=MIDNIGHT + DAY)(info.value)
    await guild_world.accept(who(user=2))
    await guild_world.accept(who(user=1, guild=OTHER_GUILD))
    # A failed job gave the member nothing: it does not use up the quota.
    await guild_world.store.transition(first.id, S.FAILED, error_code="internal")
    await guild_world.accept(who(user=1))
    with pytest.raises(IntakeError):
        await guild_world.accept(who(user=1))
    # The last instant of the period still belongs to it; the reset moment starts a new one.
    wall.now = MIDNIGHT + DAY - 0.001
    with pytest.raises(IntakeError):
        await guild_world.accept(who(user=1))
    wall.now = MIDNIGHT + DAY
    await guild_world.accept(who(user=1))
    await guild_world.accept(who(user=1), kind=JobKind.IMAGE)
    with pytest.raises(IntakeError) as info:
        await guild_world.accept(who(user=1), kind=JobKind.IMAGE)
    expect_error(IntakeProblem.DAILY_QUOTA, kind=JobKind.IMAGE, limit=1, resets_at=MIDNIGHT + 2 * DAY)(
        info.value
    )


async def test_the_operators_quota_applies_when_the_server_sets_none(
    tmp_path: Path, limits: Limits, wall: WallClock
) -> None:
    book = Book(Ceilings(member_jobs=5, queue_cap=10, daily_videos=1, daily_images=None))
    store = await Store.open(tmp_path / "db.sqlite3", clock=wall)
    w = World(store, limits, max_running=1, policy_for=book.policy_for, clock=wall, quota_period=DAY)
    try:
        await w.accept(who(user=1))
        with pytest.raises(IntakeError) as info:
            await w.accept(who(user=1))
        assert info.value.problem is IntakeProblem.DAILY_QUOTA and info.value.params["limit"] == 1
        await w.accept(who(user=1), kind=JobKind.IMAGE)
        await w.accept(who(user=1), kind=JobKind.IMAGE)
    finally:
        await w.scheduler.close(timeout=1.0)
        await store.close()


class _ClaimOutage(Store):
    """The store, with its database gone at the instant between a job's insert and its lease."""

    async def claim(self, job_id: int, owner: str, until: float) -> bool:
        raise StoreUnavailable("job store unavailable: no answer in time")


async def test_a_job_committed_before_its_lease_could_be_taken_is_accepted_for_the_lease_scan(
    tmp_path: Path, limits: Limits
) -> None:
    store = await _ClaimOutage.open(tmp_path / "db.sqlite3")
    clock = ManualClock()
    leases = Leases(store, owner="framecast", lease_seconds=60.0, clock=clock)
    scheduler = Scheduler(store=store, runner=StandInRunner(store), admission=1, leases=leases)
    intake = Intake(store=store, scheduler=scheduler, limits=limits)
    try:
        params = intake.image_params(
            guild_id=GUILD, prompt="a cat", model=None, size=None, known_models=(), default_model="m"
        )
        job, place = await intake.accept(who(), JobKind.IMAGE, params)
        # Persisted, so accepted (a refusal would hide a job that runs), not queued without its
        # lease (it could run twice): its lease is free for the scan of this or another process.
        assert place == 1 and scheduler.position(job.id) is None
        [stored] = await store.claimable(clock.time())
        assert stored.id == job.id and stored.state is S.QUEUED
    finally:
        await scheduler.close(timeout=1.0)
        await store.close()
