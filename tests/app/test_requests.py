"""A request as typed (framecast.app.requests): a stored job's options read back, the Remix form parsed."""

from __future__ import annotations

from typing import Any

import pytest

from framecast.app import (
    FormInput,
    IntakeError,
    IntakeProblem,
    Job,
    JobKind,
    JobOptions,
    JobState,
    options_from_form,
    options_of,
)


def stored(kind: JobKind, **params: Any) -> Job:
    return Job(
        id=1,
        kind=kind,
        state=JobState.DELIVERED,
        guild_id=1,
        channel_id=2,
        user_id=3,
        locale="en-US",
        params=params,
        created_at=0.0,
        updated_at=0.0,
    )


def test_a_picked_model_is_kept_and_a_default_one_is_the_default_of_now() -> None:
    picked = stored(JobKind.IMAGE, prompt="p", size_key="square", model="svc-image-2.0", model_default=False)
    assert options_of(picked) == JobOptions(prompt="p", size="square", model="svc-image-2.0")
    for marks in ({"model_default": True}, {"model_default": False, "model_server_default": True}):
        job = stored(JobKind.IMAGE, prompt="p", size_key="square", model="svc-image-2.0", **marks)
        assert options_of(job).model is None


def test_a_job_from_before_size_keys_finds_its_preset_by_frame_size() -> None:
    video = stored(JobKind.VIDEO, prompt="p", width=720, height=1280, seconds=3, frame_rate=30, model="m")
    assert options_of(video) == JobOptions(prompt="p", size="vertical", seconds=3, fps=30, model="m")
    image = stored(JobKind.IMAGE, prompt="p", size="1280x720", model="m")
    assert options_of(image).size == "widescreen"


@pytest.mark.parametrize(
    ("typed", "size"),
    [
        ("Square", "square"),
        ("960x960", "square"),
        ("960 × 960", "square"),
        ("", None),
        ("enormous", "enormous"),
    ],
)
def test_a_typed_size_is_a_preset_key_or_its_frame_size(typed: str, size: str | None) -> None:
    # Anything else goes on as typed: the intake refuses it as a bad option, like /video would.
    assert options_from_form(JobKind.VIDEO, FormInput(prompt="p", size=typed)).size == size


@pytest.mark.parametrize(
    ("typed", "number"), [("5", 5), ("5s", 5), (" 5 sec ", 5), ("24 fps", 24), ("", None)]
)
def test_numbers_may_carry_their_unit(typed: str, number: int | None) -> None:
    options = options_from_form(JobKind.VIDEO, FormInput(prompt="p", length=typed, fps=typed))
    assert (options.seconds, options.fps) == (number, number)


@pytest.mark.parametrize("field", ["length", "fps"])
def test_a_number_that_is_no_number_is_a_bad_option(field: str) -> None:
    with pytest.raises(IntakeError) as refused:
        options_from_form(JobKind.VIDEO, FormInput(prompt="p", **{field: "forever"}))
    assert refused.value.problem is IntakeProblem.BAD_OPTION and refused.value.params == {"option": field}


def test_an_image_form_has_no_length_and_an_empty_model_is_the_default() -> None:
    options = options_from_form(JobKind.IMAGE, FormInput(prompt="p", length="x", fps="y", model="  "))
    assert options == JobOptions(prompt="p")
