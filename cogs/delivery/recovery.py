"""Is a job's result already on its messages? (A crash between the upload and its record.)

Only the runner asks (``JobReporter.was_delivered``, a pure query); the answer comes from here.
"""

from __future__ import annotations

import discord

from cogs.delivery.lookup import JobMessages, result_attachments
from cogs.delivery.record import DiscordRecord
from cogs.literal import link_text
from framecast.app import Job, without_credentials

__all__ = ["result_on_messages", "shows_result"]


def shows_result(message: discord.Message, job: Job) -> bool:
    """Whether `message` carries the job's result: its file, or the service's link to it (as it is
    posted: without the ``user:password@`` it may have come with)."""
    if result_attachments(message, job.id):
        return True
    return bool(job.result_url) and link_text(without_credentials(job.result_url or "")) in (
        message.content or ""
    )


async def result_on_messages(messages: JobMessages, job: Job, record: DiscordRecord) -> bool:
    """Look at every message the job has had (as `record` knows them): is the result on one of them?

    Raises :class:`ChatUnreadable` when Discord could not be asked about one of them now.
    """
    return any(shows_result(message, job) for message in await messages.all(job, record, strict=True))
