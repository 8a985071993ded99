"""Where a job's message lives, and moving it.

A job's message starts as the interaction's answer, edited through the interaction token (valid 15
minutes, stored with the job). It moves to a normal channel message sent with the bot token
`TOKEN_MARGIN` seconds before the token expires, when Discord says the token is dead (50027/10015),
and again when the channel message gets too old to edit (30046) or is gone (10008). The old message
is pointed at the new one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import discord

from cogs.delivery.codes import MessageUnusable, TokenDead, describe, translate
from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.slot import Slot
from cogs.i18n import t
from cogs.views.render import Rendered
from framecast.clock import Clock
from framecast.config import Settings
from framecast.jobs import Job

__all__ = ["Drawer", "Placement", "Target"]

log = logging.getLogger(__name__)

#: Places tried for one edit: the current one, then after a move (dead token, unusable message).
_PLACES_TRIED = 3


@dataclass
class Target:
    """Where the job's message lives: the interaction's message, or a channel message."""

    via_token: bool
    message_id: int | str  # "@original" until the first edit through the token reveals the id
    channel_id: int
    application_id: int = 0
    token: str = ""

    def __repr__(self) -> str:  # never show the interaction token
        return f"<Target token={self.via_token} message={self.message_id}>"


class Drawer(Protocol):
    """How a slot's job is drawn and its bookkeeping saved (the reporter)."""

    def rendered(self, slot: Slot, *, extra: tuple[str, ...] = ()) -> Rendered:
        """The job's message as it should look now, with `extra` lines."""
        ...

    async def persist(self, slot: Slot) -> None:
        """Save ``slot.job.discord`` (merged with other writers) and refresh the slot's record."""
        ...


class Placement:
    """Chooses the job message to edit, edits it, and moves it when it must."""

    def __init__(
        self,
        client: discord.Client,
        *,
        settings: Settings,
        clock: Clock,
        drawer: Drawer,
        errors: DiscordErrors | None = None,
    ) -> None:
        """`errors`: where failed edits and posts are counted (default: nowhere)."""
        self._client = client
        self._errors = errors or DiscordErrors()
        self._settings = settings
        self._clock = clock
        self._drawer = drawer

    def __repr__(self) -> str:
        return f"<Placement margin={self._settings.token_margin:g}s>"

    @property
    def token_margin(self) -> float:
        """Seconds before its expiry that a token stops being used for the job's message."""
        return self._settings.token_margin

    # -- decisions ----------------------------------------------------------------------------------
    def token_usable(self, discord_data: dict[str, Any], spare: float = 0.0) -> bool:
        """Whether the stored interaction token may still be used (`spare` seconds before the margin)."""
        d = discord_data
        if not d.get("token") or d.get("token_dead"):
            return False
        expires = float(d.get("token_expires_at") or 0)
        return self._clock.time() < expires - self._settings.token_margin - spare

    def until_move(self, job: Job) -> float | None:
        """Seconds until the job must leave its interaction token (None when it already has)."""
        d = job.discord
        if job.is_terminal or d.get("channel_message_id") or not d.get("token"):
            return None
        expires = float(d.get("token_expires_at") or 0)
        return max(0.0, expires - self._settings.token_margin - self._clock.time())

    def on_channel(self, job: Job) -> Target | None:
        """The job's channel message, once it has one."""
        mid = job.discord.get("channel_message_id")
        return Target(False, int(mid), job.channel_id) if mid else None

    def token_safety(self) -> float:
        """How long before its real expiry a token is no longer used, even for a last pointer edit.

        Never more than half the margin: the move happens `token_margin` before expiry, and the old
        message must still be reachable at that moment to point at the new one.
        """
        return min(2.0, self._settings.token_margin / 2)

    # -- acting -------------------------------------------------------------------------------------
    async def show(self, slot: Slot, send: Callable[[Target], Awaitable[None]]) -> None:
        """Call `send` with the job's message, moving it first when the current one cannot be used."""
        for _ in range(_PLACES_TRIED):
            target = await self.target(slot)
            try:
                await send(target)
                return
            except TokenDead:
                slot.job.discord["token_dead"] = True
                await self._drawer.persist(slot)
            except MessageUnusable:
                # Discord refuses edits of this message (30046) or it is gone (10008): a fresh one,
                # and no further attempt on the old one.
                await self.move(slot, reason="refused", point_old=False)
        raise RuntimeError(f"job {slot.job.id}: no message could be updated")

    async def target(self, slot: Slot) -> Target:
        """The message to edit now (moving the job first if its token or message is too old)."""
        job = slot.job
        channel = self.on_channel(job)
        if channel is not None:
            age = self._clock.time() - discord.utils.snowflake_time(int(channel.message_id)).timestamp()
            if age > self._settings.status_message_max_age and not job.is_terminal:
                await self.move(slot, reason="old")
                channel = self.on_channel(slot.job)
                assert channel is not None
            return channel
        d = job.discord
        if self.token_usable(d):
            return Target(
                True,
                d.get("message_id") or "@original",
                job.channel_id,
                int(d["application_id"]),
                str(d["token"]),
            )
        await self.move(slot, reason="token")
        channel = self.on_channel(slot.job)
        assert channel is not None
        return channel

    async def edit(
        self,
        target: Target,
        *,
        content: str | None,
        embed: discord.Embed,
        view: discord.ui.View | None,
        files: list[discord.File] | None = None,
    ) -> discord.Message | None:
        """Edit the job's message (never pinging). Raises what :func:`~cogs.delivery.codes.translate` says."""
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
                    return await webhook.edit_message(target.message_id, **kwargs)  # type: ignore[arg-type]
                channel = self._client.get_partial_messageable(target.channel_id)
                return await channel.get_partial_message(int(target.message_id)).edit(**kwargs)
        except discord.HTTPException as exc:
            translated = translate(exc, via_token=target.via_token)
            if translated is exc:
                raise
            raise translated from None

    async def move(self, slot: Slot, *, reason: str, point_old: bool = True) -> None:
        """Post the job's message afresh in the channel (bot token) and point the old one at it."""
        # slot.job is replaced while we await (job_changed merges newer records in): always write to
        # the current one, never to a reference taken before an await.
        job = slot.job
        old_channel_mid = job.discord.get("channel_message_id")
        rendered = self._drawer.rendered(slot)
        channel = self._client.get_partial_messageable(job.channel_id, guild_id=job.guild_id)
        # render_job always builds a view (possibly empty): an empty one simply sends no buttons.
        view = rendered.view or discord.ui.View(timeout=None)
        with self._errors.counted():
            message = await channel.send(
                embed=rendered.embed, view=view, allowed_mentions=discord.AllowedMentions.none()
            )
        slot.job.discord["channel_message_id"] = message.id
        await self._drawer.persist(slot)
        slot.last_key = rendered.key
        slot.last_edit = self._clock.monotonic()
        log.info("job %s: status moved to a channel message (%s)", job.id, reason)
        if point_old:
            await self._point_old(slot, old_channel_mid, message.jump_url)

    async def _point_old(self, slot: Slot, old_channel_mid: int | None, link: str) -> None:
        """One last edit of the old message, no buttons, saying where the job went (best effort)."""
        job = slot.job
        old = self._drawer.rendered(slot, extra=(t("note_moved", job.locale, link=link),))
        d = job.discord
        try:
            if old_channel_mid:
                await self.edit(
                    Target(False, int(old_channel_mid), job.channel_id),
                    content=None,
                    embed=old.embed,
                    view=None,
                )
            elif self.token_usable(d, spare=-self._settings.token_margin + self.token_safety()):
                await self.edit(
                    Target(
                        True,
                        d.get("message_id") or "@original",
                        job.channel_id,
                        int(d["application_id"]),
                        str(d["token"]),
                    ),
                    content=None,
                    embed=old.embed,
                    view=None,
                )
        except (discord.HTTPException, TokenDead, MessageUnusable, aiohttp.ClientError) as exc:
            log.info("job %s: old message not updated after the move: %s", job.id, describe(exc))
