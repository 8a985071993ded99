"""Shows jobs in Discord: the one writer of every job's message.

Each unfinished job has a :class:`_Slot` with one task that owns the job's message: renders are
coalesced (only when the visible text changes, at most one edit per ``EDIT_INTERVAL``), deliveries
go through the same task so two writers never race, and the message moves from the interaction
(15-minute token) to a normal channel message sent with the bot token before the token expires,
when Discord says the token is dead (50027/10015), or when the message gets too old to edit (30046).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import io
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import discord

from cogs.utils.i18n import t
from cogs.utils.render import Rendered, link_text, render_job
from framecast.clock import Clock
from framecast.config import Settings
from framecast.jobs import Job, JobKind, JobState
from framecast.runner import UploadTooLarge
from framecast.store import JobStore

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)

DEFAULT_UPLOAD_LIMIT = 10 * 1024 * 1024
UPLOAD_SLACK = 8 * 1024  # multipart framing and rounding: stay a little under the limit
_TOKEN_DEAD_CODES = {50027, 10015}
_DELIVERY_ATTEMPTS = 5
_OLD_MESSAGE_CODE = 30046
_UNKNOWN_MESSAGE_CODE = 10008
# Bookkeeping in job.discord that only the reporter writes (see _merge).
_REPORTER_KEYS = ("message_id", "channel_message_id", "token_dead", "pinged")


@dataclass
class _Target:
    """Where the job's message lives: the interaction's message, or a channel message."""

    via_token: bool
    message_id: int | str  # "@original" until the first edit through the token reveals the id
    channel_id: int
    application_id: int = 0
    token: str = ""

    def __repr__(self) -> str:  # never show the interaction token
        return f"<_Target token={self.via_token} message={self.message_id}>"


@dataclass
class _Delivery:
    data: bytes | None
    filename: str | None
    link: str | None
    notice: str | None
    future: asyncio.Future[None]


@dataclass
class _Slot:
    job: Job
    notes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    urgent: asyncio.Event = field(default_factory=asyncio.Event)
    last_key: tuple[object, ...] | None = None
    last_edit: float = -math.inf
    delivery: _Delivery | None = None
    task: asyncio.Task[None] | None = None
    checked: bool = False  # a restored DELIVERING job: looked for an earlier delivery already


class _TokenDead(Exception):
    pass


class _MessageTooOld(Exception):
    pass


class DiscordReporter:
    """Implements :class:`framecast.runner.JobReporter` on top of discord.py."""

    def __init__(
        self, bot: Framecast, *, store: JobStore, settings: Settings, clock: Clock,
        position: Callable[[int], int | None],
    ) -> None:
        self._bot = bot
        self._store = store
        self._settings = settings
        self._clock = clock
        self._position = position
        self._slots: dict[int, _Slot] = {}
        self._closing = False

    def __repr__(self) -> str:
        return f"<DiscordReporter slots={len(self._slots)}>"

    # -- JobReporter protocol -----------------------------------------------------------------------
    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        """Re-render the job's message soon (now when `urgent`)."""
        if job.state is JobState.DELIVERED and job.id not in self._slots:
            return  # the delivery's own edit gave the message its final look
        slot = self._slot(job)
        slot.job = _merge(job, slot.job)
        slot.wake.set()
        if urgent:
            slot.urgent.set()

    async def upload_limit(self, job: Job) -> int:
        """The destination's limit: the interaction's while its token lives, else the guild's."""
        slot = self._slot(job)
        d = slot.job.discord
        if self._token_usable(d, spare=120.0) and not d.get("channel_message_id"):
            limit = int(d.get("attachment_limit") or DEFAULT_UPLOAD_LIMIT)
        else:
            await self._bot.wait_until_ready()
            guild = self._bot.get_guild(job.guild_id)
            limit = guild.filesize_limit if guild is not None else DEFAULT_UPLOAD_LIMIT
        return max(1024, limit - UPLOAD_SLACK)

    async def deliver_file(self, job: Job, data: bytes, filename: str, *, notice: str | None) -> None:
        """Attach the file to the job's message (raises UploadTooLarge on a 413)."""
        await self._deliver(job, _Delivery(data, filename, None, notice, asyncio.get_running_loop().create_future()))

    async def deliver_link(self, job: Job, url: str, reason: str) -> None:
        """Put the service's link on the job's message, saying why there is no file."""
        await self._deliver(job, _Delivery(None, None, url, reason, asyncio.get_running_loop().create_future()))

    async def was_delivered(self, job: Job) -> bool:
        """Look at the job's messages: is the result already there (a crash after the upload)?"""
        slot = self._slots.get(job.id)
        if slot is not None:
            # The caller's copy may predate a move to a channel message: look where the job is now.
            job = dataclasses.replace(job, discord={**job.discord, **{
                key: slot.job.discord[key] for key in _REPORTER_KEYS if key in slot.job.discord}})
        prefix = f"framecast-{job.id}."
        for message in await self._messages(job):
            if any(a.filename.startswith(prefix) for a in message.attachments):
                return True
            if job.result_url and link_text(job.result_url) in (message.content or ""):
                return True
        return False

    async def job_message(self, job: Job) -> discord.Message | None:
        """The job's current message (the channel message once it moved there), if it can be read."""
        messages = await self._messages(job)
        return messages[0] if messages else None

    async def _messages(self, job: Job) -> list[discord.Message]:
        found = []
        for key in ("channel_message_id", "message_id"):
            mid = job.discord.get(key)
            if not mid or mid == "@original":
                continue
            message = await self._fetch(job, int(mid), via_token=(key == "message_id"))
            if message is not None:
                found.append(message)
        return found

    # -- extras used by the bot -----------------------------------------------------------------------
    def add_note(self, job: Job, key: str, **params: Any) -> None:
        """Show an extra line (a localised message key) on the job's message until it finishes."""
        slot = self._slot(job)
        if (key, params) not in slot.notes:
            slot.notes.append((key, params))

    def positions_changed(self, guild_id: int, queued: list[int]) -> None:
        """The guild's queue moved: queued jobs re-render their place (coalesced)."""
        for job_id in queued:
            slot = self._slots.get(job_id)
            if slot is not None:
                slot.wake.set()

    async def close(self, timeout: float = 5.0) -> None:
        """Stop all slot tasks (their jobs' state is in the database; nothing is lost)."""
        self._closing = True
        tasks = [s.task for s in self._slots.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    # -- the slot task -------------------------------------------------------------------------------
    def _slot(self, job: Job) -> _Slot:
        slot = self._slots.get(job.id)
        if slot is None:
            slot = _Slot(job=job)
            self._slots[job.id] = slot
        if (slot.task is None or slot.task.done()) and not self._closing:
            slot.task = asyncio.create_task(self._run_slot(slot), name=f"framecast-message-{job.id}")
            slot.task.add_done_callback(functools.partial(self._slot_done, job.id))
        return slot

    def _slot_done(self, job_id: int, task: asyncio.Task[None]) -> None:
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
                self._slot(slot.job).wake.set()

    async def _deliver(self, job: Job, delivery: _Delivery) -> None:
        slot = self._slot(job)
        slot.job = _merge(job, slot.job)
        slot.delivery = delivery
        slot.wake.set()
        slot.urgent.set()
        await delivery.future

    async def _run_slot(self, slot: _Slot) -> None:
        while True:
            timeout = self._until_move(slot)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(slot.wake.wait(), timeout)
            if slot.delivery is None and not slot.urgent.is_set():
                # Coalesce: at most one edit per EDIT_INTERVAL; an urgent change cuts the wait short.
                wait = slot.last_edit + self._settings.edit_interval - self._clock.monotonic()
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(slot.urgent.wait(), wait)
            slot.wake.clear()
            slot.urgent.clear()
            delivery, slot.delivery = slot.delivery, None
            if delivery is not None:
                try:
                    await self._deliver_patiently(slot, delivery)
                except BaseException as exc:
                    if not delivery.future.done():
                        delivery.future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("stopped"))
                    if not isinstance(exc, Exception):
                        raise
                    continue
                # The delivery's edit showed the finished message (file, notices, link): nothing is
                # left to draw, and the message must not move or change any more.
                slot.job = _with_state(slot.job, JobState.DELIVERED)
                if not delivery.future.done():
                    delivery.future.set_result(None)
                return
            if slot.job.state is JobState.DELIVERED:
                return
            if slot.job.state is JobState.DELIVERING and not slot.checked and slot.last_edit == -math.inf:
                # Restored after a restart while delivering: the file may already be on the message
                # (the bot died before recording it). Drawing "uploading" over it would be wrong.
                slot.checked = True
                try:
                    already = await self.was_delivered(slot.job)
                except (discord.HTTPException, aiohttp.ClientError, TimeoutError) as exc:
                    log.warning("job %s: could not look at its message: %s", slot.job.id, _describe(exc))
                    already = False
                if already:
                    mid = slot.job.discord.get("channel_message_id")
                    if mid:  # the bot died between the upload and the requester's ping
                        await self._ping_requester(slot, _Target(False, int(mid), slot.job.channel_id),
                                                   _with_state(slot.job, JobState.DELIVERED))
                    slot.job = _with_state(slot.job, JobState.DELIVERED)
                    return
            try:
                await self._render(slot, None)
            except discord.RateLimited as exc:
                slot.wake.set()
                await asyncio.sleep(min(exc.retry_after, 30.0))
            except (discord.HTTPException, aiohttp.ClientError, TimeoutError) as exc:
                log.warning("job %s: could not update its message: %s", slot.job.id, _describe(exc))
            if slot.job.is_terminal and slot.delivery is None and not slot.wake.is_set():
                return

    async def _deliver_patiently(self, slot: _Slot, delivery: _Delivery) -> None:
        """Deliver, riding out Discord's transient trouble (long rate limits, 5xx, lost connections).

        A failed attempt may still have reached Discord, so before every retry the job's message is
        looked at: a delivery is never repeated. Anything else (413, 4xx) is for the runner to judge.
        """
        for attempt in range(1, _DELIVERY_ATTEMPTS + 1):
            try:
                await self._render(slot, delivery)
                return
            except discord.RateLimited as exc:
                delay = exc.retry_after
                if attempt == _DELIVERY_ATTEMPTS:
                    raise
            except discord.HTTPException as exc:
                if exc.status < 500 or attempt == _DELIVERY_ATTEMPTS:
                    raise
                delay = min(30.0, 2.0 ** (attempt - 1))
            except (aiohttp.ClientError, TimeoutError):
                if attempt == _DELIVERY_ATTEMPTS:
                    raise
                delay = min(30.0, 2.0 ** (attempt - 1))
            log.warning("job %s: delivery attempt %d failed; retrying in %.0fs", slot.job.id, attempt, delay)
            await asyncio.sleep(delay)
            with contextlib.suppress(discord.HTTPException, aiohttp.ClientError, TimeoutError):
                if delivery.data is not None and await self.was_delivered(slot.job):
                    log.info("job %s: the failed attempt had reached Discord after all", slot.job.id)
                    return

    def _until_move(self, slot: _Slot) -> float | None:
        """Seconds until the job must leave its interaction token (None when it already has)."""
        d = slot.job.discord
        if slot.job.is_terminal or d.get("channel_message_id") or not d.get("token"):
            return None
        expires = float(d.get("token_expires_at") or 0)
        return max(0.0, expires - self._settings.token_margin - self._clock.time())

    # -- rendering and sending -----------------------------------------------------------------------
    def _rendered(self, slot: _Slot, *, extra: tuple[str, ...] = ()) -> Rendered:
        job = slot.job
        notes = tuple(t(key, job.locale, **params) for key, params in slot.notes) + extra
        return render_job(
            job,
            position=self._position(job.id) if job.state is JobState.QUEUED else None,
            now=self._clock.time(),
            poll_timeout=self._settings.gen_poll_timeout,
            notes=notes if not job.is_terminal or job.state is not JobState.DELIVERED else extra,
        )

    async def _render(self, slot: _Slot, delivery: _Delivery | None) -> None:
        for _ in range(3):
            target = await self._target(slot)
            try:
                await self._send(slot, target, delivery)
                return
            except _TokenDead:
                slot.job.discord["token_dead"] = True
                await self._persist(slot)
            except _MessageTooOld:
                # Discord refuses edits of this message (30046) or it is gone (10008): a fresh one,
                # and no further attempt on the old one.
                await self._move(slot, reason="refused", point_old=False)
        raise RuntimeError(f"job {slot.job.id}: no message could be updated")

    async def _send(self, slot: _Slot, target: _Target, delivery: _Delivery | None) -> None:
        job = slot.job
        # Edits never notify anybody (Discord pings only on a new message): the requester is pinged
        # by a short reply once the result is on a channel message (see _ping_requester).
        extra: tuple[str, ...] = ()
        files: list[discord.File] | None = None
        content_extra = ""
        shown = job
        if delivery is not None:
            # Show the finished look together with the file, in one edit.
            shown = _with_state(job, JobState.DELIVERED)
            if delivery.notice:
                extra = (t(delivery.notice, job.locale, url=delivery.link or ""),)
            if delivery.data is not None:
                assert delivery.filename is not None
                files = [discord.File(io.BytesIO(delivery.data), filename=delivery.filename)]
            elif delivery.link:
                content_extra = link_text(delivery.link)
        saved, slot.job = slot.job, shown
        try:
            rendered = self._rendered(slot, extra=extra)
        finally:
            slot.job = saved
        content = content_extra or None
        if delivery is None and rendered.key == slot.last_key:
            return
        message = await self._edit(target, content=content, embed=rendered.embed, view=rendered.view,
                                   files=files, allowed=discord.AllowedMentions.none())
        if target.via_token and target.message_id == "@original" and message is not None:
            # Learn the real id once: it lets a restarted bot look at the message with the bot token.
            slot.job.discord["message_id"] = message.id
            await self._persist(slot)
        slot.last_key = rendered.key if delivery is None else None
        slot.last_edit = self._clock.monotonic()
        if not target.via_token and shown.state in (JobState.DELIVERED, JobState.FAILED):
            await self._ping_requester(slot, target, shown)

    async def _ping_requester(self, slot: _Slot, target: _Target, shown: Job) -> None:
        """Mention the requester once, in a reply to the job's channel message (best effort).

        On the interaction's own message the member is already looking at their command's answer;
        a channel message (the token expired) changes silently, so the result needs a ping.
        """
        job = slot.job
        if job.discord.get("pinged"):
            return
        kind = t("kind_video" if job.kind is JobKind.VIDEO else "kind_image", job.locale)
        mention = f"<@{job.user_id}>"
        text = (t("note_ready", job.locale, mention=mention, kind=kind.lower()) if shown.state is JobState.DELIVERED
                else t("note_finished", job.locale, mention=mention, id=job.id))
        channel = self._bot.get_partial_messageable(target.channel_id, guild_id=job.guild_id)
        try:
            await channel.send(
                text,
                reference=discord.MessageReference(message_id=int(target.message_id), channel_id=target.channel_id,
                                                   fail_if_not_exists=False),
                allowed_mentions=discord.AllowedMentions(everyone=False, roles=False, replied_user=False,
                                                         users=[discord.Object(job.user_id)]),
            )
        except (discord.HTTPException, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("job %s: could not mention the requester: %s", job.id, _describe(exc))
            return
        slot.job.discord["pinged"] = True
        with contextlib.suppress(Exception):
            await self._persist(slot)

    async def _edit(
        self, target: _Target, *, content: str | None, embed: discord.Embed, view: discord.ui.View | None,
        files: list[discord.File] | None, allowed: discord.AllowedMentions,
    ) -> discord.Message | None:
        kwargs: dict[str, Any] = {"content": content, "embed": embed, "view": view, "allowed_mentions": allowed}
        if files is not None:
            kwargs["attachments"] = files
        try:
            if target.via_token:
                webhook = discord.Webhook.partial(target.application_id, target.token, client=self._bot)
                return await webhook.edit_message(target.message_id, **kwargs)  # type: ignore[arg-type]
            channel = self._bot.get_partial_messageable(target.channel_id)
            return await channel.get_partial_message(int(target.message_id)).edit(**kwargs)
        except discord.HTTPException as exc:
            if exc.status == 413 or exc.code == 40005:
                raise UploadTooLarge(str(exc.code)) from None
            if target.via_token and (exc.code in _TOKEN_DEAD_CODES or exc.status == 401):
                raise _TokenDead from None
            if not target.via_token and exc.code in (_OLD_MESSAGE_CODE, _UNKNOWN_MESSAGE_CODE):
                raise _MessageTooOld from None
            raise

    async def _target(self, slot: _Slot) -> _Target:
        d = slot.job.discord
        if d.get("channel_message_id"):
            mid = int(d["channel_message_id"])
            age = self._clock.time() - discord.utils.snowflake_time(mid).timestamp()
            if age > self._settings.status_message_max_age and not slot.job.is_terminal:
                await self._move(slot, reason="old")
                mid = int(slot.job.discord["channel_message_id"])
            return _Target(False, mid, slot.job.channel_id)
        if self._token_usable(d):
            return _Target(True, d.get("message_id") or "@original", slot.job.channel_id,
                           int(d["application_id"]), str(d["token"]))
        await self._move(slot, reason="token")
        return _Target(False, int(slot.job.discord["channel_message_id"]), slot.job.channel_id)

    def _token_usable(self, d: dict[str, Any], spare: float = 0.0) -> bool:
        if not d.get("token") or d.get("token_dead"):
            return False
        expires = float(d.get("token_expires_at") or 0)
        return self._clock.time() < expires - self._settings.token_margin - spare

    async def _move(self, slot: _Slot, *, reason: str, point_old: bool = True) -> None:
        """Post the job's message afresh in the channel (bot token) and point the old one at it."""
        # slot.job is replaced while we await (job_changed merges newer records in): always write to
        # the current one, never to a reference taken before an await.
        job = slot.job
        old_channel_mid = job.discord.get("channel_message_id")
        rendered = self._rendered(slot)
        channel = self._bot.get_partial_messageable(job.channel_id, guild_id=job.guild_id)
        # render_job always builds a view (possibly empty): an empty one simply sends no buttons.
        view = rendered.view or discord.ui.View(timeout=None)
        message = await channel.send(embed=rendered.embed, view=view, allowed_mentions=discord.AllowedMentions.none())
        slot.job.discord["channel_message_id"] = message.id
        await self._persist(slot)
        slot.last_key = rendered.key
        slot.last_edit = self._clock.monotonic()
        log.info("job %s: status moved to a channel message (%s)", job.id, reason)
        # Point the old message at the new one: one last edit, no buttons, best effort.
        link = message.jump_url
        old = self._rendered(slot, extra=(t("note_moved", job.locale, link=link),))
        d = slot.job.discord
        try:
            if not point_old:
                pass
            elif old_channel_mid:
                await self._edit(_Target(False, int(old_channel_mid), job.channel_id), content=None,
                                 embed=old.embed, view=None, files=None, allowed=discord.AllowedMentions.none())
            elif self._token_usable(d, spare=-self._settings.token_margin + _token_safety(self._settings)):
                await self._edit(_Target(True, d.get("message_id") or "@original", job.channel_id, int(d["application_id"]),
                                         str(d["token"])), content=None, embed=old.embed, view=None, files=None,
                                 allowed=discord.AllowedMentions.none())
        except (discord.HTTPException, _TokenDead, _MessageTooOld, aiohttp.ClientError) as exc:
            log.info("job %s: old message not updated after the move: %s", job.id, _describe(exc))

    async def _persist(self, slot: _Slot) -> None:
        # A merge in one transaction: other writers of the dict (the Retry button) are not lost.
        updated = await self._store.patch_discord(slot.job.id, dict(slot.job.discord))
        slot.job = _merge(updated, slot.job)

    async def _fetch(self, job: Job, message_id: int, *, via_token: bool) -> discord.Message | None:
        try:
            channel = self._bot.get_partial_messageable(job.channel_id, guild_id=job.guild_id)
            return await channel.fetch_message(message_id)
        except discord.HTTPException:
            pass
        d = job.discord
        if via_token and self._token_usable(d, spare=-self._settings.token_margin):
            with contextlib.suppress(discord.HTTPException):
                webhook = discord.Webhook.partial(int(d["application_id"]), str(d["token"]), client=self._bot)
                return await webhook.fetch_message(message_id)
        return None


def _token_safety(settings: Settings) -> float:
    """How long before its real expiry a token is no longer used, even for a last pointer edit.

    Never more than half the margin: the move happens `token_margin` before expiry, and the old
    message must still be reachable at that moment to point at the new one.
    """
    return min(2.0, settings.token_margin / 2)


def _merge(new: Job, old: Job) -> Job:
    """The newest job record, keeping Discord bookkeeping this reporter learned in the meantime."""
    if new is old:
        return new
    merged = dict(old.discord)
    merged.update(new.discord)
    # This reporter is the only writer of these keys and its slot always has their latest value; a
    # record read before it learned them (the runner's copy) must not roll them back, e.g. a real
    # message id back to "@original", which would leave a restarted bot unable to see a delivery.
    for key in _REPORTER_KEYS:
        if key in old.discord and old.discord[key] not in (None, "@original"):
            merged[key] = old.discord[key]
    new.discord = merged
    return new


def _with_state(job: Job, state: JobState) -> Job:
    return dataclasses.replace(job, state=state)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, discord.HTTPException):
        return f"HTTP {exc.status} (code {exc.code})"
    return type(exc).__name__
