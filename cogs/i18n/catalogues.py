"""All catalogues together: the message lookup behind :func:`t` and the command-string lookup.

The shipped catalogues (``locales/*.json``) are read on first use, or at start-up when the bot
sets :class:`cogs.i18n.FramecastTranslator` on its command tree; nothing is read at import time.
A missing or broken translation never breaks a reply: the English text is used instead.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import discord

from cogs.i18n.catalogue import Catalogue, CatalogueError
from cogs.i18n.resolver import SOURCE, candidates

log = logging.getLogger(__name__)

#: Where the shipped catalogues live, one ``<discord-locale>.json`` each.
LOCALES_DIR = Path(__file__).with_name("locales")

Locale = str | discord.Locale | None


class Catalogues:
    """Every catalogue by locale code; English (:data:`~cogs.i18n.resolver.SOURCE`) is required."""

    def __init__(self, catalogues: Mapping[str, Catalogue]) -> None:
        if SOURCE not in catalogues:
            raise CatalogueError(f"the {SOURCE} catalogue (the source text) is missing")
        self.by_locale: Mapping[str, Catalogue] = dict(catalogues)
        self.english = catalogues[SOURCE]

    @classmethod
    def load(cls, directory: Path = LOCALES_DIR) -> Catalogues:
        """Read every ``*.json`` in `directory`; an unusable file other than English is skipped."""
        catalogues: dict[str, Catalogue] = {}
        for path in sorted(directory.glob("*.json")):
            try:
                catalogues[path.stem] = Catalogue.from_file(path)
            except CatalogueError:
                if path.stem == SOURCE:
                    raise
                log.exception("translation catalogue %s is unusable; its members read English", path.name)
        return cls(catalogues)

    @classmethod
    def from_data(cls, data: Mapping[str, object]) -> Catalogues:
        """Catalogues from parsed JSON by locale code (for tests and tools)."""
        return cls({code: Catalogue.from_data(code, value) for code, value in data.items()})

    def chain(self, locale: Locale) -> Iterator[Catalogue]:
        """The catalogues `locale` reads, best first, ending with English."""
        for code in candidates(locale):
            if code in self.by_locale:
                yield self.by_locale[code]

    def message(self, key: str, locale: Locale, params: Mapping[str, Any]) -> str:
        """The message `key` in `locale` with `params` filled in; `key` itself if nobody has it."""
        for catalogue in self.chain(locale):
            template = catalogue.template(key, params)
            if template is not None:
                try:
                    return template.format(**params)
                except (KeyError, IndexError, ValueError):
                    # A broken translation must not break the reply: fall back to English.
                    log.warning("translation of %r for %s (%s) is malformed", key, locale, catalogue.locale)
                    break
        english = self.english.template(key, params)
        return key if english is None else english.format(**params)

    def command(self, text: str, locale: Locale) -> str | None:
        """The translation of the command string `text` for `locale`, or None to keep the English."""
        for catalogue in self.chain(locale):
            translated = catalogue.commands.get(text)
            if translated is not None:
                return None if translated == text else translated
        return None


@functools.cache
def shipped() -> Catalogues:
    """The catalogues shipped in ``locales/``, read once on first use."""
    return Catalogues.load()


def t(key: str, locale: Locale = None, /, **params: Any) -> str:
    """The message `key` in `locale` (a Discord locale), with `params` filled in."""
    return shipped().message(key, locale, params)


def command_name(name: str, locale: Locale = None, /) -> str:
    """A slash command as the member sees it in their language (``/bild`` for ``image`` in German)."""
    return "/" + (shipped().command(name, locale) or name)
