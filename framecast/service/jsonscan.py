"""Counting what a JSON answer would cost before anything of it is built.

A 48 KB gzip of ``{"data": [{},{},...]}`` inflates to 48 MiB and 16 million objects: parsing it
is over a gigabyte of memory and seconds of a blocked event loop, although every cap on bytes
holds. :class:`JsonScan` walks the bytes and counts the values, object keys and nesting they
would make, refusing with :class:`~framecast.service.errors.BadResponse` the moment a cap is
passed; only an answer that fits is then given to the JSON parser.

The scan is incremental: :meth:`JsonScan.feed` takes the growing buffer while the body is still
being read (:func:`~framecast.service.body.read_body`), so a bomb is refused after its first
megabyte is inflated, long before its end. It only tokenizes (strings, brackets, literals) and
does not validate: the JSON parser that runs afterwards does. Its counts are exact for valid
JSON, and on invalid JSON it never counts less than the parser could build before it stops.

Cost: one regular-expression match per token, in C, so at most the caps' worth of Python steps;
a long string (a base64 image) is one match, resumed where it stopped when it spans chunks, so
the whole scan is linear in the body's size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from framecast.service.errors import BadResponse

__all__ = ["JSON_MAX_ITEMS", "JsonCounts", "JsonScan", "scan_json"]

#: Most values plus object keys accepted in one answer. Real answers hold tens (a model list: a
#: few thousand at most); 100,000 small objects are about 25 MiB of Python objects at worst.
JSON_MAX_ITEMS = 100_000

_WS = rb"[ \t\r\n]"
# One token, after any whitespace and separators (commas and colons only separate: the parser
# checks they are where they belong). A string may be followed by the colon that makes it a key.
_TOKEN = re.compile(
    rb"[ \t\r\n,:]*(?:"
    rb'(?P<str>"[^"\\]*(?:\\.[^"\\]*)*")(?P<colon>' + _WS + rb"*:)?"
    rb"|(?P<open>[\[{])"
    rb"|(?P<close>[\]}])"
    rb'|(?P<lit>[^ \t\r\n\[\]{},:"]+)'
    rb")",
    re.DOTALL,
)
_SKIP = re.compile(rb"[ \t\r\n,:]*")
_COLON = re.compile(_WS + rb"*(:)?")
#: Longest literal (number, true, false, null) accepted: a number of more than 40 digits is
#: refused by the parser anyway, and a bound keeps a literal cut by every chunk from being scanned
#: again and again.
_LITERAL_MAX = 1024
# The rest of a string whose opening quote was seen: stops before the closing quote, or at the
# end of the data (before a lone backslash there, whose escaped byte has not come yet).
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)


@dataclass(frozen=True)
class JsonCounts:
    """What a JSON document would build: values (containers included), object keys, containers, depth."""

    values: int
    keys: int
    containers: int
    depth: int

    @property
    def items(self) -> int:
        """Values plus keys: what the item cap counts."""
        return self.values + self.keys


class JsonScan:
    """Counts a JSON document's values, keys and nesting, refusing past `max_items` or `max_depth`.

    Feed it the document's bytes as they grow (:meth:`feed`, the same buffer each time, only ever
    appended to), then :meth:`finish`. Raises :class:`BadResponse` when a cap is passed, and on
    :meth:`finish` for an unterminated string.
    """

    def __init__(self, *, max_items: int, max_depth: int) -> None:
        if max_items < 1 or max_depth < 1:
            raise ValueError("max_items and max_depth must be >= 1")
        self.max_items = max_items
        self.max_depth = max_depth
        self._pos = 0  # everything before is counted
        self._string_from: int | None = None  # inside a string that started here...
        self._string_scanned = 0  # ...and holds no closing quote before this offset
        self._blank_scanned = 0  # ...and after its closing quote, only blanks up to this offset
        self._values = 0
        self._keys = 0
        self._containers = 0
        self._depth = 0
        self._deepest = 0

    def __repr__(self) -> str:
        return f"<JsonScan at {self._pos}: {self.counts()}>"

    def counts(self) -> JsonCounts:
        """The counts so far."""
        return JsonCounts(self._values, self._keys, self._containers, self._deepest)

    def feed(self, data: bytes | bytearray | memoryview, *, final: bool = False) -> None:
        """Count the tokens of `data` not counted yet; a token that may go on past its end waits.

        `data` is the whole document so far (the previous call's data with more appended).
        """
        end = len(data)
        pos = self._pos
        match = _TOKEN.match
        while True:
            if self._string_from is not None:
                # Resume a long string where the last scan stopped, instead of from its quote.
                rest = _STRING_REST.match(data, self._string_scanned)
                stop = rest.end() if rest is not None else self._string_scanned
                if stop >= end or data[stop] != 0x22:  # no closing quote yet
                    self._string_scanned = stop
                    break
                colon = _COLON.match(data, max(stop + 1, self._blank_scanned))
                if colon is None or (colon.group(1) is None and colon.end() >= end and not final):
                    self._string_scanned = stop  # the colon that makes it a key may follow
                    self._blank_scanned = colon.end() if colon is not None else stop + 1
                    break
                self._string_from = None
                self._blank_scanned = 0
                pos = colon.end()
                if colon.group(1) is None:
                    self._count_value()
                else:
                    self._keys += 1
                    self._check_items()
                continue
            m = match(data, pos)
            if m is None:
                skipped = _SKIP.match(data, pos)
                after = skipped.end() if skipped is not None else pos
                if after < end and data[after] == 0x22:  # an unterminated string (so far)
                    self._string_from = after
                    self._string_scanned = after + 1
                    pos = after
                    continue
                pos = after
                break
            kind = m.lastgroup
            if kind == "lit" and m.end("lit") - m.start("lit") > _LITERAL_MAX:
                raise BadResponse(f"the answer holds a literal of more than {_LITERAL_MAX} characters")
            if m.end() >= end and not final and kind in ("str", "lit"):
                # The token may go on in the next bytes (a literal, or a key's colon to come): wait,
                # remembering where it starts so no byte before it is scanned again.
                if kind == "lit":
                    pos = m.start("lit")
                else:
                    pos = self._string_from = m.start("str")
                    self._string_scanned = m.end("str") - 1
                    self._blank_scanned = 0
                break
            pos = m.end()
            if kind == "open":
                self._count_value()
                self._containers += 1
                self._depth += 1
                if self._depth > self._deepest:
                    self._deepest = self._depth
                    if self._depth > self.max_depth:
                        raise BadResponse(f"the answer is nested deeper than {self.max_depth} levels")
            elif kind == "close":
                if self._depth > 0:
                    self._depth -= 1
            elif kind == "colon":
                self._keys += 1
                self._check_items()
            else:  # a string or a literal
                self._count_value()
        self._pos = pos

    def finish(self, data: bytes | bytearray | memoryview) -> JsonCounts:
        """Count the rest of the complete document `data`; its counts."""
        self.feed(data, final=True)
        if self._string_from is not None:
            raise BadResponse("the answer is not valid JSON")  # a string never closed
        return self.counts()

    def _count_value(self) -> None:
        self._values += 1
        self._check_items()

    def _check_items(self) -> None:
        if self._values + self._keys > self.max_items:
            raise BadResponse(f"the answer holds more than {self.max_items} JSON values")


def scan_json(
    data: bytes | bytearray | memoryview, *, max_items: int = JSON_MAX_ITEMS, max_depth: int
) -> JsonCounts:
    """The counts of the complete document `data` (see :class:`JsonScan`); raises :class:`BadResponse`."""
    return JsonScan(max_items=max_items, max_depth=max_depth).finish(data)
