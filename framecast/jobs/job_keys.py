"""Which API key runs a job, as the runner sees it (:mod:`framecast.accounts` implements it).

Each job runs on one key: the operator's, or its server's own. The runner reaches keys only
through these two protocols, so the jobs package does not depend on how keys are stored or budgeted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from framecast.service.types import PollPacer
from framecast.values.job import Job
from framecast.values.service_requests import Priority, RefusalKind

if TYPE_CHECKING:
    from framecast.service import GenerationClient

__all__ = ["JobAccounts", "JobPlan", "KeyAccount", "NoPlan"]


class JobPlan(Protocol):
    """One job's handle on its key's planner (:meth:`KeyAccount.plan`): what the runner tells it,
    and asks it, in the job's three phases: its create, its polls, its end."""

    def creating(self) -> Priority:
        """The create is sent now: at which budget priority."""
        ...

    def created(self) -> None:
        """The create went through."""
        ...

    async def create_failed(
        self,
        refusal: RefusalKind | None,
        *,
        retry_in: float | None,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        """The create failed (`refusal`: the service pushed back, None: its error); unless `retry_in`
        is None (given up), return when the next try may go (`sleep` waits clock seconds)."""
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

    def creating(self) -> Priority:
        """A create at normal priority."""
        return Priority.NORMAL

    def created(self) -> None:
        """Nothing to learn."""

    async def create_failed(
        self,
        refusal: RefusalKind | None,
        *,
        retry_in: float | None,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        """Wait `retry_in` (nothing, when given up)."""
        if retry_in is not None:
            await sleep(retry_in)

    def pacer(self) -> PollPacer | None:
        """Every poll interval."""
        return None

    async def ended(self, *, completed: bool) -> None:
        """Nothing to learn."""


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

    def bind(self, job_id: int, account: KeyAccount) -> None:
        """The runner works on the job with `account` (kept open until :meth:`unbind`)."""
        ...

    def unbind(self, job_id: int) -> None:
        """The runner is done with the job."""
        ...

    async def key_rejected(self, account: KeyAccount) -> None:
        """A server's own key got a 401 (told once per key; the operator's key is not reported here)."""
        ...
