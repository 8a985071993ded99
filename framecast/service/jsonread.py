"""Reading the service's answers as JSON, strictly: UTF-8, bounded items and nesting, finite numbers.

Every answer of the untrusted service passes through :func:`load_json` before any parser sees it,
so no answer can crash a job (only :class:`~framecast.service.errors.BadResponse` comes out).
"""

from __future__ import annotations

import json
import math
from typing import Any

from framecast.service.errors import BadResponse
from framecast.service.jsonscan import JSON_MAX_ITEMS, scan_json

__all__ = ["INT_MAX_DIGITS", "JSON_MAX_DEPTH", "JSON_MAX_ITEMS", "load_json"]

#: Deepest nesting of arrays and objects accepted in an answer. Real answers use three or four
#: levels; the bound keeps every recursive walk of an answer (here and in the C JSON scanner) far
#: from Python's recursion limit.
JSON_MAX_DEPTH = 64
#: Longest integer literal accepted (a 40-digit number is already no count, size or id of ours).
INT_MAX_DIGITS = 40

_BOM = "\ufeff".encode()


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


def load_json(
    body: bytes | bytearray,
    *,
    max_depth: int = JSON_MAX_DEPTH,
    max_items: int = JSON_MAX_ITEMS,
    counted: bool = False,
) -> Any:
    """Parse an answer of the service as strict UTF-8 JSON, its cost counted first.

    Refused with :class:`BadResponse` (and nothing else): more than `max_items` values and object
    keys, nesting deeper than `max_depth` (both counted on the bytes by
    :func:`~framecast.service.jsonscan.scan_json` before anything is built), bytes that are not
    UTF-8, ``NaN``/``Infinity``, floats out of range, integers of more than 40 digits, and
    anything else that is not JSON. A UTF-8 byte order mark is tolerated. `counted`: the caller
    already scanned `body` with these caps while reading it (:func:`~framecast.service.body.read_body`
    with a :class:`~framecast.service.jsonscan.JsonScan`), so it is not scanned twice.
    """
    if body.startswith(_BOM):
        body = body[len(_BOM) :]
    if not counted:
        scan_json(body, max_items=max_items, max_depth=max_depth)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadResponse("the answer is not UTF-8 text") from None
    try:
        return _DECODER.decode(text)
    except _Unreadable as exc:
        raise BadResponse(str(exc)) from None
    except ValueError:
        raise BadResponse("the answer is not valid JSON") from None
    except RecursionError:  # not reachable with the depth check; kept so no input can escape
        raise BadResponse(f"the answer is nested deeper than {max_depth} levels") from None
