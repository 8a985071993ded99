"""Property tests of every parser of the service's answers: no input escapes as anything but the
documented errors (:class:`BadResponse`, and :class:`TaskFailed` for a failed image), and what they
return is safe to store, log and show.

Inputs are arbitrary bytes, arbitrary JSON values, answers shaped like the real ones with hostile
field values, and deep or huge structures built directly.
"""

from __future__ import annotations

import json
import math
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from framecast.service import (
    JSON_MAX_DEPTH,
    ImageResult,
    ModelCatalog,
    TaskStatus,
    error_detail,
    load_json,
    normalize_progress,
    parse_image_answer,
    parse_model_list,
    parse_poll,
    parse_retry_after,
    parse_task_id,
)
from framecast.service.errors import BadResponse, TaskFailed

BASE = "http://svc.example:8080"
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**500), max_value=10**500)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.text(
        alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters(), max_size=20
    )
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)
urls = st.sampled_from(
    [
        "http://cdn.example/x.mp4",
        "/files/x.png",
        "file:///proc/self/environ",
        "data:image/png;base64,iVBORw0K",
        "data:,",
        "http://[::1",
        "http://x/\x00\n",
        "  ",
        "h" * 9000,
        "javascript:alert(1)",
    ]
) | st.text(max_size=40)
statuses = (
    st.sampled_from(["pending", "completed", "failed", "PENDING", " completed ", "exploded", ""])
    | json_values
)
poll_answers = st.fixed_dictionaries(
    {},
    optional={
        "status": statuses,
        "progress": json_values,
        "video_url": urls | json_values,
        "image_url": urls,
        "url": urls,
        "result_url": urls,
        "error": json_values,
        "data": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "url": urls | json_values,
                    "b64_json": st.text(string.ascii_letters + "+/=-_", max_size=40) | json_values,
                },
            )
            | json_values,
            max_size=3,
        ),
    },
)
image_answers = poll_answers | st.fixed_dictionaries(
    {},
    optional={
        "b64_json": st.text(max_size=40) | json_values,
        "task_id": json_values,
        "id": json_values,
        "video_id": json_values,
        "status": statuses,
        "error": json_values,
    },
)
create_answers = st.fixed_dictionaries(
    {}, optional={"video_id": json_values | st.text(max_size=300), "task_id": json_values, "id": json_values}
)
model_lists = st.lists(
    st.text(max_size=20)
    | st.fixed_dictionaries(
        {},
        optional={
            "id": json_values,
            "model": json_values,
            "name": json_values,
            "type": json_values,
            "modalities": json_values,
            "object": json_values,
        },
    )
    | json_values,
    max_size=8,
)
model_answers = model_lists | st.fixed_dictionaries(
    {}, optional={"data": model_lists | json_values, "models": model_lists}
)


def nested(depth: int, leaf: Any = 1) -> Any:
    """A list nested `depth` deep, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def deep_dict(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"error": value, "message": value}
    return value


HOSTILE: list[Any] = [
    nested(100_000),
    deep_dict(5_000),
    {"status": "failed", "error": nested(50_000)},
    {"status": "failed", "error": deep_dict(3_000)},
    {"data": nested(10_000)},
    {"status": "pending", "progress": 10**400},
    {"status": "pending", "progress": "1" * 5000},
    {"status": "completed", "video_url": "\ud800"},
    {"id": "\ud800"},
    {"video_id": 10**60},
    [10**400],
    float("nan"),
    {"data": [{"url": "\ud800"}]},
    {"data": ["data:\ud800"]},
]


def safe_text(text: str, limit: int) -> None:
    """Storable, loggable and printable on one line (ZWJ/ZWNJ are kept: emoji and scripts need them)."""
    text.encode("utf-8")
    assert len(text) <= limit
    assert all(ch.isprintable() or ch in "\u200c\u200d" for ch in text), repr(text)


# -- the JSON loader --------------------------------------------------------------------------------
@PROPERTY
@given(st.binary(max_size=2000))
@example(b"[" * 200_000)
@example(b'{"a": 1' + b"0" * 5000 + b"}")
@example(b"\xef\xbb\xbf{}")
@example(b'"\\ud800"')
@example(b"1e400")
@example(b"-Infinity")
@example(b'["\\"[[[[' + b"[" * 100 + b'"]')
def test_load_json_raises_only_bad_response(body: bytes) -> None:
    try:
        load_json(body)
    except BadResponse:
        pass


def _roundtrip_ok(value: Any, depth: int = 0) -> bool:
    if depth > JSON_MAX_DEPTH:
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return len(str(abs(value))) <= 40
    if isinstance(value, list):
        return all(_roundtrip_ok(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_roundtrip_ok(v, depth + 1) for v in value.values())
    return True


@PROPERTY
@given(json_values)
def test_load_json_reads_what_json_writes(value: Any) -> None:
    body = json.dumps(value).encode("utf-8", "surrogatepass")
    if not _roundtrip_ok(value):
        with pytest.raises(BadResponse):
            load_json(body)
        return
    assert load_json(body) == value or value != value  # NaN is never equal, and never accepted


@pytest.mark.parametrize("depth", [JSON_MAX_DEPTH - 1, JSON_MAX_DEPTH, JSON_MAX_DEPTH + 1, 1000, 200_000])
def test_load_json_depth_bound(depth: int) -> None:
    body = ("[" * depth + "]" * depth).encode()
    if depth <= JSON_MAX_DEPTH:
        assert load_json(body) == nested(depth - 1, [])
    else:
        with pytest.raises(BadResponse, match="nested deeper"):
            load_json(body)
    # Brackets inside strings (escaped quotes included) are text, not nesting.
    text = json.dumps({"s": '\\"' + "[" * depth + "{" * depth})
    assert load_json(text.encode()) == json.loads(text)


# -- the parsers ------------------------------------------------------------------------------------
def check_status(status: TaskStatus) -> None:
    assert status.state in ("pending", "completed", "failed")
    assert status.progress is None or 0.0 <= status.progress <= 1.0
    if status.state == "completed":
        assert isinstance(status.result_url, str) and status.result_url.isprintable()
    if status.error is not None:
        safe_text(status.error, 2000)


@PROPERTY
@given(poll_answers | json_values, st.sampled_from(["video", "image"]))
def test_parse_poll(data: Any, kind: str) -> None:
    try:
        check_status(parse_poll(data, kind=kind, base_url=BASE))
    except BadResponse:
        pass


@pytest.mark.parametrize("data", HOSTILE, ids=range(len(HOSTILE)))
def test_parsers_on_hostile_structures(data: Any) -> None:
    for parse in (
        lambda: check_status(parse_poll(data, kind="video", base_url=BASE)),
        lambda: check_status(parse_poll(data, kind="image", base_url=BASE)),
        lambda: parse_task_id(data),
        lambda: parse_image_answer(data, base_url=BASE),
        lambda: parse_model_list(data),
    ):
        try:
            parse()
        except (BadResponse, TaskFailed):
            pass
    assert normalize_progress(data) is None or 0 <= normalize_progress(data) <= 1  # type: ignore[operator]


@PROPERTY
@given(create_answers | json_values)
@example({"video_id": "abc\x1b[31m"})
@example({"video_id": "x" * 300})
def test_parse_task_id(data: Any) -> None:
    try:
        task_id = parse_task_id(data)
    except BadResponse:
        return
    assert 0 < len(task_id) <= 128 and task_id.isprintable() and " " not in task_id


@PROPERTY
@given(image_answers | json_values)
def test_parse_image_answer(data: Any) -> None:
    try:
        result = parse_image_answer(data, base_url=BASE)
    except BadResponse:
        return
    except TaskFailed as exc:
        if exc.reason is not None:
            safe_text(exc.reason, 2000)
        return
    assert isinstance(result, ImageResult)
    if result.url is not None:
        assert result.url.isprintable()
    if result.data is not None:
        assert len(result.data) > 0


@PROPERTY
@given(model_answers | json_values)
def test_parse_model_list(data: Any) -> None:
    try:
        catalog, skipped = parse_model_list(data)
    except BadResponse:
        return
    assert isinstance(catalog, ModelCatalog) and skipped >= 0
    for model_id in catalog.all():
        assert 0 < len(model_id) <= 128 and model_id.isprintable() and " " not in model_id


@PROPERTY
@given(st.binary(max_size=3000) | json_values.map(lambda v: json.dumps(v).encode("utf-8", "surrogatepass")))
@example(b'{"error": {"message": "no \\ud800\\u0000 way"}}')
@example(b"<html>502 Bad Gateway</html>")
@example(b'"\\u200c"')
@example(b'{"detail": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
def test_error_detail(body: bytes) -> None:
    detail = error_detail(body)
    if detail is not None:
        assert detail
        safe_text(detail, 2000)


@PROPERTY
@given(
    st.none()
    | st.text()
    | st.from_regex(r"\s*[0-9.eE+-]{0,30}\s*", fullmatch=True)
    | st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT"))
    | st.text(alphabet="MonTueJan0123456789 ,:+-GMT", max_size=40),
    st.floats(min_value=0, max_value=4e9),
)
@example("Mon, 01 Jan 99999 00:00:00 GMT", 0.0)
@example("Sun, 31 Dec 9999 23:59:59 -2359", 1.7e9)
@example("1" * 500, 0.0)
@example("\udc80", 0.0)
def test_parse_retry_after(value: str | None, now: float) -> None:
    delay = parse_retry_after(value, now)
    assert delay is None or (math.isfinite(delay) and delay >= 0)


@PROPERTY
@given(json_values | st.fractions() | st.decimals())
@example(10**400)
@example(-(10**400))
@example("9" * 1000)
@example("1e400%")
def test_normalize_progress(value: Any) -> None:
    progress = normalize_progress(value)
    assert progress is None or 0.0 <= progress <= 1.0


# -- the whole path: bytes from the wire to a value ---------------------------------------------------
@PROPERTY
@given(st.binary(max_size=500) | poll_answers.map(lambda v: json.dumps(v).encode("utf-8", "surrogatepass")))
def test_bytes_to_status(body: bytes) -> None:
    try:
        check_status(parse_poll(load_json(body), kind="image", base_url=BASE))
    except BadResponse:
        pass


@pytest.mark.parametrize(
    "named", [{"video_id": "someone-else"}, {"task_id": 7}, {"video_id": "t2", "task_id": "t3"}]
)
def test_a_poll_answer_about_another_task_is_refused_never_taken_for_this_one(named: dict[str, Any]) -> None:
    data = {"status": "completed", "video_url": "https://cdn.example/other.mp4", **named}
    with pytest.raises(BadResponse, match="another task"):
        parse_poll(data, base_url=BASE, task_id="t1")


@pytest.mark.parametrize(
    "named",
    [
        {},
        {"video_id": "t1"},
        {"task_id": " t1 "},
        {"video_id": None},
        {"video_id": True},
        {"video_id": "t1", "task_id": "internal-9"},
    ],
)
def test_a_poll_answer_naming_this_task_or_none_is_read(named: dict[str, Any]) -> None:
    data = {"status": "completed", "video_url": "https://cdn.example/mine.mp4", **named}
    assert parse_poll(data, base_url=BASE, task_id="t1").result_url == "https://cdn.example/mine.mp4"
