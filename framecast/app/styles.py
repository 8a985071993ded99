"""Servers' named prompt styles: what admins do with them (/settings styles), and how a request uses one.

:class:`StyleBook` keeps every server's styles in memory (read once at start-up, kept current by its
own add and remove: the one writer), so ``style:`` autocompletes and resolves with no I/O before
Discord's 3 seconds. :class:`ServerStyles` holds the admins' use cases (add, list, remove), each taking
the :class:`~framecast.app.actors.Actor` asking (the admins' one rule decides who may:
:func:`~framecast.app.actors.administered`, else :class:`~framecast.app.actors.AdminRefused`) and
returning a typed outcome; a refused style is a :class:`StyleError` the edge words. :func:`styled_params` is the one
place a request's parameters take a style: the member's prompt stays ``prompt`` (shown everywhere,
read by the blocklist), the style's name and template are kept for Again, Remix and Retry, and the
expanded prompt (what the service gets) is kept too, so a style removed or edited later changes
no queued job. The expanded prompt must fit the same prompt limit as a typed one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from framecast.app.actors import Actor, administered
from framecast.app.problems import IntakeError, IntakeProblem
from framecast.guilds.styles import (
    MAX_STYLES,
    NAME_MAX_CHARS,
    PLACEHOLDER,
    TEMPLATE_MAX_CHARS,
    Style,
    StyleError,
    StyleKind,
    StyleProblem,
    check_name,
    check_template,
    style_key,
)
from framecast.storage import Store
from framecast.values import JobKind
from framecast.values.job import STYLED_PROMPT

__all__ = [
    "MAX_STYLES",
    "NAME_MAX_CHARS",
    "STYLE_PARAMS",
    "STYLE_PLACEHOLDER",
    "TEMPLATE_MAX_CHARS",
    "ServerStyles",
    "Style",
    "StyleAdded",
    "StyleBook",
    "StyleError",
    "StyleKind",
    "StyleList",
    "StyleProblem",
    "StyleRemoved",
    "job_style",
    "styled_params",
]

log = logging.getLogger(__name__)

#: The job parameters a style adds: its name, its template (kept for Again, Remix and Retry), and
#: the expanded prompt the service gets.
STYLE_NAME, STYLE_TEMPLATE = "style", "style_template"
STYLE_PARAMS = (STYLE_NAME, STYLE_TEMPLATE, STYLED_PROMPT)
#: What a template holds where the member's prompt goes.
STYLE_PLACEHOLDER = PLACEHOLDER


@dataclass(frozen=True)
class StyleAdded:
    """A style was added: it, and how many the server has now (of :data:`MAX_STYLES`)."""

    style: Style
    count: int


@dataclass(frozen=True)
class StyleRemoved:
    """A style was removed (jobs already queued with it keep it)."""

    style: Style
    count: int


@dataclass(frozen=True)
class StyleList:
    """A server's styles, oldest first, and the most it may keep."""

    styles: tuple[Style, ...]
    limit: int = MAX_STYLES


class StyleBook:
    """Every server's styles as the running core knows them: read from memory, written here only."""

    def __init__(self, store: Store, known: Mapping[int, Iterable[Style]]) -> None:
        self._store = store
        self._styles: dict[int, tuple[Style, ...]] = {g: tuple(s) for g, s in known.items() if s}

    @classmethod
    async def load(cls, store: Store) -> StyleBook:
        """Every server's stored styles (one query at start-up)."""
        return cls(store, await store.styles.all())

    def __repr__(self) -> str:
        return f"<StyleBook servers={len(self._styles)}>"

    def styles(self, guild_id: int | None) -> tuple[Style, ...]:
        """The server's styles, oldest first (none outside a server)."""
        return self._styles.get(guild_id, ()) if guild_id is not None else ()

    def find(self, guild_id: int | None, name: str) -> Style | None:
        """The server's style called `name` (ignoring case and width), or None."""
        key = style_key(name)
        return next((s for s in self.styles(guild_id) if s.key == key), None)

    def suggest(self, guild_id: int | None, kind: JobKind | None, typed: str, limit: int = 25) -> list[Style]:
        """Autocomplete: the server's styles for `kind` (None: any) whose name holds what was typed
        (names starting with it first), from memory."""
        key = style_key(typed)
        fitting = [s for s in self.styles(guild_id) if (kind is None or s.kind.fits(kind)) and key in s.key]
        fitting.sort(key=lambda s: not s.key.startswith(key))  # stable: oldest first within each
        return fitting[:limit]

    async def add(self, guild_id: int, style: Style, *, by: int) -> Style:
        """Store the style (the limit and a name taken in any case are checked by the store, against
        every process), then cache it."""
        # From memory first (a clear answer without a write); the store checks again under its lock.
        taken = self.find(guild_id, style.name)
        if taken is not None:
            raise StyleError(StyleProblem.NAME_TAKEN, name=taken.name)
        if len(self.styles(guild_id)) >= MAX_STYLES:
            raise StyleError(StyleProblem.TOO_MANY, max=MAX_STYLES)
        stored = await self._store.styles.add(guild_id, style, by=by, limit=MAX_STYLES)
        self._styles[guild_id] = (*self.styles(guild_id), stored)
        return stored

    async def remove(self, guild_id: int, name: str, *, by: int) -> Style | None:
        """Forget the style (any case); the style removed, or None when the server has none by that name."""
        removed = await self._store.styles.remove(guild_id, name, by=by)
        # Drop it from memory whether or not this process knew it (another may have added it).
        key = style_key(name)
        kept = tuple(s for s in self.styles(guild_id) if s.key != key)
        if kept:
            self._styles[guild_id] = kept
        else:
            self._styles.pop(guild_id, None)
        return removed


class ServerStyles:
    """The admins' style use cases (/settings styles add, list, remove), over the one :class:`StyleBook`."""

    def __init__(self, book: StyleBook) -> None:
        self._book = book

    def __repr__(self) -> str:
        return f"<ServerStyles {self._book!r}>"

    async def add(
        self, actor: Actor, name: str, template: str, kind: StyleKind = StyleKind.BOTH
    ) -> StyleAdded:
        """Add a style; :class:`StyleError` for a bad name or template, a name taken (any case), or a
        server that has :data:`MAX_STYLES` already."""
        guild_id, by = administered(actor), actor.user_id
        style = Style(check_name(name), check_template(template), StyleKind(kind))
        stored = await self._book.add(guild_id, style, by=by)
        log.info("guild %s: user %s added style %r (%s)", guild_id, by, stored.name, stored.kind)
        return StyleAdded(stored, len(self._book.styles(guild_id)))

    def list_styles(self, actor: Actor) -> StyleList:
        """The server's styles, oldest first (no I/O)."""
        return StyleList(self._book.styles(administered(actor)))

    def suggest(self, guild_id: int | None, typed: str) -> list[Style]:
        """Autocomplete for a style's name (any kind), from memory."""
        return self._book.suggest(guild_id, None, typed)

    async def remove(self, actor: Actor, name: str) -> StyleRemoved:
        """Remove a style (any case); :class:`StyleError` NOT_FOUND when the server has none by that name.

        Jobs already queued with it keep it: they carry its template and their expanded prompt.
        """
        guild_id, by = administered(actor), actor.user_id
        removed = await self._book.remove(guild_id, name, by=by)
        if removed is None:
            raise StyleError(StyleProblem.NOT_FOUND, name=name)
        log.info("guild %s: user %s removed style %r", guild_id, by, removed.name)
        return StyleRemoved(removed, len(self._book.styles(guild_id)))


def job_style(params: Mapping[str, Any]) -> Style | None:
    """The style a job was made with, as kept in its parameters (None: none, or unreadable)."""
    name, template = params.get(STYLE_NAME), params.get(STYLE_TEMPLATE)
    if isinstance(name, str) and isinstance(template, str):
        return Style(name, template)
    return None


def styled_params(params: Mapping[str, Any], style: Style | None, prompt_chars: int) -> dict[str, Any]:
    """`params` with `style` applied (or any earlier style taken off, for None).

    The member's prompt stays ``prompt``; the expanded one must fit `prompt_chars` too:
    :class:`IntakeError` STYLED_PROMPT_TOO_LONG (with the style's name) when it does not.
    """
    out = {k: v for k, v in params.items() if k not in STYLE_PARAMS}
    if style is None:
        return out
    expanded = style.expand(str(out.get("prompt", "")))
    if len(expanded) > prompt_chars:
        raise IntakeError(
            IntakeProblem.STYLED_PROMPT_TOO_LONG, style=style.name, max=prompt_chars, length=len(expanded)
        )
    out.update({STYLE_NAME: style.name, STYLE_TEMPLATE: style.template, STYLED_PROMPT: expanded})
    return out
