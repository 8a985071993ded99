"""A key's shared state through a real Redis: what each process publishes, and reads of the others'.

Each "process" is a SharedPlanState with its own Redis connection on one key id (unique per test,
deleted after), publishing a plain text (:class:`Note`) and reading the others' texts, sorted. Redis
must answer on 127.0.0.1:6379, else the module is skipped. Refreshes are called by hand unless a
test is about the refresh task itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from framecast.clock import Clock, SystemClock
from framecast.keys.shared_plan import KEY_PREFIX, SharedPlanState
from tests.e2e.servers import Relay
from tests.fakes.clock import ManualClock
from tests.redis_server import REDIS_HOST, REDIS_PORT, own_connection, refresh_all, requires_redis

pytestmark = requires_redis

WINDOW = 60.0
#: The view without other processes.
NOBODY: tuple[str, ...] = ()

State = SharedPlanState[tuple[str, ...]]


@dataclass(frozen=True)
class Note:
    """A payload: its text as it is."""

    text: str

    def to_json(self) -> str:
        return self.text


def _read(payloads: list[str]) -> tuple[str, ...]:
    return tuple(sorted(payloads))


@dataclass
class Proc:
    """One process's side of the key: its state, its connection, and what it publishes."""

    shared: State
    redis: aioredis.Redis
    note: Note


ProcFactory = Callable[..., Awaitable[Proc]]


@pytest.fixture
async def proc(plan_key_id: str) -> AsyncIterator[ProcFactory]:
    """Make processes on `plan_key_id`, publishing `text` (closed after the test)."""

    async def make(
        text: str, *, port: int = REDIS_PORT, window: float = WINDOW, clock: Clock | None = None
    ) -> Proc:
        redis = own_connection(port)
        shared = SharedPlanState(
            redis=redis,
            key_id=plan_key_id,
            clock=clock or ManualClock(),
            window=window,
            read=_read,
            nobody=NOBODY,
        )
        p = Proc(shared, redis, Note(text))
        shared.attach(lambda: p.note)
        processes.push_async_callback(redis.aclose)
        processes.push_async_callback(shared.aclose)
        return p

    async with contextlib.AsyncExitStack() as processes:
        yield make


async def refresh(*procs: Proc) -> None:
    """Each publishes, then each reads, until everyone saw everyone's latest."""
    await refresh_all(*(p.shared for p in procs))


async def test_each_process_reads_the_others_payloads_and_not_its_own(
    proc: ProcFactory, plan_key_id: str
) -> None:
    a, b, c = await proc('{"a": 1}'), await proc("b"), await proc("c")
    assert a.shared.view == NOBODY  # nothing read yet
    await refresh(a, b, c)
    assert a.shared.view == ("b", "c") and b.shared.view == ("c", '{"a": 1}')
    # What Redis holds: one field per process, the server time (ms) then the payload as published.
    stored = await a.redis.hget(f"{KEY_PREFIX}{plan_key_id}", a.shared.owner)
    assert isinstance(stored, bytes) and re.fullmatch(rb'\d{13} \{"a": 1\}', stored)
    a.note = Note("a2")
    await refresh(a, b)
    assert b.shared.view == ("a2", "c")


async def test_a_view_change_is_heard_and_an_unchanged_one_is_not(proc: ProcFactory) -> None:
    a, b = await proc("a"), await proc("b")
    heard: list[tuple[str, ...]] = []
    b.shared.attach(lambda: b.note, lambda: heard.append(b.shared.view))
    await refresh(a, b)
    assert heard == [("a",)]
    await refresh(a, b)
    assert heard == [("a",)]
    a.note = Note("a2")
    await refresh(a, b)
    assert heard == [("a",), ("a2",)]


async def test_a_dead_process_stops_counting(proc: ProcFactory, plan_key_id: str) -> None:
    # A short window (in seconds of Redis' own clock): a silent field is stale after two windows.
    a, b = await proc("a", window=0.2), await proc("b", window=0.2)
    await refresh(a, b)
    assert b.shared.view == ("a",)
    # A dies without a word (kill -9): its field stays until it is stale.
    await a.redis.aclose()
    assert await b.shared.refresh() and b.shared.view == ("a",)
    await asyncio.sleep(a.shared.stale_after + 0.1)
    assert await b.shared.refresh()
    assert b.shared.view == NOBODY
    fields = await b.redis.hkeys(f"{KEY_PREFIX}{plan_key_id}")
    assert fields == [b.shared.owner.encode()]  # the dead field is gone from Redis too


async def test_a_closed_process_withdraws_at_once(proc: ProcFactory, plan_key_id: str) -> None:
    a, b = await proc("a"), await proc("b")
    await refresh(a, b)
    assert b.shared.view == ("a",)
    await a.shared.aclose()
    assert await b.shared.refresh()
    assert b.shared.view == NOBODY
    assert await b.redis.hkeys(f"{KEY_PREFIX}{plan_key_id}") == [b.shared.owner.encode()]


async def test_the_refresh_task_publishes_on_its_own(proc: ProcFactory) -> None:
    clock = SystemClock()
    a, b = await proc("a", window=0.4, clock=clock), await proc("b", window=0.4, clock=clock)
    assert a.shared.period == pytest.approx(0.1)
    a.shared.start()
    b.shared.start()
    for _ in range(50):
        if a.shared.view == ("b",) and b.shared.view == ("a",):
            break
        await asyncio.sleep(0.05)
    assert a.shared.view == ("b",) and b.shared.view == ("a",)
    b.note = Note("b2")
    for _ in range(50):
        if a.shared.view == ("b2",):
            break
        await asyncio.sleep(0.05)
    assert a.shared.view == ("b2",)
    await b.shared.aclose()
    for _ in range(50):
        if a.shared.view == NOBODY:
            break
        await asyncio.sleep(0.05)
    assert a.shared.view == NOBODY


async def test_without_redis_the_view_is_nobody_and_the_outage_is_logged_once(
    proc: ProcFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="framecast.keys.shared_plan")
    relay = Relay((REDIS_HOST, REDIS_PORT))
    await relay.start()
    try:
        a, b = await proc("a"), await proc("b", port=relay.port)
        await refresh(a, b)
        assert b.shared.view == ("a",)
        await relay.cut()
        # Redis is gone: B reads nobody at once, and says so once.
        assert not await b.shared.refresh()
        assert not await b.shared.refresh()
        assert b.shared.view == NOBODY
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "Redis unreachable" in warnings[0].getMessage()
        assert str(relay.port) not in warnings[0].getMessage()  # the error's class only, no address
        await relay.restore()
        assert await b.shared.refresh()
        assert b.shared.view == ("a",)
        assert any("reachable again" in r.getMessage() for r in caplog.records)
    finally:
        await relay.cut()


async def test_a_cache_nobody_refreshed_for_two_windows_is_ignored(proc: ProcFactory) -> None:
    clock = ManualClock()
    a, b = await proc("a", clock=clock), await proc("b", clock=clock)
    await refresh(a, b)
    assert b.shared.view == ("a",)
    # The refresh task stalled (no answer, no error): after two windows the view is dropped.
    assert b.shared.stale_after == 2 * WINDOW
    await clock.advance(b.shared.stale_after + 1)
    assert b.shared.view == NOBODY


async def test_nothing_is_published_before_a_reader_is_attached(plan_key_id: str) -> None:
    redis = own_connection()
    try:
        shared = SharedPlanState(
            redis=redis, key_id=plan_key_id, clock=ManualClock(), window=WINDOW, read=_read, nobody=NOBODY
        )
        with pytest.raises(RuntimeError):
            await shared.refresh()
        with pytest.raises(RuntimeError):
            shared.start()
        assert await redis.exists(f"{KEY_PREFIX}{plan_key_id}") == 0
    finally:
        await redis.aclose()


def test_a_key_id_is_one_word_and_a_window_is_positive() -> None:
    def state(key_id: str, window: float) -> State:
        return SharedPlanState(
            redis=aioredis.Redis(),
            key_id=key_id,
            clock=SystemClock(),
            window=window,
            read=_read,
            nobody=NOBODY,
        )

    with pytest.raises(ValueError):
        state("has space", 1.0)
    with pytest.raises(ValueError):
        state("", 1.0)
    with pytest.raises(ValueError):
        state("word", 0.0)
    assert state("word", 1.0).key == "framecast:plan:word"
