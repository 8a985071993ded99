"""``DiscordReporter``: the core's :class:`~framecast.jobs.runner.JobReporter`, on top of discord.py.

Thin by design: each job's message has one worker (:mod:`.worker`) that draws it through
:mod:`cogs.views.render` at the place :mod:`.placement` chooses; deliveries go through that worker,
Discord's transient failures are judged by :mod:`.retries`, the requester is pinged by :mod:`.ping`,
and the runner's "was it delivered already?" is answered by :mod:`.recovery`.

Between polls, a queued or running job's message shows the key's planner's estimate (its
:class:`~framecast.planner.estimate.Estimates`), read from memory: no request to the service. The
worker draws it again every ``EDIT_INTERVAL``; an edit is made only when the text changes, and a
percentage never goes backwards (the highest one shown is kept with the job).

Every failed request to Discord made here is counted once in the process's metrics (see
:mod:`.errors_metric`).
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Callable

import discord

from cogs.delivery import limits, retries
from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.lookup import JobMessages
from cogs.delivery.notes import note_text
from cogs.delivery.ping import ping_requester
from cogs.delivery.placement import Placement, Target
from cogs.delivery.recovery import result_on_messages, where_now
from cogs.delivery.slot import SHOWN_PERCENT, Delivery, Slot, merge, percent_floor, with_state
from cogs.delivery.worker import Workers
from cogs.views.render import Rendered, link_text, render_job
from framecast.clock import Clock
from framecast.config import Settings
from framecast.jobs import Job, JobState
from framecast.jobs.reasons import Note
from framecast.jobs.runner import DeliveryInterrupted
from framecast.ops.metrics import Metrics
from framecast.planner.estimate import Estimate, Estimates
from framecast.stores import Store

__all__ = ["DiscordReporter"]

log = logging.getLogger(__name__)


class DiscordReporter:
    """Implements :class:`framecast.jobs.runner.JobReporter`: every job's message in Discord."""

    def __init__(
        self,
        client: discord.Client,
        *,
        store: Store,
        settings: Settings,
        clock: Clock,
        position: Callable[[int], int | None],
        estimates: Estimates | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """`estimates`: what the key's planner expects of each job (None: no estimates shown);
        `metrics`: where failed requests to Discord are counted (None: not recorded)."""
        self._client = client
        self._store = store
        self._settings = settings
        self._clock = clock
        self._position = position
        self._estimates = estimates
        self._errors = DiscordErrors(metrics)
        self._placement = Placement(client, settings=settings, clock=clock, drawer=self, errors=self._errors)
        self._messages = JobMessages(client, self._placement, self._errors)
        # With estimates, queued and running jobs are drawn again between changes: the estimate moves.
        self._workers = Workers(
            self,
            clock=clock,
            interval=settings.edit_interval,
            refresh=settings.edit_interval if estimates is not None else None,
        )

    def __repr__(self) -> str:
        return f"<DiscordReporter slots={len(self._workers)}>"

    # -- JobReporter protocol -----------------------------------------------------------------------
    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        """Re-render the job's message soon (now when `urgent`)."""
        if job.state is JobState.DELIVERED and self._workers.get(job.id) is None:
            return  # the delivery's own edit gave the message its final look
        slot = self._workers.slot(job)
        slot.job = merge(job, slot.job)
        slot.wake.set()
        if urgent:
            slot.urgent.set()

    async def upload_limit(self, job: Job, refused: int | None = None) -> int:
        """The size to aim at: the interaction's limit while its token lives, else the guild's.

        After a refusal of `refused` bytes, also below the next limit Discord uses (see :mod:`.limits`).
        """
        d = self._workers.slot(job).job.discord
        if self._placement.token_usable(d, spare=120.0) and not d.get("channel_message_id"):
            advertised = int(d.get("attachment_limit") or limits.DEFAULT_UPLOAD_LIMIT)
        else:
            await self._client.wait_until_ready()
            guild = self._client.get_guild(job.guild_id)
            advertised = guild.filesize_limit if guild is not None else limits.DEFAULT_UPLOAD_LIMIT
        return limits.aim(advertised, refused)

    async def deliver_file(self, job: Job, data: bytes, filename: str, *, notice: Note | None) -> None:
        """Attach the file to the job's message.

        Raises ``UploadTooLarge`` on a 413 and ``DeliveryInterrupted`` when another attempt may help.
        """
        await self._deliver(
            job, Delivery(data, filename, None, notice, asyncio.get_running_loop().create_future())
        )

    async def deliver_link(self, job: Job, url: str, reason: Note) -> None:
        """Put the service's link on the job's message, saying why there is no file."""
        await self._deliver(
            job, Delivery(None, None, url, reason, asyncio.get_running_loop().create_future())
        )

    async def was_delivered(self, job: Job) -> bool:
        """Look at the job's messages: is the result already there (a crash after the upload)?

        The answer also tells the job's worker: a job restored mid-delivery is drawn only once the
        runner has looked, and a result found there is left alone (and its requester pinged).
        """
        slot = self._workers.slot(job)
        found = await result_on_messages(self._messages, where_now(job, slot.job))
        waiting = slot.awaits_look
        slot.looked = True
        if found:
            slot.landed = True
            slot.job = with_state(slot.job, JobState.DELIVERED)
        if found or waiting:
            slot.wake.set()
            slot.urgent.set()
        return found

    # -- for the bot --------------------------------------------------------------------------------
    async def job_message(self, job: Job) -> discord.Message | None:
        """The job's current message (the channel message once it moved there), if it can be read."""
        slot = self._workers.get(job.id)
        return await self._messages.current(where_now(job, slot.job if slot else None))

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

    async def close(self, timeout: float = 5.0) -> None:
        """Stop every job's worker (their state is in the database; nothing is lost)."""
        await self._workers.close(timeout)

    # -- the workers' owner (see worker.SlotOwner) ------------------------------------------------------
    async def deliver(self, slot: Slot, delivery: Delivery) -> None:
        """One delivery attempt; Discord's transient trouble becomes ``DeliveryInterrupted``."""
        try:
            await self._placement.show(slot, lambda target: self._send(slot, target, delivery))
        except Exception as exc:
            slot.failed_attempts += 1
            delay = retries.retry_delay(exc, slot.failed_attempts)
            if delay is None:
                slot.failed_attempts = 0
                raise
            log.warning(
                "job %s: delivery attempt %d failed; retrying in %.0fs",
                slot.job.id,
                slot.failed_attempts,
                delay,
            )
            raise DeliveryInterrupted(delay) from exc
        slot.failed_attempts = 0

    async def redraw(self, slot: Slot) -> None:
        """Draw the job's current state where its message lives now."""
        await self._placement.show(slot, lambda target: self._send(slot, target, None))

    async def landed(self, slot: Slot) -> None:
        """The result was found on the message: mention the requester if a crash cut the ping off."""
        target = self._placement.on_channel(slot.job)
        if target is not None:
            await ping_requester(
                self._client, slot, target, slot.job, persist=self.persist, errors=self._errors
            )

    def until_move(self, slot: Slot) -> float | None:
        """Seconds until the job must leave its interaction token."""
        return self._placement.until_move(slot.job)

    # -- the placement's drawer (see placement.Drawer) ------------------------------------------------
    def rendered(self, slot: Slot, *, extra: tuple[str, ...] = ()) -> Rendered:
        """The job's message as it should look now: state, queue place, estimate, notes, then `extra`.

        The percentage shown becomes the job's floor at once (``SHOWN_PERCENT``): a later draw never
        shows less, even if this one never reaches Discord.
        """
        job = slot.job
        notes = tuple(note_text(note, job.locale) for note in slot.notes) + extra
        floor = percent_floor(job)
        rendered = render_job(
            job,
            position=self._position(job.id) if job.state is JobState.QUEUED else None,
            now=self._clock.time(),
            poll_timeout=self._settings.gen_poll_timeout,
            notes=notes if job.state is not JobState.DELIVERED else extra,
            estimate=self._estimate(job),
            floor=floor,
        )
        if rendered.percent is not None and rendered.percent > floor:
            job.discord[SHOWN_PERCENT] = rendered.percent
        return rendered

    async def persist(self, slot: Slot) -> None:
        """Save the slot's Discord bookkeeping, merged in one transaction with other writers'."""
        updated = await self._store.patch_discord(slot.job.id, dict(slot.job.discord))
        slot.job = merge(updated, slot.job)

    # -- internals ----------------------------------------------------------------------------------
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

    async def _deliver(self, job: Job, delivery: Delivery) -> None:
        slot = self._workers.slot(job)
        slot.job = merge(job, slot.job)
        slot.delivery = delivery
        slot.wake.set()
        slot.urgent.set()
        await delivery.future

    async def _send(self, slot: Slot, target: Target, delivery: Delivery | None) -> None:
        """Edit `target` to show the job (with the delivery's file or link, in the same edit)."""
        job = slot.job
        extra: tuple[str, ...] = ()
        files: list[discord.File] | None = None
        content: str | None = None
        shown = job
        if delivery is not None:
            # Show the finished look together with the file, in one edit.
            shown = with_state(job, JobState.DELIVERED)
            if delivery.notice is not None:
                extra = (note_text(delivery.notice, job.locale, url=delivery.link or ""),)
            if delivery.data is not None:
                assert delivery.filename is not None
                files = [discord.File(io.BytesIO(delivery.data), filename=delivery.filename)]
            elif delivery.link:
                content = link_text(delivery.link)
        saved, slot.job = slot.job, shown
        try:
            rendered = self.rendered(slot, extra=extra)
        finally:
            slot.job = saved
        if delivery is None and rendered.key == slot.last_key:
            return
        percent = percent_floor(slot.job)
        if percent > slot.saved_percent:
            # Saved before it shows, so that a restarted bot never shows less (one write per rise).
            slot.saved_percent = percent
            await self.persist(slot)
        message = await self._placement.edit(
            target, content=content, embed=rendered.embed, view=rendered.view, files=files
        )
        if target.via_token and target.message_id == "@original" and message is not None:
            # Learn the real id once: it lets a restarted bot look at the message with the bot token.
            slot.job.discord["message_id"] = message.id
            await self.persist(slot)
        slot.last_key = rendered.key if delivery is None else None
        slot.last_edit = self._clock.monotonic()
        # Edits never notify anybody: on a channel message the requester gets a short reply.
        if not target.via_token and shown.state in (JobState.DELIVERED, JobState.FAILED):
            await ping_requester(self._client, slot, target, shown, persist=self.persist, errors=self._errors)
