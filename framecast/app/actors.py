"""Who acts, and the one rule of who may administer a server.

An :class:`Actor` is a person acting in one place: a server (``guild_id``, with whether they have
Manage Server there), or their own queue (user installs: ``guild_id`` is their own user id). The
edge reads it off the interaction or the web request; the use cases decide what it may do with it:
:meth:`Actor.may_manage` for a job (the members' use cases), :func:`administered` for a server's
settings, styles and key (the admins' use cases, :class:`~framecast.app.admins.Admins` and
:class:`~framecast.app.styles.ServerStyles`). A refusal is an :class:`AdminRefused` with an
:class:`AdminRefusal` the edge words.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from framecast.app.intake import is_personal_queue
from framecast.values import Job

__all__ = ["Actor", "AdminRefusal", "AdminRefused", "administered"]


@dataclass(frozen=True)
class Actor:
    """A person acting: who, in which server (or their own queue), and whether they may manage it."""

    user_id: int
    guild_id: int
    #: The member has Manage Server (or Administrator) in `guild_id`.
    manages_guild: bool = False

    @property
    def personal(self) -> bool:
        """Acting on their own queue (a user install outside a server that installed the app)."""
        return is_personal_queue(self.guild_id, self.user_id)

    def may_manage(self, job: Job) -> bool:
        """The job's requester, or a member with Manage Server in the job's own server."""
        return job.user_id == self.user_id or (self.manages_guild and job.guild_id == self.guild_id)


class AdminRefusal(StrEnum):
    """Why a person may not administer where they act."""

    #: Neither Manage Server nor Administrator in that server.
    NOT_MANAGER = "not_manager"
    #: Their own queue (a DM, a group DM, a server without the bot): it has no settings, styles or
    #: key of its own, only the operator's.
    NO_SERVER = "no_server"


class AdminRefused(Exception):
    """`actor` may not change (or look at) a server's settings, styles or key: `refusal` says why."""

    def __init__(self, refusal: AdminRefusal, actor: Actor) -> None:
        super().__init__(f"{refusal.value}: user {actor.user_id} in {actor.guild_id}")
        self.refusal = refusal
        self.actor = actor


def administered(actor: Actor) -> int:
    """The server `actor` may administer (its id); else :class:`AdminRefused`.

    The one rule for ``/settings``, its styles and key, and the web dashboard: a member with Manage
    Server (or Administrator) in a server, never a person's own queue. No I/O: the edge may ask it
    before acknowledging, and every admin use case asks it again.
    """
    if actor.personal:
        raise AdminRefused(AdminRefusal.NO_SERVER, actor)
    if not actor.manages_guild:
        raise AdminRefused(AdminRefusal.NOT_MANAGER, actor)
    return actor.guild_id
