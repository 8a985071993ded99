"""One API key's parts, and one server's use of a key (the operator's, or a server's own).

:class:`KeyParts` is what one key owns however many servers set it: its budget (``keys``), its
service client (``service``) and its planner (``planner``). :class:`Account` is one server's (or
the operator's) use of those parts. :class:`~framecast.accounts.accounts.Accounts` opens, shares
and closes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from framecast.config import Secret
from framecast.jobs.queues import Scope
from framecast.keys.shared_plan import SharedPlanState
from framecast.ops.metrics import BudgetReading
from framecast.planner.planner import PlannedJob, Planner
from framecast.planner.shared import SharedView
from framecast.service import GenerationClient
from framecast.service.budget import Budget
from framecast.values import Job

__all__ = ["Account", "KeyCheck", "KeyParts"]


@dataclass(eq=False)
class KeyParts:
    """What one API key owns, however many servers set it: its budget, client and planner.

    The service limits requests per key, so two servers that set the same key share one budget
    and one planner (and the operator's, if a server sets the operator's key).
    """

    key: Secret = field(repr=False)
    label: str  # the key's name in the metrics (never the key)
    budget: Budget
    client: GenerationClient
    planner: Planner
    #: The guilds whose jobs run on this key, as the queues index them (the planner counts only those).
    scope: Scope = field(repr=False)
    #: What the planner shares with other processes on this key (``REDIS_URL``); None: alone.
    shared: SharedPlanState[SharedView] | None = field(default=None, repr=False)
    #: Accounts using these parts; closed when the last one goes.
    users: int = 0

    def budget_reading(self) -> BudgetReading:
        """The budget's gauges now (read by the metrics at scrape time)."""
        b = self.budget
        return BudgetReading(used=b.used(), limit=b.limit, allowed=b.allowed, waiting=b.waiting)

    async def close(self, *, keep_budget: bool = False) -> None:
        """Close the client's own session, the budget's timer (unless kept) and the planner's shared state."""
        if self.shared is not None:
            await self.shared.aclose()
        await self.client.close()
        if not keep_budget:
            self.budget.close()


@dataclass(eq=False)
class Account:
    """One server's (or the operator's) use of an API key: its :class:`KeyParts` and its status."""

    owner: int | None  # the guild whose own key this is; None: the operator's
    last4: str  # the only part of a server's key ever shown (to its admins); "" for the operator's
    parts: KeyParts
    #: The service answered 401 to this key (its admins were told once).
    rejected: bool = False
    #: Jobs a runner is working on with this key (a replaced key stays open until they end).
    jobs: set[int] = field(default_factory=set, repr=False)

    @property
    def key(self) -> Secret:
        """The API key."""
        return self.parts.key

    @property
    def key_last4(self) -> str:
        """The key's last four characters, written with each task it creates (a task is polled only with
        the key that created it, which a restart knows by them)."""
        return self.parts.key.reveal()[-4:]

    @property
    def budget(self) -> Budget:
        """The key's request budget (shared by every server using the key)."""
        return self.parts.budget

    @property
    def client(self) -> GenerationClient:
        """The service client carrying the key."""
        return self.parts.client

    @property
    def planner(self) -> Planner:
        """The key's planner."""
        return self.parts.planner

    def plan(self, job: Job) -> PlannedJob:
        """`job`'s handle on the key's planner (the runner's :class:`~framecast.jobs.job_keys.JobPlan`)."""
        return self.parts.planner.plan(job)

    @property
    def label(self) -> str:
        """The key's name in the metrics: ``operator``, or ``guild-`` and a keyed hash (:func:`~framecast.ops.metrics.key_label`)."""
        return self.parts.label

    def budget_reading(self) -> BudgetReading:
        """The budget's gauges now (read by the metrics at scrape time)."""
        return self.parts.budget_reading()


def can_be_key(key: str) -> bool:
    """Whether `key` (stripped) could be an API key: not empty, printable ASCII without spaces, the
    only characters a header carries (anything else is refused without asking the service)."""
    key = key.strip()
    return bool(key) and all(33 <= ord(ch) < 127 for ch in key)


class KeyCheck(StrEnum):
    """What one model-list call with a key said about it."""

    OK = "ok"
    REJECTED = "rejected"  # the service refused it (401/403), or it cannot be a key at all
    UNREACHABLE = "unreachable"  # no answer worth judging (down, 5xx, timeout): try again later
