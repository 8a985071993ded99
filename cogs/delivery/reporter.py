"""``DiscordReporter``: the core's chat side (:class:`~framecast.app.ChatSide`), on top of discord.py.

Thin by design, and the top of the package: one delivery flows down, never back up. The runner's
:meth:`~DiscordReporter.deliver` hands the result to the job's worker (:mod:`.worker`, the one
writer of that job's message), which puts it on the message through :mod:`.placement` (which draws
through :mod:`.drawing` and pings through :mod:`.ping`) and answers the outcome through the
delivery's future. "Was it delivered already?" is a pure query answered by :mod:`.recovery`.
Beside the jobs, it delivers the admins' notices the core decides on (a refused server key:
:mod:`.key_notice`).

Between polls, a queued or running job's message shows the key's planner's estimate (its
:class:`~framecast.app.Estimates`), read from memory: no request to the service. The worker draws
it again every ``edit_interval``; an edit is made only when the text changes, and a percentage never
goes backwards (the highest one shown is kept with the job).

Every failed request to Discord made here is counted once in the process's metrics (see
:mod:`.errors_metric`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import discord

from cogs.delivery import limits
from cogs.delivery.drawing import Drawing
from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.key_notice import KeyNotices
from cogs.delivery.lookup import JobMessages
from cogs.delivery.placement import Placement
from cogs.delivery.record import DiscordRecord, delete_click
from cogs.delivery.recovery import result_on_messages
from cogs.delivery.removal import JobMessageRemoval
from cogs.delivery.slot import Delivery, Slot
from cogs.delivery.timings import DeliveryTimings
from cogs.delivery.worker import Workers
from framecast.app import (
    ChatMetrics,
    Clock,
    DeliveryOutcome,
    Estimates,
    Job,
    JobBookkeeping,
    JobState,
    Note,
    RefusedKeyNotice,
    RemovalProblem,
    ResultToDeliver,
)

__all__ = ["DiscordReporter"]

log = logging.getLogger(__name__)


class DiscordReporter:
    """Implements :class:`framecast.app.ChatSide`: every job's message in Discord."""

    def __init__(
        self,
        client: discord.Client,
        *,
        bookkeeping: JobBookkeeping,
        timings: DeliveryTimings,
        clock: Clock,
        position: Callable[[int], int | None],
        estimates: Estimates | None = None,
        metrics: ChatMetrics | None = None,
    ) -> None:
        """`bookkeeping`: where each job's Discord record is kept (the store); `estimates`: what the
        key's planner expects of each job (None: no estimates shown); `metrics`: where failed
        requests to Discord are counted (None: not recorded)."""
        self._client = client
        self._bookkeeping = bookkeeping
        self._timings = timings
        self._clock = clock
        self._errors = DiscordErrors(metrics)
        drawing = Drawing(
            bookkeeping=bookkeeping,
            clock=clock,
            position=position,
            poll_timeout=timings.poll_timeout,
            estimates=estimates,
        )
        placement = Placement(client, timings=timings, clock=clock, drawing=drawing, errors=self._errors)
        self._messages = JobMessages(
            client, clock=clock, token_margin=timings.token_margin, errors=self._errors
        )
        self._removal = JobMessageRemoval(
            client, clock=clock, token_margin=timings.token_margin, errors=self._errors
        )
        self._key_notices = KeyNotices(client, errors=self._errors)
        # With estimates, queued and running jobs are drawn again between changes: the estimate moves.
        self._workers = Workers(
            placement,
            clock=clock,
            interval=timings.edit_interval,
            refresh=timings.edit_interval if estimates is not None else None,
        )

    def __repr__(self) -> str:
        return f"<DiscordReporter slots={len(self._workers)}>"

    # -- the runner's JobReporter -------------------------------------------------------------------
    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        """Re-render the job's message soon (now when `urgent`)."""
        current = self._workers.get(job.id)
        if job.state is JobState.DELIVERED and (current is None or current.delivered_here):
            return  # the delivery's own edit gave the message its final look
        slot = self._workers.slot(job)
        slot.update(job)
        slot.wake.set()
        if urgent:
            slot.urgent.set()

    async def upload_limit(self, job: Job, refused: int | None = None) -> int:
        """The size to aim at: the interaction's limit while its token lives, else the guild's.

        After a refusal of `refused` bytes, also below the next limit Discord uses (see :mod:`.limits`).
        """
        record = self._record(job)
        spare = 120.0
        if (
            record.token_usable(self._clock.time(), self._timings.token_margin, spare)
            and not record.channel_message_id
        ):
            advertised = record.attachment_limit or limits.DEFAULT_UPLOAD_LIMIT
        else:
            await self._client.wait_until_ready()
            guild = self._client.get_guild(job.guild_id)
            advertised = guild.filesize_limit if guild is not None else limits.DEFAULT_UPLOAD_LIMIT
        return limits.aim(advertised, refused)

    async def was_delivered(self, job: Job) -> bool:
        """Look at the job's messages: is the result already there (a crash after the upload)?

        A pure query: nothing here changes; the runner acts on the answer.
        """
        return await result_on_messages(self._messages, job, self._record(job))

    async def delivery_pending(self, job: Job) -> None:
        """The runner looked and found no result: a restored job's message may be drawn again."""
        slot = self._workers.get(job.id)
        if slot is None:
            return
        waiting = slot.awaits_look
        slot.looked = True
        if waiting:
            slot.wake.set()
            slot.urgent.set()

    async def deliver(self, job: Job, result: ResultToDeliver) -> DeliveryOutcome:
        """Hand `result` to the job's worker and wait for how its one attempt went."""
        slot = self._workers.slot(job)
        slot.update(job)
        # The runner only delivers after it looked: a restored job's message may be drawn now.
        slot.looked = True
        delivery = Delivery(result, asyncio.get_running_loop().create_future())
        slot.delivery = delivery
        slot.wake.set()
        slot.urgent.set()
        return await delivery.future

    # -- for the core and the bot -------------------------------------------------------------------
    async def job_message(self, job: Job) -> discord.Message | None:
        """The job's current message (the channel message once it moved there), if it can be read."""
        return await self._messages.current(job, self._record(job))

    async def remove_job_message(self, job: Job) -> RemovalProblem | None:
        """Delete the job's messages (Delete): the result, and the one that pointed to it.

        Raises ``RemovalFailed`` when the result stays; returns why a pointer stays (None: none).
        """
        return await self._removal.remove(job, self._record(job))

    async def delete_clicked(
        self, job_id: int, interaction: discord.Interaction[Any], message_id: int
    ) -> None:
        """Keep a Delete click's own token with the job: it can delete the message it was on
        (``@original`` once the click is answered with a deferred update) for 15 minutes."""
        await self._bookkeeping.patch_discord(job_id, delete_click(interaction, message_id))

    async def key_refused(self, notice: RefusedKeyNotice) -> None:
        """Tell a server's admins that the service refused its key (see :mod:`.key_notice`)."""
        await self._key_notices.key_refused(notice)

    def add_note(self, job: Job, note: Note) -> None:
        """Show an extra line on the job's message until it finishes."""
        slot = self._workers.slot(job)
        if note not in slot.notes:
            slot.notes.append(note)

    def positions_changed(self, guild_id: int, queued: list[int]) -> None:
        """The guild's queue moved: queued jobs re-render their place (coalesced)."""
        for job_id in queued:
            slot = self._workers.get(job_id)
            if slot is not None:
                slot.wake.set()

    def thread_opened(self, thread_id: int) -> None:
        """A closed thread is open again (a member posted there, or a moderator reopened it): its
        jobs' progress is drawn there again (see ``Placement.redraw``)."""
        for slot in self._workers.in_channel(thread_id):
            if slot.place_closed:
                slot.place_closed = False
                slot.wake.set()

    async def close(self, timeout: float = 5.0) -> None:
        """Stop every job's worker (their state is in the database; nothing is lost)."""
        await self._workers.close(timeout)

    # -- internals ----------------------------------------------------------------------------------
    def _record(self, job: Job) -> DiscordRecord:
        """The job's bookkeeping: `job`'s, with what this process learned since (a move, a message id)."""
        slot: Slot | None = self._workers.get(job.id)
        stored = DiscordRecord.from_dict(job.discord)
        return stored if slot is None else stored.merged(slot.record)
