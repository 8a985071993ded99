"""A server's usage over the last days, for its dashboard: jobs a day by kind, failures by reason,
how long members waited for a start, and the members who asked most.

Counted from the store's rows of the period (every job asked for, whatever became of it).
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from framecast.clock import Clock
from framecast.storage import UsageRow
from framecast.values import JobKind, JobState

__all__ = ["USAGE_DAYS", "USAGE_TTL", "DayCount", "ServerUsage", "Usage"]

#: The days the dashboard's usage covers.
USAGE_DAYS = 30
#: The members listed as asking most.
TOP_MEMBERS = 10
#: Seconds a server's usage is reused (the last 30 days do not change much in a minute).
USAGE_TTL = 60.0
#: Servers whose usage is kept at most (the oldest is dropped first).
_MAX_KEPT = 256
_DAY = 86400.0


class UsageSource(Protocol):
    """What usage needs of the store (see ``Store.usage``)."""

    async def usage(self, guild_id: int, *, since: float) -> list[UsageRow]:
        """A server's jobs created since `since`."""
        ...


@dataclass(frozen=True)
class DayCount:
    """Jobs asked for on one UTC day (its start, epoch seconds), by kind."""

    day: float
    videos: int
    images: int


@dataclass(frozen=True)
class ServerUsage:
    """A server's last :data:`USAGE_DAYS` days."""

    days: tuple[DayCount, ...]
    #: Failed jobs by reason (an ``ErrorCode`` value, or "unknown"), most first.
    failures: tuple[tuple[str, int], ...]
    #: Seconds from asking to the service starting the job: median and 90th percentile (None: none started).
    wait_median: float | None
    wait_p90: float | None
    #: The members who asked most: (user id, jobs), most first.
    top_members: tuple[tuple[int, int], ...]


class Usage:
    """The dashboard's usage use case.

    Counting a busy server's month reads up to ``MAX_USAGE_ROWS`` rows and walks them on the event
    loop (about a second at the cap): each server's count is made once at a time (views asking
    meanwhile wait for it) and reused for :data:`USAGE_TTL` seconds, so reloading the dashboard,
    or many tabs of it, cannot hold the loop (and every server's interactions) for longer.
    """

    def __init__(
        self, store: UsageSource, clock: Clock, *, days: int = USAGE_DAYS, ttl: float = USAGE_TTL
    ) -> None:
        self._store = store
        self._clock = clock
        self._days = days
        self._ttl = ttl
        self._kept: dict[int, tuple[float, ServerUsage]] = {}
        self._counting: dict[int, asyncio.Future[ServerUsage]] = {}

    def __repr__(self) -> str:
        return f"<Usage days={self._days}>"

    async def of_server(self, guild_id: int) -> ServerUsage:
        """`guild_id`'s usage over the last days (today included, by UTC day), at most
        :data:`USAGE_TTL` seconds old."""
        kept = self._kept.get(guild_id)
        if kept is not None and self._clock.monotonic() - kept[0] < self._ttl:
            return kept[1]
        counting = self._counting.get(guild_id)
        if counting is None:
            counting = asyncio.ensure_future(self._count(guild_id))
            self._counting[guild_id] = counting
            counting.add_done_callback(lambda _: self._counting.pop(guild_id, None))
        # Shielded: a view that goes away (its browser closed) leaves the count to the others.
        usage = await asyncio.shield(counting)
        if len(self._kept) >= _MAX_KEPT and guild_id not in self._kept:
            self._kept.pop(next(iter(self._kept)))
        self._kept[guild_id] = (self._clock.monotonic(), usage)
        return usage

    async def _count(self, guild_id: int) -> ServerUsage:
        today = self._clock.time() // _DAY * _DAY
        first = today - (self._days - 1) * _DAY
        rows = await self._store.usage(guild_id, since=first)
        per_day: dict[float, Counter[JobKind]] = {first + i * _DAY: Counter() for i in range(self._days)}
        failures: Counter[str] = Counter()
        members: Counter[int] = Counter()
        waits: list[float] = []
        for row in rows:
            day = row.created_at // _DAY * _DAY
            if day in per_day:
                per_day[day][row.kind] += 1
            members[row.user_id] += 1
            if row.state is JobState.FAILED:
                failures[row.error_code or "unknown"] += 1
            if row.started_at is not None and row.started_at >= row.created_at:
                waits.append(row.started_at - row.created_at)
        p90 = statistics.quantiles(waits, n=10)[-1] if len(waits) >= 2 else (waits[0] if waits else None)
        return ServerUsage(
            days=tuple(DayCount(d, c[JobKind.VIDEO], c[JobKind.IMAGE]) for d, c in sorted(per_day.items())),
            failures=tuple(failures.most_common()),
            wait_median=statistics.median(waits) if waits else None,
            wait_p90=p90,
            top_members=tuple(members.most_common(TOP_MEMBERS)),
        )
