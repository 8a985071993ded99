"""The web gallery: a server's delivered results, newest first, as one viewer may see them.

What a viewer may see is /queue's rule, :meth:`QueueViewer.hides`, applied to whole results: a
result whose prompt /queue would hide from them is not shown at all (nor counted). Deleted results
never show. Who the viewer is in the server (their roles, the channels they can read, Manage
Server) comes from the chat side's own view of the server (:class:`ServerDirectory`), never from
the browser.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from framecast.app.actors import Actor
from framecast.app.queue_view import QueueViewer
from framecast.app.styles import job_style
from framecast.storage import GalleryFilter
from framecast.values import Job, JobKind, JobState

__all__ = [
    "GALLERY_PAGE_SIZE",
    "Gallery",
    "GalleryItem",
    "GalleryPage",
    "GalleryQuery",
    "DirectoryBusy",
    "DirectoryUnavailable",
    "ServerDirectory",
    "ServerMember",
]

#: Results on one gallery page.
GALLERY_PAGE_SIZE = 24
#: Batches read for one page at most (each twice a page): results the viewer may not see are
#: skipped, and a page ends early (with a cursor to go on) rather than read the whole server.
_MAX_BATCHES = 8
#: The longest search accepted (longer text is cut).
SEARCH_MAX_CHARS = 200


@dataclass(frozen=True)
class ServerMember:
    """A person as the chat side sees them in one server: may they manage it, which channels
    they can read (``viewer``), and the server's name to show."""

    actor: Actor
    viewer: QueueViewer
    server_name: str
    #: The server's text channels this person can read, as (id, name), in the chat app's order (the
    #: dashboard's lists and what its channel form may add). Any other channel given is dropped here:
    #: a channel's name is shown only to who can read it (``viewer.readable_channels``, /queue's
    #: reading), as the chat app shows it.
    channels: tuple[tuple[int, str], ...] = ()

    def __post_init__(self) -> None:
        readable = self.viewer.readable_channels
        named = tuple((cid, name) for cid, name in self.channels if cid in readable)
        object.__setattr__(self, "channels", named)


class DirectoryUnavailable(Exception):
    """The chat side could not say who a person is just now (its API is unreachable): try later."""


class DirectoryBusy(DirectoryUnavailable):
    """This person's page views asked the chat side more often than it allows: try in a moment."""


class ServerDirectory(Protocol):
    """What the web pages need of the chat side: who a person is in a server, and where a job's
    result message is."""

    async def member(self, guild_id: int, user_id: int, *, fresh: bool = False) -> ServerMember | None:
        """`user_id` in `guild_id` as the bot sees them (`fresh`: asked now, never remembered); None:
        not a member, or no such server. Raises :class:`DirectoryUnavailable` when it cannot tell."""
        ...

    def message_link(self, job: Job) -> str | None:
        """A link to `job`'s result message in the chat app (None: not known)."""
        ...

    async def media_url(self, job: Job, asker: int) -> str | None:
        """The result's file as the chat app serves it now (a signed link, fetched fresh: never
        stored), or None when the message or its file is gone. Raises :class:`DirectoryBusy` when
        `asker` (a user id) made the chat side look things up too often, :class:`DirectoryUnavailable`
        when it cannot tell."""
        ...


class GallerySource(Protocol):
    """What the gallery needs of the store (see ``Store.web.gallery_jobs``)."""

    async def gallery_jobs(self, where: GalleryFilter, *, before: int | None, limit: int) -> tuple[Job, ...]:
        """Up to `limit` delivered jobs `where` allows, older than job `before`, newest first."""
        ...

    async def job(self, job_id: int, /) -> Job | None:
        """The job with this id, or None."""
        ...


@dataclass(frozen=True)
class GalleryQuery:
    """The viewer's filters: a member, a kind, a style's name, words in the prompt; and the page
    (results older than job `before`; None: the newest)."""

    member: int | None = None
    kind: JobKind | None = None
    style: str | None = None
    search: str | None = None
    before: int | None = None

    def matches(self, job: Job) -> bool:
        """Whether `job` passes the filters (the store's cut is coarse: this decides)."""
        if self.member is not None and job.user_id != self.member:
            return False
        if self.kind is not None and job.kind is not self.kind:
            return False
        style = job_style(job.params)
        if self.style and (style is None or style.name != self.style):
            return False
        return not self.search or self.search.casefold() in job.prompt.casefold()


@dataclass(frozen=True)
class GalleryItem:
    """One result as the gallery shows it."""

    job: Job
    #: The style's name it was made with (None: none).
    style: str | None


@dataclass(frozen=True)
class GalleryPage:
    """One page of results and the cursor of the next, older page (None: the last page)."""

    items: tuple[GalleryItem, ...]
    older: int | None


def _fragment(text: str) -> str:
    # The text as it sits inside the stored JSON (quotes and backslashes escaped).
    return json.dumps(text, ensure_ascii=False)[1:-1]


class Gallery:
    """The gallery's use case, over the store's paged query."""

    def __init__(self, store: GallerySource, *, page_size: int = GALLERY_PAGE_SIZE) -> None:
        self._store = store
        self._page_size = page_size

    def __repr__(self) -> str:
        return f"<Gallery page_size={self._page_size}>"

    async def page(self, guild_id: int, member: ServerMember, query: GalleryQuery) -> GalleryPage:
        """The page of `guild_id`'s delivered results `member` may see that pass `query`."""
        viewer = member.viewer
        search = (query.search or "").strip()[:SEARCH_MAX_CHARS] or None
        query = GalleryQuery(query.member, query.kind, query.style or None, search, query.before)
        contains = []
        if search:
            contains.append(_fragment(search))
        if query.style:
            contains.append(_fragment(query.style))
        where = GalleryFilter(
            guild_id=guild_id,
            channels=viewer.shown_channels,
            own=viewer.user_id,
            member=query.member,
            kind=query.kind,
            contains=tuple(contains),
        )
        items: list[GalleryItem] = []
        cursor, batch_size = query.before, self._page_size * 2
        for _ in range(_MAX_BATCHES):
            batch = await self._store.gallery_jobs(where, before=cursor, limit=batch_size)
            for job in batch:
                cursor = job.id
                if not shows(job, guild_id, viewer) or not query.matches(job):
                    continue
                style = job_style(job.params)
                items.append(GalleryItem(job, style.name if style is not None else None))
                if len(items) == self._page_size:
                    return GalleryPage(tuple(items), older=job.id)
            if len(batch) < batch_size:
                return GalleryPage(tuple(items), older=None)
        return GalleryPage(tuple(items), older=cursor)

    async def item(self, guild_id: int, member: ServerMember, job_id: int) -> GalleryItem | None:
        """One result of `guild_id` if the gallery shows it to `member` (None: not, or no such job)."""
        job = await self._store.job(job_id)
        if job is None or not shows(job, guild_id, member.viewer):
            return None
        style = job_style(job.params)
        return GalleryItem(job, style.name if style is not None else None)


def shows(job: Job, guild_id: int, viewer: QueueViewer) -> bool:
    """Whether the gallery of `guild_id` shows `job` to `viewer`: a delivered result of that server,
    not deleted, whose prompt /queue would show them (:meth:`QueueViewer.hides`)."""
    return (
        job.guild_id == guild_id
        and job.state is JobState.DELIVERED
        and job.deleted is None
        and viewer.hides(job) is None
    )
