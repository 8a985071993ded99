"""The small rules of delivery: upload-size tiers, the result's filename, and the notes' texts."""

from __future__ import annotations

import pytest

from cogs.delivery.limits import DEFAULT_UPLOAD_LIMIT, KNOWN_LIMITS, UPLOAD_SLACK, aim, limit_below
from cogs.delivery.notes import NOTE_KEYS, note_text
from framecast.reasons import Note
from framecast.runner import is_result_filename, result_filename

MiB = 1024 * 1024


@pytest.mark.parametrize(
    ("refused", "aimed"),
    [
        (10 * MiB, 8 * MiB - 64 * 1024),  # the default refused: the older 8 MiB default
        (50 * MiB, 25 * MiB - 64 * 1024),
        (10 * MiB + 1, 8 * MiB - 64 * 1024),  # just over a tier: the next one down, not the same
        (int(10.6 * MiB), 10 * MiB - 64 * 1024),  # clearly (5%) over a tier: that tier
        (600 * MiB, 500 * MiB - 64 * 1024),
        (1_500_000, 750_000),  # below every known tier: half
    ],
)
def test_the_next_size_after_a_refusal(refused: int, aimed: int) -> None:
    assert limit_below(refused) == aimed
    assert limit_below(refused) < refused


def test_the_known_tiers_are_largest_first() -> None:
    assert list(KNOWN_LIMITS) == sorted(KNOWN_LIMITS, reverse=True)
    assert DEFAULT_UPLOAD_LIMIT in KNOWN_LIMITS


def test_aim_stays_under_what_is_advertised_and_what_was_refused() -> None:
    assert aim(DEFAULT_UPLOAD_LIMIT) == DEFAULT_UPLOAD_LIMIT - UPLOAD_SLACK
    assert aim(100) == 1024  # never below the floor
    assert aim(50 * MiB, refused=50 * MiB) == 25 * MiB - 64 * 1024
    assert aim(2 * MiB, refused=50 * MiB) == 2 * MiB - UPLOAD_SLACK  # never above the advertised limit


def test_one_filename_rule_for_writing_and_recognising_results() -> None:
    assert result_filename(42, "mp4") == "framecast-42.mp4"
    assert is_result_filename(result_filename(42, "png"), 42)
    assert not is_result_filename(result_filename(421, "mp4"), 42)
    assert not is_result_filename("clip.mp4", 42)


def test_every_note_has_a_text() -> None:
    assert set(NOTE_KEYS) == set(Note)
    for note in Note:
        assert note_text(note, "en-US", url="https://x.example/r.mp4")
    assert "https://x.example/r.mp4" in note_text(Note.TOO_LARGE, "de", url="https://x.example/r.mp4")
