"""A job whose picked model the service no longer offers: its message names the models offered now.

Every locale says it, with the model picked and the listing (``error_detail``) shown literally, and
the status fits its embed field even for the longest listing the core stores.
"""

from __future__ import annotations

from typing import Any

import pytest

from cogs.i18n import shipped
from cogs.views.render import render_job
from framecast.app.model_choice import LISTED_MODELS, models_listing
from framecast.values import Job, JobKind, JobState
from framecast.values.reasons import ErrorCode
from tests.fakes.gen_service import VIDEO_MODEL

NOW = 1_700_000_000.0
LOCALES = sorted(shipped().by_locale)
PARAMS = {
    "model": VIDEO_MODEL,
    "prompt": "a river",
    "width": 64,
    "height": 64,
    "num_frames": 12,
    "frame_rate": 12,
}


def failed(detail: str | None, locale: str = "en-US", **params: Any) -> Job:
    return Job(
        id=7,
        kind=JobKind.VIDEO,
        state=JobState.FAILED,
        guild_id=1,
        channel_id=2,
        user_id=3,
        locale=locale,
        params={**PARAMS, **params},
        created_at=NOW - 60,
        updated_at=NOW - 1,
        error_code=ErrorCode.MODEL_GONE,
        error_detail=detail,
    )


def status_of(job: Job) -> str:
    embed = render_job(job, position=None, now=NOW, poll_timeout=900).embed
    return str(embed.fields[-1].value)


def test_there_are_fifteen_locales() -> None:
    assert len(LOCALES) == 15


@pytest.mark.parametrize("locale", LOCALES)
def test_every_locale_names_the_gone_model_and_the_models_offered_now(locale: str) -> None:
    text = status_of(failed("svc-video-v2.1, other-video-v9", locale))
    assert VIDEO_MODEL in text and "svc-video-v2.1, other-video-v9" in text
    assert "{" not in text  # every placeholder filled


@pytest.mark.parametrize("locale", LOCALES)
def test_with_no_model_known_now_the_message_still_names_the_gone_one(locale: str) -> None:
    text = status_of(failed(None, locale))
    assert VIDEO_MODEL in text and "{" not in text


def test_model_ids_are_shown_literally() -> None:
    text = status_of(failed("svc_video_v2.1", model="svc_video*v2.0"))
    assert r"svc\_video\_v2.1" in text and r"svc\_video\*v2.0" in text


@pytest.mark.parametrize("locale", LOCALES)
def test_the_longest_listing_fits_the_status_field(locale: str) -> None:
    # Ids that escape to twice their length, as many as the listing takes, and a 100-character pick.
    ids = [f"m{n:02d}" + "_" * 96 for n in range(LISTED_MODELS * 2)]
    detail = ", ".join(models_listing(ids))
    text = status_of(failed(detail, locale, model="x" + "_" * 99))
    assert len(text) <= 1024  # Discord's cap on an embed field's value
