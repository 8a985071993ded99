"""The one mapping from the core's typed notes to the message keys a member reads."""

from __future__ import annotations

from typing import Any

from cogs.i18n import t
from cogs.i18n.personal import place_key
from framecast.app import Job, Note, is_personal_queue

__all__ = ["NOTE_KEYS", "note_text"]

NOTE_KEYS: dict[Note, str] = {
    Note.RESUMED: "note_resumed",
    Note.REENCODED: "note_reencoded",
    Note.TOO_LARGE: "note_too_large",
    Note.WAITS_IN_JOB: "note_waits_in_job",
}


def note_text(note: Note, job: Job, **params: Any) -> str:
    """`note` on `job`'s message, in its language and for its place (a server's or a person's own
    queue); `params` fill the message, e.g. ``url`` for TOO_LARGE (``id`` is the job's)."""
    personal = is_personal_queue(job.guild_id, job.user_id)
    return t(place_key(NOTE_KEYS[note], personal=personal), job.locale, **{"id": job.id, **params})
