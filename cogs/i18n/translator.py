"""Localised slash-command names, descriptions and choice names for discord.py.

The commands use ``locale_str("<English text>")``; the catalogues' ``"commands"`` sections map
that English text to each language. Discord's rules (``tests/cogs/test_i18n.py`` checks them): names
match ``^[-_'\\p{L}\\p{N}\\p{sc=Deva}\\p{sc=Thai}]{1,32}$`` and are lower case where the script
has case (a locale with no good one-word name leaves it out and keeps the English); descriptions
and choice names are 1-100 characters.
"""

from __future__ import annotations

import discord
from discord import app_commands
from discord.app_commands import TranslationContextTypes, locale_str

from cogs.i18n.catalogues import Catalogues, shipped


class FramecastTranslator(app_commands.Translator):
    """Serves the catalogues' command strings when the command tree is synced.

    Set it with ``await bot.tree.set_translator(FramecastTranslator())``, which also reads the
    catalogues (:meth:`load`), so a broken English catalogue stops the bot at start-up.
    """

    def __init__(self, catalogues: Catalogues | None = None) -> None:
        self._catalogues = catalogues

    @property
    def catalogues(self) -> Catalogues:
        """The catalogues served: the given ones, or the shipped ones."""
        if self._catalogues is None:
            self._catalogues = shipped()
        return self._catalogues

    async def load(self) -> None:
        """Read the catalogues now rather than on the first sync (discord.py calls this)."""
        _ = self.catalogues

    async def translate(
        self, string: locale_str, locale: discord.Locale, context: TranslationContextTypes
    ) -> str | None:
        """The member's language for `string`, or None (Discord then shows the English text)."""
        return self.catalogues.command(string.message, locale)
