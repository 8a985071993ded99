"""The pre-scan counts exactly what the JSON parser would build, and refuses past its caps.

:class:`~framecast.service.jsonscan.JsonScan` decides whether an answer may be parsed at all,
so its counts must match the parsed structure for every JSON document, fed whole or in any
cuts, and any bytes must give a value or :class:`BadResponse`, nothing else.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from framecast.service.errors import BadResponse
from framecast.service.jsonread import load_json
from framecast.service.jsonscan import JsonCounts, JsonScan, scan_json

# -- the pre-scan ---------------------------------------------------------------------------------


def expected_counts(value: Any) -> JsonCounts:
    """What a parsed document holds: values (containers too), object keys, containers, depth."""
    values = keys = containers = deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        values += 1
        if isinstance(item, dict | list):
            containers += 1
            deepest = max(deepest, depth + 1)
            children = list(item.values()) if isinstance(item, dict) else item
            keys += len(item) if isinstance(item, dict) else 0
            stack.extend((child, depth + 1) for child in children)
    return JsonCounts(values, keys, containers, deepest)


_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values, ascii_only=st.booleans(), indent=st.sampled_from([None, 0, 2]), cuts=st.data())
def test_the_prescan_counts_what_the_parser_builds(
    value: Any, ascii_only: bool, indent: int | None, cuts: Any
) -> None:
    data = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode()
    expected = expected_counts(json.loads(data))
    assert scan_json(data, max_items=10**9, max_depth=10**9) == expected
    # Fed as it arrives, cut anywhere (inside strings, escapes, literals), the counts are the same.
    points = sorted(cuts.draw(st.lists(st.integers(0, len(data)), max_size=6)))
    scan = JsonScan(max_items=10**9, max_depth=10**9)
    for point in points:
        scan.feed(data[:point])
    assert scan.finish(data) == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(alphabet='[]{}",:\\ 0123456789.-+eEtrufalsn\u00e9').map(str.encode))
def test_any_bytes_give_a_value_or_bad_response(data: bytes) -> None:
    try:
        load_json(data)
    except BadResponse:
        pass


@settings(max_examples=100, deadline=None)
@given(value=json_values)
def test_the_caps_refuse_exactly_past_them(value: Any) -> None:
    data = json.dumps(value).encode()
    counts = expected_counts(value)
    assert scan_json(data, max_items=counts.items, max_depth=max(counts.depth, 1)) == counts
    with pytest.raises(BadResponse, match="more than"):
        scan_json(data, max_items=counts.items - 1, max_depth=10**9) if counts.items > 1 else scan_json(
            b"[1]", max_items=1, max_depth=9
        )
    if counts.depth > 1:
        with pytest.raises(BadResponse, match="nested deeper"):
            scan_json(data, max_items=10**9, max_depth=counts.depth - 1)


def test_an_unterminated_string_is_refused() -> None:
    with pytest.raises(BadResponse):
        load_json(b'{"data": "abc')


def _fed_in_steps(data: bytes, step: int = 64 * 1024) -> JsonCounts:
    scan = JsonScan(max_items=10**9, max_depth=64)
    for end in range(step, len(data), step):
        scan.feed(data[:end])
    return scan.finish(data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"data": "' + b"A" * (8 << 20) + b'"}',  # a long string (a base64 image)
        b'{"data"' + b" " * (8 << 20) + b': "x"}',  # blanks between a key and its colon
        b"[" + b" ," * (4 << 20) + b"1]",  # a long run of separators
    ],
    ids=["string", "blanks-after-key", "separators"],
)
def test_long_tokens_cut_by_every_chunk_are_scanned_once(data: bytes) -> None:
    started = time.process_time()  # this process's CPU: a loaded machine's wall clock says nothing
    _fed_in_steps(data)
    assert time.process_time() - started < 2.0  # rescanning from each token's start: minutes


def test_a_huge_literal_is_refused() -> None:
    with pytest.raises(BadResponse, match="literal of more than"):
        _fed_in_steps(b'{"progress": ' + b"1" * (8 << 20) + b"}")
    with pytest.raises(BadResponse, match="literal of more than"):
        load_json(b"[" + b"1" * 5000 + b"]")
