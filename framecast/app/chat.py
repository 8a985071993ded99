"""What the application needs of the chat side, and what it gives it to show and deliver jobs with.

The chat side (the Discord bot's ``cogs/delivery``) implements :class:`ChatSide`: the runner's
:class:`~framecast.jobs.chat_side.JobReporter` (show a job, say the upload limit, deliver a result in
one call answering a :data:`DeliveryOutcome`, answer "is it there already?" as a pure query) plus
queue moves, notes, removing a job's messages, telling a server's admins that the service refused
their key (:class:`~framecast.app.admins.AdminNotices`), and closing. The core builds it once through a :class:`ChatSideFactory`.

The chat side keeps its own bookkeeping per job (which message shows it, its interaction token...)
as an opaque mapping stored with the job; it reads and saves it through the narrow
:class:`JobBookkeeping`, never the whole store. The protocols the runner needs are defined in the
machinery (:mod:`framecast.jobs.chat_side`: machinery never imports the application) and
re-exported here, so the edge imports them, like everything of the core, from ``framecast.app``.
So is :func:`is_store_outage`: a bookkeeping write that meets a store outage is no reason to stop
showing a job (the runner waits the outage out, and the next change is drawn and saved).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from framecast.app.admins import AdminNotices
from framecast.clock import Clock
from framecast.jobs.chat_side import (
    ChatUnreadable,
    Delivered,
    DeliveryOutcome,
    Interrupted,
    JobReporter,
    ResultFile,
    ResultLink,
    ResultToDeliver,
    UploadTooLarge,
    is_result_filename,
    result_filename,
)
from framecast.jobs.queues import QueuePositions
from framecast.jobs.service_params import without_credentials
from framecast.planner.estimate import Estimates
from framecast.storage.faults import is_store_outage
from framecast.values.job import Job
from framecast.values.reasons import Note

if TYPE_CHECKING:
    from framecast.ops.metrics import Metrics
    from framecast.storage import Store

__all__ = [
    "ChatMetrics",
    "ChatSide",
    "ChatSideFactory",
    "ChatUnreadable",
    "Delivered",
    "DeliveryOutcome",
    "Estimates",
    "Interrupted",
    "JobBookkeeping",
    "JobReporter",
    "QueuePositions",
    "RemovalFailed",
    "RemovalProblem",
    "ResultFile",
    "ResultLink",
    "ResultToDeliver",
    "UploadTooLarge",
    "is_result_filename",
    "is_store_outage",
    "result_filename",
    "without_credentials",
]


class RemovalProblem(StrEnum):
    """Why a message of a job could not be removed (the member is told which)."""

    #: The message is where the bot is not (a group DM, a server without the bot) and no
    #: interaction token that reaches it is still valid (they last 15 minutes).
    UNREACHABLE = "unreachable"
    #: Discord refused or did not answer: trying again later may work.
    REFUSED = "refused"


class RemovalFailed(Exception):
    """The job's result is still showing: it could not be removed (`problem` says why)."""

    def __init__(self, problem: RemovalProblem) -> None:
        super().__init__(problem.value)
        self.problem = problem


class JobBookkeeping(Protocol):
    """The chat side's own record of each job, stored with the job (the store implements it).

    The core keeps the mapping opaquely; the chat side decides what it holds.
    """

    async def get(self, job_id: int) -> Job | None:
        """The job as stored now (None: no such job)."""
        ...

    async def patch_discord(self, job_id: int, changes: Mapping[str, Any]) -> Job:
        """Merge `changes` into the job's chat record in one transaction; the updated job."""
        ...

    async def patch_discord_once(
        self, job_id: int, changes: Mapping[str, Any], *, unless: str
    ) -> tuple[Job, bool]:
        """Merge `changes` only while the record has no `unless` key (a conditional write).

        The job as stored now, and whether this call wrote: of two racing callers one writes.
        """
        ...


class ChatMetrics(Protocol):
    """What the chat side counts (:class:`framecast.ops.metrics.Metrics` implements it)."""

    def discord_error(self, status: int | None, code: int | None) -> None:
        """A request to Discord failed: HTTP `status` (None: no answer) and its JSON error `code`."""
        ...


class ChatSide(JobReporter, AdminNotices, Protocol):
    """What the core needs of the chat side: a :class:`JobReporter`, the admins' notices (a refused
    key), plus queue moves, notes, removing a job's messages, closing."""

    def positions_changed(self, guild_id: int, queued: list[int]) -> None:
        """A guild's queue moved: `queued` are its waiting jobs, head first."""
        ...

    def add_note(self, job: Job, note: Note) -> None:
        """Show `note` on the job's message until the job finishes."""
        ...

    async def remove_job_message(self, job: Job) -> RemovalProblem | None:
        """Remove the message(s) showing `job`'s result (Delete); one already gone counts as removed.

        Raises :class:`~framecast.app.deletion.RemovalFailed` when the result is still there;
        returns why an older message that only pointed to it stays (None: nothing stays).
        """
        ...

    async def close(self) -> None:
        """Stop showing jobs (their state is in the store; nothing is lost)."""
        ...


R_co = TypeVar("R_co", bound=ChatSide, covariant=True)


class ChatSideFactory(Protocol[R_co]):
    """Builds the chat side once the parts it needs exist (called once by ``Core.open``)."""

    def __call__(
        self, *, store: Store, positions: QueuePositions, estimates: Estimates, clock: Clock, metrics: Metrics
    ) -> R_co:
        """The chat side, keeping its bookkeeping in `store` (it needs only :class:`JobBookkeeping`
        of it), showing `positions` and `estimates`, counting its failed requests in `metrics`."""
        ...
