"""framecast.service.transport: the one retry loop behind API calls and downloads (no network)."""

from __future__ import annotations

import random
from typing import Any, cast

import aiohttp
import pytest

from framecast.backoff import backoff_delay
from framecast.config import Secret
from framecast.keys.budget import RequestBudget
from framecast.logsetup import mask_secrets
from framecast.service.errors import ServiceError, ServiceUnavailable
from framecast.service.transport import Answer, Retry, Transport


class RecordingClock:
    """A clock whose sleeps return at once and are written down."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def make_transport(clock: RecordingClock, *, retry_max: int = 4, seed: int = 1) -> Transport:
    return Transport(
        cast(aiohttp.ClientSession, None),  # retrying() never touches the network
        base_url="http://svc.invalid",
        api_key=Secret("sk-test-key"),
        budget=RequestBudget(10, 1.0, clock=clock),
        clock=clock,
        request_timeout=5,
        retry_max=retry_max,
        backoff_base=1.0,
        backoff_max=8.0,
        rng=random.Random(seed),
        json_max_bytes=1000,
    )


def scripted(outcomes: list[Any]) -> Any:
    calls = iter(outcomes)

    async def attempt() -> Any:
        return next(calls)

    return attempt


def unavailable(n: int) -> ServiceError:
    return ServiceUnavailable(f"gave up after {n}")


async def test_backoff_between_attempts_then_the_value() -> None:
    clock = RecordingClock()
    transport = make_transport(clock, seed=7)
    value = await transport.retrying("x", scripted([Retry("HTTP 503", unavailable)] * 3 + ["done"]))
    assert value == "done"
    rng = random.Random(7)
    assert clock.sleeps == [backoff_delay(n, base=1.0, cap=8.0, rng=rng) for n in (1, 2, 3)]


async def test_retry_after_is_honoured_and_capped() -> None:
    clock = RecordingClock()
    transport = make_transport(clock)
    outcomes = [
        Retry("HTTP 503", unavailable, retry_after=0.25),
        Retry("HTTP 503", unavailable, retry_after=600),
        1,
    ]
    assert await transport.retrying("x", scripted(outcomes)) == 1
    assert clock.sleeps == [0.25, 8.0]


async def test_a_budget_pause_is_the_wait() -> None:
    clock = RecordingClock()
    transport = make_transport(clock)
    outcomes = [Retry("rate limited (HTTP 429)", unavailable, budget_pause=3.0), b"ok"]
    assert await transport.retrying("x", scripted(outcomes)) == b"ok"
    assert clock.sleeps == []  # the budget holds the next slot back; the loop does not sleep too


async def test_gives_up_after_retry_max_attempts() -> None:
    clock = RecordingClock()
    transport = make_transport(clock, retry_max=3)
    with pytest.raises(ServiceUnavailable, match="gave up after 3"):
        await transport.retrying("x", scripted([Retry("HTTP 502", unavailable)] * 5))
    assert len(clock.sleeps) == 2


async def test_errors_raised_by_an_attempt_are_not_retried() -> None:
    clock = RecordingClock()
    transport = make_transport(clock)
    calls = 0

    async def attempt() -> bytes:
        nonlocal calls
        calls += 1
        raise ServiceUnavailable("fatal")

    with pytest.raises(ServiceUnavailable, match="fatal"):
        await transport.retrying("x", attempt)
    assert calls == 1 and clock.sleeps == []


def test_answer_ok_needs_a_complete_2xx() -> None:
    assert Answer(status=200).ok
    assert not Answer(status=200, problem="connection problem (reset)").ok
    assert not Answer(status=302).ok and not Answer().ok


def test_the_key_is_scrubbed_before_cutting() -> None:
    transport = make_transport(RecordingClock())
    assert transport.scrub("echo sk-test-key back") == "echo *** back"
    shown = transport.shown("x" * 10 + "sk-test-key", 15)
    assert shown is not None and "sk-test" not in shown
    assert "sk-test-key" not in transport.describe(OSError("bad key sk-test-key"))
    assert transport.headers()["Authorization"] == "Bearer sk-test-key"


def test_every_key_the_bot_holds_is_scrubbed_and_revealing() -> None:
    transport = make_transport(RecordingClock())
    other = "sk-another-servers-key"
    owner = object()
    assert not transport.reveals_key(f"https://cdn.example/v.mp4?k={other}")
    mask_secrets(owner, {other})  # as Accounts publishes the keys its accounts hold
    try:
        assert transport.scrub(f"bad keys sk-test-key and {other}") == "bad keys *** and ***"
        for link in (
            "https://cdn.example/v.mp4?k=sk-test-key",
            f"https://cdn.example/{other}/v.mp4",
            "https://cdn.example/v.mp4?k=" + other.replace("-", "%2D"),
        ):
            assert transport.reveals_key(link), link
        assert not transport.reveals_key("https://cdn.example/v.mp4?sig=sk-test")
    finally:
        mask_secrets(owner, ())
