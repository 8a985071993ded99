"""The job's Discord bookkeeping, as a typed record: which message shows it, and how to reach it.

The core stores it with the job as an opaque JSON object (``Job.discord``); only this package (and
the one place a job starts, through :func:`record_for`) reads or writes it, always through
:class:`DiscordRecord`. The keys on the wire are today's, so rows written by older code load.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import discord

from framecast.app import PARKED

__all__ = ["DM", "GUILD", "ORIGINAL", "DiscordRecord", "delete_click", "record_for"]

#: The wire's stand-in for the interaction's own message until its real id is known.
ORIGINAL = "@original"
#: The context of a job asked in a server that installed the app (the default, never stored).
GUILD = "guild"
#: The context of a job asked in the requester's own DM with the bot (the bot's token reaches it).
DM = "dm"
#: The key of a Delete click's token, expiry and message in the record. The token sits under a
#: ``"token"`` key, so the log filter masks it wherever a record is logged, as the job's own.
DELETE_CLICK = "delete_click"


@dataclass(frozen=True)
class DiscordRecord:
    """Where a job's message lives and how to reach it (read through attributes, never keys)."""

    #: The application whose interaction token edits the job's first message (0: none).
    application_id: int = 0
    #: The interaction token ("": none). Never shown in ``repr``.
    token: str = dataclasses.field(default="", repr=False)
    #: Wall-clock time the interaction token expires.
    token_expires_at: float = 0.0
    #: The per-file upload limit the interaction advertised (None: unknown).
    attachment_limit: int | None = None
    #: The interaction's message id (None: not learned yet, the wire's ``"@original"``).
    message_id: int | None = None
    #: The channel message the job moved to, once it did.
    channel_message_id: int | None = None
    #: Discord said the interaction token is dead.
    token_dead: bool = False
    #: The requester was mentioned once the job ended on a channel message.
    pinged: bool = False
    #: The highest percentage the job's message has shown: the floor of the next one.
    shown_percent: int = 0
    #: The job a Retry created from this one (written by the Retry button).
    retried_as: int | None = None
    #: Where the job was asked (``cogs.interactions.Where``): "guild", or a person's own queue's
    #: "dm", "group_dm", "user_guild".
    context: str = GUILD
    #: A personal job's DM with its requester, once opened (where it moves when its token expires).
    dm_channel_id: int | None = None
    #: Discord refused to let the bot open or write that DM (50007): nowhere left to post.
    dm_refused: bool = False
    #: The result could be posted nowhere: it waits for its requester in ``/job`` (and ``/history``).
    parked: bool = False
    #: Older channel messages of the job, each left pointing to the next by a move, and the reply
    #: mentioning the requester (Delete removes them too).
    pointers: tuple[int, ...] = ()
    #: A Delete click's own interaction token (written by the Delete button on a personal job's
    #: message): after its deferred update, its ``@original`` is the message the click was on,
    #: `delete_message_id`, which it can delete for 15 minutes, where the bot is not. Never shown.
    delete_token: str = dataclasses.field(default="", repr=False)
    delete_token_expires_at: float = 0.0
    delete_message_id: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DiscordRecord:
        """The record stored as `data` (today's keys; missing or malformed values read as unset)."""
        percent = data.get("shown_percent")
        click = data.get(DELETE_CLICK)
        click = click if isinstance(click, Mapping) else {}
        return cls(
            application_id=_int(data.get("application_id")) or 0,
            token=str(data.get("token") or ""),
            token_expires_at=float(data.get("token_expires_at") or 0.0),
            attachment_limit=_int(data.get("attachment_limit")),
            message_id=_int(data.get("message_id")),
            channel_message_id=_int(data.get("channel_message_id")),
            token_dead=bool(data.get("token_dead")),
            pinged=bool(data.get("pinged")),
            shown_percent=percent if isinstance(percent, int) and not isinstance(percent, bool) else 0,
            retried_as=_int(data.get("retried_as")),
            context=str(data.get("context") or GUILD),
            dm_channel_id=_int(data.get("dm_channel_id")),
            dm_refused=bool(data.get("dm_refused")),
            parked=bool(data.get(PARKED)),
            pointers=tuple(i for i in map(_int, _list(data.get("pointers"))) if i is not None),
            delete_token=str(click.get("token") or ""),
            delete_token_expires_at=float(click.get("expires_at") or 0.0),
            delete_message_id=_int(click.get("message_id")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The record as stored (the keys :meth:`from_dict` reads; unset ones are left out)."""
        out: dict[str, Any] = {}
        if self.token:
            out |= {
                "application_id": self.application_id,
                "token": self.token,
                "token_expires_at": self.token_expires_at,
                "message_id": self.message_id if self.message_id is not None else ORIGINAL,
            }
        if self.attachment_limit is not None:
            out["attachment_limit"] = self.attachment_limit
        if self.context != GUILD:
            out["context"] = self.context
        return out | self.delivery_changes() | ({"retried_as": self.retried_as} if self.retried_as else {})

    def delivery_changes(self) -> dict[str, Any]:
        """What the delivery package learns and saves: the message ids, the flags and the floor."""
        out: dict[str, Any] = {}
        if self.message_id is not None:
            out["message_id"] = self.message_id
        if self.channel_message_id is not None:
            out["channel_message_id"] = self.channel_message_id
        if self.token_dead:
            out["token_dead"] = True
        if self.pinged:
            out["pinged"] = True
        if self.shown_percent:
            out["shown_percent"] = self.shown_percent
        if self.dm_channel_id is not None:
            out["dm_channel_id"] = self.dm_channel_id
        if self.dm_refused:
            out["dm_refused"] = True
        if self.parked:
            out[PARKED] = True
        if self.pointers:
            out["pointers"] = list(self.pointers)
        return out

    def merged(self, known: DiscordRecord) -> DiscordRecord:
        """This (newer) record, keeping what the delivery package had learned in `known`.

        Only the delivery package learns these, and its copy always has their latest value: a
        record read before it learned them (the runner's copy) must not roll them back, e.g. a real
        message id back to ``"@original"``, which would leave a restarted bot unable to see a delivery.
        """
        return dataclasses.replace(
            self,
            message_id=known.message_id if known.message_id is not None else self.message_id,
            channel_message_id=known.channel_message_id or self.channel_message_id,
            token_dead=self.token_dead or known.token_dead,
            pinged=self.pinged or known.pinged,
            shown_percent=max(self.shown_percent, known.shown_percent),
            dm_channel_id=known.dm_channel_id or self.dm_channel_id,
            dm_refused=self.dm_refused or known.dm_refused,
            parked=self.parked or known.parked,
            pointers=tuple(dict.fromkeys((*self.pointers, *known.pointers))),
        )

    @property
    def moves(self) -> int:
        """How many channel messages the job has had: each move posts one, and remembers the one
        before it in ``pointers``. It numbers the next move (its message's nonce)."""
        return len(self.pointers) + (self.channel_message_id is not None)

    @property
    def personal(self) -> bool:
        """The job is on its requester's own queue (asked outside a server that installed the app)."""
        return self.context != GUILD

    def delete_token_for(self, message_id: int | None, now: float) -> str | None:
        """The Delete click's token when it reaches `message_id` and is still valid at `now`."""
        if not self.delete_token or message_id is None or self.delete_message_id != message_id:
            return None
        return self.delete_token if now < self.delete_token_expires_at else None

    def token_usable(self, now: float, margin: float, spare: float = 0.0) -> bool:
        """Whether the interaction token may still be used at `now` (`spare` seconds before `margin`)."""
        if not self.token or self.token_dead:
            return False
        return now < self.token_expires_at - margin - spare


def record_for(interaction: discord.Interaction[Any], *, context: str = "guild") -> DiscordRecord:
    """The bookkeeping of a job a command just started (its interaction reaches its first message).

    The interaction's application id and token are stored with the job, so the reporter (and a
    restarted bot) can edit the message until the token expires, then move to a channel message.
    """
    return DiscordRecord(
        application_id=interaction.application_id,
        token=interaction.token,
        token_expires_at=interaction.expires_at.timestamp(),
        attachment_limit=interaction.filesize_limit,
        context=context,
    )


def delete_click(interaction: discord.Interaction[Any], message_id: int) -> dict[str, Any]:
    """What the chat record keeps of a Delete click on message `message_id` (see ``delete_token``)."""
    return {
        DELETE_CLICK: {
            "token": interaction.token,
            "expires_at": interaction.expires_at.timestamp(),
            "message_id": message_id,
        }
    }


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _int(value: object) -> int | None:
    """An id or size stored as an int or a string of digits (None: unset, or ``"@original"``)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None
