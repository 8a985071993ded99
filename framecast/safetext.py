"""Text from outside (the generation service) made safe to store, log and show.

The service is untrusted: its strings may hold lone surrogates (which UTF-8 cannot encode, so
SQLite, logging and Discord all choke on them), control characters (terminal escapes in a log,
invisible text in a message) or megabytes of text. :func:`clean_text` is applied once, where such
text enters the bot, so everything downstream can rely on it.
"""

from __future__ import annotations

import unicodedata

__all__ = ["clean_text"]

_REPLACEMENT = "\ufffd"
#: Format characters that are harmless and carry meaning in real scripts (ZWJ in emoji, ZWNJ in
#: Persian/Hindi): kept. Other Cf characters (bidi overrides, ...) can disguise text and are dropped.
_KEPT_FORMAT = {"\u200c", "\u200d"}


def clean_text(text: object, limit: int = 500) -> str:
    """`text` as one line of at most `limit` characters that any UTF-8 sink accepts.

    Lone surrogates become U+FFFD, control and bidi-override characters are dropped, runs of
    white space fold to one space, and an over-long text is cut with ``…``. Non-strings are
    turned into text with ``str()`` first (never raising).
    """
    if not isinstance(text, str):
        try:
            text = str(text)
        except Exception:
            text = f"<{type(text).__name__}>"
    out: list[str] = []
    for ch in text:
        if "\ud800" <= ch <= "\udfff":
            out.append(_REPLACEMENT)
            continue
        category = unicodedata.category(ch)
        if ch.isspace():
            out.append(" ")
        elif category in ("Cc", "Cs", "Co", "Cn") or (category == "Cf" and ch not in _KEPT_FORMAT):
            continue
        else:
            out.append(ch)
        if len(out) > 4 * limit + 64:  # enough to fold white space and still fill `limit`
            break
    folded = " ".join("".join(out).split())
    if len(folded) > limit:
        folded = folded[: max(0, limit - 1)] + "…"
    return folded
