"""The small rules of delivery: upload-size tiers, the result's filename, and the notes' texts."""

from __future__ import annotations

import dataclasses

import pytest

from cogs.delivery.limits import DEFAULT_UPLOAD_LIMIT, KNOWN_LIMITS, UPLOAD_SLACK, aim, limit_below
from cogs.delivery.notes import NOTE_KEYS, note_text
from cogs.delivery.ping import ping_text
from framecast.app import is_result_filename, result_filename
from framecast.values import Job, JobKind, JobState
from framecast.values.reasons import Note

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
        assert note_text(note, _job(JobKind.VIDEO, "en-US"), url="https://x.example/r.mp4")
    assert "https://x.example/r.mp4" in note_text(
        Note.TOO_LARGE, _job(JobKind.VIDEO, "de"), url="https://x.example/r.mp4"
    )


@pytest.mark.parametrize("note", [Note.REENCODED, Note.TOO_LARGE])
def test_a_personal_queues_notes_speak_of_no_server(note: Note) -> None:
    """A user install's job (its queue is its requester's own: ``guild_id == user_id``) reads no
    "server" in any language; a server's job still names the server's upload limit."""
    server = _job(JobKind.VIDEO, "en-US")
    own = dataclasses.replace(server, guild_id=server.user_id)
    assert "server" in note_text(note, server, url="u")
    for locale in ("en-US", "de", "fr", "pl", "ja"):
        mine = note_text(note, dataclasses.replace(own, locale=locale), url="u")
        theirs = note_text(note, dataclasses.replace(server, locale=locale), url="u")
        assert mine != theirs, locale
    assert "server" not in note_text(note, own, url="u").lower()


def _job(kind: JobKind, locale: str) -> Job:
    return Job(
        id=7,
        kind=kind,
        state=JobState.DELIVERED,
        guild_id=1,
        channel_id=2,
        user_id=3,
        locale=locale,
        params={},
        created_at=0.0,
        updated_at=0.0,
    )


@pytest.mark.parametrize(
    ("locale", "kind", "text"),
    [
        ("en-US", JobKind.VIDEO, "<@3>, your video is ready!"),
        ("en-US", JobKind.IMAGE, "<@3>, your image is ready!"),
        # German capitalises nouns: the catalogue's wording is used as written, never lower-cased.
        ("de", JobKind.VIDEO, "<@3>, dein Video ist fertig!"),
        ("de", JobKind.IMAGE, "<@3>, dein Bild ist fertig!"),
        ("es-419", JobKind.IMAGE, "<@3>, ¡ya tienes tu imagen!"),
    ],
)
def test_the_ready_ping_reads_as_the_catalogue_writes_it(locale: str, kind: JobKind, text: str) -> None:
    assert ping_text(_job(kind, locale), JobState.DELIVERED) == text


def test_a_failed_job_on_a_channel_message_pings_with_its_number() -> None:
    job = dataclasses.replace(_job(JobKind.VIDEO, "en-US"), state=JobState.FAILED)
    assert ping_text(job, JobState.FAILED) == "<@3>, your job #7 has finished."


def test_the_delivery_package_and_the_renderer_import_only_the_application_from_the_core() -> None:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    files = [*sorted((root / "cogs" / "delivery").glob("*.py")), root / "cogs" / "views" / "render.py"]
    reached = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                reached.add((path.name, node.module))
            elif isinstance(node, ast.Import):
                reached.update((path.name, alias.name) for alias in node.names)
    core = {(name, module) for name, module in reached if module.split(".")[0] == "framecast"}
    assert core and all(module == "framecast.app" for _, module in core), sorted(core)
