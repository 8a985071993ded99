"""Which API key runs a job, as the runner sees it (:mod:`framecast.accounts` implements it).

Each job runs on one key: the operator's, or its server's own. The runner reaches keys only
through these two protocols, so the jobs package does not depend on how keys are stored or budgeted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from framecast.service.types import PollPacer
from framecast.values.job import Job
from framecast.values.service_requests import Priority, RefusalKind

if TYPE_CHECKING:
    from framecast.service import GenerationClient

__all__ = ["CreateFailure", "JobAccounts", "JobPlan", "KeyAccount", "NoPlan"]

T = TypeVar("T")


@dataclass(frozen=True)
class CreateFailure:
    """What the runner makes of a create attempt that failed, for the job's plan to learn and act on."""

    #: The service pushed back: for the key's rate or for its tasks at once. None: the service's
    #: error (a 5xx, a timeout).
    refusal: RefusalKind | None
    #: Clock seconds of backoff before the next attempt (None: given up, the error is raised).
    retry_in: float | None


class JobPlan(Protocol):
    """One job's handle on its key's planner (:meth:`KeyAccount.plan`): one call for each of the
    job's three phases: its create, its polls, its end."""

    async def create(
        self,
        send: Callable[[Callable[[], Priority]], Awaitable[T]],
        *,
        failure: Callable[[Exception], CreateFailure | None],
        sleep: Callable[[float], Awaitable[None]],
    ) -> T:
        """Create the job's task: `send` one attempt, and again after each that failed, until one
        goes through; what `send` returned then (the created task).

        `send(sent_now)` calls ``sent_now()`` right as it sends the create (after what it checks
        first, so a create never sent is never counted): the budget priority to send it at.
        `failure(exc)` judges what `send` raised: a create failure, tried again once the plan lets
        the next attempt go (after `retry_in`; `sleep` waits clock seconds) or raised when given
        up; or None: not one, raised as it is (a create sent stays counted in flight until the
        runner's ``JobAccounts.unbind``).
        """
        ...

    def pacer(self) -> PollPacer | None:
        """When the task is polled (None: every poll interval)."""
        ...

    async def ended(self, *, completed: bool) -> None:
        """The job stopped waiting for its task: seen completed, or not (failed, cancelled, paused)."""
        ...


class NoPlan:
    """The handle of a key without a planner: normal priority, a fixed pace, nothing learned."""

    def __repr__(self) -> str:
        return "<NoPlan>"

    async def create(
        self,
        send: Callable[[Callable[[], Priority]], Awaitable[T]],
        *,
        failure: Callable[[Exception], CreateFailure | None],
        sleep: Callable[[float], Awaitable[None]],
    ) -> T:
        """Send at normal priority; after a failure, wait its `retry_in` and send again."""
        while True:
            try:
                return await send(_normal)
            except Exception as exc:
                failed = failure(exc)
                if failed is None or failed.retry_in is None:
                    raise
                retry_in = failed.retry_in
            await sleep(retry_in)

    def pacer(self) -> PollPacer | None:
        """Every poll interval."""
        return None

    async def ended(self, *, completed: bool) -> None:
        """Nothing to learn."""


def _normal() -> Priority:
    return Priority.NORMAL


class KeyAccount(Protocol):
    """One API key as the runner uses it (:class:`framecast.accounts.Account` implements it)."""

    @property
    def owner(self) -> int | None:
        """The guild whose own key this is (None: the operator's key)."""
        ...

    @property
    def client(self) -> GenerationClient:
        """The service client carrying this key (with its own request budget)."""
        ...

    @property
    def key_last4(self) -> str:
        """The key's last four characters (written with the task it creates, told apart after a restart)."""
        ...

    def plan(self, job: Job) -> JobPlan:
        """`job`'s handle on the key's planner (:class:`NoPlan` for a key without one)."""
        ...

    @property
    def rejected(self) -> bool:
        """The service refused this (server's) key: no new task is created with it."""
        ...


class JobAccounts(Protocol):
    """Which key runs which job (:class:`framecast.accounts.Accounts` implements it)."""

    def for_job(self, job: Job) -> KeyAccount | None:
        """The key `job` runs on (None: the key that created its task is gone).

        Not created yet: its guild's key now; else the key that created its task.
        """
        ...

    def key_unreadable(self, guild_id: int) -> bool:
        """The guild's stored key cannot be decrypted: its jobs not yet created fail, never on another key."""
        ...

    def reveals_key(self, text: str) -> bool:
        """Whether `text` (a result link) carries any API key the bot holds (see :func:`shareable_link`)."""
        ...

    def bind(self, job_id: int, account: KeyAccount) -> None:
        """The runner works on the job with `account` (kept open until :meth:`unbind`)."""
        ...

    def unbind(self, job_id: int) -> None:
        """The runner is done with the job."""
        ...

    async def key_rejected(self, account: KeyAccount) -> None:
        """A server's own key got a 401 (told once per key; the operator's key is not reported here)."""
        ...
