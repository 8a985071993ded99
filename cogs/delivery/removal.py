"""Removing a job's messages (the Delete button): the result, and the message that pointed to it.

Both are the bot's own messages, and each is looked for where delivery put it (:func:`home`: a
personal job's channel message is in its requester's DM, never in the conversation it was asked
in). The interaction's message goes through an interaction token while one reaches it: the job's
own (15 minutes from the command), else the Delete click's (:attr:`DiscordRecord.delete_token`:
15 minutes from the click, for the message the click was on); only then with the bot token, and
only where the bot is (a server's channel, the requester's DM with the bot). A group DM or a
server without the bot is reached by tokens alone.

Only Discord's Unknown Message (10008) means "gone already". Missing Access (50001) and Unknown
Channel (10003) mean the bot could not look, so the message may well still show: the result is
then reported as not removed (:class:`RemovalFailed`), never as deleted. A pointer a move left
behind that cannot be removed is reported back (the result itself is gone, so the job is marked).
"""

from __future__ import annotations

import logging

import aiohttp
import discord

from cogs.delivery.codes import DiscordCode, describe
from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.record import DM, ORIGINAL, DiscordRecord
from cogs.delivery.target import home
from framecast.app import Clock, Job, RemovalFailed, RemovalProblem

__all__ = ["JobMessageRemoval"]

log = logging.getLogger(__name__)

#: Discord's answers meaning an interaction token can no longer reach the message.
_TOKEN_DEAD = (DiscordCode.INVALID_WEBHOOK_TOKEN, DiscordCode.UNKNOWN_WEBHOOK)
#: Discord's answers meaning the bot cannot reach the channel at all (it is not in it).
_NO_ACCESS = (DiscordCode.MISSING_ACCESS, DiscordCode.UNKNOWN_CHANNEL)


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

    async def remove(self, job: Job, record: DiscordRecord) -> RemovalProblem | None:
        """Delete every message of `job` that `record` knows.

        Raises :class:`RemovalFailed` when the result (the job's current message) stays. Returns
        why the interaction's message stays when it only pointed to a moved result (None: gone).
        """
        has_interaction_message = bool(record.token) or record.message_id is not None
        if record.channel_message_id is None:
            if has_interaction_message:
                await self._interaction_message(job, record)
            return None
        channel_id, guild_id = home(job, record)
        if channel_id is None:
            raise RemovalFailed(RemovalProblem.UNREACHABLE)
        await self._with_bot_token(job, channel_id, guild_id, record.channel_message_id)
        # The result is gone; then the messages that pointed to it (older channel messages, and
        # the interaction's message), each tried; the first reason one stays is reported.
        left: RemovalProblem | None = None
        for pointer in record.pointers:
            try:
                await self._with_bot_token(job, channel_id, guild_id, pointer)
            except RemovalFailed as failed:
                left = left or failed.problem
        if has_interaction_message:
            try:
                await self._interaction_message(job, record)
            except RemovalFailed as failed:
                left = left or failed.problem
        if left is not None:
            log.info("job %s: a message that pointed to the result stays (%s)", job.id, left)
        return left

    async def _interaction_message(self, job: Job, record: DiscordRecord) -> None:
        now = self._clock.time()
        # Until the token's real expiry: the margin only keeps progress edits off a dying token.
        if record.token_usable(now, self._token_margin, spare=-self._token_margin):
            target = record.message_id if record.message_id is not None else ORIGINAL
            if await self._with_token(job, record.application_id, record.token, target):
                return
        click_token = record.delete_token_for(record.message_id, now)
        if click_token is not None and await self._with_token(
            job, record.application_id, click_token, ORIGINAL
        ):
            return
        if record.message_id is None or (record.personal and record.context != DM):
            # Where only a token reaches (a group DM, a server without the bot), and none does now.
            raise RemovalFailed(RemovalProblem.UNREACHABLE)
        await self._with_bot_token(
            job, job.channel_id, None if record.personal else job.guild_id, record.message_id
        )

    async def _with_token(self, job: Job, application_id: int, token: str, target: int | str) -> bool:
        """Delete through an interaction token: True when the message is gone, False when the token
        is dead (another way may work); raises :class:`RemovalFailed` on any other refusal."""
        webhook = discord.Webhook.partial(application_id, token, client=self._client)
        try:
            with self._errors.counted():
                await webhook.delete_message(target)  # type: ignore[arg-type]  # "@original" too
            return True
        except discord.HTTPException as exc:
            if exc.code in _TOKEN_DEAD or exc.status == 401:
                log.info("job %s: an interaction token is dead, trying another way", job.id)
                return False
            if exc.code == DiscordCode.UNKNOWN_MESSAGE:
                return True  # gone already
            log.warning("job %s: Discord refused to delete its message: %s", job.id, describe(exc))
            raise RemovalFailed(RemovalProblem.REFUSED) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("job %s: Discord did not answer the delete: %s", job.id, describe(exc))
            raise RemovalFailed(RemovalProblem.REFUSED) from None

    async def _with_bot_token(self, job: Job, channel_id: int, guild_id: int | None, message_id: int) -> None:
        channel = self._client.get_partial_messageable(channel_id, guild_id=guild_id)
        try:
            with self._errors.counted():
                await channel.get_partial_message(message_id).delete()
        except discord.HTTPException as exc:
            if exc.code == DiscordCode.UNKNOWN_MESSAGE:
                return  # gone already: deleted by a moderator, or by an earlier Delete
            log.warning("job %s: Discord refused to delete its message: %s", job.id, describe(exc))
            unreachable = exc.code in _NO_ACCESS
            raise RemovalFailed(
                RemovalProblem.UNREACHABLE if unreachable else RemovalProblem.REFUSED
            ) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("job %s: Discord did not answer the delete: %s", job.id, describe(exc))
            raise RemovalFailed(RemovalProblem.REFUSED) from None
