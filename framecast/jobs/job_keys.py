"""Which API key runs a job, as the runner sees it (:mod:`framecast.keys.accounts` implements it).

Each job runs on one key: the operator's, or its server's own. The runner reaches keys only
through these two protocols, so the jobs package does not depend on how keys are stored or budgeted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from framecast.jobs.model import Job

if TYPE_CHECKING:
    from framecast.planner.planner import Planner
    from framecast.service import GenerationClient

__all__ = ["JobAccounts", "KeyAccount"]


class KeyAccount(Protocol):
    """One API key as the runner uses it (:class:`framecast.keys.accounts.Account` implements it)."""

    @property
    def owner(self) -> int | None:
        """The guild whose own key this is (None: the operator's key)."""
        ...

    @property
    def client(self) -> GenerationClient:
        """The service client carrying this key (with its own request budget)."""
        ...

    @property
    def planner(self) -> Planner | None:
        """The key's planner (None: fixed pace, nothing learned)."""
        ...

    @property
    def rejected(self) -> bool:
        """The service refused this (server's) key: no new task is created with it."""
        ...


class JobAccounts(Protocol):
    """Which key runs which job (:class:`framecast.keys.accounts.Accounts` implements it)."""

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
