"""Text from members and the service shown literally in Discord: never formatting, a link, or a ping.

Prompts, style templates and names are member text; links come from the service. Every message and
embed that shows them passes them through here.
"""

from __future__ import annotations

import re
from urllib.parse import quote

__all__ = ["as_text", "link_text"]


# What Discord's markdown acts on inside a line: emphasis, spoilers and code, masked links
# ``[text](url)``, mentions/emoji/timestamps ``<...>``, ``@everyone``, and the ``:`` of a URL's
# ``://`` (so nothing autolinks). Discord shows a backslashed ASCII punctuation mark as itself.
_INLINE_MARKUP = re.compile(r"[\\*_~|`\[\]<@]|:(?=//)")
# Markup that only counts at the start of a line: headings (``#``, ``-#``), lists, numbered lists,
# block quotes.
_LINE_MARKUP = re.compile(r"^([ \t]*)(?:([#+>-])|(\d+)\.)", re.MULTILINE)


def as_text(text: str, limit: int | None = None) -> str:
    """`text` escaped so that Discord shows it literally (in an embed or a message).

    Markdown, masked links, mentions, headings and code render as the characters typed, never as
    formatting, links or pings. Unescaped the way Discord does (a backslash before punctuation
    shows that character), the result reads exactly `text`. With `limit`, a longer result is cut
    (never inside an escape) and ends with ``…``.
    """
    escaped = _INLINE_MARKUP.sub(r"\\\g<0>", text)
    escaped = _LINE_MARKUP.sub(
        lambda m: f"{m[1]}\\{m[2]}" if m[2] else f"{m[1]}{m[3]}\\.",
        escaped,
    )
    if limit is None or len(escaped) <= limit:
        return escaped
    cut = escaped[: limit - 1]
    # An odd run of trailing backslashes ends in an escape whose character was cut off: drop it.
    if (len(cut) - len(cut.rstrip("\\"))) % 2:
        cut = cut[:-1]
    return cut + "…"


# Characters a URL never needs raw that markdown or Discord's link detection would act on.
_LINK_UNSAFE = re.compile(r"[\s\[\]<>|`\"\\]")


def link_text(url: str) -> str:
    """A link from the service, as message text that can only ever show as that one link.

    Spaces, brackets, ``<>``, ``|``, backticks, quotes and backslashes are percent-encoded (the
    link still leads to the same place), so nothing can turn it into a masked link, a mention or
    a second link. Everything else is kept byte for byte (signed links stay valid).
    """
    return _LINK_UNSAFE.sub(lambda m: quote(m[0], safe=""), url)
