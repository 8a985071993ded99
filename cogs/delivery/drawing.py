"""How a job's message looks now, and saving what the delivery package learned about it.

The bottom of the delivery package: :mod:`.placement` draws through it and saves the job's
bookkeeping with it; it calls nothing above it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cogs.delivery.notes import note_text
from cogs.delivery.slot import Slot
from cogs.views.render import Rendered, render_job
from framecast.app import Clock, Estimate, Estimates, Job, JobBookkeeping, JobState

__all__ = ["Drawing"]

log = logging.getLogger(__name__)


class Drawing:
    """Renders a slot's job (state, queue place, estimate, notes) and saves its bookkeeping."""

    def __init__(
        self,
        *,
        bookkeeping: JobBookkeeping,
        clock: Clock,
        position: Callable[[int], int | None],
        poll_timeout: float,
        estimates: Estimates | None = None,
    ) -> None:
        """`position`: a queued job's place; `estimates`: the planner's (None: none shown)."""
        self._bookkeeping = bookkeeping
        self._clock = clock
        self._position = position
        self._poll_timeout = poll_timeout
        self._estimates = estimates

    def __repr__(self) -> str:
        return f"<Drawing estimates={self._estimates is not None}>"

    def rendered(self, slot: Slot, *, extra: tuple[str, ...] = (), job: Job | None = None) -> Rendered:
        """The job's message as it should look now (`job`: the look to draw, default the slot's).

        The percentage shown becomes the job's floor at once (``shown_percent``): a later draw
        never shows less, even if this one never reaches Discord.
        """
        job = job or slot.job
        notes = tuple(note_text(note, job) for note in slot.notes) + extra
        floor = slot.record.shown_percent
        rendered = render_job(
            job,
            position=self._position(job.id) if job.state is JobState.QUEUED else None,
            now=self._clock.time(),
            poll_timeout=self._poll_timeout,
            notes=notes if job.state is not JobState.DELIVERED else extra,
            estimate=self._estimate(job),
            floor=floor,
        )
        if rendered.percent is not None and rendered.percent > floor:
            slot.learn(shown_percent=rendered.percent)
        return rendered

    async def save(self, slot: Slot) -> None:
        """Save the slot's bookkeeping, merged in one transaction with other writers'."""
        updated = await self._bookkeeping.patch_discord(slot.job.id, slot.record.delivery_changes())
        slot.update(updated)

    def _estimate(self, job: Job) -> Estimate | None:
        """The planner's estimate for a queued or running job (None: nothing to add)."""
        if self._estimates is None or job.state not in (JobState.QUEUED, JobState.RUNNING):
            return None
        try:
            return self._estimates.estimate(job)
        except Exception:
            # An estimate is a nicety: a bug there must not stop the job's message from updating.
            log.exception("job %s: no estimate", job.id)
            return None
