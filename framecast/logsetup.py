"""Logging to stdout with secrets scrubbed from every record.

discord.py logs request URLs at DEBUG level, and interaction webhook URLs contain the interaction
token; the Discord token and the API key must never reach a log either. The filter below masks all of
them in the formatted message, whatever logger produced it.

Two kinds of secrets are masked: the operator's own (given to :func:`setup_logging`: always
masked) and the servers' API keys, published by their owner through :func:`mask_secrets` while
they are accepted and in use (:class:`framecast.accounts.Accounts`). A key an admin merely
typed is never registered: masking it would let anyone with Manage Server blank any word out of
the operator's logs; the check of a typed key keeps it out of the log itself (the service client
scrubs its own key from every message it makes).

Masking costs the same however many secrets there are (see :class:`SecretIndex`).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Hashable, Iterable

_URL_TOKENS = re.compile(r"(/(?:webhooks|interactions)/\d+/)[A-Za-z0-9_\-.:]+")
# discord.py logs raw gateway events at DEBUG: interaction payloads carry their token.
_TOKEN_FIELDS = re.compile(r"""(['"]token['"]\s*:\s*['"])[^'"]+""")
_BEARER = re.compile(r"(?i)(bearer|bot)\s+[A-Za-z0-9_\-.=]{8,}")
#: Marks the custom_id of a text input that holds a secret (a server's API key typed into a modal):
#: discord.py logs raw gateway events at DEBUG, modal submissions with their values included.
SECRET_INPUT_MARK = "secret"
_LITERAL = r"'(?:[^'\\]|\\.)*'" + r'|"(?:[^"\\]|\\.)*"'
_SIMPLE_FIELDS = r"""(?:['"]\w+['"]\s*:\s*[^,{}\[\]]+,\s*)*"""
_SECRET_ID = rf"""['"]custom_id['"]\s*:\s*['"][^'"]*{SECRET_INPUT_MARK}[^'"]*['"]"""
# The value of a secret text input, whichever side of its custom_id it is on (same flat object).
_SECRET_VALUE_AFTER = re.compile(rf"""({_SECRET_ID},\s*{_SIMPLE_FIELDS}['"]value['"]\s*:\s*)(?:{_LITERAL})""")
_SECRET_VALUE_BEFORE = re.compile(
    rf"""(['"]value['"]\s*:\s*)(?:{_LITERAL})(,\s*{_SIMPLE_FIELDS}{_SECRET_ID})"""
)
#: The shortest secret masked: a shorter "secret" would star out ordinary words.
MIN_SECRET_LENGTH = 4
# Every secret is indexed by its first characters (as many as the shortest secret has).
_HEAD = MIN_SECRET_LENGTH
# Up to this many distinct heads, candidates are found with str.find (C speed, one pass per head);
# beyond it, with one dict lookup per character of the message: either way a bounded cost per record.
_FIND_HEADS = 32


class SecretIndex:
    """A fixed set of secrets, found in a text at a cost that does not grow with their number.

    Secrets are grouped by their first :data:`MIN_SECRET_LENGTH` characters (their head); each head
    knows the lengths of its secrets, longest first. A text is scanned once (one dict lookup per
    character, or one ``str.find`` per head when there are few heads): at each position whose head
    is known, one set lookup per length of that head says which secret (the longest) starts there.
    The work per record is thus bounded by the text's length times the number of distinct key
    lengths, never by the number of keys (keys of one service share their length, and often a
    prefix such as ``sk-``). ``lookups`` counts those set lookups (tests assert on it, not on time).
    """

    __slots__ = ("_heads", "_secrets", "lookups")

    def __init__(self, secrets: Iterable[str]) -> None:
        self._secrets = frozenset(s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH)
        lengths: dict[str, set[int]] = {}
        for secret in self._secrets:
            lengths.setdefault(secret[:_HEAD], set()).add(len(secret))
        self._heads = {head: tuple(sorted(ls, reverse=True)) for head, ls in lengths.items()}
        self.lookups = 0

    def __len__(self) -> int:
        return len(self._secrets)

    def __contains__(self, secret: object) -> bool:
        return secret in self._secrets

    def _starts(self, text: str) -> list[int]:
        """Positions of `text` where some secret's head begins (in any order)."""
        heads = self._heads
        if len(heads) > _FIND_HEADS:
            return [at for at in range(len(text) - _HEAD + 1) if text[at : at + _HEAD] in heads]
        found = []
        for head in heads:
            at = text.find(head)
            while at != -1:
                found.append(at)
                at = text.find(head, at + 1)
        return found

    def spans(self, text: str) -> list[tuple[int, int]]:
        """``(start, end)`` of the longest secret starting at each position where one starts."""
        found: list[tuple[int, int]] = []
        secrets = self._secrets
        for at in self._starts(text):
            for length in self._heads[text[at : at + _HEAD]]:
                self.lookups += 1
                if text[at : at + length] in secrets:
                    found.append((at, at + length))
                    break
        return found


def mask(text: str, *indexes: SecretIndex) -> str:
    """`text` with every secret of `indexes` replaced by ``***``.

    The longest secret at a position wins, and overlapping secrets are masked as one run, so no
    part of a secret survives because a shorter one (or another that overlaps it) was found first.
    """
    spans = [span for index in indexes if index for span in index.spans(text)]
    if not spans:
        return text
    spans.sort()
    out: list[str] = []
    done = 0  # text before this is written (or masked)
    start, end = spans[0]
    for s, e in spans[1:]:
        if s < end:  # overlaps the run: extend it
            end = max(end, e)
            continue
        out.append(text[done:start])
        out.append("***")
        done, start, end = end, s, e
    out.append(text[done:start])
    out.append("***")
    out.append(text[end:])
    return "".join(out)


class _Published:
    """The servers' keys masked now: each owner's set, and one index of them all (copy-on-write).

    Owners publish from the event loop while any thread may log: a writer builds a new index under
    the lock and swaps it in with one assignment; a filter reads :attr:`index` once per record.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owned: dict[Hashable, frozenset[str]] = {}
        self.index = SecretIndex(())

    def set(self, owner: Hashable, secrets: Iterable[str]) -> None:
        wanted = frozenset(s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH)
        with self._lock:
            if self._owned.get(owner, frozenset()) == wanted:
                return
            if wanted:
                self._owned[owner] = wanted
            else:
                self._owned.pop(owner, None)
            self.index = SecretIndex(frozenset().union(*self._owned.values()))


_PUBLISHED = _Published()


def mask_secrets(owner: Hashable, secrets: Iterable[str]) -> None:
    """Mask exactly `secrets` on behalf of `owner` in every log record from now on.

    Replaces what `owner` masked before (an empty iterable: nothing any more), so a key that is
    removed, replaced or refused stops being masked. Several owners may mask the same secret.
    Rebuilds the index (proportional to the secrets published); thread-safe.
    """
    _PUBLISHED.set(owner, secrets)


def masked_secrets() -> SecretIndex:
    """The index of the secrets published through :func:`mask_secrets` now (read-only)."""
    return _PUBLISHED.index


def _scrub_secret_inputs(text: str) -> str:
    text = _SECRET_VALUE_AFTER.sub(r"\1'***'", text)
    return _SECRET_VALUE_BEFORE.sub(r"\1'***'\2", text)


class RedactingFilter(logging.Filter):
    """Replaces known secrets and token-bearing URL parts with ``***``.

    Known secrets: the ones given here (the operator's: always) and the ones published through
    :func:`mask_secrets` when the record is logged.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._own = SecretIndex(secrets)

    def _mask(self, text: str) -> str:
        return mask(text, self._own, _PUBLISHED.index)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = _URL_TOKENS.sub(r"\1***", message)
        clean = _BEARER.sub(r"\1 ***", clean)
        clean = _TOKEN_FIELDS.sub(r"\1***", clean)
        clean = self._mask(_scrub_secret_inputs(clean))
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            scrubbed = _URL_TOKENS.sub(r"\1***", self._mask(_scrub_secret_inputs(text)))
            if scrubbed != text:
                record.msg = f"{record.getMessage()}\n{scrubbed}"
                record.exc_info = None
                record.exc_text = None
        return True


def setup_logging(level: str, secrets: Iterable[str]) -> None:
    """Log to stdout at `level`, scrubbing `secrets` from every record."""
    # Text from outside (the service's error messages, prompts) may hold anything: a log line must
    # never fail on it, so characters stdout cannot encode are escaped instead of raising.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiohttp's access/client internals are noisy at DEBUG and add nothing for operators; aiosqlite
    # logs every statement twice (nine log lines in ten at DEBUG, each one formatted and scrubbed)
    # while the store logs what an operator needs.
    for noisy in ("aiohttp", "aiosqlite"):
        logging.getLogger(noisy).setLevel(max(logging.INFO, root.level))
