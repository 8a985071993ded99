"""What the service client needs of a key's request budget: the protocol every request waits on.

The client and its transport take a budget slot for every request, and report 429s and successes
to it. The service package defines what it needs here; the budgets themselves
(:class:`framecast.keys.budget.RequestBudget` in one process,
:class:`framecast.keys.shared_budget.RedisBudget` through Redis) live above it, in ``keys``, and
implement it, so the client never imports the package that holds the keys.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

from framecast.values.service_requests import Priority

__all__ = ["Budget"]


class Budget(Protocol):
    """A key's request budget: :class:`framecast.keys.budget.RequestBudget` in one process, or
    :class:`framecast.keys.shared_budget.RedisBudget` shared by several processes through Redis."""

    limit: int
    window: float

    def slot(self, priority: Priority | int = ...) -> contextlib.AbstractAsyncContextManager[None]:
        """Wait for a slot and hold it for one request."""
        ...

    def penalize(self, retry_after: float | None = None) -> float:
        """A 429: pause every grant; returns the pause in seconds."""
        ...

    def reward(self) -> None:
        """A success after a 429."""
        ...

    @property
    def in_flight(self) -> int:
        """Requests holding a slot now."""
        ...

    @property
    def waiting(self) -> int:
        """Callers waiting for a slot."""
        ...

    @property
    def streak(self) -> int:
        """429s in a row."""
        ...

    @property
    def granted_total(self) -> int:
        """Slots granted since start."""
        ...

    @property
    def allowed(self) -> int:
        """Requests per window allowed now (the limit, lowered after 429s)."""
        ...

    def paused_for(self) -> float:
        """Seconds left of a 429 pause."""
        ...

    def available(self) -> int:
        """Slots that could be granted now."""
        ...

    def used(self) -> int:
        """Requests in flight or finished inside the current window."""
        ...

    def frees_at(self) -> list[float] | None:
        """When the slots used now free again (monotonic, soonest first); None: not known here."""
        ...

    def close(self) -> None:
        """Stop the timer; waiters are released with an error."""
        ...
