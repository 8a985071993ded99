"""Server settings: JSON round trip, ceilings, validation of changes, quota windows (blocklist matching:
test_blocklist.py)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framecast.config import Secret, Settings
from framecast.guilds.settings import (
    MAX_CHANNELS,
    MAX_TERM_CHARS,
    MAX_TERMS,
    Ceilings,
    GuildSettings,
    Setting,
    SettingsError,
    SettingsProblem,
    Source,
    check_change,
    quota_window,
    resolve,
)
from framecast.values import JobKind, presets

CEILINGS = Ceilings(member_jobs=3, queue_cap=20, daily_videos=10, daily_images=None)
FULL = GuildSettings(
    member_jobs=2,
    daily_videos=5,
    daily_images=7,
    queue_cap=9,
    video_size="portrait",
    video_seconds=8,
    video_fps=30,
    video_model="svc-video-v1.5",
    image_size="landscape",
    image_model="svc-image-2.0",
    channels=(10, 20),
    nsfw_only=True,
    blocklist=("café", "猫"),
)


@contextmanager
def refused(problem: SettingsProblem, **params: Any) -> Iterator[None]:
    """Expect a SettingsError with exactly this problem and these params."""
    with pytest.raises(SettingsError) as info:
        yield
    assert info.value.problem is problem
    assert info.value.params == params


# ---------------------------------------------------------------------- GuildSettings


def test_json_round_trip_keeps_only_overrides() -> None:
    assert GuildSettings().to_json() == {}
    data = FULL.to_json()
    assert data["channels"] == [10, 20] and data["blocklist"] == ["café", "猫"]
    assert GuildSettings.from_json(data) == FULL
    assert GuildSettings.from_json({"member_jobs": 1}).to_json() == {"member_jobs": 1}


def test_from_json_ignores_unknown_keys_and_wrong_types() -> None:
    loaded = GuildSettings.from_json(
        {
            "member_jobs": "3",  # wrong type: the operator's default
            "queue_cap": True,  # a bool is not a number here
            "daily_videos": 4,
            "channels": [1, "2"],
            "blocklist": "not a list",
            "nsfw_only": 1,
            "video_model": 5,
            "a_future_setting": {"x": 1},
        }
    )
    assert loaded == GuildSettings(daily_videos=4)


def test_replace_and_overrides() -> None:
    changed = GuildSettings().replace(nsfw_only=True, channels=(5,))
    assert changed == GuildSettings(nsfw_only=True, channels=(5,))
    assert changed.overrides(Setting.NSFW_ONLY) and changed.overrides(Setting.CHANNELS)
    assert not changed.overrides(Setting.BLOCKLIST) and not changed.overrides(Setting.API_KEY)
    assert GuildSettings(daily_videos=0).overrides(Setting.DAILY_VIDEOS)  # 0 is a value, not "unset"


# ---------------------------------------------------------------------- ceilings and policy


def test_ceilings_come_from_the_configuration() -> None:
    s = Settings(
        discord_token=Secret("t"),
        gen_api_base_url="http://127.0.0.1:1",
        gen_api_key=Secret("k"),
        member_job_limit=4,
        guild_queue_cap=40,
        daily_video_quota=3,
        daily_image_quota=0,
    )
    assert Ceilings.from_settings(s) == Ceilings(member_jobs=4, queue_cap=40, daily_videos=3, daily_images=0)


def test_resolve_caps_server_values_by_the_ceilings() -> None:
    policy = resolve(GuildSettings(), CEILINGS)
    assert (policy.member_jobs, policy.queue_cap, policy.daily_videos, policy.daily_images) == (
        3,
        20,
        10,
        None,
    )
    assert policy.daily_quota(JobKind.VIDEO) == 10 and policy.daily_quota(JobKind.IMAGE) is None
    assert all(policy.source(s) is Source.OPERATOR for s in Setting)

    policy = resolve(GuildSettings(member_jobs=1, daily_videos=2, daily_images=4, queue_cap=5), CEILINGS)
    assert (policy.member_jobs, policy.queue_cap, policy.daily_videos, policy.daily_images) == (1, 5, 2, 4)
    assert policy.source(Setting.MEMBER_JOBS) is Source.SERVER
    assert policy.source(Setting.VIDEO_SIZE) is Source.OPERATOR

    # Stored before the operator lowered the ceilings: capped, not refused.
    lowered = Ceilings(member_jobs=1, queue_cap=2, daily_videos=1, daily_images=3)
    policy = resolve(GuildSettings(member_jobs=3, queue_cap=20, daily_videos=5, daily_images=4), lowered)
    assert (policy.member_jobs, policy.queue_cap, policy.daily_videos, policy.daily_images) == (1, 2, 1, 3)


# ---------------------------------------------------------------------- check_change


def test_check_change_returns_new_settings_and_none_resets() -> None:
    new = check_change(GuildSettings(), CEILINGS, member_jobs=2, daily_images=50, video_size="vertical")
    assert new == GuildSettings(member_jobs=2, daily_images=50, video_size="vertical")
    assert check_change(new, CEILINGS, member_jobs=None, video_size=None) == GuildSettings(daily_images=50)
    assert check_change(FULL, CEILINGS, channels=None, blocklist=None, nsfw_only=None) == FULL.replace(
        channels=(), blocklist=(), nsfw_only=False
    )
    assert check_change(FULL, CEILINGS) == FULL


@pytest.mark.parametrize(
    ("changes", "problem", "params"),
    [
        ({"member_jobs": 4}, SettingsProblem.ABOVE_CEILING, {"setting": Setting.MEMBER_JOBS, "ceiling": 3}),
        ({"queue_cap": 21}, SettingsProblem.ABOVE_CEILING, {"setting": Setting.QUEUE_CAP, "ceiling": 20}),
        (
            {"daily_videos": 11},
            SettingsProblem.ABOVE_CEILING,
            {"setting": Setting.DAILY_VIDEOS, "ceiling": 10},
        ),
        ({"member_jobs": 0}, SettingsProblem.BAD_VALUE, {"setting": Setting.MEMBER_JOBS}),
        ({"queue_cap": 0}, SettingsProblem.BAD_VALUE, {"setting": Setting.QUEUE_CAP}),
        ({"daily_videos": -1}, SettingsProblem.BAD_VALUE, {"setting": Setting.DAILY_VIDEOS}),
        ({"daily_images": True}, SettingsProblem.BAD_VALUE, {"setting": Setting.DAILY_IMAGES}),
        ({"member_jobs": 1.0}, SettingsProblem.BAD_VALUE, {"setting": Setting.MEMBER_JOBS}),
        ({"video_size": "imax"}, SettingsProblem.BAD_VALUE, {"setting": Setting.VIDEO_SIZE}),
        ({"image_size": "small"}, SettingsProblem.BAD_VALUE, {"setting": Setting.IMAGE_SIZE}),
        ({"video_seconds": 4}, SettingsProblem.BAD_VALUE, {"setting": Setting.VIDEO_SECONDS}),
        ({"video_fps": 25}, SettingsProblem.BAD_VALUE, {"setting": Setting.VIDEO_FPS}),
        ({"video_model": "no spaces allowed"}, SettingsProblem.BAD_VALUE, {"setting": Setting.VIDEO_MODEL}),
        ({"image_model": ""}, SettingsProblem.BAD_VALUE, {"setting": Setting.IMAGE_MODEL}),
        ({"nsfw_only": "yes"}, SettingsProblem.BAD_VALUE, {"setting": Setting.NSFW_ONLY}),
        ({"channels": [1, -2]}, SettingsProblem.BAD_VALUE, {"setting": Setting.CHANNELS}),
        ({"channels": "123"}, SettingsProblem.BAD_VALUE, {"setting": Setting.CHANNELS}),
        ({"blocklist": "one string"}, SettingsProblem.BAD_VALUE, {"setting": Setting.BLOCKLIST}),
        ({"blocklist": ["ok", 3]}, SettingsProblem.BAD_VALUE, {"setting": Setting.BLOCKLIST}),
        ({"blocklist": ["a\ud800"]}, SettingsProblem.BAD_VALUE, {"setting": Setting.BLOCKLIST}),
    ],
)
def test_check_change_refuses(
    changes: dict[str, Any], problem: SettingsProblem, params: dict[str, Any]
) -> None:
    with refused(problem, **params):
        check_change(GuildSettings(), CEILINGS, **changes)


def test_quotas_without_an_operator_ceiling_are_free_and_zero_is_allowed() -> None:
    assert check_change(GuildSettings(), CEILINGS, daily_images=10_000).daily_images == 10_000
    assert check_change(GuildSettings(), CEILINGS, daily_videos=0).daily_videos == 0
    assert check_change(GuildSettings(), CEILINGS, member_jobs=3, queue_cap=20).queue_cap == 20  # = ceiling


def test_every_preset_is_accepted_as_a_default() -> None:
    for size in presets.VIDEO_SIZES:
        assert check_change(GuildSettings(), CEILINGS, video_size=size).video_size == size
    for size in presets.IMAGE_SIZES:
        assert check_change(GuildSettings(), CEILINGS, image_size=size).image_size == size
    for secs in presets.VIDEO_SECONDS:
        assert check_change(GuildSettings(), CEILINGS, video_seconds=secs).video_seconds == secs
    for fps in presets.FRAME_RATES:
        assert check_change(GuildSettings(), CEILINGS, video_fps=fps).video_fps == fps
    assert (
        check_change(GuildSettings(), CEILINGS, video_model=" svc-video-v2.1 ").video_model
        == "svc-video-v2.1"
    )


def test_unknown_settings_are_a_programming_error() -> None:
    with pytest.raises(TypeError):
        check_change(GuildSettings(), CEILINGS, colour="blue")
    with pytest.raises(TypeError):
        check_change(GuildSettings(), CEILINGS, api_key="sk-secret")


def test_channels_are_distinct_and_bounded() -> None:
    assert check_change(GuildSettings(), CEILINGS, channels=[3, 1, 3, 2, 1]).channels == (3, 1, 2)
    ok = list(range(1, MAX_CHANNELS + 1))
    assert len(check_change(GuildSettings(), CEILINGS, channels=ok).channels) == MAX_CHANNELS == 25
    with refused(SettingsProblem.TOO_MANY_CHANNELS, max=25):
        check_change(GuildSettings(), CEILINGS, channels=[*ok, 26])


def test_blocklist_terms_are_tidied_deduplicated_and_bounded() -> None:
    new = check_change(
        GuildSettings(), CEILINGS, blocklist=["  Bad   Word ", "bad word", "BÄD WORD", "  ", "\u0301", "猫"]
    )
    # Repeats by their matching form ("BÄD WORD" is "bad word") and terms that fold to nothing go.
    assert new.blocklist == ("Bad Word", "猫")
    terms = [f"term{i}" for i in range(MAX_TERMS)]
    assert len(check_change(GuildSettings(), CEILINGS, blocklist=terms).blocklist) == MAX_TERMS == 100
    with refused(SettingsProblem.TOO_MANY_TERMS, max=100):
        check_change(GuildSettings(), CEILINGS, blocklist=[*terms, "one more"])
    assert len(check_change(GuildSettings(), CEILINGS, blocklist=["x" * MAX_TERM_CHARS]).blocklist[0]) == 100
    with refused(SettingsProblem.TERM_TOO_LONG, max=100):
        check_change(GuildSettings(), CEILINGS, blocklist=["x" * (MAX_TERM_CHARS + 1)])


def test_settings_errors_do_not_carry_admin_text_in_their_message() -> None:
    with pytest.raises(SettingsError) as info:
        check_change(GuildSettings(), CEILINGS, blocklist=["secret-term" * 20])
    assert str(info.value) == "term_too_long"


# ---------------------------------------------------------------------- quota windows


def test_quota_windows_are_aligned_to_the_epoch() -> None:
    day = 86_400.0
    midnight = 19_675 * day
    assert quota_window(midnight, day) == (midnight, midnight + day)
    assert quota_window(midnight + 0.5, day) == (midnight, midnight + day)
    assert quota_window(midnight + day - 0.001, day) == (midnight, midnight + day)
    assert quota_window(midnight + day, day) == (midnight + day, midnight + 2 * day)
    assert quota_window(125.0, 60.0) == (120.0, 180.0)  # scaled test periods work the same way


@pytest.mark.parametrize("period", [0.0, -5.0, math.nan, math.inf])
def test_quota_window_refuses_bad_periods(period: float) -> None:
    with pytest.raises(ValueError):
        quota_window(1.0, period)


@given(now=st.floats(min_value=0, max_value=4e9), period=st.floats(min_value=1.0, max_value=1e7))
def test_quota_window_contains_now(now: float, period: float) -> None:
    start, reset = quota_window(now, period)
    assert start <= now < reset
    assert reset - start == pytest.approx(period)
