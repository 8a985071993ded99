"""A create refused for the key's tasks at once is told from one refused for the key's rate.

What the answer says decides, else what the key's other requests meet: creates refused while
polls pass. A concurrency refusal neither pauses the budget nor is retried at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from framecast.service import GenerationClient
from framecast.service.errors import (
    RateLimited,
    RequestRejected,
    ServiceUnavailable,
    TooManyTasks,
    says_too_many_tasks,
)
from framecast.service.refusals import CreateRefusals, create_refusal
from framecast.values.service_requests import RefusalKind
from tests.fakes.gen_service import POLL_PATH, FakeService, TaskPlan
from tests.service.clients import VIDEO, new_client

CONCURRENCY, RATE = RefusalKind.CONCURRENCY, RefusalKind.RATE


@pytest.mark.parametrize(
    "words",
    [
        "too many tasks are running for this key",
        '{"error": {"code": "concurrency_limit_exceeded", "message": "Too Many Requests"}}',
        "You have reached the maximum number of concurrent tasks",
        "3 tasks already in progress",
        "parallel task over resource pack limit",
        "limit of 3 active jobs",
        '{"detail": "max_concurrent_tasks reached"}',
        "You can only run 2 generations at a time",
        "Task limit reached",
        "the queue is full",
    ],
)
def test_words_of_too_many_tasks_at_once_are_a_concurrency_refusal(words: str) -> None:
    assert says_too_many_tasks(words)
    assert CreateRefusals().classify(words.encode()) is CONCURRENCY


@pytest.mark.parametrize(
    "words",
    [
        '{"error": {"message": "Rate limit exceeded", "type": "rate_limit_error"}}',
        "Too Many Requests",
        "You exceeded 16 requests per minute",
        "too many requests at once, slow down",
        "daily video limit reached",
        "",
    ],
)
def test_words_of_the_rate_or_none_are_a_rate_refusal_the_first_time(words: str) -> None:
    assert not says_too_many_tasks(words)
    assert CreateRefusals().classify(words.encode()) is RATE


def test_creates_refused_while_polls_pass_are_concurrency_refusals() -> None:
    refusals = CreateRefusals()
    assert refusals.classify(b"Rate limit exceeded") is RATE
    refusals.answered(200)  # a poll went through meanwhile
    assert refusals.classify(b"Rate limit exceeded") is CONCURRENCY
    assert refusals.classify(b"Rate limit exceeded") is CONCURRENCY  # known from now on
    refusals.answered(429)  # ...until a poll is refused: the rate binds after all
    assert refusals.classify(b"") is RATE


def test_creates_refused_with_nothing_passing_between_them_stay_rate_refusals() -> None:
    refusals = CreateRefusals()
    assert refusals.classify(b"") is RATE
    assert refusals.classify(b"") is RATE
    refusals.answered(429)
    refusals.answered(None)
    assert refusals.classify(b"") is RATE


def test_a_create_that_failed_for_good_is_refused_for_its_rate_or_its_tasks_at_once() -> None:
    assert create_refusal(TooManyTasks()) is CONCURRENCY
    assert create_refusal(RequestRejected(status=409, detail="3 tasks already running")) is CONCURRENCY
    assert create_refusal(RateLimited()) is RATE
    assert create_refusal(RequestRejected(status=400, detail="Too many requests")) is RATE
    assert create_refusal(RequestRejected(status=400, detail="width must be even")) is None
    assert create_refusal(ServiceUnavailable()) is None


@given(st.binary(max_size=300), st.lists(st.sampled_from([None, 200, 404, 429, 503]), max_size=5))
def test_any_refusal_body_is_classified_without_error(body: bytes, statuses: list[int | None]) -> None:
    refusals = CreateRefusals()
    for status in statuses:
        refusals.answered(status)
    assert refusals.classify(body) in (RATE, CONCURRENCY)
    assert isinstance(says_too_many_tasks(body.decode("utf-8", "replace")), bool)


@pytest.fixture
async def client(fake_service: FakeService) -> AsyncIterator[GenerationClient]:
    async with aiohttp.ClientSession() as session:
        client = new_client(fake_service, session, backoff_base=0.05)
        try:
            yield client
        finally:
            await client.close()


async def test_a_create_over_the_cap_raises_at_once_and_leaves_the_budget_alone(
    fake_service: FakeService, client: GenerationClient
) -> None:
    fake_service.default_plan = TaskPlan(duration=60.0)
    fake_service.max_running = 1
    task = await client.create_video(VIDEO)
    with pytest.raises(TooManyTasks) as refused:
        await client.create_video(VIDEO)
    assert isinstance(refused.value, RateLimited)  # whoever does not tell them apart still copes
    assert fake_service.count(path="/v1/videos") == 2  # not retried: it would be refused again
    budget = client.budget
    assert budget.streak == 0 and budget.paused_for() == 0 and budget.allowed == budget.limit
    assert (await client.poll_video(task)).state == "pending"  # polls go on at once


async def test_an_unexplained_refusal_becomes_a_concurrency_one_once_polls_pass(
    fake_service: FakeService, client: GenerationClient
) -> None:
    fake_service.default_plan = TaskPlan(duration=60.0)
    fake_service.max_running = 1
    fake_service.max_running_message = "Rate limit exceeded"
    fake_service.max_running_type = "rate_limit_error"
    task = await client.create_video(VIDEO)
    with pytest.raises(RateLimited) as first:
        await client.create_video(VIDEO)
    assert not isinstance(first.value, TooManyTasks)  # once alone: it may be the key's rate
    await client.poll_video(task)  # the poll passes...
    with pytest.raises(TooManyTasks):  # ...while creates are refused: a cap
        await client.create_video(VIDEO)
    assert fake_service.count(path=POLL_PATH, status=429) == 0
