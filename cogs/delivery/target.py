"""Where a job's message lives: the interaction's message (through its token) or a channel message."""

from __future__ import annotations

from dataclasses import dataclass

from cogs.delivery.record import ORIGINAL, DiscordRecord
from framecast.app import Job

__all__ = ["Target", "home"]


def home(job: Job, record: DiscordRecord) -> tuple[int | None, int | None]:
    """``(channel id, guild id)`` where the bot posts the job's channel message with its own token.

    In a server, the job's channel. A personal job (a DM, a group DM, a server without the bot) has
    no channel of the bot's: its requester's DM with the bot, once opened (None before).
    """
    if record.personal:
        return record.dm_channel_id, None
    return job.channel_id, job.guild_id


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

    @classmethod
    def interaction(cls, record: DiscordRecord, channel_id: int) -> Target:
        """The interaction's own message, edited through its token."""
        mid: int | str = record.message_id if record.message_id is not None else ORIGINAL
        return cls(True, mid, channel_id, record.application_id, record.token)

    @property
    def unknown_original(self) -> bool:
        """The interaction's message whose real id is not known yet."""
        return self.via_token and self.message_id == ORIGINAL
