"""Localised text: member-facing messages and slash-command strings, from JSON catalogues.

* :func:`t` - a message by key in a member's Discord locale, plural forms picked by the catalogue;
* :class:`FramecastTranslator` - the command tree's translator (names, descriptions, choices);
* :func:`candidates` - the one locale resolver both use (``es-419`` reads ``es-ES``, ``pt-PT``
  reads ``pt`` if there is one, everything ends in English).

The catalogues are ``locales/<discord-locale>.json``; ``locales/README.md`` is for translators.
"""

from cogs.i18n.catalogue import Catalogue, CatalogueError, Plural
from cogs.i18n.catalogues import LOCALES_DIR, Catalogues, command_name, shipped, t
from cogs.i18n.resolver import SOURCE, candidates
from cogs.i18n.translator import FramecastTranslator

__all__ = [
    "LOCALES_DIR",
    "SOURCE",
    "Catalogue",
    "CatalogueError",
    "Catalogues",
    "FramecastTranslator",
    "Plural",
    "candidates",
    "command_name",
    "shipped",
    "t",
]
