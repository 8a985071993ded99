"""One API key for every job: the runner's :class:`~framecast.jobs.job_keys.JobAccounts` in tests.

Moved out of the product (it was ``SingleKey`` in ``framecast/jobs/runner.py``): production runs
every job on :class:`framecast.accounts.Accounts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from framecast.jobs.job_keys import JobPlan, KeyAccount, NoPlan
from framecast.service import GenerationClient
from framecast.values import Job

if TYPE_CHECKING:
    from framecast.planner.planner import Planner


@dataclass(frozen=True)
class _Key:
    """The one key: its client and planner, the operator's (no owner), never rejected."""

    client: GenerationClient
    planner: Planner | None = None
    owner: int | None = None
    rejected: bool = False
    key_last4: str = "fake"

    def plan(self, job: Job) -> JobPlan:
        """The planner's handle for `job`, or one that does nothing without a planner."""
        return self.planner.plan(job) if self.planner is not None else NoPlan()


@dataclass
class SingleKey:
    """:class:`~framecast.jobs.job_keys.JobAccounts` with one key for every job: `client` and its `planner`."""

    client: GenerationClient
    planner: Planner | None = None
    _key: _Key = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._key = _Key(self.client, self.planner)

    def for_job(self, job: Job) -> KeyAccount | None:
        """The one key."""
        return self._key

    def key_unreadable(self, guild_id: int) -> bool:
        """Never: the one key is the operator's."""
        return False

    def reveals_key(self, text: str) -> bool:
        """Whether `text` carries the one key."""
        return self.client.reveals_key(text)

    def bind(self, job_id: int, account: KeyAccount) -> None:
        """Nothing to keep: the one key lives as long as the runner."""

    def unbind(self, job_id: int) -> None:
        """Nothing to release."""

    async def key_rejected(self, account: KeyAccount) -> None:
        """Never called: the operator's key is not a server's."""


#: The ``REDIS_KEY_SECRET`` of every test that names budgets in Redis: one value for all of them, so
#: tests sharing a Redis database never trip the start-up check of a differing secret.
TEST_REDIS_KEY_SECRET = "framecast-tests-redis-key-secret-0123456789"
