"""Reading the service's answers as JSON, strictly: UTF-8, bounded nesting, finite numbers.

Every answer of the untrusted service passes through :func:`load_json` before any parser sees it,
so no answer can crash a job (only :class:`~framecast.service.errors.BadResponse` comes out).
"""

from __future__ import annotations

import json
import math
import re
from array import array
from itertools import accumulate
from typing import Any

from framecast.service.errors import BadResponse

__all__ = ["INT_MAX_DIGITS", "JSON_MAX_DEPTH", "load_json"]

#: Deepest nesting of arrays and objects accepted in an answer. Real answers use three or four
#: levels; the bound keeps every recursive walk of an answer (here and in the C JSON scanner) far
#: from Python's recursion limit.
JSON_MAX_DEPTH = 64
#: Longest integer literal accepted (a 40-digit number is already no count, size or id of ours).
INT_MAX_DIGITS = 40

_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')  # once escapes are gone, a string holds no quote
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as signed bytes


class _Unreadable(ValueError):
    """Raised from inside the JSON scanner's hooks: the reason is the message."""


def _parse_int(text: str) -> int:
    if len(text) - text.startswith("-") > INT_MAX_DIGITS:
        raise _Unreadable(f"the answer holds a number of more than {INT_MAX_DIGITS} digits")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 reads as infinity
        raise _Unreadable("the answer holds a number out of range")
    return value


def _refuse_constant(name: str) -> Any:
    raise _Unreadable(f"the answer holds {name}, which is not JSON")


_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float, parse_constant=_refuse_constant)


def _nesting_exceeds(text: str, limit: int) -> bool:
    """Whether `text` nests arrays/objects deeper than `limit` (brackets inside strings ignored).

    Linear, iterative and mostly in C: escapes are dropped, then strings, then everything but
    brackets, and the running depth is summed up. Counting on invalid JSON may be off, but only
    after the point where the JSON scanner itself stops, so it never under-counts what the
    scanner would recurse into.
    """
    if text.count("[") + text.count("{") <= limit:
        return False  # the usual case: too few brackets to be deep at all
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    steps = array("b", skeleton.encode("ascii").translate(_DEPTH_STEPS))
    return max(accumulate(steps), default=0) > limit


def load_json(body: bytes, *, max_depth: int = JSON_MAX_DEPTH) -> Any:
    """Parse an answer of the service as strict UTF-8 JSON.

    Refused with :class:`BadResponse` (and nothing else): bytes that are not UTF-8, nesting deeper
    than `max_depth`, ``NaN``/``Infinity``, floats out of range, integers of more than 40 digits,
    and anything else that is not JSON. A UTF-8 byte order mark is tolerated.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadResponse("the answer is not UTF-8 text") from None
    text = text.removeprefix("\ufeff")
    if _nesting_exceeds(text, max_depth):
        raise BadResponse(f"the answer is nested deeper than {max_depth} levels")
    try:
        return _DECODER.decode(text)
    except _Unreadable as exc:
        raise BadResponse(str(exc)) from None
    except ValueError:
        raise BadResponse("the answer is not valid JSON") from None
    except RecursionError:  # not reachable with the depth check; kept so no input can escape
        raise BadResponse(f"the answer is nested deeper than {max_depth} levels") from None
