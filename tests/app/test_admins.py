"""The server admins' use cases (framecast.app.admins), no Discord.

A real core: SQLite in ``tmp_path``, the real key vault, and the fake generation service (a real
HTTP server on 127.0.0.1) only where a key or the model list is asked about.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from framecast.app import (
    Actor,
    AdminRefusal,
    AdminRefused,
    ImageDefaults,
    IntakeError,
    IntakeProblem,
    JobKind,
    JobState,
    KeyAvailability,
    KeyLine,
    KeyRemoved,
    KeySetResult,
    KeyView,
    LimitsChange,
    NotAChannel,
    RefusedKeyNotice,
    Requester,
    Setting,
    SettingsError,
    Source,
    VideoDefaults,
)
from framecast.app.core import Core
from framecast.app.key_checks import KEY_CHECKS_PER_HOUR
from framecast.clock import Clock
from framecast.config import Secret, Settings
from framecast.jobs.queues import QueuePositions
from framecast.logsetup import RedactingFilter
from framecast.ops.metrics import Metrics
from framecast.planner.estimate import Estimates
from framecast.service.types import ModelCatalog
from framecast.storage import Store
from framecast.values import NewJob
from tests.fakes.chat_side import QuietChat
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL, FakeService

WAIT = 20.0
GUILD = 1
OTHER_GUILD = 2
ADMIN = 77
SERVER_KEY = "a-server-key-0123456789"


def admin(guild_id: int = GUILD) -> Actor:
    """The admin (Manage Server) of `guild_id`, as the edges read them."""
    return Actor(ADMIN, guild_id, manages_guild=True)


def quiet_chat(
    *, store: Store, positions: QueuePositions, estimates: Estimates, clock: Clock, metrics: Metrics
) -> QuietChat:
    return QuietChat()


def settings_for(service: FakeService, tmp_path: Path, **overrides: object) -> Settings:
    base: dict[str, object] = {
        "discord_token": Secret("discord-token-not-used-here"),
        "gen_api_base_url": service.base_url,
        "gen_api_key": Secret(service.api_key),
        "gen_backoff_base": 0.05,
        "gen_backoff_max": 0.2,
        "database_path": tmp_path / "data" / "framecast.sqlite3",
        "shutdown_timeout": 2.0,
        "key_encryption_secret": Secret(Fernet.generate_key().decode("ascii")),
    }
    base.update(overrides)
    return Settings(**base)  # type: ignore[arg-type]


async def wait_until(predicate: Callable[[], bool]) -> None:
    async def _wait() -> None:
        # The model cache offers no event to wait on: poll it briefly.
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    await asyncio.wait_for(_wait(), WAIT)


async def open_core(settings: Settings) -> Core[QuietChat]:
    core = await asyncio.wait_for(Core.open(settings, reporter=quiet_chat), WAIT)
    # The model list is read in the background at start: the model rules need it.
    await wait_until(lambda: core.models.catalog is not None)
    return core


@pytest.fixture
async def core(fake_service: FakeService, tmp_path: Path) -> AsyncIterator[Core[QuietChat]]:
    fake_service.api_keys.add(SERVER_KEY)
    opened = await open_core(settings_for(fake_service, tmp_path))
    try:
        yield opened
    finally:
        await opened.close()


# -- show --------------------------------------------------------------------------------------------
async def test_show_says_where_each_value_comes_from_with_the_ceilings(core: Core[QuietChat]) -> None:
    view = await core.admins.show(admin(GUILD))
    assert view.source(Setting.MEMBER_JOBS) is Source.OPERATOR
    assert view.limit(Setting.MEMBER_JOBS) == core.settings.member_job_limit
    assert view.ceiling(Setting.MEMBER_JOBS) == core.settings.member_job_limit
    assert view.ceiling(Setting.VIDEO_SIZE) is None  # only limits have ceilings
    assert view.key.line is KeyLine.NONE and view.key.last4 is None
    assert view.video_model.chosen is None and view.video_model.used == VIDEO_MODEL
    assert not view.video_model.dropped

    changed = await core.admins.change_limits(admin(GUILD), LimitsChange(member_jobs=1, daily_videos=3))
    assert changed.asked == (Setting.MEMBER_JOBS, Setting.DAILY_VIDEOS)
    assert changed.view.source(Setting.MEMBER_JOBS) is Source.SERVER
    assert changed.view.limit(Setting.MEMBER_JOBS) == 1
    # A daily quota applies now: the view says when it starts again.
    assert changed.view.quota_resets_at is not None and changed.view.quota_resets_at > core.clock.time()
    # Another server keeps the operator's values.
    assert (await core.admins.show(admin(OTHER_GUILD))).source(Setting.MEMBER_JOBS) is Source.OPERATOR


async def test_show_says_what_jobs_get_when_the_service_drops_the_servers_model(
    core: Core[QuietChat],
) -> None:
    core.models.update(ModelCatalog(video=(VIDEO_MODEL, "svc-video-v9"), image=(IMAGE_MODEL,)))
    await core.admins.change_video_defaults(admin(GUILD), VideoDefaults(model="svc-video-v9"))
    view = await core.admins.show(admin(GUILD))
    assert view.model(JobKind.VIDEO).used == "svc-video-v9" and not view.video_model.dropped
    core.models.update(ModelCatalog(video=(VIDEO_MODEL,), image=(IMAGE_MODEL,)))
    view = await core.admins.show(admin(GUILD))
    assert view.video_model.chosen == "svc-video-v9"
    assert view.video_model.dropped and view.video_model.used == VIDEO_MODEL


# -- changes -----------------------------------------------------------------------------------------
async def test_a_limit_above_the_operators_ceiling_is_refused_and_nothing_is_saved(
    core: Core[QuietChat],
) -> None:
    with pytest.raises(SettingsError):
        await core.admins.change_limits(
            admin(GUILD), LimitsChange(member_jobs=core.settings.member_job_limit + 1)
        )
    assert await core.store.settings_log(GUILD) == []


async def test_changes_are_saved_once_logged_by_name_and_survive_a_restart(
    fake_service: FakeService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(fake_service, tmp_path)
    core = await open_core(settings)
    try:
        with caplog.at_level(logging.INFO, logger="framecast.app.settings_book"):
            outcome = await core.admins.set_nsfw_only(admin(GUILD), True)
        assert outcome.saved == (Setting.NSFW_ONLY,)
        assert f"guild {GUILD}: user {ADMIN} changed nsfw_only" in caplog.text
        # The same value again: named, but nothing saved or logged.
        again = await core.admins.set_nsfw_only(admin(GUILD), True)
        assert again.asked == (Setting.NSFW_ONLY,) and again.saved == ()
        assert len(await core.store.settings_log(GUILD)) == 1
        # The intake reads the same settings (one writer, one cache).
        assert core.book.policy(GUILD).settings.nsfw_only
    finally:
        await core.close()
    core = await open_core(settings)
    try:
        assert (await core.admins.show(admin(GUILD))).settings.nsfw_only
    finally:
        await core.close()


async def test_a_default_model_must_be_one_the_service_lists(core: Core[QuietChat]) -> None:
    with pytest.raises(IntakeError) as refused:
        await core.admins.change_video_defaults(admin(GUILD), VideoDefaults(model="svc-video-v404"))
    assert refused.value.problem is IntakeProblem.UNLISTED_MODEL
    with pytest.raises(IntakeError) as refused:
        await core.admins.change_image_defaults(admin(GUILD), ImageDefaults(model="not a model id!"))
    assert refused.value.problem is IntakeProblem.UNKNOWN_MODEL
    outcome = await core.admins.change_image_defaults(
        admin(GUILD), ImageDefaults(model=" svc-image-2.1-flash ")
    )
    assert outcome.view.settings.image_model == IMAGE_MODEL  # stored trimmed
    assert outcome.view.source(Setting.IMAGE_MODEL) is Source.SERVER


async def test_video_defaults_name_only_what_was_given(core: Core[QuietChat]) -> None:
    outcome = await core.admins.change_video_defaults(admin(GUILD), VideoDefaults(seconds=3, fps=16))
    assert outcome.asked == (Setting.VIDEO_SECONDS, Setting.VIDEO_FPS)
    assert outcome.view.video_seconds == 3 and outcome.view.video_fps == 16
    nothing = await core.admins.change_video_defaults(admin(GUILD), VideoDefaults())
    assert nothing.asked == ()


async def test_channels_are_added_once_removed_and_cleared(core: Core[QuietChat]) -> None:
    first = await core.admins.add_channel(admin(GUILD), 10)
    assert first.view.settings.channels == (10,)
    # Adding it again names nothing (the admin is told there was nothing to change).
    assert (await core.admins.add_channel(admin(GUILD), 10)).asked == ()
    both = await core.admins.add_channel(admin(GUILD), 11)
    assert both.view.settings.channels == (10, 11)
    assert (await core.admins.remove_channel(admin(GUILD), 10)).view.settings.channels == (11,)
    cleared = await core.admins.clear_channels(admin(GUILD))
    assert cleared.view.settings.channels == ()


async def test_a_channel_the_admin_was_not_offered_is_refused_and_changes_nothing(
    core: Core[QuietChat],
) -> None:
    offered = {10, 11}  # the server's channels the dashboard's form offered this admin
    for stranger in (12, 2**63, 10**20 - 1):  # another server's channel, ids beyond 64 bits
        with pytest.raises(NotAChannel):
            await core.admins.add_channel(admin(GUILD), stranger, choices=offered)
    assert (await core.admins.show(admin(GUILD))).settings.channels == ()
    added = await core.admins.add_channel(admin(GUILD), 11, choices=offered)
    assert added.view.settings.channels == (11,)
    # Who asks comes first: a member without Manage Server learns nothing of the choices.
    with pytest.raises(AdminRefused):
        await core.admins.add_channel(Actor(ADMIN, GUILD), 12, choices=offered)
    # Removing a channel that is not listed saves nothing.
    assert (await core.admins.remove_channel(admin(GUILD), 10)).saved == ()


async def test_blocklist_terms_are_split_deduplicated_by_case_and_removed_by_case(
    core: Core[QuietChat],
) -> None:
    added = await core.admins.block_terms(admin(GUILD), "Harbour, ship，harbour、 ,boat")
    assert added.view.settings.blocklist == ("Harbour", "ship", "boat")
    # Terms already blocked (in any case) change nothing.
    assert (await core.admins.block_terms(admin(GUILD), "SHIP")).asked == ()
    removed = await core.admins.unblock_terms(admin(GUILD), "harbour, BOAT")
    assert removed.view.settings.blocklist == ("ship",)
    assert (await core.admins.unblock_terms(admin(GUILD), "absent")).asked == ()
    assert (await core.admins.clear_blocklist(admin(GUILD))).view.settings.blocklist == ()


async def test_reset_brings_back_the_operators_default_but_never_touches_the_key(
    core: Core[QuietChat],
) -> None:
    await core.admins.change_limits(admin(GUILD), LimitsChange(queue_cap=2))
    reset = await core.admins.reset(admin(GUILD), Setting.QUEUE_CAP)
    assert reset.saved == (Setting.QUEUE_CAP,)
    assert reset.view.source(Setting.QUEUE_CAP) is Source.OPERATOR
    with pytest.raises(IntakeError) as refused:
        await core.admins.reset(admin(GUILD), Setting.API_KEY)
    assert refused.value.problem is IntakeProblem.BAD_OPTION
    # As a command sends it: a name, maybe one no setting has (a command synced by another version).
    assert (await core.admins.reset(admin(GUILD), "queue_cap")).saved == ()
    with pytest.raises(IntakeError) as refused:
        await core.admins.reset(admin(GUILD), "no_such_setting")
    assert refused.value.problem is IntakeProblem.BAD_OPTION


# -- the server's own key ----------------------------------------------------------------------------
async def test_a_key_is_checked_stored_encrypted_shown_by_its_last_four_and_masked_in_logs(
    core: Core[QuietChat],
) -> None:
    assert core.admins.key_availability(admin()) is KeyAvailability.READY
    refused = await core.admins.set_key(admin(GUILD), "a-key-the-service-refuses")
    assert refused.result is KeySetResult.REFUSED
    assert await core.store.guild_key(GUILD) is None
    saved = await core.admins.set_key(admin(GUILD), f"  {SERVER_KEY} ")
    assert saved.result is KeySetResult.SAVED and saved.last4 == SERVER_KEY[-4:]
    stored = await core.store.guild_key(GUILD)
    assert stored is not None and SERVER_KEY.encode() not in stored.token and stored.set_by == ADMIN
    view = await core.admins.show(admin(GUILD))
    assert view.key == type(view.key)(KeyLine.SET, SERVER_KEY[-4:])
    assert core.accounts.for_guild(GUILD).key.reveal() == SERVER_KEY  # trimmed, in use
    # Accepted and in use: every log filter masks it. A refused one is not (anyone could type a word).
    for typed, shown in ((SERVER_KEY, "***"), ("a-key-the-service-refuses", "a-key-the-service-refuses")):
        record = logging.LogRecord("x", logging.INFO, __file__, 1, "key %s", (typed,), None)
        RedactingFilter([]).filter(record)
        assert record.getMessage() == f"key {shown}"


async def test_key_checks_are_throttled_per_server_without_asking_the_service(
    core: Core[QuietChat], fake_service: FakeService
) -> None:
    for n in range(KEY_CHECKS_PER_HOUR):
        outcome = await core.admins.set_key(admin(GUILD), f"a-key-the-service-refuses-{n}")
        assert outcome.result is KeySetResult.REFUSED
    asked = fake_service.count()
    throttled = await core.admins.set_key(admin(GUILD), SERVER_KEY)
    assert throttled.result is KeySetResult.THROTTLED and throttled.checks_per_hour == KEY_CHECKS_PER_HOUR
    assert throttled.retry_at is not None and 0 < throttled.retry_at - core.clock.time() <= 3600
    assert fake_service.count() == asked  # nothing asked of the service
    assert await core.store.guild_key(GUILD) is None
    # Another server has its own checks.
    assert (await core.admins.set_key(admin(OTHER_GUILD), SERVER_KEY)).result is KeySetResult.SAVED


async def test_a_key_the_service_cannot_judge_is_not_stored(
    core: Core[QuietChat], fake_service: FakeService
) -> None:
    await fake_service.stop()
    outcome = await core.admins.set_key(admin(GUILD), SERVER_KEY)
    assert outcome.result is KeySetResult.UNREACHABLE
    assert await core.store.guild_key(GUILD) is None


async def test_remove_key_goes_back_to_the_operators_key(core: Core[QuietChat]) -> None:
    assert await core.admins.remove_key(admin(GUILD)) is KeyRemoved.NO_KEY
    await core.admins.set_key(admin(GUILD), SERVER_KEY)
    assert await core.admins.remove_key(admin(GUILD)) is KeyRemoved.REMOVED
    assert (await core.admins.show(admin(GUILD))).key.line is KeyLine.NONE
    assert core.accounts.for_guild(GUILD) is core.accounts.operator


@pytest.mark.parametrize(
    ("overrides", "availability", "line"),
    [
        ({"guild_keys": False}, KeyAvailability.DISABLED, KeyLine.DISABLED),
        ({"key_encryption_secret": None}, KeyAvailability.NO_SECRET, KeyLine.NO_SECRET),
    ],
)
async def test_without_server_keys_the_key_is_unavailable_and_nothing_is_asked(
    fake_service: FakeService,
    tmp_path: Path,
    overrides: dict[str, object],
    availability: KeyAvailability,
    line: KeyLine,
) -> None:
    core = await open_core(settings_for(fake_service, tmp_path, **overrides))
    try:
        assert core.admins.key_availability(admin()) is availability
        assert (await core.admins.show(admin(GUILD))).key.line is line
        asked = len(fake_service.requests)
        outcome = await core.admins.set_key(admin(GUILD), SERVER_KEY)
        assert outcome.result.value == availability.value
        assert len(fake_service.requests) == asked  # no model-list call
        assert await core.store.guild_key(GUILD) is None
    finally:
        await core.close()


# -- who may ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("who", "refusal"),
    [
        # No Manage Server: an Integrations override showed them /settings.
        (Actor(ADMIN + 1, GUILD), AdminRefusal.NOT_MANAGER),
        # A person's own queue (a user install in a DM): no server, whatever their permissions.
        (Actor(ADMIN + 2, ADMIN + 2, manages_guild=True), AdminRefusal.NO_SERVER),
    ],
)
async def test_only_a_member_with_manage_server_may_look_or_change_and_nothing_is_asked_or_saved(
    core: Core[QuietChat], fake_service: FakeService, who: Actor, refusal: AdminRefusal
) -> None:
    asked = len(fake_service.requests)
    attempts: list[Callable[[], Awaitable[object]]] = [
        lambda: core.admins.show(who),
        lambda: core.admins.change_limits(who, LimitsChange(member_jobs=1)),
        lambda: core.admins.change_video_defaults(who, VideoDefaults(seconds=3)),
        lambda: core.admins.change_image_defaults(who, ImageDefaults(size="1024x1024")),
        lambda: core.admins.add_channel(who, 10),
        lambda: core.admins.remove_channel(who, 10),
        lambda: core.admins.clear_channels(who),
        lambda: core.admins.set_nsfw_only(who, True),
        lambda: core.admins.block_terms(who, "harbour"),
        lambda: core.admins.unblock_terms(who, "harbour"),
        lambda: core.admins.clear_blocklist(who),
        lambda: core.admins.reset(who, Setting.API_KEY),  # refused for who asks, before what
        lambda: core.admins.set_key(who, SERVER_KEY),
        lambda: core.admins.remove_key(who),
    ]
    for attempt in attempts:
        with pytest.raises(AdminRefused) as refused:
            await attempt()
        assert refused.value.refusal is refusal and refused.value.actor == who
    for check in (core.admins.authorize, core.admins.key_availability):
        with pytest.raises(AdminRefused) as refused:
            check(who)
        assert refused.value.refusal is refusal
    assert len(fake_service.requests) == asked  # no key was checked
    assert (
        await core.store.settings_log(who.guild_id) == [] and await core.store.guild_key(who.guild_id) is None
    )


async def test_a_member_with_manage_server_may(core: Core[QuietChat]) -> None:
    # Administrator counts as Manage Server: the edge reads either into ``manages_guild``.
    manager = Actor(ADMIN + 1, GUILD, manages_guild=True)
    assert core.admins.authorize(manager) == GUILD
    assert core.admins.key_availability(manager) is KeyAvailability.READY
    assert (await core.admins.set_nsfw_only(manager, True)).saved == (Setting.NSFW_ONLY,)
    assert (await core.admins.show(manager)).settings.nsfw_only


# -- a refused key -----------------------------------------------------------------------------------
async def test_a_refused_key_is_told_once_to_the_admin_who_set_it(core: Core[QuietChat]) -> None:
    # Whom to tell is the core's; telling is the chat side's (it gets the notice to deliver).
    told = core.reporter.refused_keys
    await core.admins.set_key(admin(GUILD), SERVER_KEY)
    account = core.accounts.for_guild(GUILD)
    await core.accounts.key_rejected(account)
    assert told == [RefusedKeyNotice(GUILD, SERVER_KEY[-4:], set_by=ADMIN)]
    view = await core.admins.show(admin(GUILD))
    assert view.key.line is KeyLine.REFUSED and view.key.last4 == SERVER_KEY[-4:]
    # Asked again about the same key: already told.
    assert await core.admins.refused_key_notice(GUILD) is None
    # The admin sets the key again and it is refused again: that is news again.
    await core.admins.set_key(admin(GUILD), SERVER_KEY)
    await core.accounts.key_rejected(core.accounts.for_guild(GUILD))
    assert len(told) == 2


async def test_nobody_is_told_when_no_refused_key_is_stored(core: Core[QuietChat]) -> None:
    assert await core.admins.refused_key_notice(GUILD) is None
    await core.admins.set_key(admin(GUILD), SERVER_KEY)
    assert await core.admins.refused_key_notice(GUILD) is None  # accepted, not refused


# -- a stored key this bot cannot decrypt (KEY_ENCRYPTION_SECRET removed or changed) --------------------
def requester(guild_id: int = GUILD) -> Requester:
    return Requester(guild_id=guild_id, channel_id=100, user_id=ADMIN, locale="en-US")


async def store_key_under_a_secret(fake_service: FakeService, tmp_path: Path) -> Secret:
    """A key set (and stored encrypted) by a bot with a secret that is returned; that bot stopped."""
    secret = Secret(Fernet.generate_key().decode("ascii"))
    first = await open_core(settings_for(fake_service, tmp_path, key_encryption_secret=secret))
    try:
        assert (await first.admins.set_key(admin(GUILD), SERVER_KEY)).result is KeySetResult.SAVED
    finally:
        await first.close()
    return secret


@pytest.mark.parametrize("secret_now", ["removed", "another"])
async def test_a_stored_key_that_cannot_be_read_refuses_jobs_instead_of_using_the_operators_key(
    fake_service: FakeService, tmp_path: Path, secret_now: str
) -> None:
    fake_service.api_keys.add(SERVER_KEY)
    await store_key_under_a_secret(fake_service, tmp_path)
    other = None if secret_now == "removed" else Secret(Fernet.generate_key().decode("ascii"))
    core = await open_core(settings_for(fake_service, tmp_path, key_encryption_secret=other))
    try:
        view = await core.admins.show(admin(GUILD))
        assert view.key == KeyView(KeyLine.UNREADABLE, SERVER_KEY[-4:])
        with pytest.raises(IntakeError) as refused:
            core.members.check(requester(), JobKind.VIDEO)
        assert refused.value.problem is IntakeProblem.GUILD_KEY_UNREADABLE
        core.members.check(requester(OTHER_GUILD), JobKind.VIDEO)  # a server without a key: fine
        # Removing it is the documented way back to the operator's key.
        assert await core.admins.remove_key(admin(GUILD)) is KeyRemoved.REMOVED
        core.members.check(requester(), JobKind.VIDEO)
        assert core.accounts.for_guild(GUILD) is core.accounts.operator
        after = (await core.admins.show(admin(GUILD))).key.line
        assert after is (KeyLine.NO_SECRET if other is None else KeyLine.NONE)
    finally:
        await core.close()


async def test_setting_the_key_again_under_the_new_secret_lifts_the_refusal(
    fake_service: FakeService, tmp_path: Path
) -> None:
    fake_service.api_keys.add(SERVER_KEY)
    await store_key_under_a_secret(fake_service, tmp_path)
    new = Secret(Fernet.generate_key().decode("ascii"))
    core = await open_core(settings_for(fake_service, tmp_path, key_encryption_secret=new))
    try:
        assert (await core.admins.show(admin(GUILD))).key.line is KeyLine.UNREADABLE
        assert (await core.admins.set_key(admin(GUILD), SERVER_KEY)).result is KeySetResult.SAVED
        core.members.check(requester(), JobKind.VIDEO)
        assert (await core.admins.show(admin(GUILD))).key == KeyView(KeyLine.SET, SERVER_KEY[-4:])
        assert core.accounts.for_guild(GUILD).key.reveal() == SERVER_KEY
    finally:
        await core.close()


async def test_with_the_new_secret_first_and_the_old_after_it_the_stored_key_is_read(
    fake_service: FakeService, tmp_path: Path
) -> None:
    fake_service.api_keys.add(SERVER_KEY)
    old = await store_key_under_a_secret(fake_service, tmp_path)
    both = Secret(f"{Fernet.generate_key().decode('ascii')},{old.reveal()}")
    core = await open_core(settings_for(fake_service, tmp_path, key_encryption_secret=both))
    try:
        assert (await core.admins.show(admin(GUILD))).key == KeyView(KeyLine.SET, SERVER_KEY[-4:])
        core.members.check(requester(), JobKind.VIDEO)
        assert core.accounts.for_guild(GUILD).key.reveal() == SERVER_KEY
    finally:
        await core.close()


async def test_a_job_queued_before_the_secret_was_removed_fails_with_the_unreadable_key_reason(
    fake_service: FakeService, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_service.api_keys.add(SERVER_KEY)
    await store_key_under_a_secret(fake_service, tmp_path)
    store = await Store.open(tmp_path / "data" / "framecast.sqlite3")
    try:
        params = {"prompt": "a heron", "model": VIDEO_MODEL, "size": "1280x720", "seconds": 4, "fps": 24}
        new = NewJob(
            kind=JobKind.VIDEO, guild_id=GUILD, channel_id=100, user_id=ADMIN, locale="en-US", params=params
        )
        queued = await store.add(new, member_limit=None, guild_cap=None)
    finally:
        await store.close()
    creates = len(fake_service.requests)
    caplog.set_level(logging.WARNING)
    core = await open_core(settings_for(fake_service, tmp_path, key_encryption_secret=None))
    try:
        failed = asyncio.Event()
        core.store.subscribe(lambda job: failed.set() if job.state is JobState.FAILED else None)
        job = await core.store.get(queued.id)
        if job is None or job.state is not JobState.FAILED:
            await asyncio.wait_for(failed.wait(), WAIT)
            job = await core.store.get(queued.id)
        assert job is not None and job.state is JobState.FAILED
        assert job.error_code == "guild_key_unreadable"
        assert not [r for r in fake_service.requests[creates:] if r.method == "POST"]  # no task made
    finally:
        await core.close()
    # Start-up went on, with a warning naming the guild only.
    warned = [r.getMessage() for r in caplog.records if r.name == "framecast.keys.server_keys"]
    assert any(f"guild {GUILD}:" in line and "cannot be decrypted" in line for line in warned)
