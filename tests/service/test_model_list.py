"""The model list: family/version parsing, the stand-in for a default the service stopped listing,
and the one warning the operator gets about it."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framecast.clock import SystemClock
from framecast.service import GenerationClient, ModelCatalog
from framecast.service.model_list import ModelCache, best_match, is_model_id, split_version
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL
from tests.fakes.unused import unused

VIDEO = VIDEO_MODEL
IMAGE = IMAGE_MODEL


@pytest.mark.parametrize(
    ("model", "family", "version"),
    [
        (VIDEO_MODEL, "svc-video-#", (2, 0)),
        ("svc-video-v2.1", "svc-video-#", (2, 1)),
        ("SVC-Video-V10", "svc-video-#", (10,)),
        (IMAGE_MODEL, "svc-image-#-flash", (2, 1)),
        ("svc-image-3-flash", "svc-image-#-flash", (3,)),
        ("vendor/gen-2024-08-06", "vendor/gen-#-#-#", (2024, 8, 6)),
        ("org/model:latest", "org/model:latest", ()),
        ("model-4o", "model-4o", ()),
        ("x-" + "9" * 40, "x-" + "9" * 40, ()),  # not a version: no giant integer
    ],
)
def test_split_version(model: str, family: str, version: tuple[int, ...]) -> None:
    assert split_version(model) == (family, version)


def test_the_configured_model_is_kept_while_listed() -> None:
    assert best_match(VIDEO, ["svc-video-v2.1", VIDEO]) == VIDEO


def test_the_newest_of_the_family_replaces_a_missing_model() -> None:
    listed = ["other-video-v9", "svc-video-v2.1", "svc-video-v10.0", "svc-video-v9.9", "svc-video-v3.0-beta"]
    assert best_match(VIDEO, listed) == "svc-video-v10.0"  # numbers, not text: 10 > 9.9 > 2.1
    assert (
        best_match(IMAGE, ["svc-image-2.2-pro", "svc-image-3.0-flash", "svc-image-2.2-flash"])
        == "svc-image-3.0-flash"
    )


def test_ids_without_versions_have_a_family_too() -> None:
    # A configured id without a version: the newest versioned model of that name, not the first listed.
    listed = ["other-video-v9", "svc-video-v2.9", "svc-video-v2.10", "svc-video-v2.10-beta"]
    assert best_match("svc-video", listed) == "svc-video-v2.10"
    # ...and the other way round: the service dropped the version from the name.
    assert best_match(VIDEO, ["other-video-v9", "svc-video"]) == "svc-video"
    # A versioned relative still wins over the unversioned one when both are listed.
    assert best_match(VIDEO, ["svc-video", "svc-video-v2.1"]) == "svc-video-v2.1"
    assert best_match("svc-image-flash", ["svc-image-2.2-pro", "svc-image-3-flash"]) == "svc-image-3-flash"
    assert best_match("svc-video", ["acme-clip-1", "acme-clip-2"]) == "acme-clip-1"


def test_drift_from_an_unversioned_id_names_the_family(caplog: pytest.LogCaptureFixture) -> None:
    models = cache()
    models.default_video = "svc-video"
    models.update(catalog(video=("other-video-v9", "svc-video-v2.9", "svc-video-v2.10")))
    assert models.default("video") == "svc-video-v2.10"
    assert any(
        "svc-video" in line and "svc-video-v2.10" in line and "newest of its family" in line
        for line in warnings(caplog)
    )


def test_without_a_family_member_the_first_listed_model_is_used() -> None:
    assert best_match(VIDEO, ["acme-clip-1", "acme-clip-2"]) == "acme-clip-1"


def test_nothing_usable_means_no_match() -> None:
    assert best_match(VIDEO, []) is None
    # Ids the bot would refuse (bad shape) are never chosen.
    assert best_match(VIDEO, ["svc-video-v2.1 <script>", "-bad", ""]) is None
    assert best_match(VIDEO, ["svc-video v9", "svc-video-v2.1"]) == "svc-video-v2.1"


@given(st.text(max_size=60), st.lists(st.text(max_size=60), max_size=8))
def test_best_match_never_raises_and_picks_a_listed_valid_id(wanted: str, listed: list[str]) -> None:
    chosen = best_match(wanted, listed)
    assert chosen is None or (chosen in listed and is_model_id(chosen))


def cache() -> ModelCache:
    # The client is never called: the tests feed lists through update(), as the refresh loop does.
    return ModelCache(
        unused(GenerationClient),
        clock=SystemClock(),
        refresh_every=600,
        default_video=VIDEO,
        default_image=IMAGE,
    )


def catalog(video: tuple[str, ...] = (VIDEO,), image: tuple[str, ...] = (IMAGE,)) -> ModelCatalog:
    return ModelCatalog(video=video, image=image, text=("svc-text-1.5",))


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name == "framecast.service.model_list"
    ]


def test_defaults_before_the_list_is_known() -> None:
    models = cache()
    assert models.default("video") == VIDEO and models.default("image") == IMAGE
    assert models.ids("video") == ()


def test_drift_uses_the_newest_family_member_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    models = cache()
    caplog.set_level(logging.INFO, logger="framecast.service.model_list")
    models.update(catalog())
    assert models.default("video") == VIDEO
    assert warnings(caplog) == []

    models.update(catalog(video=("svc-video-v2.1", "svc-video-v1.9")))
    assert models.default("video") == "svc-video-v2.1"
    assert models.default("image") == IMAGE
    [line] = warnings(caplog)
    assert "GEN_VIDEO_MODEL" in line and VIDEO in line and "svc-video-v2.1" in line

    for _ in range(5):  # every refresh: the same choice, no new warning
        models.update(catalog(video=("svc-video-v2.1", "svc-video-v1.9")))
    assert len(warnings(caplog)) == 1

    models.update(catalog(video=("svc-video-v2.2", "svc-video-v2.1")))  # the choice changes: said again
    assert models.default("video") == "svc-video-v2.2"
    assert len(warnings(caplog)) == 2 and "svc-video-v2.2" in warnings(caplog)[-1]

    models.update(catalog(video=(VIDEO, "svc-video-v2.2")))  # the configured one is back
    assert models.default("video") == VIDEO
    assert len(warnings(caplog)) == 2
    assert any("again" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


def test_image_drift_and_an_unrelated_stand_in(caplog: pytest.LogCaptureFixture) -> None:
    models = cache()
    models.update(catalog(video=("acme-clip-1",), image=("svc-image-2.2-flash", "svc-image-9-pro")))
    assert models.default("image") == "svc-image-2.2-flash"
    assert models.default("video") == "acme-clip-1"
    assert len(warnings(caplog)) == 2
    assert any("first video model" in line for line in warnings(caplog))


def test_a_list_without_usable_models_of_a_kind_keeps_the_configured_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    models = cache()
    models.update(catalog(video=()))
    assert models.default("video") == VIDEO
    assert warnings(caplog) == []
    models.update(catalog(video=("bad id!",)))
    assert models.default("video") == VIDEO
    [line] = warnings(caplog)
    assert "no usable video model" in line


def test_autocomplete_offers_the_model_in_use_first() -> None:
    models = cache()
    models.update(catalog(video=("svc-video-v1.0", "svc-video-v2.1")))
    assert models.suggest("video", "") == ["svc-video-v2.1", "svc-video-v1.0"]
    assert models.suggest("video", "V1") == ["svc-video-v1.0"]
    models.update(catalog(video=("svc-video-v2.1", "x" * 101, "bad id <@1>")))
    assert models.suggest("video", "") == ["svc-video-v2.1"]


def test_ids_of_a_shape_the_bot_refuses_are_not_known() -> None:
    # A member can never pick them (the intake refuses the shape), so they are neither offered nor
    # listed back in a refusal: "[Free_Nitro](https://x)" has no space, and the parser keeps it.
    models = cache()
    odd = ("[Free_Nitro](https://evil.example)", "<@&123>", "svc-video-v2.1\u202e", "svc-video-v2.1")
    models.update(catalog(video=(VIDEO, *odd)))
    assert models.ids("video") == (VIDEO, "svc-video-v2.1")
    assert models.suggest("video", "") == [VIDEO, "svc-video-v2.1"]
