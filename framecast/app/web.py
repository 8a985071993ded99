"""The use cases the web pages call, gathered for the web edge (built once by ``bot.py``).

The web pages change nothing by a road of their own: settings go through :class:`Admins` and
:class:`ServerStyles`, as ``/settings`` does; the queue is :meth:`Members.show_queue`, as ``/queue``;
a person's own jobs are :class:`MyJobs`, rows as ``/history`` shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from framecast.app.admins import Admins
from framecast.app.gallery import Gallery, ServerDirectory
from framecast.app.members import Members
from framecast.app.my_jobs import MyJobs
from framecast.app.styles import ServerStyles
from framecast.app.usage import Usage
from framecast.app.web_sessions import WebSessions

if TYPE_CHECKING:
    from framecast.app.core import Core

__all__ = ["WebCases", "web_cases"]


@dataclass(frozen=True)
class WebCases:
    """What the web edge may call."""

    gallery: Gallery
    sessions: WebSessions
    admins: Admins
    styles: ServerStyles
    members: Members
    usage: Usage
    my_jobs: MyJobs
    #: Who a person is in a server, from the chat side's own view.
    directory: ServerDirectory


def web_cases(core: Core[Any], directory: ServerDirectory) -> WebCases:
    """The web edge's use cases over an opened core."""
    return WebCases(
        gallery=Gallery(core.store.web),
        sessions=WebSessions(core.store.web.sessions, core.clock),
        admins=core.admins,
        styles=core.styles,
        members=core.members,
        usage=Usage(core.store.web, core.clock),
        my_jobs=MyJobs(core.store.web),
        directory=directory,
    )
