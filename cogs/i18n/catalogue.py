"""One locale's catalogue: its member-facing messages and its slash-command strings.

A catalogue is a JSON file ``locales/<discord-locale>.json`` (see ``locales/README.md``)::

    {"messages": {"<key>": "<text>" | {"plural": "<param>", "one": "...", "other": "..."}},
     "commands": {"<English text>": "<translation>"}}

A message with a count may be a :class:`Plural`: one text per CLDR plural category of the
catalogue's language, chosen with Babel from the number passed as ``<param>``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from pathlib import Path
from typing import Any

import babel
from babel.plural import PluralRule

log = logging.getLogger(__name__)

#: Every CLDR plural category, in CLDR's order.
CATEGORIES = ("zero", "one", "two", "few", "many", "other")


class CatalogueError(Exception):
    """A catalogue file that cannot be used at all (unreadable, not JSON, unknown locale)."""


@dataclass(frozen=True)
class Plural:
    """A message whose wording depends on a number: one text per CLDR plural category."""

    param: str
    """The placeholder whose value picks the form (``"count"`` for ``{count}``)."""
    forms: Mapping[str, str]
    """Category -> text; ``"other"`` is always present."""

    def form(self, category: str) -> str:
        """The text for `category`, or the ``"other"`` text when the catalogue lacks it."""
        return self.forms.get(category) or self.forms["other"]


Message = str | Plural


@dataclass(frozen=True)
class Catalogue:
    """The messages and command strings of one Discord locale."""

    locale: str
    messages: Mapping[str, Message]
    commands: Mapping[str, str]
    language: babel.Locale
    """The catalogue's language, as Babel knows it (checked when the file is read)."""
    problems: tuple[str, ...] = field(default=())
    """Entries left out because they were malformed (logged when the file is read)."""

    @classmethod
    def from_file(cls, path: Path) -> Catalogue:
        """Read ``<locale>.json``; raises :class:`CatalogueError` if the file is unusable."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CatalogueError(f"{path.name}: {exc}") from exc
        catalogue = cls.from_data(path.stem, data)
        for problem in catalogue.problems:
            log.warning("translation catalogue %s: %s (left out)", path.name, problem)
        return catalogue

    @classmethod
    def from_data(cls, locale: str, data: object) -> Catalogue:
        """A catalogue from parsed JSON; malformed entries are left out and listed in ``problems``."""
        try:
            language = babel.Locale.parse(locale, sep="-")
        except (ValueError, TypeError, babel.UnknownLocaleError) as exc:
            raise CatalogueError(f"{locale}: not a locale Babel knows ({exc})") from exc
        if not isinstance(data, dict):
            raise CatalogueError(f"{locale}: a catalogue is a JSON object")
        problems: list[str] = [
            f"unknown section {name!r}" for name in data if name not in ("messages", "commands")
        ]
        messages: dict[str, Message] = {}
        for key, value in _section(data, "messages", problems).items():
            message = _message(value)
            if message is None:
                problems.append(f"message {key!r} is neither a text nor a plural object")
            else:
                messages[key] = message
        commands: dict[str, str] = {}
        for text, value in _section(data, "commands", problems).items():
            if isinstance(value, str) and value:
                commands[text] = value
            else:
                problems.append(f"command string {text!r} is not a text")
        return cls(locale, messages, commands, language, tuple(problems))

    @cached_property
    def plural_rule(self) -> PluralRule:
        """The language's CLDR plural rule, read on first use: it loads the whole locale's CLDR data
        (a sixth of a second for every catalogue at each start-up, for rules most processes use
        for a few languages only)."""
        return self.language.plural_form

    def category(self, value: object) -> str:
        """The CLDR plural category of `value` in this catalogue's language (``"other"`` if no number)."""
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            return "other"
        try:
            return self.plural_rule(value)
        except (TypeError, ValueError, ArithmeticError):  # NaN, infinity
            return "other"

    def template(self, key: str, params: Mapping[str, Any]) -> str | None:
        """The text of `key` for these `params` (the plural form picked), or None if not here."""
        message = self.messages.get(key)
        if isinstance(message, Plural):
            return message.form(self.category(params.get(message.param)))
        return message or None  # an empty text counts as untranslated


def _section(data: dict[str, Any], name: str, problems: list[str]) -> dict[str, Any]:
    section = data.get(name, {})
    if isinstance(section, dict):
        return section
    problems.append(f"{name!r} is not an object")
    return {}


def _message(value: object) -> Message | None:
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        return None
    param = value.get("plural")
    forms = {k: v for k, v in value.items() if k != "plural"}
    if not isinstance(param, str) or not isinstance(forms.get("other"), str):
        return None
    if any(k not in CATEGORIES or not isinstance(v, str) for k, v in forms.items()):
        return None
    return Plural(param, forms)
