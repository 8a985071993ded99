"""What the runner needs of the chat side, and the typed answers a delivery gets.

The runner owns "delivered exactly once": it hands a finished result to one call,
:meth:`JobReporter.deliver`, which answers with a :data:`DeliveryOutcome`:

* :class:`Delivered`: the result is on the job's message, or (``parked``) it could be posted nowhere
  and waits for its requester to fetch it (a user install whose token is spent and whose DMs are
  closed to the bot): the runner then keeps a result it saved itself instead of forgetting it;
* :class:`Interrupted`: the attempt failed in a way another attempt may cure (Discord's rate
  limit, a 5xx, a lost connection), after `retry_after` seconds. It may still have landed: the runner
  asks :meth:`JobReporter.was_delivered` (a pure query) before it sends again;
* :class:`UploadTooLarge`: the destination refused the file as too large (HTTP 413); the runner
  asks :meth:`JobReporter.upload_limit` for the next size worth trying.

Anything else a delivery raises is a failure the runner records (after looking whether the result
landed anyway). :meth:`JobReporter.was_delivered` raises :class:`ChatUnreadable` when the chat cannot
be read now: that is no answer (saying "not there" would have the file uploaded a second time), and
the runner asks again later. This module is machinery: :mod:`framecast.app.chat` re-exports it for the edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from framecast.values.job import Job
from framecast.values.reasons import Note

__all__ = [
    "ChatUnreadable",
    "Delivered",
    "DeliveryOutcome",
    "Interrupted",
    "JobReporter",
    "ResultFile",
    "ResultLink",
    "ResultToDeliver",
    "UploadTooLarge",
    "is_result_filename",
    "result_filename",
]


class ChatUnreadable(Exception):
    """The chat side could not read the job's messages now (its service failing): ask again later."""


@dataclass(frozen=True)
class ResultFile:
    """The finished file to attach to the job's message (`notice`: a line to show with it)."""

    data: bytes = field(repr=False)
    filename: str
    notice: Note | None = None


@dataclass(frozen=True)
class ResultLink:
    """The service's link to post instead of a file; `reason` says why there is no file."""

    url: str
    reason: Note


#: What one delivery hands to the chat side.
ResultToDeliver = ResultFile | ResultLink


@dataclass(frozen=True)
class Delivered:
    """The result is on the job's message, or kept for its requester (`parked`): the job is done."""

    #: There was nowhere to post it: the requester fetches it later (``framecast.app.parked``), so
    #: the runner keeps a result it saved itself (an inline image) rather than forgetting it.
    parked: bool = False


@dataclass(frozen=True)
class Interrupted:
    """The attempt failed in a way another attempt may cure; it may have landed all the same."""

    #: Seconds to wait before the next attempt.
    retry_after: float


@dataclass(frozen=True)
class UploadTooLarge:
    """The destination refused the file as too large (HTTP 413)."""

    #: Bytes of the refused file.
    size: int


#: The answer to one :meth:`JobReporter.deliver` call.
DeliveryOutcome = Delivered | Interrupted | UploadTooLarge


class JobReporter(Protocol):
    """What the runner needs from the chat side (the Discord bot implements it).

    The runner alone decides that a result is delivered exactly once: it asks
    :meth:`was_delivered` before a first delivery (a restart may follow an upload that was never
    recorded), before every attempt after an :class:`Interrupted` one and after a failed attempt.
    """

    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        """Show the job's current state; non-urgent changes may be coalesced."""

    async def upload_limit(self, job: Job, refused: int | None = None) -> int:
        """The largest file, in bytes, to send to the job's destination.

        With `refused`, a file of that many bytes was just refused as too large: the answer is the
        next size worth trying (the chat side knows its platform's limits).
        """

    async def was_delivered(self, job: Job) -> bool:
        """Is the job's result already in the chat (an attempt whose answer was lost)? A pure query.

        Raises :class:`ChatUnreadable` when the chat cannot tell now.
        """

    async def delivery_pending(self, job: Job) -> None:
        """The runner looked and the result is not in the chat: its delivery follows.

        A job restored mid-delivery is not drawn before this (its message may hold the result).
        """

    async def deliver(self, job: Job, result: ResultToDeliver) -> DeliveryOutcome:
        """Put `result` on the job's message, in one attempt, and say how it went."""


# Filenames stay short and never contain user text (Discord caps them, and prompts are untrusted).
def _result_stem(job_id: int) -> str:
    return f"framecast-{job_id}."


def result_filename(job_id: int, ext: str) -> str:
    """The attachment name of a job's result, e.g. ``framecast-42.mp4``."""
    return _result_stem(job_id) + ext


def is_result_filename(filename: str, job_id: int) -> bool:
    """Whether `filename` is job `job_id`'s result (:func:`result_filename` with any extension)."""
    return filename.startswith(_result_stem(job_id))
