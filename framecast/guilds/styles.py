"""A server's named prompt styles: what a style is, the rules it obeys, and the one expansion.

An admin keeps up to :data:`MAX_STYLES` styles per server, each a name and a template holding
``{prompt}`` (at most :data:`TEMPLATE_MAX_CHARS` characters), for videos, images or both. A member
picks one with ``style:``; the service gets the template with ``{prompt}`` replaced by the member's
prompt, literally (:func:`expand`: never ``str.format``, so braces anywhere stay as typed), while the
member's own prompt is what everyone is shown and what the blocklist reads.

Names are 1-:data:`NAME_MAX_CHARS` characters of visible text on one line (whitespace runs read as
one space, ends trimmed), unique per server ignoring case and width (:func:`style_key`), and shown
as the admin typed them.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from framecast.values import JobKind

__all__ = [
    "MAX_STYLES",
    "NAME_MAX_CHARS",
    "PLACEHOLDER",
    "TEMPLATE_MAX_CHARS",
    "Style",
    "StyleError",
    "StyleKind",
    "StyleProblem",
    "check_name",
    "check_template",
    "expand",
    "style_key",
]

#: Styles one server may keep (Discord shows at most 25 autocomplete choices: all of them fit).
MAX_STYLES = 25
#: Longest style name.
NAME_MAX_CHARS = 32
#: Longest template.
TEMPLATE_MAX_CHARS = 1000
#: What a template must hold: the member's prompt goes there.
PLACEHOLDER = "{prompt}"


class StyleKind(StrEnum):
    """Which requests a style is offered for."""

    VIDEO = "video"
    IMAGE = "image"
    BOTH = "both"

    def fits(self, kind: JobKind | str) -> bool:
        """Whether a request of `kind` may use a style of this kind."""
        return self is StyleKind.BOTH or self.value == JobKind(kind).value


class StyleProblem(StrEnum):
    """Why a style cannot be added, removed or used (the chat side words it)."""

    BAD_NAME = "bad_name"  # params: max (empty, too long, or not one line of visible text)
    NAME_TAKEN = "name_taken"  # params: name (the existing style's name)
    NO_PLACEHOLDER = "no_placeholder"  # the template lacks {prompt}
    TEMPLATE_TOO_LONG = "template_too_long"  # params: max, length
    TOO_MANY = "too_many"  # params: max
    NOT_FOUND = "not_found"  # params: name (as typed)


class StyleError(Exception):
    """A style an admin may not add or remove, or a member may not use: `problem` says why."""

    def __init__(self, problem: StyleProblem, **params: Any) -> None:
        super().__init__(problem.value)
        self.problem = problem
        self.params = params


@dataclass(frozen=True)
class Style:
    """One named style of a server: its name as typed, its template, and which requests it serves."""

    name: str
    template: str
    kind: StyleKind = StyleKind.BOTH
    #: The admin who added it (0: not recorded).
    created_by: int = 0
    #: When it was added (epoch seconds; 0: not recorded).
    created_at: float = 0.0

    @property
    def key(self) -> str:
        """The name as compared: ignoring case and width."""
        return style_key(self.name)

    def expand(self, prompt: str) -> str:
        """This style's template around `prompt` (see :func:`expand`)."""
        return expand(self.template, prompt)


def style_key(name: str) -> str:
    """The form two names are compared in: NFKC, case-folded, whitespace runs as one space."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def _visible(ch: str) -> bool:
    # Control, format (zero-width, bidi) and separator characters other than the plain space would
    # make two names look alike, or a name look empty.
    return ch == " " or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs")


def check_name(name: str | None) -> str:
    """The name as kept (whitespace runs as one space, ends trimmed), or :class:`StyleError` BAD_NAME."""
    cleaned = " ".join((name or "").split())
    if not cleaned or len(cleaned) > NAME_MAX_CHARS or not all(_visible(ch) for ch in cleaned):
        raise StyleError(StyleProblem.BAD_NAME, max=NAME_MAX_CHARS)
    return cleaned


def check_template(template: str | None) -> str:
    """The template unchanged, or :class:`StyleError`: without ``{prompt}``, or too long."""
    text = template or ""
    if len(text) > TEMPLATE_MAX_CHARS:
        raise StyleError(StyleProblem.TEMPLATE_TOO_LONG, max=TEMPLATE_MAX_CHARS, length=len(text))
    if PLACEHOLDER not in text or "\x00" in text:
        raise StyleError(StyleProblem.NO_PLACEHOLDER)
    return text


def expand(template: str, prompt: str) -> str:
    """`template` with every ``{prompt}`` replaced by `prompt`, byte for byte.

    A plain replacement of the template's own placeholders: braces elsewhere in the template, and
    anything at all in the prompt (``{prompt}`` included), stay exactly as typed.
    """
    return template.replace(PLACEHOLDER, prompt)
