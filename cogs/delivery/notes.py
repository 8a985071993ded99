"""The one mapping from the core's typed notes to the message keys a member reads."""

from __future__ import annotations

from typing import Any

import discord

from cogs.i18n import t
from framecast.app import Note

__all__ = ["NOTE_KEYS", "note_text"]

NOTE_KEYS: dict[Note, str] = {
    Note.RESUMED: "note_resumed",
    Note.REENCODED: "note_reencoded",
    Note.TOO_LARGE: "note_too_large",
}


def note_text(note: Note, locale: str | discord.Locale | None, **params: Any) -> str:
    """`note` in the member's language (`params` fill the message, e.g. ``url`` for TOO_LARGE)."""
    return t(NOTE_KEYS[note], locale, **params)
