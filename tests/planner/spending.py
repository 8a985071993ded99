"""A budget spent as a test needs it: its used slots are what "starts in" and "left" play forward."""

from __future__ import annotations

from framecast.keys.budget import RequestBudget
from tests.fakes.clock import ManualClock


async def spend(budget: RequestBudget, clock: ManualClock, slots: int, *, every: float = 0.0) -> None:
    """Spend `slots` of `budget`, one every `every` clock seconds (the last one now)."""
    for n in range(slots):
        async with budget.slot():
            pass
        if n < slots - 1:
            await clock.advance(every)
