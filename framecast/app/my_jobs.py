"""``/me`` on the web: a person's own jobs in every server and in their own queue, newest first.

Their own jobs only (the store is asked for their user id), so every prompt is theirs to see, as in
``/history``; a deleted result is listed as deleted, with no message to go to (:class:`HistoryRow`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from framecast.app.history import HistoryRow
from framecast.values import Job

__all__ = ["MY_JOBS_PAGE_SIZE", "MyJobs", "MyJobsPage"]

#: Jobs on one page of /me.
MY_JOBS_PAGE_SIZE = 20


class UserJobsSource(Protocol):
    """What /me needs of the store (see ``WebStore.user_jobs``)."""

    async def user_jobs(self, user_id: int, *, before: int | None, limit: int) -> tuple[Job, ...]:
        """A person's jobs anywhere, newest first."""
        ...


@dataclass(frozen=True)
class MyJobsPage:
    """One page of a person's jobs and the cursor of the next, older page (None: the last)."""

    rows: tuple[HistoryRow, ...]
    older: int | None


class MyJobs:
    """/me's use case."""

    def __init__(self, store: UserJobsSource, *, page_size: int = MY_JOBS_PAGE_SIZE) -> None:
        self._store = store
        self._page_size = page_size

    def __repr__(self) -> str:
        return f"<MyJobs page_size={self._page_size}>"

    async def page(self, user_id: int, *, before: int | None = None) -> MyJobsPage:
        """`user_id`'s jobs older than job `before` (None: the newest)."""
        found = await self._store.user_jobs(user_id, before=before, limit=self._page_size + 1)
        shown = found[: self._page_size]
        rows = tuple(HistoryRow(job, job.deleted) for job in shown)
        return MyJobsPage(rows, older=shown[-1].id if len(found) > self._page_size else None)
