"""Is a job's result already on its messages? (A crash between the upload and its record.)

Only the runner asks (``JobReporter.was_delivered``); the answer comes from here.
"""

from __future__ import annotations

import dataclasses

import discord

from cogs.delivery.lookup import JobMessages, result_attachments
from cogs.delivery.slot import REPORTER_KEYS
from cogs.views.render import link_text
from framecast.jobs import Job

__all__ = ["shows_result", "where_now", "result_on_messages"]


def shows_result(message: discord.Message, job: Job) -> bool:
    """Whether `message` carries the job's result: its file, or the service's link to it."""
    if result_attachments(message, job.id):
        return True
    return bool(job.result_url) and link_text(job.result_url or "") in (message.content or "")


def where_now(job: Job, latest: Job | None) -> Job:
    """`job` with the message bookkeeping of `latest` (the caller's copy may predate a move)."""
    if latest is None:
        return job
    known = {key: latest.discord[key] for key in REPORTER_KEYS if key in latest.discord}
    return dataclasses.replace(job, discord={**job.discord, **known})


async def result_on_messages(messages: JobMessages, job: Job) -> bool:
    """Look at every message the job has had: is the result on one of them?"""
    return any(shows_result(message, job) for message in await messages.all(job))
