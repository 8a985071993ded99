"""What the bot may honestly say about a job between polls, without spending the key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from framecast.jobs import Job

__all__ = ["Estimate", "Estimates"]


@dataclass(frozen=True)
class Estimate:
    """A job's estimated progress and timing, computed locally.

    ``progress`` is a fraction in ``0..1`` estimated for now (``None``: nothing honest to say);
    ``remaining`` the seconds until the result is expected (``None``: unknown); ``starts_in``, for
    a queued job, the seconds until it is expected to start (``None``: unknown or not queued).
    ``measured`` is true when ``progress`` is the service's own last report rather than an
    estimate between polls.
    """

    progress: float | None = None
    remaining: float | None = None
    starts_in: float | None = None
    measured: bool = False


class Estimates(Protocol):
    """Where the chat side gets a job's :class:`Estimate` (the key's planner implements it)."""

    def estimate(self, job: Job) -> Estimate:
        """The job's estimate now."""
        ...
