"""The handle of a key without a planner (``NoPlan``): a create at normal priority, a plain backoff."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from framecast.jobs.job_keys import CreateFailure, NoPlan
from framecast.values.service_requests import Priority, RefusalKind


class Refused(Exception):
    """An attempt that failed, with what the runner made of it."""

    def __init__(self, failure: CreateFailure) -> None:
        super().__init__(failure)
        self.failure = failure


class Script:
    """Each attempt answers the next of `answers` (None: through); what it was sent at, what was waited."""

    def __init__(self, *answers: CreateFailure | Exception | None) -> None:
        self.answers = list(answers)
        self.sent: list[Priority] = []
        self.waited: list[float] = []

    async def send(self, sent_now: Callable[[], Priority]) -> str:
        self.sent.append(sent_now())
        answer = self.answers.pop(0)
        if isinstance(answer, CreateFailure):
            raise Refused(answer)
        if isinstance(answer, Exception):
            raise answer
        return "task-1"

    async def sleep(self, seconds: float) -> None:
        self.waited.append(seconds)

    async def create(self) -> str:
        return await NoPlan().create(self.send, failure=judged, sleep=self.sleep)


def judged(exc: Exception) -> CreateFailure | None:
    return exc.failure if isinstance(exc, Refused) else None


async def test_a_create_without_a_planner_waits_each_backoff_as_given_and_is_sent_again() -> None:
    script = Script(
        CreateFailure(None, retry_in=3.0), CreateFailure(RefusalKind.CONCURRENCY, retry_in=5.0), None
    )
    assert await script.create() == "task-1"
    assert script.sent == [Priority.NORMAL] * 3
    assert script.waited == [3.0, 5.0]  # a concurrency refusal too: nothing to wait for but the time


async def test_a_create_without_a_planner_given_up_raises_at_once() -> None:
    script = Script(CreateFailure(RefusalKind.RATE, retry_in=None))
    with pytest.raises(Refused):
        await script.create()
    assert script.waited == []


async def test_a_create_without_a_planner_raises_what_is_no_create_failure_as_it_is() -> None:
    script = Script(LookupError("the store paused"))
    with pytest.raises(LookupError):
        await script.create()
    assert script.sent == [Priority.NORMAL] and script.waited == []
