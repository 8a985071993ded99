"""Deleting a delivered result: its requester, or a member with Manage Server in its server.

Who may is :meth:`Members.authorize`'s call (:attr:`JobAction.DELETE`), from the stored job. The
chat side removes the result message (:class:`RemovesJobMessages`); the job itself stays, in the
history, marked deleted in its chat record (``deleted_at``, ``deleted_by``; read as
:attr:`Job.deleted`). The message goes first and the mark follows: a failed removal leaves the
result where it was and the job unmarked (:class:`RemovalFailed` says why, for the member), and a
mark that failed after the removal is written by the next Confirm (a message already gone counts
as removed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from framecast.app.actors import Actor
from framecast.app.chat import JobBookkeeping, RemovalProblem
from framecast.app.members import JobAction, Members
from framecast.clock import Clock
from framecast.values import DELETED_AT, DELETED_BY, Deletion, Job

__all__ = ["Deleted", "Deletion", "Deletions", "RemovesJobMessages"]

log = logging.getLogger(__name__)


class RemovesJobMessages(Protocol):
    """What deleting needs of the chat side: remove a job's result message."""

    async def remove_job_message(self, job: Job) -> RemovalProblem | None:
        """Remove the message(s) showing `job`'s result; one already gone counts as removed.

        Raises :class:`RemovalFailed` when the result is still there. Returns why an older message
        that only pointed to the result (left by a move) stays, or None when nothing stays.
        """
        ...


@dataclass(frozen=True)
class Deleted:
    """The job whose result is (or, from :meth:`Deletions.check`, may be) deleted.

    `already`: the result was deleted before this request (another click came first); the job's
    :attr:`Job.deleted` says when and by whom. `pointer_left`: the result is gone, but an older
    message that pointed to it could not be removed, and why.
    """

    job: Job
    already: bool = False
    pointer_left: RemovalProblem | None = None


class Deletions:
    """The Delete button's use cases: the question (:meth:`check`), then the deletion (:meth:`delete`)."""

    def __init__(
        self, *, members: Members, jobs: JobBookkeeping, remover: RemovesJobMessages, clock: Clock
    ) -> None:
        self._members = members
        self._jobs = jobs
        self._remover = remover
        self._clock = clock

    def __repr__(self) -> str:
        return "<Deletions>"

    async def check(self, actor: Actor, job_id: int) -> Deleted:
        """May `actor` delete job `job_id`'s result? The job (``already``: it is deleted).

        Raises :class:`JobRefused`: NOT_FOUND (no delivered job of that id in the actor's server),
        NOT_ALLOWED (neither its requester nor a server manager).
        """
        job = await self._members.authorize(actor, job_id, JobAction.DELETE)
        return Deleted(job, already=job.deleted is not None)

    async def delete(self, actor: Actor, job_id: int) -> Deleted:
        """Remove job `job_id`'s result message and mark the job deleted by `actor`.

        Authority is checked again (the question may be old, or the clicker's roles changed). A
        job deleted already answers ``already`` and touches nothing: a second Confirm, or two
        members at once, remove the message once and keep the first deleter.
        """
        checked = await self.check(actor, job_id)
        if checked.already:
            return checked
        left = await self._remover.remove_job_message(checked.job)  # RemovalFailed: nothing marked
        # One conditional write: of two Confirms racing (from any processes) the first mark stays.
        marked, wrote = await self._jobs.patch_discord_once(
            job_id, {DELETED_AT: self._clock.time(), DELETED_BY: actor.user_id}, unless=DELETED_AT
        )
        if not wrote:
            return Deleted(marked, already=True)
        log.info("job %s: result deleted by user %s", job_id, actor.user_id)
        return Deleted(marked, pointer_left=left)
