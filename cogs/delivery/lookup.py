"""Reading a job's messages back from Discord (for ``/job`` and for the runner's look after a restart)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import aiohttp
import discord

from cogs.delivery.codes import DiscordCode, describe
from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.record import DiscordRecord
from cogs.delivery.target import home
from framecast.app import ChatUnreadable, Clock, Job, is_result_filename

__all__ = ["JobMessages", "result_attachments"]

#: Discord not answering a read now (as opposed to answering that the message cannot be read);
#: a 429 or 5xx that discord.py raised is one too (see _unanswered).
_UNANSWERED = (discord.RateLimited, aiohttp.ClientError, TimeoutError)


class JobMessages:
    """Fetches the messages a job has had: its channel message, then its interaction's message."""

    def __init__(
        self,
        client: discord.Client,
        *,
        clock: Clock,
        token_margin: float,
        errors: DiscordErrors | None = None,
    ) -> None:
        """`token_margin`: how long before its expiry the move left the token (it may be read until
        expiry); `errors`: where failed fetches are counted (default: nowhere)."""
        self._client = client
        self._clock = clock
        self._token_margin = token_margin
        self._errors = errors or DiscordErrors()

    def __repr__(self) -> str:
        return "<JobMessages>"

    async def all(self, job: Job, record: DiscordRecord, *, strict: bool = False) -> list[discord.Message]:
        """The job's messages that can still be read, the current one first.

        `strict`: a message Discord could not be asked about now (a 5xx, a rate limit, no
        connection) raises :class:`ChatUnreadable` instead of counting as unreadable.
        """
        found = []
        for mid, via_token in ((record.channel_message_id, False), (record.message_id, True)):
            if mid is None:
                continue
            message = await self.fetch(job, record, mid, via_token=via_token, strict=strict)
            if message is not None:
                found.append(message)
        return found

    async def current(self, job: Job, record: DiscordRecord) -> discord.Message | None:
        """The job's current message (the channel message once it moved there), if it can be read."""
        messages = await self.all(job, record)
        return messages[0] if messages else None

    async def fetch(
        self, job: Job, record: DiscordRecord, message_id: int, *, via_token: bool, strict: bool = False
    ) -> discord.Message | None:
        """One message of the job: with the bot token, else through its interaction token while it lives.

        A personal job's interaction message is in a place that may not be the bot's (a group DM, a
        server without the bot): only its token reads it. Its channel message is in the requester's DM.
        `strict`: see :meth:`all` (a message Discord says is gone, 10008, is gone all the same).
        """
        trouble: list[BaseException] = []
        gone = False
        channel_id: int | None
        guild_id: int | None
        if via_token:
            channel_id, guild_id = (None, None) if record.personal else (job.channel_id, job.guild_id)
        else:
            channel_id, guild_id = home(job, record)
        ways: list[Callable[[], Awaitable[discord.Message]]] = []
        if channel_id is not None:
            channel = self._client.get_partial_messageable(channel_id, guild_id=guild_id)
            ways.append(functools.partial(channel.fetch_message, message_id))
        # Until its real expiry: the margin only keeps edits off a token about to die.
        if via_token and record.token_usable(
            self._clock.time(), self._token_margin, spare=-self._token_margin
        ):
            webhook = discord.Webhook.partial(record.application_id, record.token, client=self._client)
            ways.append(functools.partial(webhook.fetch_message, message_id))
        for way in ways:
            try:
                with self._errors.counted():
                    return await way()
            except _UNANSWERED as exc:
                trouble.append(exc)
            except discord.HTTPException as exc:
                if exc.status == 429 or exc.status >= 500:
                    trouble.append(exc)
                gone = gone or exc.code == DiscordCode.UNKNOWN_MESSAGE
        if strict and trouble and not gone:
            raise ChatUnreadable(f"message {message_id}: {describe(trouble[-1])}")
        return None


def result_attachments(message: discord.Message, job_id: int) -> list[discord.Attachment]:
    """The attachments of `message` that are job `job_id`'s result (see ``result_filename``)."""
    return [a for a in message.attachments if is_result_filename(a.filename, job_id)]
