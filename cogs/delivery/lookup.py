"""Reading a job's messages back from Discord (for ``/job`` and for the runner's look after a restart)."""

from __future__ import annotations

import contextlib

import discord

from cogs.delivery.errors_metric import DiscordErrors
from cogs.delivery.placement import Placement
from framecast.jobs import Job
from framecast.jobs.runner import is_result_filename

__all__ = ["JobMessages", "result_attachments"]


class JobMessages:
    """Fetches the messages a job has had: its channel message, then its interaction's message."""

    def __init__(
        self, client: discord.Client, placement: Placement, errors: DiscordErrors | None = None
    ) -> None:
        """`errors`: where failed fetches are counted (default: nowhere)."""
        self._client = client
        self._placement = placement
        self._errors = errors or DiscordErrors()

    def __repr__(self) -> str:
        return "<JobMessages>"

    async def all(self, job: Job) -> list[discord.Message]:
        """The job's messages that can still be read, the current one first."""
        found = []
        for key in ("channel_message_id", "message_id"):
            mid = job.discord.get(key)
            if not mid or mid == "@original":
                continue
            message = await self.fetch(job, int(mid), via_token=(key == "message_id"))
            if message is not None:
                found.append(message)
        return found

    async def current(self, job: Job) -> discord.Message | None:
        """The job's current message (the channel message once it moved there), if it can be read."""
        messages = await self.all(job)
        return messages[0] if messages else None

    async def fetch(self, job: Job, message_id: int, *, via_token: bool) -> discord.Message | None:
        """One message of the job: with the bot token, else through its interaction token while it lives."""
        try:
            channel = self._client.get_partial_messageable(job.channel_id, guild_id=job.guild_id)
            with self._errors.counted():
                return await channel.fetch_message(message_id)
        except discord.HTTPException:
            pass
        d = job.discord
        if via_token and self._placement.token_usable(d, spare=-self._placement.token_margin):
            with contextlib.suppress(discord.HTTPException), self._errors.counted():
                webhook = discord.Webhook.partial(
                    int(d["application_id"]), str(d["token"]), client=self._client
                )
                return await webhook.fetch_message(message_id)
        return None


def result_attachments(message: discord.Message, job_id: int) -> list[discord.Attachment]:
    """The attachments of `message` that are job `job_id`'s result (see ``result_filename``)."""
    return [a for a in message.attachments if is_result_filename(a.filename, job_id)]
