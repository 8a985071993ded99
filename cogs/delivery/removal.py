"""Removing a job's messages (the Delete button): the result, and the message that pointed to it.

Both are the bot's own messages. The interaction's message goes through its interaction token
while the token lives (this also reaches channels the bot cannot see, as long as the token does),
else with the bot token through the channel; a channel message the job moved to goes with the bot
token. A message already gone counts as removed; any other refusal is raised, so the job is not
marked deleted while its result still shows.
"""

from __future__ import annotations

import logging

import discord

from cogs.delivery.codes import DiscordCode
from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.record import ORIGINAL, DiscordRecord
from framecast.app import Clock, Job

__all__ = ["JobMessageRemoval"]

log = logging.getLogger(__name__)

#: Discord's answers meaning the interaction token can no longer reach the message.
_TOKEN_DEAD = (DiscordCode.INVALID_WEBHOOK_TOKEN, DiscordCode.UNKNOWN_WEBHOOK)


class JobMessageRemoval:
    """Deletes a job's messages: the channel message it moved to, then its interaction's message."""

    def __init__(
        self,
        client: discord.Client,
        *,
        clock: Clock,
        token_margin: float,
        errors: DiscordErrors | None = None,
    ) -> None:
        """`token_margin`: how long before its expiry progress left the token (it may be used until
        expiry); `errors`: where failed requests are counted (default: nowhere)."""
        self._client = client
        self._clock = clock
        self._token_margin = token_margin
        self._errors = errors or DiscordErrors()

    def __repr__(self) -> str:
        return "<JobMessageRemoval>"

    async def remove(self, job: Job, record: DiscordRecord) -> None:
        """Delete every message of `job` that `record` knows; raise when one stays."""
        if record.channel_message_id is not None:
            await self._with_bot_token(job, record.channel_message_id)
        if record.token or record.message_id is not None:
            await self._interaction_message(job, record)

    async def _interaction_message(self, job: Job, record: DiscordRecord) -> None:
        # Until the token's real expiry: the margin only keeps progress edits off a dying token.
        if record.token_usable(self._clock.time(), self._token_margin, spare=-self._token_margin):
            webhook = discord.Webhook.partial(record.application_id, record.token, client=self._client)
            target = record.message_id if record.message_id is not None else ORIGINAL
            try:
                with self._errors.counted():
                    await webhook.delete_message(target)  # type: ignore[arg-type]  # "@original" too
                return
            except discord.NotFound as exc:
                if exc.code not in _TOKEN_DEAD:
                    return  # gone already
            except discord.HTTPException as exc:
                if exc.status != 401 and exc.code not in _TOKEN_DEAD:
                    raise
            log.info("job %s: interaction token dead, deleting with the bot token", job.id)
        if record.message_id is not None:
            await self._with_bot_token(job, record.message_id)

    async def _with_bot_token(self, job: Job, message_id: int) -> None:
        channel = self._client.get_partial_messageable(job.channel_id, guild_id=job.guild_id)
        try:
            with self._errors.counted():
                await channel.get_partial_message(message_id).delete()
        except discord.NotFound:
            pass  # gone already: deleted by a moderator, or by an earlier Delete
