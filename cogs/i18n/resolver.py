"""The one locale resolver: which catalogues a Discord locale reads, best first.

Replies (:func:`cogs.i18n.t`) and slash-command names (:class:`cogs.i18n.FramecastTranslator`)
both go through :func:`candidates`, so a member sees one language everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping

import discord

#: The catalogue every other one is translated from, and the last resort.
SOURCE = "en-US"

#: Discord locales that read another catalogue well (Latin American Spanish reads Spain's).
ALIASES: Mapping[str, str] = {"es-419": "es-ES"}


def locale_code(locale: str | discord.Locale | None) -> str:
    """The Discord locale code (``"pt-BR"``) of `locale`; no locale at all means English."""
    if isinstance(locale, discord.Locale):
        return locale.value
    return locale or SOURCE


def candidates(locale: str | discord.Locale | None) -> tuple[str, ...]:
    """The catalogue codes to try for `locale`: exact, alias, base language, then English.

    ``"es-419"`` -> ``("es-419", "es-ES", "es", "en-US")``; ``"de"`` -> ``("de", "en-US")``.
    Codes without a catalogue are simply skipped by the caller.
    """
    code = locale_code(locale)
    chain = [code]
    if code in ALIASES:
        chain.append(ALIASES[code])
    if "-" in code:
        chain.append(code.split("-", 1)[0])
    chain.append(SOURCE)
    return tuple(dict.fromkeys(chain))  # without repeats, in order
