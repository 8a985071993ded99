"""The form an admin types the server's API key into (``/settings key set``), and its one route.

Like the Remix form (:mod:`cogs.views.remix`), it is never kept in memory: discord.py keeps one open
modal per custom id (its ``ViewStore``), so with a fixed id a second admin opening the form drops
the first one's, whose submit is then discarded; and no form would outlive a restart. Each opening
gets its own custom id (a random nonce), the modal is stopped before it is sent, and every submit
takes one typed route, before a restart and after: the settings cog's ``on_interaction`` listener
reads it with :meth:`KeySubmit.of` and hands the key to the use case. The submit itself says who
sends it and from which server, so nothing about the opening needs remembering.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import discord

from cogs.i18n import t
from framecast.app import SECRET_INPUT_MARK

__all__ = ["KEY_INPUT_ID", "KEY_MAX_CHARS", "KEY_MIN_CHARS", "KeySubmit", "key_form"]

#: The key's text input: its id carries the log filter's secret mark, so discord.py's DEBUG log of
#: the raw submission shows ``***`` instead of the key.
KEY_INPUT_ID = f"settings:key:{SECRET_INPUT_MARK}"
#: Lengths Discord enforces on the key's text input (API keys are long; anything shorter is a typo).
KEY_MIN_CHARS = 8
KEY_MAX_CHARS = 400
#: A form of this bot's: its own nonce per opening (``settings:key``: one opened before this route).
_FORM_ID = re.compile(r"framecast:key-form:[0-9a-f]{16}|settings:key")
_TITLE_MAX, _LABEL_MAX = 45, 45


def key_form(locale: str | discord.Locale | None) -> discord.ui.Modal:
    """The key form: one short text input, never prefilled, with a custom id of its own."""
    modal = discord.ui.Modal(
        title=t("settings_key_modal_title", locale)[:_TITLE_MAX],
        custom_id=f"framecast:key-form:{secrets.token_hex(8)}",
        timeout=None,
    )
    modal.add_item(
        discord.ui.TextInput(
            label=t("settings_key_modal_label", locale)[:_LABEL_MAX],
            custom_id=KEY_INPUT_ID,
            style=discord.TextStyle.short,
            min_length=KEY_MIN_CHARS,
            max_length=KEY_MAX_CHARS,
            required=True,
        )
    )
    modal.stop()  # never kept by discord.py: the submit takes the typed route
    return modal


@dataclass(frozen=True)
class KeySubmit:
    """A submitted key form: the key as typed (never in ``repr``)."""

    key: str = field(repr=False)

    @classmethod
    def of(cls, interaction: discord.Interaction[Any]) -> KeySubmit | None:
        """The key form `interaction` submits; None for any other interaction."""
        if interaction.type is not discord.InteractionType.modal_submit:
            return None
        data: Mapping[str, Any] = interaction.data or {}  # type: ignore[assignment]  # a TypedDict union
        if _FORM_ID.fullmatch(str(data.get("custom_id", ""))) is None:
            return None
        return cls(_key_value(data.get("components")) or "")


def _key_value(components: Any) -> str | None:
    """The key input's value in a submit's components (in labels and in action rows alike)."""
    for component in components if isinstance(components, list) else ():
        if not isinstance(component, Mapping):
            continue
        if component.get("custom_id") == KEY_INPUT_ID and isinstance(component.get("value"), str):
            return str(component["value"])
        inner = component.get("component")
        found = _key_value([inner] if isinstance(inner, Mapping) else component.get("components"))
        if found is not None:
            return found
    return None
