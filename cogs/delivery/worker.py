"""One task per unfinished job: the one writer of that job's message.

Renders are coalesced (only when the visible text changes, at most one edit per ``EDIT_INTERVAL``,
an urgent change at once), and deliveries go through the same task so two writers never race. A
queued or running job is also drawn again every `refresh` seconds without any change, so that its
estimate (progress, time left, start) moves between polls; the draw is a no-op when the text reads
the same. What a draw or a delivery does is the owner's (:class:`SlotOwner`, the placement below);
when and in which order is decided here, and so is how a delivery attempt went: its outcome
(delivered, interrupted with when to try again, too large) is answered to the reporter above
through the delivery's future, never by calling back up.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Protocol

import discord

from cogs.delivery import retries
from cogs.delivery.codes import DISCORD_TROUBLE, TooLarge, describe
from cogs.delivery.slot import Delivery, Slot, with_state
from framecast.app import (
    Clock,
    Delivered,
    DeliveryOutcome,
    Interrupted,
    Job,
    JobState,
    ResultFile,
    UploadTooLarge,
    is_store_outage,
)

__all__ = ["SlotOwner", "Workers"]

log = logging.getLogger(__name__)

#: Longest pause after Discord's rate limit before the message is drawn again.
_RATE_LIMIT_PAUSE = 30.0
#: States whose message shows an estimate that moves with time (see ``refresh``).
_MOVING = frozenset({JobState.QUEUED, JobState.RUNNING})


class SlotOwner(Protocol):
    """What a job's worker does with the job's message."""

    async def deliver(self, slot: Slot, delivery: Delivery) -> Delivered:
        """Put the result on the message (raises when it could not); parked: there was nowhere to."""
        ...

    async def redraw(self, slot: Slot) -> None:
        """Draw the job's current state (a no-op when the message already shows it)."""
        ...

    async def landed(self, slot: Slot) -> None:
        """The runner found the result already on the message: finish it off (the ping)."""
        ...

    def until_move(self, slot: Slot) -> float | None:
        """Seconds until the message must move (None: no deadline)."""
        ...


class Workers:
    """The slots of unfinished jobs, each with its worker task."""

    def __init__(
        self, owner: SlotOwner, *, clock: Clock, interval: float, refresh: float | None = None
    ) -> None:
        """`interval`: the least time between two edits; `refresh`: how often a queued or running
        job is drawn again unprompted (None: only on a change), never more often than `interval`."""
        self._owner = owner
        self._clock = clock
        self._interval = interval
        self._refresh = None if refresh is None else max(refresh, interval)
        self._slots: dict[int, Slot] = {}
        self._closing = False

    def __repr__(self) -> str:
        return f"<Workers slots={len(self._slots)}>"

    def __len__(self) -> int:
        return len(self._slots)

    def get(self, job_id: int) -> Slot | None:
        """The job's slot, if it has one."""
        return self._slots.get(job_id)

    def in_channel(self, channel_id: int) -> list[Slot]:
        """The slots of the jobs asked for in channel (or thread) `channel_id`."""
        return [slot for slot in self._slots.values() if slot.job.channel_id == channel_id]

    def slot(self, job: Job) -> Slot:
        """The job's slot, created (with its task) if needed; a task that ended is started again."""
        slot = self._slots.get(job.id)
        if slot is None:
            slot = Slot(job=job)
            self._slots[job.id] = slot
        if (slot.task is None or slot.task.done()) and not self._closing:
            slot.task = asyncio.create_task(self._run(slot), name=f"framecast-message-{job.id}")
            slot.task.add_done_callback(functools.partial(self._done, job.id))
        return slot

    async def close(self, timeout: float = 5.0) -> None:
        """Stop every task (their jobs' state is in the database; nothing is lost)."""
        self._closing = True
        tasks = [s.task for s in self._slots.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    def _done(self, job_id: int, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("message task of job %s died", job_id, exc_info=task.exception())
        slot = self._slots.get(job_id)
        if slot is not None and slot.task is task:
            if slot.delivery is not None and not slot.delivery.future.done():
                slot.delivery.future.set_exception(RuntimeError("the message task stopped"))
            if slot.job.is_terminal or self._closing:
                del self._slots[job_id]
            elif not task.cancelled():
                # Restart a task that died: a job must never lose its message.
                self.slot(slot.job).wake.set()

    def _until_refresh(self, slot: Slot) -> float | None:
        """Clock seconds until the job's estimate is drawn again unprompted (None: never)."""
        if self._refresh is None or slot.job.state not in _MOVING:
            return None
        return max(0.0, slot.last_draw + self._refresh - self._clock.monotonic())

    async def _woken(self, slot: Slot) -> None:
        """Until the slot is woken or, for a moving estimate, its refresh is due (on the clock)."""
        refresh = self._until_refresh(slot)
        if refresh is None:
            await slot.wake.wait()
            return
        waiters = (asyncio.ensure_future(slot.wake.wait()), asyncio.ensure_future(self._clock.sleep(refresh)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _wait(self, slot: Slot) -> None:
        """Until there is something to do: a wake, a refresh, or the deadline to move the message."""
        timeout = None if slot.awaits_look else self._owner.until_move(slot)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._woken(slot), timeout)
        if slot.delivery is None and not slot.urgent.is_set():
            # Coalesce: at most one edit per interval; an urgent change cuts the wait short.
            wait = slot.last_edit + self._interval - self._clock.monotonic()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(slot.urgent.wait(), wait)
        slot.wake.clear()
        slot.urgent.clear()

    async def _attempt(self, slot: Slot, delivery: Delivery) -> DeliveryOutcome:
        """One delivery attempt through the owner, and how it went.

        Discord's transient trouble becomes :class:`Interrupted` (see :mod:`.retries`), a 413
        :class:`UploadTooLarge`; anything else is raised for the runner to judge.
        """
        try:
            delivered = await self._owner.deliver(slot, delivery)
        except TooLarge:
            slot.failed_attempts = 0
            size = len(delivery.result.data) if isinstance(delivery.result, ResultFile) else 0
            return UploadTooLarge(size)
        except Exception as exc:
            slot.failed_attempts += 1
            delay = retries.retry_delay(exc, slot.failed_attempts)
            if delay is None:
                slot.failed_attempts = 0
                raise
            log.warning(
                "job %s: delivery attempt %d failed (%s); retrying in %.0fs",
                slot.job.id,
                slot.failed_attempts,
                describe(exc),
                delay,
            )
            return Interrupted(delay)
        slot.failed_attempts = 0
        return delivered

    async def _run(self, slot: Slot) -> None:
        while True:
            await self._wait(slot)
            delivery, slot.delivery = slot.delivery, None
            if delivery is not None:
                try:
                    outcome = await self._attempt(slot, delivery)
                except BaseException as exc:
                    if not delivery.future.done():
                        delivery.future.set_exception(
                            exc if isinstance(exc, Exception) else RuntimeError("stopped")
                        )
                    if not isinstance(exc, Exception):
                        raise
                    continue
                if isinstance(outcome, Delivered):
                    # The delivery's edit showed the finished message (file, notices, link): nothing
                    # is left to draw, and the message must not move or change any more.
                    slot.job = with_state(slot.job, JobState.DELIVERED)
                    slot.delivered_here = True
                if not delivery.future.done():
                    delivery.future.set_result(outcome)
                if isinstance(outcome, Delivered):
                    return
                continue
            if slot.found_delivered:
                await self._owner.landed(slot)
                return
            if slot.job.state is JobState.DELIVERED:
                return
            if slot.awaits_look:
                continue
            slot.last_draw = self._clock.monotonic()
            try:
                await self._owner.redraw(slot)
                slot.failed_draws = 0
            except discord.RateLimited as exc:
                slot.wake.set()
                await asyncio.sleep(min(exc.retry_after, _RATE_LIMIT_PAUSE))
            except DISCORD_TROUBLE as exc:
                slot.failed_draws += 1
                level = logging.WARNING if slot.failed_draws == 1 else logging.DEBUG
                log.log(level, "job %s: could not update its message: %s", slot.job.id, describe(exc))
                # Paced (a move past its deadline is due again at once), but a delivery cuts in.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(slot.urgent.wait(), retries.draw_pause(slot.failed_draws))
            except Exception as exc:
                if not is_store_outage(exc, bare=False):
                    raise
                # Its bookkeeping could not be saved (the store is out, which the core logs once):
                # the message shows the job again at its next change, the runner's after the outage.
                log.debug("job %s: message not updated, its bookkeeping waits for the store", slot.job.id)
            if slot.job.is_terminal and slot.delivery is None and not slot.wake.is_set():
                return
