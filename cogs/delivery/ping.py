"""Mentioning the requester once their job ended on a channel message.

On the interaction's own message the member is already looking at their command's answer; a
channel message (the token expired) changes silently, since edits never notify anybody, so the
result gets one short reply that mentions the requester.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

import discord

from cogs.delivery.codes import DISCORD_TROUBLE, describe
from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.nonces import message_nonce
from cogs.delivery.slot import Slot
from cogs.delivery.target import Target
from cogs.i18n import t
from framecast.app import Job, JobKind, JobState

__all__ = ["ping_requester", "ping_text"]

log = logging.getLogger(__name__)


def ping_text(job: Job, shown: JobState) -> str:
    """The reply mentioning the requester: "your video is ready" when `shown` is DELIVERED.

    One message per kind (``note_ready_video``, ``note_ready_image``), so each language words and
    inflects it as it needs (German capitalises nouns; French and Italian agree in gender).
    """
    mention = f"<@{job.user_id}>"
    if shown is JobState.DELIVERED:
        key = "note_ready_video" if job.kind is JobKind.VIDEO else "note_ready_image"
        return t(key, job.locale, mention=mention)
    return t("note_finished", job.locale, mention=mention, id=job.id)


async def ping_requester(
    client: discord.Client,
    slot: Slot,
    target: Target,
    shown: Job,
    *,
    persist: Callable[[Slot], Awaitable[None]],
    errors: DiscordErrors | None = None,
) -> None:
    """Reply to the job's channel message `target`, mentioning the requester (once; best effort).

    `shown` is the job as the message shows it (DELIVERED: "ready", otherwise "finished"); a failed
    reply is counted in `errors`.
    """
    job = slot.job
    if slot.record.pinged:
        return
    text = ping_text(job, shown.state)
    # A personal job's channel message is in its requester's DM: no server there.
    channel = client.get_partial_messageable(
        target.channel_id, guild_id=None if slot.record.personal else job.guild_id
    )
    try:
        sent = await channel.send(
            text,
            reference=discord.MessageReference(
                message_id=int(target.message_id), channel_id=target.channel_id, fail_if_not_exists=False
            ),
            allowed_mentions=discord.AllowedMentions(
                everyone=False, roles=False, replied_user=False, users=[discord.Object(job.user_id)]
            ),
            # Sent again (its answer lost, or the bot died before saving `pinged`): no second one.
            nonce=message_nonce(job.id, "ping"),
        )
    except DISCORD_TROUBLE as exc:
        if errors is not None:
            errors.record(exc)
        log.warning("job %s: could not mention the requester: %s", job.id, describe(exc))
        return
    # It points to the result as an older channel message does: Delete removes it with the result.
    slot.learn(pinged=True, pointers=(*slot.record.pointers, sent.id))
    with contextlib.suppress(Exception):
        await persist(slot)
