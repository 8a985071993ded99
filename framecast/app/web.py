"""The use cases the web pages call, gathered for the web edge (built once by ``bot.py``).

The web pages change nothing by a road of their own: settings go through :class:`Admins` and
:class:`ServerStyles`, as ``/settings`` does; the queue is :meth:`Members.show_queue`, as ``/queue``;
a person's own jobs are :class:`MyJobs`, rows as ``/history`` shows them. What the pages say in the
reader's language comes from the chat side's catalogue (:class:`PageWords`), as its replies do, so
one message has one wording on both edges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from framecast.app.admins import Admins
from framecast.app.gallery import Gallery, ServerDirectory
from framecast.app.members import Members
from framecast.app.my_jobs import MyJobs
from framecast.app.styles import ServerStyles
from framecast.app.usage import Usage
from framecast.app.web_sessions import WebSessions

if TYPE_CHECKING:
    from framecast.app.core import Core

__all__ = ["PageWords", "WebCases", "WebSide", "web_cases"]


class PageWords(Protocol):
    """What the web pages say, in the reader's language: the chat side's catalogue of messages."""

    def words(self, key: str, languages: Sequence[str], /, **params: object) -> str:
        """Message `key` with `params`, in the first of `languages` (the browser's, best first: language
        tags such as ``de-DE``) the catalogue has, else in its source language."""
        ...


class WebSide(ServerDirectory, PageWords, Protocol):
    """What the chat side gives the web pages: who a person is in a server, and the words."""


class _KeysOnly:
    """The words of a :class:`WebCases` built without the chat side (a benchmark): the keys."""

    def words(self, key: str, languages: Sequence[str], /, **params: object) -> str:
        return key


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
    #: What the pages say, from the chat side's catalogue (``bot.py``'s directory gives both).
    words: PageWords = field(default_factory=_KeysOnly)


def web_cases(core: Core[Any], directory: WebSide) -> WebCases:
    """The web edge's use cases over an opened core, and the chat side's view and words."""
    return WebCases(
        gallery=Gallery(core.store.web),
        sessions=WebSessions(core.store.web.sessions, core.clock),
        admins=core.admins,
        styles=core.styles,
        members=core.members,
        usage=Usage(core.store.web, core.clock),
        my_jobs=MyJobs(core.store.web),
        directory=directory,
        words=directory,
    )
