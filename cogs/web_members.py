"""Who a person is in a server, for the web pages: the member fetched with the bot token, read
through discord.py's permission rules (the same reading as /queue's, :func:`member_viewer`).

Never from what the browser sends: the web session names only a user id (Discord confirmed it at
login); their roles, Manage Server and the channels they can read are the bot's own view. The
pages' words come from the bot's own catalogue (:func:`cogs.i18n.t`), in the browser's language.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import aiohttp
import discord

from cogs.delivery.record import DiscordRecord
from cogs.history import jump_url
from cogs.i18n import shipped, t
from cogs.interactions import member_viewer
from framecast.app import Actor, DirectoryBusy, DirectoryUnavailable, HistoryRow, Job, ServerMember

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)

#: How long a member fetched for the gallery is reused (a page view is not worth a Discord call
#: each; the dashboard always asks again).
MEMBER_TTL = 15.0
#: How long a result's fresh attachment link is reused (Discord signs them for about a day).
MEDIA_TTL = 600.0
#: Members remembered at most (the oldest is dropped first).
_MAX_REMEMBERED = 4096
#: Discord look-ups one person's page views may cause, per that many seconds: a person reloading
#: the dashboard (asked afresh each time) or walking every server's gallery in a loop would spend
#: the bot's own Discord rate limit, which its deliveries need. No one browses faster; past it the
#: page says to try again in a moment.
LOOKUPS_PER_PERSON, LOOKUP_WINDOW = 30, 10.0
#: Seconds a page waits for Discord's answer to one look-up before it says Discord cannot be reached
#: (discord.py waits as long as its HTTP client does: minutes, holding the page and a request).
LOOKUP_TIMEOUT = 10.0


def reading_locale(languages: Sequence[str]) -> str | None:
    """The catalogue a browser reads, from its languages (best first): the first whose tag names a
    catalogue (``de-DE`` reads ``de``'s), else one of its language (``es-MX`` reads ``es-ES``'s,
    ``en-GB`` English); None: English."""
    codes = sorted(shipped().by_locale)
    for tag in (language.lower() for language in languages):
        base = tag.split("-", 1)[0]
        exact = [code for code in codes if code.lower() in (tag, base)]
        alike = [code for code in codes if code.lower().split("-", 1)[0] == base]
        if exact or alike:
            return (exact or alike)[0]
    return None


class DiscordDirectory:
    """The web pages' :class:`~framecast.app.ServerDirectory` over the bot's cache and REST, and
    their :class:`~framecast.app.PageWords` from the bot's catalogue."""

    def __init__(
        self,
        bot: Framecast,
        *,
        ttl: float = MEMBER_TTL,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = LOOKUP_TIMEOUT,
    ) -> None:
        self._bot = bot
        self._ttl = ttl
        self._timeout = timeout
        self._clock = clock
        self._seen: dict[tuple[int, int], tuple[float, ServerMember | None]] = {}
        self._asked: dict[int, deque[float]] = {}  # each person's recent look-ups (see LOOKUPS_PER_PERSON)
        self._unavailable = False
        self._media: dict[int, tuple[float, str | None]] = {}

    def __repr__(self) -> str:
        return f"<DiscordDirectory remembered={len(self._seen)}>"

    async def member(self, guild_id: int, user_id: int, *, fresh: bool = False) -> ServerMember | None:
        """`user_id` in `guild_id` as the bot sees them; None: not a member, or a server the bot is
        not in. Raises :class:`DirectoryUnavailable` while Discord cannot be asked."""
        key, now = (guild_id, user_id), self._clock()
        if not fresh and (seen := self._seen.get(key)) is not None and now - seen[0] < self._ttl:
            return seen[1]
        # Counted before the server is looked for: a server the bot is not in answers as one whose
        # member the person is not, at the limit too (else the limit tells which servers have the bot).
        if not self._may_ask(user_id, now):
            raise DirectoryBusy()
        guild = self._bot.get_guild(guild_id)
        found: ServerMember | None = None
        try:
            if guild is not None:
                async with asyncio.timeout(self._timeout):
                    member = await guild.fetch_member(user_id)
                perms = member.guild_permissions
                found = ServerMember(
                    actor=Actor(user_id, guild_id, manages_guild=perms.manage_guild or perms.administrator),
                    viewer=member_viewer(guild, member, in_age_restricted=True),
                    server_name=guild.name,
                    channels=tuple((channel.id, channel.name) for channel in guild.text_channels),
                )
        except discord.NotFound:
            found = None
        except (discord.HTTPException, discord.RateLimited, aiohttp.ClientError, TimeoutError) as exc:
            if not self._unavailable:  # one line per outage, not one per page view
                log.warning("web: Discord did not answer a member lookup (%s)", type(exc).__name__)
                self._unavailable = True
            raise DirectoryUnavailable() from None
        self._unavailable = False
        if len(self._seen) >= _MAX_REMEMBERED:
            self._seen.pop(next(iter(self._seen)))
        self._seen[key] = (now, found)
        return found

    def _may_ask(self, user_id: int, now: float) -> bool:
        """Whether one more look-up for this person stays within LOOKUPS_PER_PERSON (counted if so)."""
        asked = self._asked.pop(user_id, None) or deque()
        while asked and asked[0] <= now - LOOKUP_WINDOW:
            asked.popleft()
        if len(self._asked) >= _MAX_REMEMBERED:
            self._asked.pop(next(iter(self._asked)))  # the person not seen for longest
        self._asked[user_id] = asked  # re-inserted: the dict's order is who was seen last
        if len(asked) >= LOOKUPS_PER_PERSON:
            return False
        asked.append(now)
        return True

    def words(self, key: str, languages: Sequence[str], /, **params: object) -> str:
        """Message `key` as the bot words it in Discord, in the browser's language."""
        return t(key, reading_locale(languages), **params)

    def message_link(self, job: Job) -> str | None:
        """The link to `job`'s result message in Discord, as /history gives it."""
        return jump_url(HistoryRow(job))

    async def media_url(self, job: Job, asker: int) -> str | None:
        """The result's attachment as Discord serves it now: the message fetched with the bot token
        (its attachment links are signed and expire, so none is ever stored), kept a few minutes,
        also when it is gone. A look-up counts towards `asker`'s LOOKUPS_PER_PERSON."""
        record = DiscordRecord.from_dict(job.discord)
        message_id = record.channel_message_id or record.message_id
        if message_id is None:
            return None
        now = self._clock()
        if (known := self._media.get(job.id)) is not None and now - known[0] < MEDIA_TTL:
            return known[1]
        if not self._may_ask(asker, now):
            raise DirectoryBusy()
        try:
            async with asyncio.timeout(self._timeout):
                channel = self._bot.get_partial_messageable(job.channel_id)
                message = await channel.fetch_message(message_id)
        except (discord.NotFound, discord.Forbidden):
            message = None
        except (discord.HTTPException, discord.RateLimited, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("web: Discord did not answer a result lookup (%s)", type(exc).__name__)
            raise DirectoryUnavailable() from None
        url = message.attachments[0].url if message is not None and message.attachments else None
        if len(self._media) >= _MAX_REMEMBERED:
            self._media.pop(next(iter(self._media)))
        self._media[job.id] = (now, url)
        return url
