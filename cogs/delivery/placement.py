"""Where a job's message lives, moving it, and drawing on it (a state, or the delivered result).

A job's message starts as the interaction's answer, edited through the interaction token (valid 15
minutes, stored with the job). It moves to a normal channel message sent with the bot token
`token_margin` seconds before the token expires, when Discord says the token is dead (50027/10015),
and again when the channel message gets too old to edit (30046) or the job's message, either one,
is gone (10008: a moderator deleted it while the job ran), or its thread was closed (50083: a fresh
message reopens it). The old message is pointed at the new one. Where no message can go any more (the
channel deleted or hidden from the bot, a thread closed and locked), the result waits in ``/job``.

:class:`Placement` is what a job's worker (:mod:`.worker`) drives: it draws through
:class:`~cogs.delivery.drawing.Drawing`, mentions the requester through :mod:`.ping`, and calls
nothing above it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import aiohttp
import discord

from cogs.delivery.codes import (
    CannotAttach,
    MessageUnusable,
    NowhereToPost,
    ThreadClosed,
    TokenDead,
    channel_closed,
    describe,
    translate,
)
from cogs.delivery.drawing import Drawing
from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.nonces import message_nonce
from cogs.delivery.notes import note_text
from cogs.delivery.ping import ping_requester
from cogs.delivery.slot import Delivery, Slot, with_state
from cogs.delivery.target import Target, home
from cogs.delivery.timings import DeliveryTimings
from cogs.i18n import t
from cogs.literal import link_text
from framecast.app import Clock, Delivered, Job, JobState, Note, ResultFile

__all__ = ["Placement", "Target"]

log = logging.getLogger(__name__)

#: Places tried for one edit: the current one, then after a move (dead token, unusable message).
_PLACES_TRIED = 3


class Placement:
    """Chooses the job message to edit, edits it, and moves it when it must."""

    def __init__(
        self,
        client: discord.Client,
        *,
        timings: DeliveryTimings,
        clock: Clock,
        drawing: Drawing,
        errors: DiscordErrors | None = None,
    ) -> None:
        """`errors`: where failed edits and posts are counted (default: nowhere)."""
        self._client = client
        self._errors = errors or DiscordErrors()
        self._timings = timings
        self._clock = clock
        self._drawing = drawing

    def __repr__(self) -> str:
        return f"<Placement margin={self._timings.token_margin:g}s>"

    # -- what a job's worker asks (see worker.SlotOwner) -------------------------------------------
    async def deliver(self, slot: Slot, delivery: Delivery) -> Delivered:
        """Put the result on the job's message in one edit (raises when it could not).

        A personal job whose token is spent and whose requester refuses the bot's DMs, or a job
        whose channel was deleted or closed to the bot as its result came, has nowhere to post: its
        record says so (``parked``), the answer too (the runner keeps its saved result), and ``/job``
        hands the file to its requester.
        """
        try:
            await self.show(slot, lambda target: self.draw(slot, target, delivery))
        except NowhereToPost:
            return await self._park(slot, "no place to post the result")
        except CannotAttach:
            # Attach Files was taken away while the job ran: the message shows the job finished,
            # saying where its file waits (/job answers through its own interaction, which needs
            # no channel permission), and pings its requester.
            parked = await self._park(slot, "the bot may not attach files in its channel")
            with contextlib.suppress(NowhereToPost):
                await self.show(slot, lambda target: self.draw(slot, target, delivery, file_refused=True))
            return parked
        return Delivered()

    async def _park(self, slot: Slot, why: str) -> Delivered:
        """Record that the job's result waits for its requester in /job (``parked``)."""
        slot.learn(parked=True)
        await self._drawing.save(slot)
        log.info("job %s: %s; it waits for its requester in /job", slot.job.id, why)
        return Delivered(parked=True)

    async def redraw(self, slot: Slot) -> None:
        """Draw the job's current state where its message lives now (a no-op when it shows it).

        In a closed thread only the job's first look (its member's command, or after a restart) and
        its end are drawn, on a fresh message that reopens the thread as a member's would: progress
        is not worth reopening it. Where the message can go nowhere (channel deleted or closed to
        the bot, DMs refused), nothing is drawn before the end, whose result then waits in /job
        (tried again at once past a token's deadline, that was a tight loop of refusals).
        """
        if slot.place_closed and not slot.job.is_terminal:
            return
        reopen = slot.last_edit == -math.inf or slot.job.is_terminal
        try:
            await self.show(slot, lambda target: self.draw(slot, target, None), reopen=reopen)
        except NowhereToPost:
            slot.place_closed = True

    async def landed(self, slot: Slot) -> None:
        """The result was found on the message: mention the requester if a crash cut the ping off."""
        target = self.on_channel(slot)
        if target is not None:
            await ping_requester(
                self._client, slot, target, slot.job, persist=self._drawing.save, errors=self._errors
            )

    def until_move(self, slot: Slot) -> float | None:
        """Seconds until the job must leave its interaction token (None when it already has)."""
        record = slot.record
        if slot.job.is_terminal or slot.place_closed or record.channel_message_id:
            return None  # (a closed place draws nothing before the job's end, which moves it then)
        if not record.token or record.dm_refused:
            return None
        return max(0.0, record.token_expires_at - self._timings.token_margin - self._clock.time())

    # -- decisions ----------------------------------------------------------------------------------
    def token_usable(self, slot: Slot, spare: float = 0.0) -> bool:
        """Whether the job's interaction token may still be used (`spare` seconds before the margin)."""
        return slot.record.token_usable(self._clock.time(), self._timings.token_margin, spare)

    def on_channel(self, slot: Slot) -> Target | None:
        """The job's channel message, once it has one."""
        mid = slot.record.channel_message_id
        channel_id, _ = home(slot.job, slot.record)
        return Target(False, mid, channel_id) if mid and channel_id else None

    def token_safety(self) -> float:
        """How long before its real expiry a token is no longer used, even for a last pointer edit.

        Never more than half the margin: the move happens `token_margin` before expiry, and the old
        message must still be reachable at that moment to point at the new one.
        """
        return min(2.0, self._timings.token_margin / 2)

    # -- acting -------------------------------------------------------------------------------------
    async def show(
        self, slot: Slot, send: Callable[[Target], Awaitable[None]], *, reopen: bool = True
    ) -> None:
        """Call `send` with the job's message, moving it first when the current one cannot be used
        (`reopen`: also out of a closed thread, which the fresh message reopens; else it waits)."""
        for _ in range(_PLACES_TRIED):
            target = await self.target(slot)
            try:
                await send(target)
                return
            except TokenDead:
                slot.learn(token_dead=True)
                await self._drawing.save(slot)
            except ThreadClosed:
                if not reopen:
                    slot.place_closed = True
                    log.info("job %s: its thread was closed; its end will reopen it", slot.job.id)
                    return
                slot.place_closed = False
                await self.move(slot, reason="refused")  # reopened: the old one points to the new
            except MessageUnusable:
                # Discord refuses edits of this message (30046) or it is gone (10008, also the
                # interaction's own answer): a fresh one, and no further attempt on the old one.
                await self.move(slot, reason="refused", point_old=False)
        raise RuntimeError(f"job {slot.job.id}: no message could be updated")

    async def target(self, slot: Slot) -> Target:
        """The message to edit now (moving the job first if its token or message is too old)."""
        channel = self.on_channel(slot)
        if channel is not None:
            age = self._clock.time() - discord.utils.snowflake_time(int(channel.message_id)).timestamp()
            if age > self._timings.status_message_max_age and not slot.job.is_terminal:
                await self.move(slot, reason="old")
                channel = self.on_channel(slot)
                assert channel is not None
            return channel
        if self.token_usable(slot):
            return Target.interaction(slot.record, slot.job.channel_id)
        if slot.record.dm_refused:
            raise NowhereToPost()
        await self.move(slot, reason="token")
        channel = self.on_channel(slot)
        assert channel is not None
        return channel

    async def draw(
        self, slot: Slot, target: Target, delivery: Delivery | None, *, file_refused: bool = False
    ) -> None:
        """Edit `target` to show the job (with the delivery's file or link, in the same edit;
        `file_refused`: finished, without its file, which waits for its requester in /job)."""
        job = slot.job
        extra: tuple[str, ...] = ()
        files: list[discord.File] | None = None
        content: str | None = None
        shown = job
        if delivery is not None:
            # Show the finished look together with the file, in one edit.
            shown = with_state(job, JobState.DELIVERED)
            result = delivery.result
            if file_refused:
                extra = (note_text(Note.WAITS_IN_JOB, job),)
            elif isinstance(result, ResultFile):
                if result.notice is not None:
                    extra = (note_text(result.notice, job, url=""),)
                files = [discord.File(io.BytesIO(result.data), filename=result.filename)]
            else:
                extra = (note_text(result.reason, job, url=result.url),)
                content = link_text(result.url)
        rendered = self._drawing.rendered(slot, extra=extra, job=shown)
        if delivery is None and rendered.key == slot.last_key:
            return
        if slot.record.shown_percent > slot.saved_percent:
            # Saved before it shows, so that a restarted bot never shows less (one write per rise).
            slot.saved_percent = slot.record.shown_percent
            await self._drawing.save(slot)
        message = await self.edit(
            target,
            content=content,
            embed=rendered.embed,
            view=rendered.view,
            files=files,
            within=self.token_left(slot) if target.via_token else None,
        )
        if target.unknown_original and message is not None:
            # Learn the real id once: it lets a restarted bot look at the message with the bot token.
            slot.learn(message_id=message.id)
            await self._drawing.save(slot)
        slot.last_key = rendered.key if delivery is None else None
        slot.last_edit = self._clock.monotonic()
        # Edits never notify anybody: on a channel message the requester gets a short reply.
        if not target.via_token and shown.state in (JobState.DELIVERED, JobState.FAILED):
            await ping_requester(
                self._client, slot, target, shown, persist=self._drawing.save, errors=self._errors
            )

    def token_left(self, slot: Slot) -> float:
        """Seconds an edit through the job's token may take: until just before the token dies."""
        return max(0.0, slot.record.token_expires_at - self.token_safety() - self._clock.time())

    async def edit(
        self,
        target: Target,
        *,
        content: str | None,
        embed: discord.Embed,
        view: discord.ui.View | None,
        files: list[discord.File] | None = None,
        within: float | None = None,
    ) -> discord.Message | None:
        """Edit the job's message (never pinging). Raises what :func:`~cogs.delivery.codes.translate` says.

        `within`: seconds an edit through the token may take, its 429 waits included (discord.py
        sleeps a webhook's Retry-After however long it is, an hour or more): past them it raises
        ``TimeoutError``, a failed attempt, and the job moves to a channel message as its token dies.
        """
        kwargs: dict[str, Any] = {
            "content": content,
            "embed": embed,
            "view": view,
            "allowed_mentions": discord.AllowedMentions.none(),
        }
        if files is not None:
            kwargs["attachments"] = files
        try:
            with self._errors.counted():
                if target.via_token:
                    webhook = discord.Webhook.partial(
                        target.application_id, target.token, client=self._client
                    )
                    async with asyncio.timeout(within):
                        return await webhook.edit_message(target.message_id, **kwargs)  # type: ignore[arg-type]
                channel = self._client.get_partial_messageable(target.channel_id)
                return await channel.get_partial_message(int(target.message_id)).edit(**kwargs)
        except discord.HTTPException as exc:
            translated = translate(exc, via_token=target.via_token)
            if translated is exc and files and not target.via_token and exc.status == 403:
                raise CannotAttach() from None
            if translated is exc:
                raise
            raise translated from None

    async def move(self, slot: Slot, *, reason: str, point_old: bool = True) -> None:
        """Post the job's message afresh in the channel (bot token) and point the old one at it."""
        # slot.job is replaced while we await (job_changed merges newer records in): always write to
        # the slot, never to a reference taken before an await.
        job: Job = slot.job
        old_channel_mid = slot.record.channel_message_id
        rendered = self._drawing.rendered(slot)
        channel_id, guild_id = home(job, slot.record)
        if slot.record.personal:
            # No channel of the bot's: the requester's DM with the bot, if Discord allows one.
            channel_id = await self._open_dm(slot)
        assert channel_id is not None
        channel = self._client.get_partial_messageable(channel_id, guild_id=guild_id)
        # render_job always builds a view (possibly empty): an empty one simply sends no buttons.
        view = rendered.view or discord.ui.View(timeout=None)
        try:
            with self._errors.counted():
                message = await channel.send(
                    embed=rendered.embed,
                    view=view,
                    allowed_mentions=discord.AllowedMentions.none(),
                    nonce=message_nonce(job.id, f"move{slot.record.moves}"),  # resent: no 2nd message
                )
        except discord.HTTPException as exc:
            if slot.record.personal and isinstance(exc, discord.Forbidden):
                await self._dm_refused(slot, exc)
            if not channel_closed(exc):
                raise
            # Deleted as the job delivered (a job still waiting there ended with it), or closed to
            # the bot: its result waits for its requester in /job instead of failing the job.
            log.info("job %s: its channel takes no message from the bot (%s)", job.id, describe(exc))
            raise NowhereToPost() from None
        # The old channel message stays, pointing here: remembered, so Delete removes it too.
        pointers = slot.record.pointers + ((old_channel_mid,) if old_channel_mid else ())
        slot.learn(channel_message_id=message.id, pointers=pointers)
        await self._drawing.save(slot)
        slot.last_key = rendered.key
        slot.last_edit = self._clock.monotonic()
        log.info("job %s: status moved to a channel message (%s)", job.id, reason)
        if point_old:
            await self._point_old(slot, old_channel_mid, message.jump_url)

    async def _open_dm(self, slot: Slot) -> int:
        """The personal job's DM with its requester (opened once, ``POST /users/@me/channels``);
        raises :class:`NowhereToPost` when Discord refuses it."""
        if slot.record.dm_channel_id:
            return slot.record.dm_channel_id
        try:
            with self._errors.counted():
                dm = await self._client.create_dm(discord.Object(slot.job.user_id))
        except discord.Forbidden as exc:
            await self._dm_refused(slot, exc)
        slot.learn(dm_channel_id=dm.id)
        await self._drawing.save(slot)
        return dm.id

    async def _dm_refused(self, slot: Slot, exc: discord.HTTPException) -> NoReturn:
        """Discord refuses the bot a DM with the requester: remember it (never asked again), and raise."""
        log.info("job %s: its requester cannot be sent a DM (%s)", slot.job.id, describe(exc))
        slot.learn(dm_refused=True)
        await self._drawing.save(slot)
        # The token's last moments: tell the requester where the result will wait.
        await self._point_old(slot, None, None)
        raise NowhereToPost() from None

    async def _point_old(self, slot: Slot, old_channel_mid: int | None, link: str | None) -> None:
        """One last edit of the old message, no buttons, saying where the job went (best effort;
        `link` None: nowhere, a personal job whose requester refuses DMs: its result waits in /job)."""
        job = slot.job
        note = (
            t("note_moved", job.locale, link=link)
            if link is not None
            else t("userinstall_note_job", job.locale, id=job.id)
        )
        old = self._drawing.rendered(slot, extra=(note,))
        try:
            channel_id, _ = home(job, slot.record)
            if old_channel_mid and channel_id:
                await self.edit(
                    Target(False, old_channel_mid, channel_id), content=None, embed=old.embed, view=None
                )
            elif self.token_usable(slot, spare=-self._timings.token_margin + self.token_safety()):
                pointer = await self.edit(
                    Target.interaction(slot.record, job.channel_id),
                    content=None,
                    embed=old.embed,
                    view=None,
                    within=self.token_left(slot),
                )
                if pointer is not None and slot.record.message_id is None:
                    # Its id, so Delete can find the pointer once no token reaches it.
                    slot.learn(message_id=pointer.id)
                    await self._drawing.save(slot)
        except (discord.HTTPException, TokenDead, MessageUnusable, aiohttp.ClientError, TimeoutError) as exc:
            log.info("job %s: old message not updated after the move: %s", job.id, describe(exc))
