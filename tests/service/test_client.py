"""The generation-service client against the fake service, over real HTTP on 127.0.0.1.

No test sends a packet anywhere but the loopback interface: internal and metadata addresses are
refused before connecting, and host names are resolved by a scripted resolver where needed.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import gzip
import json
import logging
import os
import random
import socket
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from prometheus_client import generate_latest

from framecast.clock import Clock, ScaledClock, SystemClock
from framecast.config import load_settings
from framecast.keys.budget import RequestBudget
from framecast.ops.metrics import Metrics, key_label
from framecast.service import (
    GenerationClient,
    ImageParams,
    ImageResult,
    ModelCatalog,
    TaskStatus,
    VideoParams,
    normalize_progress,
    parse_retry_after,
)
from framecast.service.errors import (
    AuthError,
    BadResponse,
    DownloadError,
    DownloadTooLarge,
    RateLimited,
    RequestRejected,
    ServiceError,
    ServiceUnavailable,
    TaskFailed,
    TaskTimedOut,
    UnreadableAnswer,
    UnsafeResultURL,
)
from framecast.service.transport import budgeted_session
from framecast.values.service_requests import Priority
from tests.fakes.gen_service import IMAGE_MODEL, POLL_PATH, VIDEO_MODEL, FakeService, TaskPlan
from tests.service.clients import IMAGE, VIDEO, new_client


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s
    # Clients made by make_client() close what they opened themselves (the foreign-host session).
    while _OPEN:
        await _OPEN.pop().close()


_OPEN: list[GenerationClient] = []


def make_client(fake: FakeService, session: aiohttp.ClientSession, **overrides: Any) -> GenerationClient:
    """:func:`new_client`, closed by the `session` fixture."""
    client = new_client(fake, session, **overrides)
    _OPEN.append(client)
    return client


class SleepLog(SystemClock):
    """The system clock, writing down every sleep asked of it."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await super().sleep(seconds)


def gaps(fake: FakeService) -> list[float]:
    times = [r.received for r in fake.requests]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


# -- create / poll ------------------------------------------------------------------------------------
async def test_create_video_sends_the_contract(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    client = make_client(fake_service, session)
    task_id = await client.create_video(VIDEO)
    assert task_id in fake_service.tasks
    (req,) = fake_service.requests
    assert (req.method, req.path, req.auth) == ("POST", "/v1/videos", "ok")
    assert req.json == {
        "model": VIDEO_MODEL, "prompt": "a cat", "width": 1152, "height": 768, "num_frames": 121,
        "frame_rate": 24,
    }  # fmt: skip
    await client.poll_video(task_id)
    poll = fake_service.requests[-1]
    assert (poll.method, poll.path, poll.query, poll.auth) == ("GET", POLL_PATH, {"video_id": task_id}, "ok")
    assert client.budget.granted_total == 2


@pytest.mark.parametrize("id_field", ["video_id", "task_id"])
async def test_task_id_from_either_field(
    fake_service: FakeService, session: aiohttp.ClientSession, id_field: str
) -> None:
    fake_service.id_field = id_field  # type: ignore[assignment]
    client = make_client(fake_service, session)
    task_id = await client.create_video(VIDEO)
    assert fake_service.tasks[task_id].prompt == "a cat"


async def test_create_without_id_is_a_bad_response(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.scripted.append((200, {"status": "ok", "queued": True}, None))
    with pytest.raises(BadResponse, match="no usable video_id or task_id.*status, queued"):
        await make_client(fake_service, session).create_video(VIDEO)


PROMPTS = [
    "一只猫在月光下跳舞，镜头缓慢推进",
    "चाँदनी रात में नाचती हुई बिल्ली",
    "قطة ترقص تحت ضوء القمر",
    "a cat 🐱 under the moon 🌕✨",
    "family: 👨\u200d👩\u200d👧\u200d👦 and flag 🏳️\u200d🌈",
    "combining: e\u0301 n\u0303 a\u030a \u0915\u094d\u0937",  # decomposed forms must not be normalised
    'quotes " and \\ backslash, tab\tnewline\nend \u200f rtl mark',
]


@pytest.mark.parametrize("prompt", PROMPTS)
async def test_prompts_arrive_byte_exact(
    fake_service: FakeService, session: aiohttp.ClientSession, prompt: str
) -> None:
    client = make_client(fake_service, session)
    task_id = await client.create_video(VideoParams(VIDEO_MODEL, prompt, 64, 64, 12, 12))
    assert fake_service.tasks[task_id].prompt == prompt
    assert json.loads(fake_service.requests[-1].body.decode("utf-8"))["prompt"].encode() == prompt.encode()
    await client.create_image(ImageParams(IMAGE_MODEL, prompt, "512x512"))
    assert fake_service.requests[-1].json["prompt"] == prompt


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ("int", 0.25),
        ("float", 0.25),
        ("percent_str", 0.25),
        ("fraction_str", 0.25),
        ("int_str", 0.25),
        ("float_percent", 0.255),
        ("missing", None),
        ("null", None),
        ("garbage", None),
    ],
)
async def test_progress_shapes(
    fake_service: FakeService,
    session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    shape: str,
    expected: float | None,
) -> None:
    fake_service.progress_shape = shape  # type: ignore[assignment]
    fake_service.default_plan = TaskPlan(polls=3)
    client = make_client(fake_service, session)
    task_id = await client.create_video(VIDEO)
    with caplog.at_level(logging.WARNING, logger="framecast.service"):
        first = await client.poll_video(task_id)
        second = await client.poll_video(task_id)
    assert first == TaskStatus("pending", expected)
    assert second.state == "pending"
    if expected is not None:
        assert second.progress is not None and second.progress > expected
    warnings = [r for r in caplog.records if "unreadable progress" in r.getMessage()]
    assert len(warnings) == (1 if shape == "garbage" else 0)  # once per task, not per poll


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (45, 0.45), (0, 0.0), (100, 1.0), (150, 1.0), (-5, 0.0), (0.45, 0.45), (1.0, 1.0), (0.0, 0.0),
        (45.0, 0.45), (99.5, 0.995), ("45%", 0.45), (" 45 % ", 0.45), ("0.45", 0.45), ("45", 0.45),
        ("100%", 1.0), ("1", 0.01), ("1.0", 1.0), ("250%", 1.0), (None, None), (True, None), (False, None),
        ("", None), ("soon", None), ("45%%", None), (float("nan"), None), (float("inf"), None), ("nan", None),
        ([45], None), ({"p": 1}, None),
    ],
)  # fmt: skip
def test_normalize_progress(value: Any, expected: float | None) -> None:
    result = normalize_progress(value)
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected)


async def test_completed_and_failed(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    fake_service.default_plan = TaskPlan(polls=0)
    fake_service.plans.append(("doomed", TaskPlan(polls=0, outcome="failed", error="content policy")))
    fake_service.plans.append(("silent", TaskPlan(polls=0, outcome="failed")))
    client = make_client(fake_service, session)
    ok = await client.poll_video(await client.create_video(VIDEO))
    assert ok.state == "completed" and ok.progress == 1.0
    assert ok.result_url is not None and ok.result_url.startswith(fake_service.base_url + "/files/")
    doomed = await client.poll_video(
        await client.create_video(VideoParams("m", "doomed cat", 64, 64, 12, 12))
    )
    assert doomed == TaskStatus("failed", None, None, "content policy")
    silent = await client.poll_video(
        await client.create_video(VideoParams("m", "silent cat", 64, 64, 12, 12))
    )
    assert silent.state == "failed" and silent.error is None


async def test_completed_without_url_and_unknown_status(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.plans.append(("nourl", TaskPlan(polls=0, omit_url=True)))
    fake_service.plans.append(("odd", TaskPlan(status="exploded")))
    client = make_client(fake_service, session)
    with pytest.raises(BadResponse, match="poll task .*completed but the response has no video_url"):
        await client.poll_video(await client.create_video(VideoParams("m", "nourl", 64, 64, 12, 12)))
    with pytest.raises(BadResponse, match="unknown status 'exploded'"):
        await client.poll_video(await client.create_video(VideoParams("m", "odd", 64, 64, 12, 12)))
    fake_service.scripted.append((200, {"progress": 5}, None))
    with pytest.raises(BadResponse, match="no status"):
        await client.poll_video("whatever")
    fake_service.scripted.append((200, ["pending"], None))
    with pytest.raises(BadResponse, match="expected a JSON object, got array"):
        await client.poll_video("whatever")


# -- wait ---------------------------------------------------------------------------------------------
async def test_wait_video_reports_progress_and_returns(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    clock = ScaledClock(100)  # a 30 s poll interval is 0.3 s of real time... we use 2 s -> 20 ms
    fake_service.default_plan = TaskPlan(polls=3)
    client = make_client(fake_service, session, clock=clock)
    task_id = await client.create_video(VIDEO)
    seen: list[TaskStatus] = []

    async def on_progress(status: TaskStatus) -> None:
        seen.append(status)

    done = await client.wait_video(task_id, interval=2.0, timeout=60.0, on_progress=on_progress)
    assert done.state == "completed" and done.result_url is not None
    assert [s.progress for s in seen] == [0.25, 0.5, 0.75]
    polls = [r.received for r in fake_service.requests if r.path == POLL_PATH]
    assert len(polls) == 4
    assert all(b - a >= 0.02 * 0.9 for a, b in zip(polls, polls[1:], strict=False))  # one interval apart
    assert polls[0] - fake_service.requests[0].received >= 0.02 * 0.9  # the first poll waits too


class ChangingPacer:
    """Plans the first poll far off, then (asked again) for one `interval` after the start."""

    def __init__(self, clock: Clock, interval: float) -> None:
        self._clock = clock
        self._interval = interval
        self._start = clock.monotonic()
        self.asked = 0

    def next_poll(self, now: float, last_poll: float | None) -> tuple[float, int]:
        self.asked += 1
        if self.asked == 1:
            return now + 1000 * self._interval, Priority.HIGH
        return max(now, self._start + self._interval), Priority.HIGH

    def observed(self, status: TaskStatus | None) -> None:
        pass


async def test_a_far_poll_is_asked_again_every_interval_and_comes_when_the_plan_moves_it(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    # The planner may learn meanwhile that a task parked for the longest gap is likely done sooner
    # (the scouts teach its kind): the wait loop asks the pacer again an interval on.
    clock = ScaledClock(100)
    fake_service.default_plan = TaskPlan(polls=0)
    client = make_client(fake_service, session, clock=clock)
    task_id = await client.create_video(VIDEO)
    pacer = ChangingPacer(clock, 2.0)
    started = clock.monotonic()
    done = await client.wait_video(task_id, interval=2.0, timeout=600.0, pacer=pacer)
    assert done.state == "completed"
    assert pacer.asked == 2
    assert clock.monotonic() - started < 10.0  # an interval or two, not the 2,000 s first planned


async def test_wait_video_failed_raises(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    fake_service.default_plan = TaskPlan(polls=1, outcome="failed", error="nsfw")
    client = make_client(fake_service, session, clock=ScaledClock(100))
    task_id = await client.create_video(VIDEO)
    with pytest.raises(TaskFailed) as info:
        await client.wait_video(task_id, interval=1.0, timeout=60.0)
    assert info.value.reason == "nsfw" and info.value.code == "task_failed" and task_id in str(info.value)
    fake_service.default_plan = TaskPlan(polls=0, outcome="failed")
    task_id = await client.create_video(VIDEO)
    with pytest.raises(TaskFailed) as info:
        await client.wait_video(task_id, interval=1.0, timeout=60.0)
    assert info.value.reason is None and "no reason" in str(info.value)


async def test_wait_video_times_out(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    fake_service.default_plan = TaskPlan(duration=3600)
    client = make_client(fake_service, session, clock=ScaledClock(100))
    task_id = await client.create_video(VIDEO)
    t0 = time.monotonic()
    with pytest.raises(TaskTimedOut) as info:
        await client.wait_video(task_id, interval=5.0, timeout=30.0)  # 0.3 real seconds
    assert time.monotonic() - t0 >= 0.25  # not before the timeout; the poll count bounds it from above
    assert info.value.code == "timeout" and info.value.task_id == task_id
    assert 5 <= fake_service.count(path=POLL_PATH) <= 7  # polls at 5, 10, ..., 30


async def test_wait_keeps_the_original_deadline(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.default_plan = TaskPlan(duration=3600)
    clock = ScaledClock(100)
    client = make_client(fake_service, session, clock=clock)
    task_id = await client.create_video(VIDEO)
    # Created 1000 s ago with a 900 s timeout (a restart): one last look, then give up.
    with pytest.raises(TaskTimedOut):
        await client.wait_video(task_id, interval=30.0, timeout=900.0, started_at=clock.time() - 1000)
    assert fake_service.count(path=POLL_PATH) == 1
    # Created 890 s ago: polls at once (an interval has passed), then at the deadline.
    fake_service.clear()
    with pytest.raises(TaskTimedOut):
        await client.wait_video(task_id, interval=30.0, timeout=900.0, started_at=clock.time() - 890)
    assert fake_service.count(path=POLL_PATH) == 2


async def test_a_deadline_passed_while_progress_was_saved_is_followed_by_one_more_poll(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    # Saving a poll's progress waits out a store outage; the deadline passes meanwhile. The task
    # (done by then) is polled once more before it is given up, not timed out unseen.
    fake_service.default_plan = TaskPlan(polls=1)
    clock = ScaledClock(100)
    client = make_client(fake_service, session, clock=clock)
    task_id = await client.create_video(VIDEO)

    async def store_out(status: TaskStatus) -> None:
        await clock.sleep(60.0)  # past the 30 s deadline

    done = await client.wait_video(task_id, interval=5.0, timeout=30.0, on_progress=store_out)
    assert done.state == "completed"
    assert fake_service.count(path=POLL_PATH) == 2
    # Still running after the outage: given up on that poll, the one after the deadline.
    fake_service.default_plan = TaskPlan(duration=3600)
    task_id = await client.create_video(VIDEO)
    with pytest.raises(TaskTimedOut):
        await client.wait_video(task_id, interval=5.0, timeout=30.0, on_progress=store_out)
    assert fake_service.count(path=POLL_PATH) == 4


async def test_a_request_whose_answer_is_cut_off_is_sent_again_only_with_a_budget_grant(
    fake_service: FakeService,
) -> None:
    # The service counted the poll, then the connection dropped: aiohttp would send it again at
    # once, inside the same grant (two requests at the service for one of the budget's). On the
    # budgeted session every request the service sees was granted.
    fake_service.default_plan = TaskPlan(polls=1)
    async with budgeted_session() as session:
        client = new_client(fake_service, session, window=60.0)
        try:
            task_id = await client.create_video(VIDEO)
            fake_service.drop_next = 1
            done = await client.wait_video(task_id, interval=0.05, timeout=30.0)
            assert done.state == "completed"
            granted = client.budget.frees_at()
            assert granted is not None and len(granted) == len(fake_service.requests) == 3
        finally:
            await client.close()


async def test_wait_survives_a_bad_minute(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    fake_service.default_plan = TaskPlan(polls=2)
    client = make_client(fake_service, session, clock=ScaledClock(100), retry_max=2)
    task_id = await client.create_video(VIDEO)
    fake_service.fail_next = 2  # one whole poll (both attempts) fails
    done = await client.wait_video(task_id, interval=1.0, timeout=60.0)
    assert done.state == "completed"
    assert fake_service.count(status=503) == 2


async def test_a_failed_poll_is_asked_again_only_an_interval_later(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    # A 503 on a poll is not retried at once (the client's backoff is 0.02 s): the wait loop polls
    # again an interval later, so the service never sees the task polled faster than that.
    fake_service.default_plan = TaskPlan(polls=2)
    client = make_client(fake_service, session, retry_max=4)
    task_id = await client.create_video(VIDEO)
    fake_service.fail_next = 2
    done = await client.wait_video(task_id, interval=0.3, timeout=30.0)
    assert done.state == "completed"
    polls = [r.received for r in fake_service.requests if r.path == POLL_PATH]
    assert fake_service.count(status=503) == 2
    assert all(b - a >= 0.3 * 0.95 for a, b in zip(polls, polls[1:], strict=False)), polls


async def test_on_progress_exceptions_propagate(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.default_plan = TaskPlan(polls=5)
    client = make_client(fake_service, session, clock=ScaledClock(100))
    task_id = await client.create_video(VIDEO)

    async def stop(status: TaskStatus) -> None:
        raise LookupError("shutting down")

    with pytest.raises(LookupError):
        await client.wait_video(task_id, interval=1.0, timeout=60.0, on_progress=stop)


# -- errors and retries -------------------------------------------------------------------------------
async def test_wrong_key_is_auth_error_not_retried(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    client = make_client(fake_service, session, key="wrong-key-123456")
    with pytest.raises(AuthError) as info:
        await client.create_video(VIDEO)
    assert info.value.code == "auth" and info.value.status == 401
    assert fake_service.count() == 1 and fake_service.requests[0].auth == "wrong"
    fake_service.scripted.append((403, {"error": "forbidden"}, None))
    with pytest.raises(AuthError):
        await make_client(fake_service, session).list_models()


@pytest.mark.parametrize(
    "body",
    [
        {"error": "width must be a multiple of 32"},
        {"error": {"message": "width must be a multiple of 32", "type": "invalid_request_error"}},
        {"message": "width must be a multiple of 32"},
        {"detail": "width must be a multiple of 32"},
        {"detail": [{"loc": ["body", "width"], "msg": "width must be a multiple of 32"}]},
        "width must be a multiple of 32",
    ],
)
async def test_rejected_with_service_message(
    fake_service: FakeService, session: aiohttp.ClientSession, body: Any
) -> None:
    fake_service.scripted.append((400, body, None))
    with pytest.raises(RequestRejected) as info:
        await make_client(fake_service, session).create_video(VIDEO)
    assert info.value.detail == "width must be a multiple of 32"
    assert info.value.status == 400 and info.value.code == "rejected"
    assert "width must be a multiple of 32" in str(info.value)
    assert fake_service.count() == 1  # never retried


async def test_rejected_by_per_prompt_plan(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    fake_service.plans.append(("forbidden", TaskPlan(reject_status=422, reject_message="prompt not allowed")))
    client = make_client(fake_service, session)
    with pytest.raises(RequestRejected) as info:
        await client.create_video(VideoParams("m", "a forbidden thing", 64, 64, 12, 12))
    assert (info.value.status, info.value.detail) == (422, "prompt not allowed")
    assert await client.create_video(VIDEO)  # other prompts are fine
    fake_service.scripted.append((404, "<html><body>nope</body></html>", None))
    with pytest.raises(RequestRejected) as info:
        await client.list_models()
    assert info.value.detail is None


async def test_transient_5xx_retried_with_growing_backoff(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    clock = SleepLog()
    client = make_client(fake_service, session, clock=clock, retry_max=4, backoff_base=0.05, backoff_max=1.0)
    fake_service.fail_next = 3
    task_id = await client.create_video(VIDEO)
    assert task_id and fake_service.count() == 4 and fake_service.count(status=503) == 3
    # Equal jitter: attempt n waits between half and all of base * 2**(n-1). The waits asked of the
    # clock are compared, not the gaps the service saw, which a loaded machine stretches.
    assert len(clock.sleeps) == 3, clock.sleeps
    for n, wait in enumerate(clock.sleeps, start=1):
        assert 0.05 * 2 ** (n - 1) / 2 <= wait <= 0.05 * 2 ** (n - 1), (n, clock.sleeps)
    assert clock.sleeps[0] < clock.sleeps[2]
    for n, gap in enumerate(gaps(fake_service), start=1):
        assert gap >= 0.05 * 2 ** (n - 1) / 2 * 0.95, (n, gaps(fake_service))


async def test_transient_exhausted_is_service_unavailable(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.fail_next = 100
    fake_service.fail_status = 502
    with pytest.raises(ServiceUnavailable) as info:
        await make_client(fake_service, session, retry_max=3).list_models()
    assert (
        info.value.status == 502
        and info.value.code == "unavailable"
        and "after 3 attempts" in str(info.value)
    )
    assert fake_service.count() == 3


async def test_503_retry_after_honoured(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    fake_service.fail_next = 1
    fake_service.fail_retry_after = "0.3"
    await make_client(fake_service, session, backoff_max=5.0).list_models()
    assert gaps(fake_service)[0] >= 0.3


async def test_malformed_json_is_not_retried_by_the_transport(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    # Retrying at once would spend the budget on a service that answers nonsense.
    client = make_client(fake_service, session, retry_max=3)
    fake_service.malformed_next = 1
    with pytest.raises(UnreadableAnswer, match="list models: the answer is not valid JSON"):
        await client.list_models()
    assert fake_service.count() == 1
    assert await client.list_models()  # the next answer is fine again


async def test_a_create_answered_unreadably_is_sent_again_up_to_the_malformed_limit(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    # Like a create whose answer was lost on the way: the service may run an extra task, and the
    # member gets the file instead of a failed job.
    clock = SleepLog()
    client = make_client(
        fake_service, session, clock=clock, retry_max=3, malformed_polls=3, backoff_base=0.02
    )
    fake_service.malformed_next = 2
    assert await client.create_video(VIDEO)
    assert fake_service.count(path="/v1/videos") == 3
    # Each sent again after a backoff, as a 5xx would be (not at once: a blip would use every try).
    assert len(clock.sleeps) == 2 and clock.sleeps[0] >= 0.01 and clock.sleeps[1] >= 0.02
    fake_service.malformed_next = 3  # a service that keeps answering nonsense: given up, clearly
    with pytest.raises(
        BadResponse, match="create video: the service's answers were unreadable 3 times in a row"
    ):
        await client.create_video(VIDEO)
    assert fake_service.count(path="/v1/videos") == 6
    fake_service.malformed_next = 1
    assert await client.create_image(IMAGE)


async def test_a_create_answer_of_an_unusable_shape_is_not_sent_again(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    client = make_client(fake_service, session, retry_max=3)
    fake_service.scripted.append((200, {"status": "queued"}, None))  # JSON, but no task id
    with pytest.raises(BadResponse, match="no usable video_id or task_id"):
        await client.create_video(VIDEO)
    assert fake_service.count(path="/v1/videos") == 1


async def test_request_timeout(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    # The timeout is generous so a loaded CI machine still answers the undelayed retry in time
    # (0.2 s flaked once); the delayed answers are far beyond it.
    client = make_client(fake_service, session, request_timeout=1.5, retry_max=2)
    fake_service.delays = [10.0]
    assert await client.create_video(VIDEO)
    assert fake_service.count(path="/v1/videos") == 2
    fake_service.delays = [10.0, 10.0]
    with pytest.raises(ServiceUnavailable, match="no answer within 1.5 s"):
        await client.list_models()


async def test_connection_refused(session: aiohttp.ClientSession) -> None:
    fake = FakeService()
    await fake.start()
    url = fake.base_url
    await fake.stop()
    client = make_client(fake, session, base_url=url, retry_max=2, key="k-123456")
    with pytest.raises(ServiceUnavailable, match="connection problem"):
        await client.list_models()


async def test_429_with_retry_after(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    fake_service.rate_limit = (2, 0.4)
    fake_service.retry_after = 0.4
    fake_service.count_rejected = False
    client = make_client(fake_service, session, backoff_max=5.0)
    for _ in range(3):
        await client.create_video(VIDEO)
    assert [r.status for r in fake_service.requests] == [200, 200, 429, 200]
    assert fake_service.requests[3].received - fake_service.requests[2].received >= 0.4
    assert client.budget.streak == 0  # the success reset it


async def test_429_without_retry_after_backs_off(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.rate_limit = (1, 0.25)
    client = make_client(fake_service, session, backoff_base=0.2, backoff_max=5.0, retry_max=6)
    await client.list_models()
    await client.list_models()
    statuses = [r.status for r in fake_service.requests]
    assert statuses[0] == 200 and statuses[-1] == 200 and 429 in statuses
    first_429 = statuses.index(429)
    assert fake_service.requests[first_429 + 1].received - fake_service.requests[first_429].received >= 0.1


async def test_429_exhausted_is_rate_limited(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.rate_limit = (1, 60.0)
    fake_service.retry_after = 0.05
    client = make_client(fake_service, session, retry_max=3)
    await client.list_models()
    with pytest.raises(RateLimited) as info:
        await client.list_models()
    assert info.value.code == "rate_limited" and info.value.retry_after == pytest.approx(0.05)
    assert fake_service.count(status=429) == 3


async def test_429_pauses_every_caller(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    # The key is shared: another client has just used up the window our budget knows nothing of.
    # A 2 s window: the three requests below and the burst must fall in one window even on a slow,
    # loaded machine (with 0.5 s, a pause between them let the window pass and no 429 came at all).
    fake_service.rate_limit = (3, 2.0)
    fake_service.retry_after = 2.0
    fake_service.count_rejected = False
    client = make_client(fake_service, session, limit=3, window=2.0, backoff_max=5.0)
    for _ in range(3):
        async with session.get(fake_service.base_url + "/v1/models", headers=_auth(fake_service)) as resp:
            assert resp.status == 200
    await asyncio.gather(*(client.list_models() for _ in range(4)))
    hit = next(r for r in fake_service.requests if r.status == 429)
    later = [r for r in fake_service.requests if r.received > hit.received + 0.05]  # past the first burst
    # One burst of 429s, then nobody comes back before Retry-After, and then one probe goes first.
    assert fake_service.count(status=429) == 3
    assert len(later) == 4 and all(r.received - hit.received >= 2.0 for r in later)
    assert later[1].received >= later[0].received
    assert fake_service.count(status=200) == 3 + 4
    assert client.budget.streak == 0


def _auth(fake: FakeService) -> dict[str, str]:
    return {"Authorization": f"Bearer {fake.api_key}"}


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(" 1.5 ", now) == 1.5
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == pytest.approx(30, abs=1)
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0
    for bad in (None, "", "soon", "-5", "nan"):
        assert parse_retry_after(bad, now) is None


# -- images and models --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", ["data_url", "url", "image_url"])
async def test_image_url_shapes(
    fake_service: FakeService, session: aiohttp.ClientSession, shape: str
) -> None:
    fake_service.image_shape = shape  # type: ignore[assignment]
    client = make_client(fake_service, session)
    result = await client.create_image(IMAGE)
    assert result.url is not None and result.url.endswith(".png") and result.data is None
    assert fake_service.requests[0].json == {
        "model": IMAGE_MODEL,
        "prompt": "a cat",
        "size": "1024x1024",
    }
    data = await client.download(result.url, max_bytes=10**6, timeout=5)
    assert data == fake_service.image_bytes() and data.startswith(b"\x89PNG")


async def test_image_b64_and_task(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    client = make_client(fake_service, session, clock=ScaledClock(100))
    fake_service.image_shape = "data_b64"
    assert await client.create_image(IMAGE) == ImageResult(data=fake_service.image_bytes())
    fake_service.image_shape = "task"
    fake_service.default_plan = TaskPlan(polls=1)
    result = await client.create_image(IMAGE)
    assert result.task_id is not None and result.task_id in fake_service.tasks
    done = await client.wait_image(result.task_id, interval=1.0, timeout=60.0)
    assert done.result_url is not None and done.result_url.endswith(".png")
    for field_name in ("url", "video_url"):
        fake_service.image_poll_url_field = field_name
        result = await client.create_image(IMAGE)
        assert result.task_id is not None
        assert (await client.wait_image(result.task_id, interval=1.0, timeout=60)).result_url


@pytest.mark.parametrize(
    ("shape", "message"),
    [("weird", "unrecognised response.*keys: result, created"), ("bad_b64", "not valid base64")],
)
async def test_image_bad_shapes(
    fake_service: FakeService, session: aiohttp.ClientSession, shape: str, message: str
) -> None:
    fake_service.image_shape = shape  # type: ignore[assignment]
    with pytest.raises(BadResponse, match=message):
        await make_client(fake_service, session).create_image(IMAGE)


async def test_image_inline_variants(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    png = fake_service.image_bytes()
    b64 = base64.b64encode(png).decode()
    client = make_client(fake_service, session)
    cases: list[tuple[Any, ImageResult]] = [
        ({"data": [{"b64_json": b64.rstrip("=")}]}, ImageResult(data=png)),  # padding stripped
        ({"url": "data:image/png;base64," + b64}, ImageResult(data=png)),
        ({"task_id": 42}, ImageResult(task_id="42")),
        ({"id": "img-1", "status": "pending"}, ImageResult(task_id="img-1")),
        ({"image_url": "/files/x.png"}, ImageResult(url=fake_service.base_url + "/files/x.png")),
    ]
    for body, expected in cases:
        fake_service.scripted.append((200, body, None))
        assert await client.create_image(IMAGE) == expected
    fake_service.scripted.append((200, {"status": "failed", "error": {"message": "nsfw"}}, None))
    with pytest.raises(TaskFailed, match="nsfw"):
        await client.create_image(IMAGE)
    fake_service.scripted.append((200, {"data": []}, None))
    with pytest.raises(BadResponse):
        await client.create_image(IMAGE)


def test_image_result_exactly_one() -> None:
    with pytest.raises(ValueError):
        ImageResult()
    with pytest.raises(ValueError):
        ImageResult(url="http://x", task_id="1")
    assert "bytes" in repr(ImageResult(data=b"\x89PNG" * 1000)) and "PNG" not in repr(
        ImageResult(data=b"PNG")
    )


@pytest.mark.parametrize("shape", ["data", "data_kind", "data_no_kind", "bare", "strings"])
async def test_model_shapes(fake_service: FakeService, session: aiohttp.ClientSession, shape: str) -> None:
    fake_service.models_shape = shape  # type: ignore[assignment]
    catalog = await make_client(fake_service, session).list_models()
    assert catalog == ModelCatalog(video=(VIDEO_MODEL,), image=(IMAGE_MODEL,), text=("svc-text-1.5",))
    assert VIDEO_MODEL in catalog


async def test_model_kinds_and_bad_shape(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    client = make_client(fake_service, session)
    fake_service.scripted.append(
        (
            200,
            {
                "models": [
                    {"id": "clip-maker", "modality": "Video"},
                    {"id": "painter", "type": "image-generation"},
                    {"id": "talker", "object": "model", "kind": "chat"},
                    {"id": "whisperer", "type": "audio"},
                    {"id": "svc-img-x", "object": "model"},
                    {"id": "clip-maker", "modality": "video"},
                    {"name": "llm-by-name"},
                    {"no": "id"},
                    17,
                ]
            },
            None,
        )
    )
    catalog = await client.list_models()
    assert catalog == ModelCatalog(
        video=("clip-maker",),
        image=("painter", "svc-img-x"),
        text=("talker", "llm-by-name"),
        other=("whisperer",),
    )
    fake_service.models_shape = "weird"
    with pytest.raises(BadResponse, match="list models"):
        await client.list_models()


# -- downloads ----------------------------------------------------------------------------------------
async def test_download_same_origin_is_keyed_and_budgeted(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.default_plan = TaskPlan(polls=0)
    fake_service.rate_limit = (100, 60.0)
    client = make_client(fake_service, session)
    status = await client.poll_video(await client.create_video(VIDEO))
    assert status.result_url is not None
    data = await client.download(status.result_url, max_bytes=10**7, timeout=5)
    assert data == fake_service.video_bytes() and data[4:8] == b"ftyp"
    download = fake_service.requests[-1]
    assert download.path.startswith("/files/") and download.auth == "ok" and download.counted
    assert client.budget.granted_total == 3


async def test_download_foreign_host_gets_no_key(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.result_base_url = fake_service.alt_base_url  # "localhost": another origin
    fake_service.default_plan = TaskPlan(polls=0)
    client = make_client(fake_service, session, result_hosts=("localhost",))
    status = await client.poll_video(await client.create_video(VIDEO))
    assert status.result_url is not None and status.result_url.startswith("http://localhost:")
    before = client.budget.granted_total
    assert await client.download(status.result_url, max_bytes=10**7, timeout=5) == fake_service.video_bytes()
    assert fake_service.requests[-1].auth == "missing"
    assert client.budget.granted_total == before


@pytest.mark.parametrize("chunked", [False, True])
async def test_download_too_large(
    fake_service: FakeService, session: aiohttp.ClientSession, chunked: bool
) -> None:
    fake_service.video_payload = b"\x00" * 300_000
    fake_service.file_chunked = chunked
    client = make_client(fake_service, session)
    with pytest.raises(DownloadTooLarge) as info:
        await client.download(fake_service.base_url + "/files/x.mp4", max_bytes=100_000, timeout=5)
    assert info.value.limit == 100_000 and info.value.code == "download_too_large"
    assert isinstance(info.value, DownloadError)
    assert info.value.size == (None if chunked else 300_000)
    assert await client.download(fake_service.base_url + "/files/x.mp4", max_bytes=300_000, timeout=5)


@pytest.mark.parametrize("status", [404, 410, 403])
async def test_download_expired_link(
    fake_service: FakeService, session: aiohttp.ClientSession, status: int
) -> None:
    fake_service.file_status = status
    with pytest.raises(DownloadError) as info:
        await make_client(fake_service, session, result_hosts=("localhost",)).download(
            fake_service.alt_base_url + "/files/x.mp4", max_bytes=10**6, timeout=5
        )
    assert (
        info.value.status == status and info.value.code == "download_failed" and "expired" in str(info.value)
    )
    assert fake_service.count() == 1


async def test_download_timeout_and_bad_url(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.video_payload = b"\x01" * 200_000
    # It keeps moving (320 kB/s: never stalled, see test_download_progress), but needs 0.6 s.
    fake_service.file_trickle = (16384, 0.05)
    client = make_client(fake_service, session)
    with pytest.raises(DownloadError, match="did not finish within 0.3 s"):
        await client.download(fake_service.base_url + "/files/x.mp4", max_bytes=10**6, timeout=0.3)
    with pytest.raises(UnsafeResultURL, match="not an http"):
        await client.download("file:///etc/passwd", max_bytes=10, timeout=1)


async def test_download_retries_transient(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    fake_service.scripted.clear()
    fake_service.file_status = 503
    client = make_client(fake_service, session, retry_max=2)
    with pytest.raises(DownloadError, match="after 2 attempts"):
        await client.download(fake_service.base_url + "/files/x.png", max_bytes=10**6, timeout=5)
    assert fake_service.count(status=503) == 2


# -- secrets ------------------------------------------------------------------------------------------
async def test_key_never_leaks(
    fake_service: FakeService, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    key = fake_service.api_key
    client = make_client(fake_service, session, retry_max=2, request_timeout=0.2)
    caught: list[BaseException] = []

    async def attempt(coro: Any) -> None:
        try:
            await coro
        except ServiceError as exc:
            caught.append(exc)

    with caplog.at_level(logging.DEBUG):
        fake_service.scripted.append((400, {"error": f"bad key {key} in header"}, None))
        await attempt(client.create_video(VIDEO))
        fake_service.fail_next = 2
        await attempt(client.list_models())
        fake_service.malformed_next = 1
        await attempt(client.list_models())
        fake_service.scripted.append(
            (200, {"status": "failed", "error": f"echo {key[:3]}\x00{key[3:]}"}, None)
        )
        await attempt(client.wait_video("t-1", interval=0.01, timeout=1))
        fake_service.delays = [1.0, 1.0]
        await attempt(client.list_models())
        fake_service.rate_limit = (0 + 1, 60.0)
        await attempt(client.list_models())
        await attempt(client.list_models())
        fake_service.rate_limit = None
        fake_service.file_status = 404
        await attempt(client.download(fake_service.base_url + "/files/a.mp4", max_bytes=10, timeout=1))
        fake_service.file_status = None
        await attempt(client.download(fake_service.base_url + "/files/a.mp4", max_bytes=10, timeout=1))
        fake_service.plans.append(("", TaskPlan(polls=0, outcome="failed", error=f"leaked {key}")))
        task_id = await client.create_video(VIDEO)
        await attempt(client.wait_video(task_id, interval=0.01, timeout=1))
        await attempt(make_client(fake_service, session, key=key + "x").list_models())
    assert len(caught) >= 9
    assert {type(e) for e in caught} >= {
        RequestRejected,
        ServiceUnavailable,
        RateLimited,
        DownloadError,
        AuthError,
        UnreadableAnswer,
        TaskFailed,
    }
    for exc in caught:
        chain: BaseException | None = exc
        while chain is not None:
            assert key not in str(chain) and key not in repr(chain)
            for value in vars(chain).values():
                assert key not in repr(value)
            chain = chain.__cause__ or chain.__context__
    assert "***" in str(caught[0])  # the echoed key was scrubbed from the service's message
    for record in caplog.records:
        text = record.getMessage() + (record.exc_text or "") + repr(record.args)
        assert key not in text
    assert key not in repr(client) and key not in str(client)


async def test_from_settings(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    settings = load_settings(
        {
            "DISCORD_TOKEN": "t",
            "GEN_API_BASE_URL": fake_service.base_url + "/",
            "GEN_API_KEY": fake_service.api_key,
            "GEN_RATE_LIMIT": "5/1",
            "GEN_RESULT_HOSTS": "localhost",
            "GEN_JSON_MAX_BYTES": "2000",
            "GEN_MAX_REDIRECTS": "0",
        }
    )
    clock = SystemClock()
    budget = RequestBudget(settings.gen_rate_limit.requests, settings.gen_rate_limit.window, clock=clock)
    client = GenerationClient.from_settings(session, settings, budget, clock)
    _OPEN.append(client)
    assert (budget.limit, budget.window) == (5, 1.0)
    assert client.base_url == fake_service.base_url
    assert await client.list_models()
    assert fake_service.requests[0].path == "/v1/models"
    # The hostile-service settings reach the client: the allow-list, the JSON cap, the redirect bound.
    assert await client.download(fake_service.alt_base_url + "/files/a.png", max_bytes=10**6, timeout=5)
    fake_service.path_scripted["/v1/models"] = [(200, b'{"data": []}' + b" " * 2000, None)]
    with pytest.raises(BadResponse, match="larger than the 2000-byte limit"):
        await client.list_models()
    fake_service.file_redirects = ["/files/b.png"]
    with pytest.raises(UnsafeResultURL, match="redirects too many times"):
        await client.download(fake_service.base_url + "/files/a.png", max_bytes=10**6, timeout=5)


# -- the budget over real HTTP ------------------------------------------------------------------------
async def test_burst_never_exceeds_the_window(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    """A few hundred budgeted calls from 50 tasks: the fake's own log never shows > N per window."""
    limit, real_window, scale = 16, 0.2, 300.0  # GEN_RATE_LIMIT=16/60 at 300x: 60 s -> 0.2 s
    fake_service.rate_limit = (limit, real_window)  # the fake enforces the same limit, strictly
    fake_service.default_plan = TaskPlan(duration=0.0, polls=2)
    clock = ScaledClock(scale)
    client = make_client(fake_service, session, clock=clock, limit=limit, window=60.0, retry_max=1)
    task_ids: list[str] = []
    done = 0

    async def worker(n: int) -> None:
        nonlocal done
        for i in range(6):
            if i % 3 == 0 or not task_ids:
                task_ids.append(await client.create_video(VIDEO, priority=Priority.NORMAL))
            elif i % 3 == 1:
                await client.poll_video(random.choice(task_ids))
            elif n % 10 == 0:
                await client.list_models()
            else:
                await client.poll_video(task_ids[-1])
            done += 1

    t0 = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*(worker(n) for n in range(50))), 30)
    elapsed = time.monotonic() - t0
    assert done == 300 and fake_service.count() == 300
    assert fake_service.count(status=429) == 0
    assert fake_service.max_in_window(real_window) <= limit
    # Never faster than the limit allows (how little of the window it wastes is bench_budget's figure).
    assert elapsed >= (300 / limit - 1) * real_window


# -- a hostile or broken service ------------------------------------------------------------------------
class ScriptedResolver(AbstractResolver):
    """DNS for made-up names, so no test ever asks a real DNS server or reaches a real host.

    `answers[name]` is a list of lookups, each a list of addresses; the last one repeats.
    """

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups.append(host)
        if host not in self.answers:
            raise OSError(f"no such host {host}")
        script = self.answers[host]
        addresses = script.pop(0) if len(script) > 1 else script[0]
        return [
            {
                "hostname": host,
                "host": a,
                "port": port,
                "family": socket.AF_INET6 if ":" in a else socket.AF_INET,
                "proto": 0,
                "flags": 0,
            }
            for a in addresses
        ]

    async def close(self) -> None:
        pass


def refused(info: pytest.ExceptionInfo[UnsafeResultURL], url: str, why: str) -> None:
    """A refusal that says why and never names the URL (it may be posted or logged)."""
    assert info.value.code == "result_refused" and why in str(info.value)
    assert url not in str(info.value) and url not in repr(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "file:///proc/self/environ",
        "file://localhost/etc/passwd",
        "FILE:///etc/passwd",
        "ftp://127.0.0.1/x.mp4",
        "gopher://127.0.0.1:70/_x",
        "data:video/mp4;base64,AAAA",
        "javascript:alert(1)",
        "//example.com/x.mp4",
        "/files/x.mp4",
        "",
    ],
)
async def test_download_refuses_what_is_not_http(
    fake_service: FakeService, session: aiohttp.ClientSession, url: str
) -> None:
    with pytest.raises(UnsafeResultURL) as info:
        await make_client(fake_service, session).download(url, max_bytes=10**6, timeout=5)
    refused(info, url or "nothing", "not an http(s) URL")
    assert fake_service.count() == 0


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.2",
        "10.0.0.1",
        "169.254.169.254",
        "192.168.1.1",
        "172.16.0.1",
        "100.64.0.1",
        "0.0.0.0",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:169.254.169.254]",
        "[fd00::1]",
        "[fe80::1]",
        "224.0.0.1",
    ],
)
async def test_download_refuses_internal_addresses_before_connecting(
    fake_service: FakeService, session: aiohttp.ClientSession, host: str
) -> None:
    url = f"http://{host}:{fake_service.port}/files/x.mp4"
    client = make_client(fake_service, session, result_hosts=("cdn.example.com",))
    with pytest.raises(UnsafeResultURL) as info:
        await client.download(url, max_bytes=10**6, timeout=5)
    refused(info, url, "internal address")
    assert fake_service.count() == 0


async def test_download_refuses_numeric_host_spellings(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    # Spellings of 127.0.0.1 that inet_aton accepts: refused either by aiohttp or by the guard.
    client = make_client(fake_service, session)
    for host in ("2130706433", "127.1", "0x7f.0.0.1"):
        with pytest.raises(UnsafeResultURL):
            await client.download(
                f"http://{host}:{fake_service.port}/files/x.mp4", max_bytes=10**6, timeout=5
            )
    assert fake_service.count() == 0


async def test_host_names_are_judged_where_the_connection_is_made(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    port = fake_service.port
    dns = ScriptedResolver(
        {
            "localhost": [["127.0.0.1"]],
            "framecast.test": [["127.0.0.1"]],
            "cdn.framecast.test": [["127.0.0.1"]],
            "mixed.framecast.test": [["127.0.0.1", "10.1.2.3", "::1"]],
            "rebind.framecast.test": [["127.0.0.1"]],
        }
    )
    client = make_client(fake_service, session, resolver=dns)
    for name in ("cdn.framecast.test", "mixed.framecast.test"):
        with pytest.raises(UnsafeResultURL) as info:
            await client.download(f"http://{name}:{port}/files/x.mp4", max_bytes=10**6, timeout=5)
        refused(info, name, "internal address")
    assert fake_service.count() == 0 and dns.lookups == ["cdn.framecast.test", "mixed.framecast.test"]
    # `localhost` through the system's resolver (/etc/hosts): loopback, refused too.
    with pytest.raises(UnsafeResultURL):
        await make_client(fake_service, session).download(
            fake_service.alt_base_url + "/files/x.mp4", max_bytes=10**6, timeout=5
        )
    assert fake_service.count() == 0

    # An operator's private CDN, listed in GEN_RESULT_HOSTS: fetched, without the key or the budget.
    listed = make_client(fake_service, session, resolver=dns, result_hosts=("*.framecast.test", "localhost"))
    before = listed.budget.granted_total
    data = await listed.download(f"http://cdn.framecast.test:{port}/files/x.mp4", max_bytes=10**7, timeout=5)
    assert data == fake_service.video_bytes()
    assert await listed.download(fake_service.alt_base_url + "/files/y.png", max_bytes=10**7, timeout=5)
    assert [r.auth for r in fake_service.requests] == ["missing", "missing"]
    assert listed.budget.granted_total == before
    with pytest.raises(UnsafeResultURL):  # "*.framecast.test" does not cover framecast.test itself
        await listed.download(f"http://framecast.test:{port}/files/x.mp4", max_bytes=10, timeout=5)


async def test_redirects_are_checked_hop_by_hop(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    port = fake_service.port
    client = make_client(fake_service, session, result_hosts=("localhost",), max_redirects=3)
    video = fake_service.base_url + "/files/a.mp4"
    # The service's origin redirects to its (listed) CDN: followed; the CDN gets no key.
    fake_service.file_redirects = [fake_service.alt_base_url + "/files/b.mp4"]
    assert await client.download(video, max_bytes=10**7, timeout=5) == fake_service.video_bytes()
    assert [(r.path, r.auth) for r in fake_service.requests] == [
        ("/files/a.mp4", "ok"),
        ("/files/b.mp4", "missing"),
    ]
    # ...a relative redirect stays on the origin, with the key.
    fake_service.clear()
    fake_service.file_redirects = ["/files/c.mp4"]
    assert await client.download(video, max_bytes=10**7, timeout=5)
    assert [r.auth for r in fake_service.requests] == ["ok", "ok"]

    for location, why in [
        ("http://169.254.169.254/latest/meta-data/iam/security-credentials/", "internal address"),
        (f"http://127.0.0.2:{port}/files/d.mp4", "internal address"),
        ("file:///proc/self/environ", "not an http(s) URL"),
        ("http://[::1", "not a valid URL"),
    ]:
        for start in (video, fake_service.alt_base_url + "/files/a.mp4"):  # from the origin, from the CDN
            fake_service.clear()
            fake_service.file_redirects = [location]
            with pytest.raises(UnsafeResultURL) as info:
                await client.download(start, max_bytes=10**7, timeout=5)
            refused(info, location, why)
            assert fake_service.count() == 1  # the redirect itself; the target was never contacted

    # A loop: at most max_redirects hops are followed.
    fake_service.clear()
    fake_service.file_redirect = "/files/loop.mp4"
    with pytest.raises(UnsafeResultURL) as info:
        await client.download(video, max_bytes=10**7, timeout=5)
    refused(info, "/files/loop.mp4", "redirects too many times")
    assert fake_service.count() == 4
    fake_service.clear()
    with pytest.raises(UnsafeResultURL):
        await make_client(fake_service, session, max_redirects=0).download(video, max_bytes=10**7, timeout=5)
    assert fake_service.count() == 1


async def test_credentials_in_a_result_url_are_not_a_crash(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    # Userinfo on the service's own origin: the key is its credential, the URL's are dropped (aiohttp
    # would raise a ValueError for both at once, failing the job as "internal").
    port = fake_service.port
    client = make_client(fake_service, session, max_redirects=2)
    for url in (
        f"http://user@127.0.0.1:{port}/files/a.mp4",
        f"http://user:secret@127.0.0.1:{port}/files/a.mp4",
    ):
        fake_service.clear()
        assert await client.download(url, max_bytes=10**7, timeout=5) == fake_service.video_bytes()
        assert [r.auth for r in fake_service.requests] == ["ok"]
    # ...the same after a redirect from the origin to itself with credentials.
    fake_service.clear()
    fake_service.file_redirects = [f"http://x:y@127.0.0.1:{port}/files/b.mp4"]
    data = await client.download(fake_service.base_url + "/files/a.mp4", max_bytes=10**7, timeout=5)
    assert data == fake_service.video_bytes()
    assert [r.auth for r in fake_service.requests] == ["ok", "ok"]
    # On any other host, credentials change nothing: an internal address is still refused.
    for url in (
        f"http://user@127.0.0.2:{port}/files/a.mp4",
        f"http://127.0.0.1:{port}@127.0.0.2/files/a.mp4",
        "http://user@127.0.0.1/files/a.mp4",
    ):
        fake_service.clear()
        with pytest.raises(UnsafeResultURL) as info:
            await client.download(url, max_bytes=10**7, timeout=5)
        refused(info, url, "internal address")
        assert fake_service.count() == 0


async def test_host_names_the_resolver_cannot_encode_are_refused(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    # getaddrinfo raises UnicodeError (a ValueError, not a failed lookup) for an empty or over-long
    # label: it must be a refusal with a reason, not an exception that fails the job as "internal".
    client = make_client(fake_service, session)
    for url in ("http://a..invalid/x.mp4", "http://" + "a" * 70 + ".invalid/x.mp4", "http://.invalid/x"):
        with pytest.raises(UnsafeResultURL) as info:
            await client.download(url, max_bytes=10**6, timeout=5)
        refused(info, url, "not a valid URL")
    # ...and after a redirect, hop by hop.
    fake_service.file_redirects = ["http://a..invalid/x.mp4"]
    with pytest.raises(UnsafeResultURL) as info:
        await client.download(fake_service.base_url + "/files/a.mp4", max_bytes=10**6, timeout=5)
    refused(info, "a..invalid", "not a valid URL")
    assert fake_service.count() == 1


async def test_api_answers_are_never_redirected(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.scripted.append((302, "", {"Location": "http://169.254.169.254/latest/meta-data/"}))
    with pytest.raises(BadResponse, match="redirect"):
        await make_client(fake_service, session).create_video(VIDEO)
    assert fake_service.count() == 1


async def test_gzip_results_are_inflated_within_the_cap(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    client = make_client(fake_service, session)
    fake_service.file_gzip = True
    url = fake_service.base_url + "/files/a.mp4"
    assert await client.download(url, max_bytes=10**7, timeout=5) == fake_service.video_bytes()
    # A bomb: 64 MiB of zeros, 64 KiB on the wire. The cap counts inflated bytes.
    fake_service.video_payload = bytes(64 * 1024 * 1024)
    with pytest.raises(DownloadTooLarge) as info:
        await client.download(url, max_bytes=1024 * 1024, timeout=5)
    assert info.value.limit == 1024 * 1024


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, 6)


async def test_json_answers_are_capped_after_decompression(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    client = make_client(fake_service, session, json_max_bytes=4096, image_json_max_bytes=10**6)
    padded = b'{"status": "pending", "progress": 5}' + b" " * 5000
    bomb = _gzip(b'{"status": "pending", "pad": "' + b" " * 50_000_000 + b'"}')
    assert len(bomb) < 100_000
    fake_service.path_scripted[POLL_PATH] = [
        (200, padded, None),
        (200, bomb, {"Content-Encoding": "gzip"}),
        (200, b"\x1f\x8b\x08\x00garbage", {"Content-Encoding": "gzip"}),
        (200, b'{"status": "pending"}', {"Content-Encoding": "br"}),
        (200, _gzip(b'{"status": "pending", "progress": 7}') * 2, {"Content-Encoding": "gzip"}),
    ]
    with pytest.raises(BadResponse, match="larger than the 4096-byte limit"):
        await client.poll_video("t1")
    with pytest.raises(BadResponse, match="larger than the 4096-byte limit"):
        await client.poll_video("t1")
    with pytest.raises(BadResponse, match="compression is broken"):
        await client.poll_video("t1")
    with pytest.raises(BadResponse, match="compression is broken or unknown"):
        await client.poll_video("t1")
    with pytest.raises(BadResponse, match="not valid JSON"):  # two gzip members: two documents
        await client.poll_video("t1")
    assert fake_service.count() == 5  # none of them retried at once
    # deflate, zlib-wrapped or raw, is read like gzip
    raw = zlib.compressobj(6, zlib.DEFLATED, -15)
    fake_service.path_scripted[POLL_PATH] = [
        (200, zlib.compress(b'{"status": "pending", "progress": 7}'), {"Content-Encoding": "deflate"}),
        (
            200,
            raw.compress(b'{"status": "pending", "progress": 8}') + raw.flush(),
            {"Content-Encoding": "deflate"},
        ),
    ]
    assert await client.poll_video("t1") == TaskStatus("pending", 0.07)
    assert await client.poll_video("t1") == TaskStatus("pending", 0.08)
    # An image create may carry the image inline: its own, larger cap.
    fake_service.image_shape = "data_b64"
    fake_service.image_payload = os.urandom(20_000)
    assert (await client.create_image(IMAGE)).data == fake_service.image_payload


async def test_stacked_encodings_are_undone_within_the_cap(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    # "Content-Encoding: gzip, deflate" (gzip applied first): undone last-first, each layer capped.
    client = make_client(fake_service, session, json_max_bytes=4096)
    answer = b'{"status": "pending", "progress": 9}'
    bomb = _gzip(_gzip(b'{"status": "pending", "pad": "' + b" " * 50_000_000 + b'"}'))
    assert len(bomb) < 100_000
    fake_service.path_scripted[POLL_PATH] = [
        (200, _gzip(_gzip(answer)), {"Content-Encoding": "gzip, gzip"}),
        (200, zlib.compress(_gzip(answer)), {"Content-Encoding": "gzip, deflate"}),
        (200, _gzip(zlib.compress(answer)), {"Content-Encoding": "deflate,gzip"}),
        (200, _gzip(answer), {"Content-Encoding": "identity, gzip"}),
        (200, bomb, {"Content-Encoding": "gzip, gzip"}),
        (200, _gzip(answer), {"Content-Encoding": "gzip, br"}),
        (200, _gzip(answer), {"Content-Encoding": "gzip, gzip"}),  # says two, has one
        (200, _gzip(_gzip(_gzip(_gzip(answer)))), {"Content-Encoding": "gzip, gzip, gzip, gzip"}),
    ]
    for _ in range(4):
        assert await client.poll_video("t1") == TaskStatus("pending", 0.09)
    with pytest.raises(BadResponse, match="larger than the 4096-byte limit"):
        await client.poll_video("t1")
    for _ in range(3):
        with pytest.raises(BadResponse, match="compression is broken or unknown"):
            await client.poll_video("t1")
    # A result download the same way, and a stacked bomb over the download cap.
    fake_service.file_gzip = True
    video = fake_service.base_url + "/files/a.mp4"
    for coding in ("gzip, gzip", "deflate, gzip", "gzip, deflate, gzip"):
        fake_service.file_encoding = coding
        assert await client.download(video, max_bytes=10**7, timeout=5) == fake_service.video_bytes()
    fake_service.file_encoding = "gzip, gzip"
    fake_service.video_payload = bytes(60_000_000)
    with pytest.raises(DownloadTooLarge):
        await client.download(video, max_bytes=10**7, timeout=5)
    fake_service.video_payload = None
    fake_service.file_encoding = "gzip, br"
    with pytest.raises(DownloadError, match="compression is broken or unknown"):
        await client.download(video, max_bytes=10**7, timeout=5)


async def test_error_bodies_are_read_only_in_part(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.scripted.append((400, {"error": "width must be even " + "x" * 20_000_000}, None))
    with pytest.raises(RequestRejected) as info:
        await make_client(fake_service, session).create_video(VIDEO)
    # Only the first 16 KiB were read (the rest of the 20 MB never left the socket buffer).
    assert info.value.detail is not None and "width must be even" in info.value.detail
    assert len(info.value.detail) <= 300


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"status": "pending", "progress": 1' + b"0" * 400 + b"}", "more than 40 digits"),
        (b'{"status": "pending", "progress": 1e400}', "out of range"),
        (b'{"status": "pending", "progress": NaN}', "NaN"),
        (b'{"status": "pending", "progress": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", "nested deeper"),
        (b'{"status": "pend\xff\xfeing"}', "not UTF-8"),
        (b'{"status": 5}', "no status"),
        (b'{"status": "completed", "video_url": 5}', "no video_url"),
        (b'{"status": "completed", "video_url": "http://x/\\u0000\\n"}', "not a usable URL"),
        (b"null", "expected a JSON object"),
    ],
    ids=[
        "huge-int",
        "huge-float",
        "nan",
        "deep",
        "not-utf8",
        "status-type",
        "url-type",
        "url-control",
        "null",
    ],
)
async def test_malformed_poll_answers_are_bad_responses(
    fake_service: FakeService, session: aiohttp.ClientSession, body: bytes, why: str
) -> None:
    fake_service.path_scripted[POLL_PATH] = [(200, body, None)]
    with pytest.raises(BadResponse, match=why):
        await make_client(fake_service, session).poll_video("t1")


@pytest.mark.parametrize(
    "answer",
    [
        {"video_id": "abc\x1b[31mdef"},
        {"video_id": "x" * 300},
        {"task_id": "a b"},
        {"video_id": "\ud800"},
        {"id": -4},
    ],
)
async def test_unusable_task_ids_are_bad_responses(
    fake_service: FakeService, session: aiohttp.ClientSession, answer: dict[str, Any]
) -> None:
    fake_service.scripted.append((200, answer, None))
    with pytest.raises(BadResponse, match="no usable video_id or task_id"):
        await make_client(fake_service, session).create_video(VIDEO)
    assert fake_service.count() == 1  # a create is never retried on a bad answer


async def test_unreadable_polls_are_counted_not_retried(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    fake_service.default_plan = TaskPlan(polls=2)
    client = make_client(fake_service, session, clock=ScaledClock(100), malformed_polls=3)
    task_id = await client.create_video(VIDEO)
    bad = (200, b'{"status": "pending", "progress": ' + b"9" * 500 + b"}", None)
    deep = (200, b"[" * 200_000, None)
    # bad, bad, good (resets the count), bad, bad, good, good -> completed
    fake_service.path_scripted[POLL_PATH] = [bad, deep]
    seen: list[TaskStatus] = []

    async def on_progress(status: TaskStatus) -> None:
        seen.append(status)
        if len(seen) == 1:
            fake_service.path_scripted[POLL_PATH] = [bad, deep]

    done = await client.wait_video(task_id, interval=2.0, timeout=600.0, on_progress=on_progress)
    assert done.state == "completed"
    polls = [r.received for r in fake_service.requests if r.path == POLL_PATH]
    assert len(polls) == 7
    # Each unreadable answer waited for the next interval (20 ms real), never retried at once.
    assert all(b - a >= 0.02 * 0.9 for a, b in zip(polls, polls[1:], strict=False))

    fake_service.clear()
    task_id = await client.create_video(VIDEO)
    fake_service.path_scripted[POLL_PATH] = [bad, deep, (200, b"\xff", None), bad]
    with pytest.raises(BadResponse, match=r"unreadable 3 times in a row") as info:
        await client.wait_video(task_id, interval=2.0, timeout=600.0)
    assert info.value.code == "bad_response" and task_id in str(info.value)
    assert fake_service.count(path=POLL_PATH) == 3


async def test_service_text_is_made_safe(fake_service: FakeService, session: aiohttp.ClientSession) -> None:
    client = make_client(fake_service, session, clock=ScaledClock(100))
    fake_service.path_scripted[POLL_PATH] = [
        (200, b'{"status": "failed", "error": "policy \\ud800 violation\\u202e\\u0007 \\n here"}', None),
        (200, json.dumps({"status": "failed", "error": "long " * 5000}).encode(), None),
    ]
    with pytest.raises(TaskFailed) as info:
        await client.wait_video("t1", interval=1.0, timeout=60.0)
    assert info.value.reason == "policy \ufffd violation here"
    str(info.value).encode("utf-8")  # storable and loggable
    with pytest.raises(TaskFailed) as info:
        await client.wait_video("t1", interval=1.0, timeout=60.0)
    assert info.value.reason is not None and len(info.value.reason) <= 500
    fake_service.scripted.append((422, b'{"error": {"message": "no \\udfff\\u0000 way"}}', None))
    with pytest.raises(RequestRejected) as rejected:
        await client.create_video(VIDEO)
    assert rejected.value.detail == "no \ufffd way"
    fake_service.scripted.append((200, {"status": "failed", "error": {"message": "bad \ud83d image"}}, None))
    with pytest.raises(TaskFailed, match="bad \ufffd image"):
        await client.create_image(IMAGE)


# -- metrics ------------------------------------------------------------------------------------------
def requests_counted(metrics: Metrics, kind: str, status: str) -> float:
    value = metrics.registry.get_sample_value(
        "framecast_service_requests_total", {"kind": kind, "status": status}
    )
    return value or 0.0


async def test_every_request_is_counted_by_kind_and_status_never_by_key(
    fake_service: FakeService, session: aiohttp.ClientSession
) -> None:
    metrics = Metrics(process=False)
    label = key_label(fake_service.api_key)
    fake_service.default_plan = TaskPlan(polls=0)
    client = make_client(fake_service, session, metrics=metrics, key_label=label, retry_max=3)
    await client.list_models()
    status = await client.poll_video(await client.create_video(VIDEO))
    assert status.result_url is not None
    await client.download(status.result_url, max_bytes=10**7, timeout=5)
    fake_service.image_shape = "url"
    await client.create_image(IMAGE)
    counted = {
        kind: requests_counted(metrics, kind, "200")
        for kind in ("models", "create_video", "poll", "download", "create_image")
    }
    assert counted == {"models": 1, "create_video": 1, "poll": 1, "download": 1, "create_image": 1}

    # A 429 is counted as a request and once more under the key's label; the retry that follows too.
    fake_service.scripted.append((429, {"error": "slow down"}, {"Retry-After": "0"}))
    await client.list_models()
    assert requests_counted(metrics, "models", "429") == 1 and requests_counted(metrics, "models", "200") == 2
    assert metrics.registry.get_sample_value("framecast_service_429_total", {"key": label}) == 1

    text = generate_latest(metrics.registry).decode()
    assert fake_service.api_key not in text and label.startswith("guild-") and label in text


async def test_a_request_without_an_answer_is_counted_as_an_error(session: aiohttp.ClientSession) -> None:
    fake = FakeService()
    await fake.start()
    url = fake.base_url
    await fake.stop()
    metrics = Metrics(process=False)
    client = make_client(fake, session, base_url=url, retry_max=2, key="k-123456", metrics=metrics)
    with pytest.raises(ServiceUnavailable):
        await client.list_models()
    assert requests_counted(metrics, "models", "error") == 2  # both attempts, no status
    assert metrics.registry.get_sample_value("framecast_service_429_total", {"key": "operator"}) is None
