"""/history: a member's own jobs in one place, newest first, a page at a time.

The place is a *scope*: a server's id, or a person's own id for their personal queue (the jobs they
asked for in DMs under a user install carry their own id as ``guild_id``). A member may look at
their own jobs; a member with Manage Server in that server may look at anyone's (the one rule,
:func:`may_view`). Another member's prompts follow /queue's rule (:meth:`QueueViewer.hides`): shown
only where the viewer could read the channel they were asked in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from framecast.app.actors import Actor
from framecast.app.queue_view import PromptHidden, QueueViewer, as_seen_by
from framecast.storage import MemberJobs
from framecast.values import Deletion, Job

__all__ = ["HISTORY_PAGE_SIZE", "HistoryPage", "HistoryRefused", "HistoryRow", "MemberHistory", "may_view"]

#: Jobs on one page of /history.
HISTORY_PAGE_SIZE = 10


class MemberJobsSource(Protocol):
    """What /history needs of the store: a page of one member's jobs (see ``Store.member_jobs``)."""

    async def member_jobs(
        self,
        guild_id: int,
        user_id: int,
        *,
        before: int | None = None,
        after: int | None = None,
        limit: int = 10,
    ) -> MemberJobs:
        """The page of `user_id`'s jobs in `guild_id` older than `before` or newer than `after`."""
        ...


class HistoryRefused(Exception):
    """The viewer may not look at `member_id`'s jobs (neither themselves nor a server manager)."""

    def __init__(self, member_id: int) -> None:
        super().__init__(f"not allowed: history of user {member_id}")
        self.member_id = member_id


def may_view(actor: Actor, member_id: int) -> bool:
    """Whether `actor` may list `member_id`'s jobs in the actor's scope: their own, or anyone's
    with Manage Server there."""
    return member_id == actor.user_id or actor.manages_guild


@dataclass(frozen=True)
class HistoryRow:
    """One job as /history shows it. A row whose prompt is hidden (`hidden` says why) carries no
    prompt and no chat record at all (no message to link to)."""

    job: Job
    #: When and by whom its result was deleted (None: it was not).
    deleted: Deletion | None = None
    #: Why the prompt is not shown to this viewer; None when it is.
    hidden: PromptHidden | None = None

    @property
    def prompt(self) -> str | None:
        """The prompt the viewer may see; None when it is hidden."""
        return None if self.hidden is not None else self.job.prompt


@dataclass(frozen=True)
class HistoryPage:
    """One page of a member's jobs, newest first, and how to reach the pages around it."""

    member_id: int
    rows: tuple[HistoryRow, ...]
    #: How many jobs the member has in the scope.
    total: int
    #: This page's number (1: the newest) and how many pages there are.
    page: int
    pages: int
    #: The cursor of the next, older page (its jobs are older than this job id); None: last page.
    older: int | None
    #: The cursor of the previous, newer page (newer than this job id); None: first page.
    newer: int | None


class MemberHistory:
    """/history's use case, over the store's paged query."""

    def __init__(self, store: MemberJobsSource, *, page_size: int = HISTORY_PAGE_SIZE) -> None:
        self._store = store
        self._page_size = page_size

    def __repr__(self) -> str:
        return f"<MemberHistory page_size={self._page_size}>"

    async def show(
        self,
        actor: Actor,
        viewer: QueueViewer,
        member_id: int,
        *,
        before: int | None = None,
        after: int | None = None,
    ) -> HistoryPage:
        """The page of `member_id`'s jobs in `actor`'s scope (``actor.guild_id``) older than job
        `before`, or newer than job `after`; neither: the newest page.

        Raises :class:`HistoryRefused` unless :func:`may_view`. `viewer` (the same person as
        `actor`) says which channels they can read: another member's prompts from other channels
        are left out of the rows.
        """
        if not may_view(actor, member_id):
            raise HistoryRefused(member_id)
        found = await self._store.member_jobs(
            actor.guild_id, member_id, before=before, after=after, limit=self._page_size
        )
        size = self._page_size
        pages = max(1, math.ceil(found.total / size))
        rows = tuple(_row(job, viewer) for job in found.jobs)
        return HistoryPage(
            member_id=member_id,
            rows=rows,
            total=found.total,
            page=min(pages, found.newer // size + 1),
            pages=pages,
            older=found.jobs[-1].id if found.has_older else None,
            newer=found.jobs[0].id if found.has_newer else None,
        )


def _row(job: Job, viewer: QueueViewer) -> HistoryRow:
    deleted = job.deleted
    shown, hidden = as_seen_by(viewer, job)  # as in /queue and /job (its styled prompt too)
    return HistoryRow(shown, deleted, hidden)
