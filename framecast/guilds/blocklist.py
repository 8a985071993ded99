"""Blocklist matching: whether a prompt holds one of a server's blocked terms.

Both the prompt and each term are brought to one *matching form* (:func:`skeleton`), then a term is
looked for in the prompt:

- Case, width and the accents of alphabets where accents are decoration (Latin, Greek, Cyrillic,
  and the vowel points of Arabic and Hebrew) do not matter; elsewhere marks are part of the word
  (Hindi काम "work" is not कम "less") and are kept.
- Look-alike letters are folded with Unicode's confusables skeleton (UTS #39 §4) after case
  folding: Cyrillic "е" and Greek "ο" count as Latin "e" and "o", small capitals (ɴᴜᴅᴇ) as plain
  letters. Capitals outside Latin are also read by their shape (Greek "Ν" as N, though its small
  letter "ν" looks like v). Digits stay digits ("101" is not "lol").
- Invisible characters (zero-width spaces and joiners, variation selectors, Hangul fillers, the
  braille blank...) cannot hide a term: the prompt is matched with each of them removed (joining
  what it split) and, separately, taken as a space (for one that separates two words).
- Single letters joined by one punctuation mark (``n.u.d.e``, ``n-u-d-e``) or, three or more of
  them, by single spaces (``n u d e``) are read as one word, in which a term may sit anywhere.
- A term in a script written without spaces (Chinese, Japanese, Korean, Thai...) matches anywhere;
  any other term matches whole words or phrases only, so ``ass`` blocks neither ``class`` nor
  ``assistant``. A term ending in ``*`` matches words that begin with it (``nude*`` blocks
  ``nudes``).

Data: ``confusables.txt`` beside this module is Unicode's confusables table, version 18.0.0
(https://www.unicode.org/Public/security/18.0.0/confusables.txt), shipped unchanged under the
Unicode License (terms of use in its header, https://www.unicode.org/terms_of_use.html). It is read
on first use, not at import.
"""

from __future__ import annotations

import functools
import importlib.resources
import itertools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PREFIX_MARK", "blocked_term", "skeleton", "term_key"]

#: A term ending in this matches every word that begins with the rest of it.
PREFIX_MARK = "*"

# Scripts written without spaces between words: a term in them is matched as a substring, since
# there are no word boundaries to look for. (start, end) code point ranges, inclusive.
_UNSPACED_RANGES: tuple[tuple[int, int], ...] = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x2E80, 0x2FDF),  # CJK and Kangxi radicals
    (0x3005, 0x3007),  # ideographic iteration mark, closing mark, number zero
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3038, 0x303B),
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3130, 0x318F),  # Hangul compatibility Jamo
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # Hangul Jamo extended A
    (0xA9E0, 0xA9FF),  # Myanmar extended B
    (0xAA60, 0xAA7F),  # Myanmar extended A
    (0xAC00, 0xD7FF),  # Hangul syllables, Jamo extended B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana (NFKD widens them anyway)
    (0x1B000, 0x1B16F),  # Kana supplement and extensions
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)
# Conjoining Hangul jamo: the confusables table maps final consonants to initial ones, which would
# stop NFC from rebuilding the syllable (각 would read as 가 + ᄀ and so contain 가). Left as they are.
_JAMO_RANGES: tuple[tuple[int, int], ...] = ((0x1100, 0x11FF), (0xA960, 0xA97F), (0xD7B0, 0xD7FF))
# The alphabets whose combining marks are accents or vowel points a member may or may not type
# (é ~ e, Ü ~ u; Arabic harakat and Hebrew points, left out in everyday writing: كَلْب ~ كلب).
# Elsewhere (Devanagari vowel signs, Japanese voicing marks...) marks are kept: dropping them
# would make different words equal (काम "work" and कम "less").
_ACCENTED_ALPHABETS = ("LATIN", "GREEK", "CYRILLIC", "ARABIC", "HEBREW")
# Characters that show nothing but are not format characters (those, Cf, are invisible anyway):
# presentation selectors, the combining grapheme joiner, Mongolian free variation selectors, Khmer
# inherent vowels, the Hangul fillers (letters to Unicode, blank on screen) and the braille blank.
_INVISIBLE = frozenset(
    chr(code)
    for code in (
        *range(0xFE00, 0xFE10),
        *range(0xE0100, 0xE01F0),
        0x034F,
        0x180B,
        0x180C,
        0x180D,
        0x180F,
        0x17B4,
        0x17B5,
        0x115F,
        0x1160,
        0x3164,
        0xFFA0,
        0x2800,
    )
)
# Small capitals carry no decomposition: "LATIN LETTER SMALL CAPITAL N" folds to "n" by its name.
_SMALL_CAPITAL_NAME = re.compile(r"LATIN LETTER SMALL CAPITAL ([A-Z]{1,2})")
_SMALL_CAPITAL_BLOCKS = ((0x0250, 0x02AF), (0x1D00, 0x1DBF), (0xA720, 0xA7FF), (0x1DF00, 0x1DFFF))
# The table's prototypes for Cyrillic "к" and "м" (and the small capitals K and M) are kra (ĸ) and
# turned w (ʍ): as small capitals fold to plain letters, these fold to "k" and "m".
_EXTRA_FOLDS = {"\u0138": "k", "\u028d": "m"}
_CONFUSABLES_FILE = "confusables.txt"


# ---------------------------------------------------------------------- character classes


def _in_ranges(ch: str, ranges: tuple[tuple[int, int], ...]) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in ranges)


@functools.lru_cache(maxsize=4096)
def _unspaced(ch: str) -> bool:
    return _in_ranges(ch, _UNSPACED_RANGES)


def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "M"


def _word_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LMN"


def _invisible(ch: str) -> bool:
    if ch in _INVISIBLE:
        return True
    category = unicodedata.category(ch)
    return category == "Cf" or (category == "Cc" and not ch.isspace())


@functools.lru_cache(maxsize=4096)
def _accented_base(ch: str) -> bool:
    """Whether combining marks after ``ch`` are droppable accents."""
    return unicodedata.name(ch, "").startswith(_ACCENTED_ALPHABETS)


def _kind(ch: str) -> str:
    """The major Unicode category: "L" letter, "M" mark, "N" number, else "O"."""
    category = unicodedata.category(ch)[0]
    return category if category in "LMN" else "O"


# ---------------------------------------------------------------------- the skeleton


@functools.cache
def _confusables() -> dict[str, str]:
    """Unicode's confusables table (source -> prototype), without the entries matching cannot use.

    Skipped: entries that would turn a letter, digit or mark into punctuation or the other way
    round (Devanagari visarga -> ":", "|" -> "l"), since that moves word boundaries and would split
    or glue words; digits that look like letters ("0" -> "o", "1" -> "l"), so that a block on "lol"
    does not refuse "room 101"; and conjoining Hangul jamo (see ``_JAMO_RANGES``).
    """
    table: dict[str, str] = {}
    text = importlib.resources.files(__package__).joinpath(_CONFUSABLES_FILE).read_text("utf-8-sig")
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split(";")
        if len(fields) < 2 or not fields[0].strip():
            continue
        source = "".join(chr(int(code, 16)) for code in fields[0].split())
        target = "".join(chr(int(code, 16)) for code in fields[1].split())
        if len(source) != 1 or not target or _in_ranges(source, _JAMO_RANGES):
            continue
        if _same_kind(source, target):
            table[source] = target
    return table


def _same_kind(source: str, target: str) -> bool:
    """Whether ``target`` is a letter (digit, mark, other character) where ``source`` is one."""
    kind = _kind(source)
    allowed = {"L": "LM", "N": "NM", "M": "M", "O": "O"}[kind]
    return _kind(target[0]) == kind and all(_kind(c) in allowed for c in target[1:])


@functools.cache
def _small_capitals() -> dict[str, str]:
    """Small capital letters -> the plain lower-case letters they stand for."""
    folds: dict[str, str] = {}
    for lo, hi in _SMALL_CAPITAL_BLOCKS:
        for code in range(lo, hi + 1):
            match = _SMALL_CAPITAL_NAME.fullmatch(unicodedata.name(chr(code), ""))
            if match:
                folds[chr(code)] = match.group(1).lower()
    return folds


@functools.lru_cache(maxsize=1 << 15)
def _fold_char(ch: str) -> str:
    """One character's matching form, before accents are dropped: NFKD + case folding (the
    canonical caseless match recipe; NFKD also maps full-width and compatibility forms to plain
    ones), small capitals, then the confusables prototype, repeated until nothing changes."""
    table = _confusables()
    small = _small_capitals()
    text = ch
    for _ in range(8):  # a handful of rounds reach the fixed point; the bound only guards the loop
        folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())
        folded = "".join(small.get(c) or _EXTRA_FOLDS.get(c) or table.get(c, c) for c in folded)
        folded = unicodedata.normalize("NFD", folded)
        if folded == text:
            break
        text = folded
    return "".join(c for c in text if not _invisible(c))


@functools.cache
def _capitals() -> dict[str, str]:
    """Capitals outside Latin -> their look-alike in the table (Greek Ν -> N, Η -> H, Β -> B).

    Case folding first would lose that shape (ν looks like v, η like n, β like ß), so a prompt is
    also read with these capitals taken by their shape (see :func:`_haystacks`). The table's
    prototype of "I" is "l"; a capital that looks like I stands for the Latin capital I here, which
    folds to "i"."""
    return {
        source: "i" if target == "l" else target
        for source, target in _confusables().items()
        if source != source.casefold() and not unicodedata.name(source, "").startswith("LATIN")
    }


_Units = tuple[tuple[str, bool, bool], ...]
_SPACE: _Units = ((" ", False, False),)


@functools.lru_cache(maxsize=1 << 15)
def _units(ch: str, by_shape: bool = False) -> _Units | None:
    """``ch`` folded, as (character, is a mark, marks after it are droppable accents); None if
    ``ch`` is invisible. White space is one space. ``by_shape``: a capital by its look-alike."""
    if ch.isspace():
        return _SPACE
    if _invisible(ch):
        return None
    shape = _capitals().get(ch) if by_shape else None
    folded = "".join(map(_fold_char, shape)) if shape else _fold_char(ch)
    return tuple((c, _is_mark(c), _accented_base(c)) for c in folded)


def _fold(text: str, invisible: str, by_shape: bool = False) -> str:
    """The matching form of ``text``; each invisible character becomes ``invisible`` ("" or " "),
    and with ``by_shape`` capitals outside Latin become their look-alikes (see :func:`_capitals`)."""
    out: list[str] = []
    drop_marks = False
    for ch in text:
        units = _units(ch, by_shape)
        if units is None:
            if invisible:
                out.append(invisible)
                drop_marks = False
            continue
        for c, mark, accented in units:
            if mark:
                if not drop_marks:
                    out.append(c)
                continue
            out.append(c)
            drop_marks = accented
    # NFC so that the marks that remain (Indic vowel signs) have one form on both sides, and Hangul
    # jamo are syllables again; phrases match whatever white space separates their words.
    return " ".join(part for part in unicodedata.normalize("NFC", "".join(out)).split(" ") if part)


def skeleton(text: str) -> str:
    """The matching form of ``text``: folded, invisible characters removed (see the module doc)."""
    return _fold(text, "")


# ---------------------------------------------------------------------- spelled-out words


def _single_letter(word: str) -> bool:
    # One letter of a spaced script, with its marks: what "n.u.d.e" is made of. Also the skeleton
    # of one letter that the table spells with two ("m" -> "rn").
    if len(word) > 1 and not _is_mark(word[1]):
        return word in _spelled_letters()
    return _kind(word[0]) == "L" and not _unspaced(word[0]) and all(map(_is_mark, word[1:]))


@functools.cache
def _spelled_letters() -> frozenset[str]:
    """The skeletons longer than one character of the letters a-z."""
    return frozenset(f for f in map(_fold_char, "abcdefghijklmnopqrstuvwxyz") if len(f) > 1)


@functools.cache
def _spelled_pair() -> re.Pattern[str]:
    """Two single letters with one punctuation mark or space between them: where a spelled-out word
    may be. A loose test (a combining mark passes for punctuation); :func:`_join_spelled` decides."""
    letter = "|".join(["[^\\W\\d_]", *sorted(_spelled_letters())])
    return re.compile(f"(?<![^\\W_])(?:{letter})(?:[^\\w\\s]|[_ ])(?:{letter})(?![^\\W_])")


def _join_spelled(text: str) -> tuple[str, frozenset[int]]:
    """``text`` with spelled-out words joined ("n.u.d.e" -> "nude"), and the positions between two
    of the letters so joined (where a term may begin or end though letters surround it).

    A run of single letters each separated from the next by exactly one punctuation mark or one
    space is joined; a run with a space in it needs three letters or more, so that everyday
    one-letter words ("a", "I") next to each other are left alone.
    """
    if not _spelled_pair().search(text):
        return text, frozenset()  # the common case, found by one regular expression
    # Alternating (word, separator) pieces: (text, is_word).
    pieces = [("".join(group), is_word) for is_word, group in itertools.groupby(text, key=_word_char)]
    out: list[str] = []
    seams: set[int] = set()
    length = 0
    i = 0
    while i < len(pieces):
        piece, is_word = pieces[i]
        run = [i]
        if is_word and _single_letter(piece):
            j = i
            while j + 2 < len(pieces) and _joiner(pieces[j + 1][0]) and _single_letter(pieces[j + 2][0]):
                j += 2
                run.append(j)
        if len(run) >= 3 or (len(run) == 2 and pieces[i + 1][0] != " "):
            for k in run:
                out.append(pieces[k][0])
                length += len(pieces[k][0])
                seams.add(length)
            seams.discard(length)
            i = run[-1] + 1
            continue
        out.append(piece)
        length += len(piece)
        i += 1
    return "".join(out), frozenset(seams)


def _joiner(separator: str) -> bool:
    return separator == " " or (len(separator) == 1 and unicodedata.category(separator)[0] == "P")


# ---------------------------------------------------------------------- terms and matching


@dataclass(frozen=True)
class _Term:
    """One blocklist term, ready to look for."""

    term: str  # as stored
    needle: str  # its matching form ("" if it holds nothing to match)
    substring: bool  # in a script without spaces: matches anywhere
    prefix: bool  # ended in PREFIX_MARK: matches the beginnings of words


@functools.lru_cache(maxsize=8192)
def _term(term: str) -> _Term:
    """A term's matching form. A term of nothing but marks, spaces and invisible characters (or a
    bare ``*``) would match almost anywhere, or nowhere sensible: its needle is ``""``. Emoji and
    symbols are kept: "🍆" is a fair term."""
    stem = term.strip()
    prefix = len(stem) > 1 and stem.endswith(PREFIX_MARK)
    if stem == PREFIX_MARK:
        stem = ""
    if prefix:
        stem = stem[: -len(PREFIX_MARK)]
    needle, _ = _join_spelled(skeleton(stem))
    if not any(unicodedata.category(ch)[0] not in "MZC" for ch in needle):
        return _Term(term, "", False, False)
    # The script is judged on the term as typed too: the table maps some Thai or kana to Latin or
    # Han look-alikes, and such a term must still match inside unspaced text.
    substring = any(_unspaced(ch) for ch in needle) or any(_unspaced(ch) for ch in stem)
    return _Term(term, needle, substring, prefix)


def term_key(term: str) -> str:
    """What makes two terms the same for matching ("" for a term that can match nothing).

    ``Café`` and ``cafe`` share a key; ``nude`` and ``nude*`` do not.
    """
    compiled = _term(term)
    if not compiled.needle:
        return ""
    return compiled.needle + (PREFIX_MARK if compiled.prefix else "")


@functools.lru_cache(maxsize=1024)
def _compiled(terms: tuple[str, ...]) -> tuple[_Term, ...]:
    # One entry per server blocklist in use (a tuple of the stored terms): the terms' matching forms
    # are computed once, not per prompt.
    return tuple(t for t in map(_term, terms) if t.needle)


def _occurs(term: _Term, haystack: str, seams: frozenset[int]) -> bool:
    needle = term.needle
    if term.substring:
        return needle in haystack
    start = haystack.find(needle)
    while start >= 0:
        end = start + len(needle)
        before_ok = (
            start == 0 or not _word_char(needle[0]) or not _word_char(haystack[start - 1]) or start in seams
        )
        after_ok = (
            term.prefix
            or end == len(haystack)
            or not _word_char(needle[-1])
            or not _word_char(haystack[end])
            or end in seams
        )
        if before_ok and after_ok:
            return True
        start = haystack.find(needle, start + 1)
    return False


def _haystacks(prompt: str) -> list[tuple[str, frozenset[int]]]:
    """The prompt's matching forms: invisible characters removed and, if there are any, taken as
    spaces; capitals outside Latin case-folded and, if there are any, by their shape; each as it is
    and with its spelled-out words joined."""
    invisibles = ("", " ") if None in map(_units, prompt) else ("",)
    shapes = (False,) if _capitals().keys().isdisjoint(prompt) else (False, True)
    forms: list[str] = []
    for invisible in invisibles:
        for by_shape in shapes:
            form = _fold(prompt, invisible, by_shape)
            if form not in forms:
                forms.append(form)
    out: list[tuple[str, frozenset[int]]] = []
    for form in forms:
        out.append((form, frozenset()))
        joined, seams = _join_spelled(form)
        if seams:
            out.append((joined, seams))
    return out


def blocked_term(prompt: str, blocklist: Iterable[str]) -> str | None:
    """The first term of ``blocklist`` (as stored) that occurs in ``prompt``, or None.

    See the module docstring for what "occurs" means. Linear in the prompt's length times the
    number of terms; never raises for any text.
    """
    terms = _compiled(tuple(blocklist))
    if not terms:
        return None
    haystacks = _haystacks(prompt)
    for term in terms:
        if any(_occurs(term, haystack, seams) for haystack, seams in haystacks):
            return term.term
    return None
