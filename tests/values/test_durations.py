"""What a learned duration is keyed by: similar work shares a key, and its stored text round-trips."""

from __future__ import annotations

import pytest

from framecast.values.durations import DurationKey


def test_keys_bucket_similar_work_together() -> None:
    assert DurationKey.of("m", 1152, 768, 121) == DurationKey.of("m", 1280, 720, 121)
    assert DurationKey.of("m", 1152, 768, 121) != DurationKey.of("m", 1152, 768, 241)
    assert DurationKey.of("m", 1024, 1024, None).kind == "image"
    video = {"model": "m", "width": 1152, "height": 768, "num_frames": 121, "prompt": "x"}
    assert DurationKey.for_params(video) == DurationKey.of("m", 1152, 768, 121)
    image = {"model": "m", "size": "1024x1024", "prompt": "x"}
    assert DurationKey.for_params(image) == DurationKey.of("m", 1024, 1024, None)
    assert DurationKey.for_params({"size": "1024x1024"}) is None  # no model
    assert DurationKey.for_params({"model": "m", "size": "huge"}) is None


@pytest.mark.parametrize("model", ["svc-video-v2.0", "org:video:v2", "a"])
def test_key_text_round_trips(model: str) -> None:
    key = DurationKey.of(model, 1152, 768, 121)
    assert DurationKey.parse(key.text) == key


@pytest.mark.parametrize("text", ["", "video", "video:27", "video:x:m", "audio:27:m", "video:27:"])
def test_key_text_that_is_not_a_key_parses_to_none(text: str) -> None:
    assert DurationKey.parse(text) is None
