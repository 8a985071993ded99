"""Reading a job's messages back from Discord (for ``/job`` and for the runner's look after a restart)."""

from __future__ import annotations

import contextlib

import discord

from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.record import DiscordRecord
from cogs.delivery.target import home
from framecast.app import Clock, Job, is_result_filename

__all__ = ["JobMessages", "result_attachments"]


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

    async def all(self, job: Job, record: DiscordRecord) -> list[discord.Message]:
        """The job's messages that can still be read, the current one first."""
        found = []
        for mid, via_token in ((record.channel_message_id, False), (record.message_id, True)):
            if mid is None:
                continue
            message = await self.fetch(job, record, mid, via_token=via_token)
            if message is not None:
                found.append(message)
        return found

    async def current(self, job: Job, record: DiscordRecord) -> discord.Message | None:
        """The job's current message (the channel message once it moved there), if it can be read."""
        messages = await self.all(job, record)
        return messages[0] if messages else None

    async def fetch(
        self, job: Job, record: DiscordRecord, message_id: int, *, via_token: bool
    ) -> discord.Message | None:
        """One message of the job: with the bot token, else through its interaction token while it lives.

        A personal job's interaction message is in a place that may not be the bot's (a group DM, a
        server without the bot): only its token reads it. Its channel message is in the requester's DM.
        """
        channel_id: int | None
        guild_id: int | None
        if via_token:
            channel_id, guild_id = (None, None) if record.personal else (job.channel_id, job.guild_id)
        else:
            channel_id, guild_id = home(job, record)
        if channel_id is not None:
            try:
                channel = self._client.get_partial_messageable(channel_id, guild_id=guild_id)
                with self._errors.counted():
                    return await channel.fetch_message(message_id)
            except discord.HTTPException:
                pass
        # Until its real expiry: the margin only keeps edits off a token about to die.
        if via_token and record.token_usable(
            self._clock.time(), self._token_margin, spare=-self._token_margin
        ):
            with contextlib.suppress(discord.HTTPException), self._errors.counted():
                webhook = discord.Webhook.partial(record.application_id, record.token, client=self._client)
                return await webhook.fetch_message(message_id)
        return None


def result_attachments(message: discord.Message, job_id: int) -> list[discord.Attachment]:
    """The attachments of `message` that are job `job_id`'s result (see ``result_filename``)."""
    return [a for a in message.attachments if is_result_filename(a.filename, job_id)]
