"""What Discord's error answers mean for a job's message.

Discord answers a refused request with an HTTP status and a JSON error code; only a handful of
codes change what the delivery code does next, and they are named here once.
"""

from __future__ import annotations

from enum import IntEnum

import aiohttp
import discord

__all__ = [
    "DISCORD_TROUBLE",
    "CannotAttach",
    "DiscordCode",
    "MessageUnusable",
    "NowhereToPost",
    "ThreadClosed",
    "TokenDead",
    "TooLarge",
    "channel_closed",
    "describe",
    "translate",
]

#: Failures of one request to Discord that leave the job as it was (logged, tried again later).
DISCORD_TROUBLE = (discord.HTTPException, aiohttp.ClientError, TimeoutError)


class DiscordCode(IntEnum):
    """The JSON error codes of Discord's answers that the delivery code acts on."""

    UNKNOWN_CHANNEL = 10003  # no such channel, as far as the bot may know
    UNKNOWN_GUILD = 10004  # no such server, as far as the bot may know
    UNKNOWN_MESSAGE = 10008  # the message is gone (deleted)
    UNKNOWN_WEBHOOK = 10015  # the interaction token is unknown (expired long ago)
    MESSAGE_TOO_OLD = 30046  # no more edits of a message older than an hour
    MISSING_ACCESS = 50001  # the bot is not in that channel (a group DM, a server without it)
    THREAD_ARCHIVED = 50083  # a closed thread: its messages cannot be edited; a new one reopens it
    CANNOT_MESSAGE_USER = 50007  # the person does not accept DMs from the bot
    REQUEST_TOO_LARGE = 40005  # the upload is over the destination's limit (HTTP 413)
    INVALID_WEBHOOK_TOKEN = 50027  # the interaction token expired


class TokenDead(Exception):
    """The interaction token can no longer reach the job's message: move to a channel message."""


class TooLarge(Exception):
    """Discord refused the upload as too large (HTTP 413): the worker answers ``UploadTooLarge``."""


class MessageUnusable(Exception):
    """Discord refuses edits of the channel message (too old) or the job's message is gone: post a
    fresh one."""


class ThreadClosed(MessageUnusable):
    """The job's thread was closed (archived) by a moderator or by inactivity: its messages cannot be
    edited until it reopens, and a fresh message would reopen it."""


class CannotAttach(Exception):
    """Discord refused the file on a channel message for the bot's permissions (403: Attach Files
    taken away while the job ran); the message itself may still be edited."""


class NowhereToPost(Exception):
    """The job's message cannot be moved anywhere: a personal job's token is spent and Discord
    refuses the bot a DM with its requester (50007), or the job's channel takes no message from the
    bot any more (:func:`channel_closed`). Its result waits for its requester in ``/job``."""


def channel_closed(exc: discord.HTTPException) -> bool:
    """Whether Discord refused a new message because the channel takes none from the bot: it was
    deleted (10003, or its server: 10004), the bot may no longer see or post there (403), or it is
    a thread closed and locked by a moderator (50083)."""
    closed = (DiscordCode.UNKNOWN_CHANNEL, DiscordCode.UNKNOWN_GUILD, DiscordCode.THREAD_ARCHIVED)
    return exc.status == 403 or exc.code in closed


def translate(exc: discord.HTTPException, *, via_token: bool) -> Exception:
    """The exception an edit of the job's message raises for Discord's refusal `exc`.

    :class:`TooLarge` for a 413, :class:`TokenDead` when the token is dead,
    :class:`MessageUnusable` when the message is gone (a moderator deleted it, through the token or
    not), its thread was closed, or a channel message cannot be edited any more,
    :class:`NowhereToPost` when a channel message's channel is gone or hidden from the bot; `exc`
    itself otherwise.
    """
    if exc.status == 413 or exc.code == DiscordCode.REQUEST_TOO_LARGE:
        return TooLarge(str(exc.code))
    dead = (DiscordCode.INVALID_WEBHOOK_TOKEN, DiscordCode.UNKNOWN_WEBHOOK)
    if via_token and (exc.code in dead or exc.status == 401):
        return TokenDead()
    # A live token whose message was deleted answers 10008 like a channel message does: the job
    # goes on in a fresh message (without this, its result was dropped as an internal failure).
    if exc.code == DiscordCode.UNKNOWN_MESSAGE or (not via_token and exc.code == DiscordCode.MESSAGE_TOO_OLD):
        return MessageUnusable()
    if exc.code == DiscordCode.THREAD_ARCHIVED:
        # A moderator (or inactivity) closed the job's thread: a fresh message reopens it, as a
        # member's would; the job's end goes on there (its progress waits: Placement.redraw).
        return ThreadClosed()
    # The channel message's channel is gone, or out of the bot's sight: no fresh message could go there.
    gone = (DiscordCode.UNKNOWN_CHANNEL, DiscordCode.UNKNOWN_GUILD, DiscordCode.MISSING_ACCESS)
    if not via_token and exc.code in gone:
        return NowhereToPost()
    return exc


def describe(exc: BaseException) -> str:
    """A short, secret-free description of a failed request, for the log."""
    if isinstance(exc, discord.HTTPException):
        return f"HTTP {exc.status} (code {exc.code})"
    return type(exc).__name__
