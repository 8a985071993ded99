"""The waiting line: one first-in-first-out queue per guild, served round-robin.

:class:`GuildQueues` is plain bookkeeping (no I/O, no tasks): the scheduler pushes accepted jobs
and takes the next one to start; anyone may ask where a job stands. It is built before the
scheduler and the chat side, so both can be handed it without a forward reference.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from framecast.jobs import Job

__all__ = ["GuildQueues", "QueuePositions"]


class QueuePositions(Protocol):
    """Where a job stands in its guild's queue (what the chat side shows)."""

    def position(self, job_id: int) -> int | None:
        """1-based place of a queued job in its guild's queue (1 once it is being started), else None."""
        ...


class GuildQueues:
    """Per-guild FIFO queues, the round-robin order of guilds, and the jobs taken off to start."""

    def __init__(self) -> None:
        self._queues: dict[int, deque[int]] = {}
        self._guild_of: dict[int, int] = {}
        self._turns: deque[int] = deque()  # guilds with queued jobs, in round-robin order
        self._just_served: int | None = None  # the guild the last take put back at the tail
        self._started: set[int] = set()  # taken off (or restored) and not finished: "first in line"

    def __repr__(self) -> str:
        return f"<GuildQueues queued={len(self._guild_of)} started={len(self._started)}>"

    def push(self, job: Job) -> None:
        """Put `job` at the tail of its guild's queue."""
        queue = self._queues.setdefault(job.guild_id, deque())
        queue.append(job.id)
        self._guild_of[job.id] = job.guild_id
        if job.guild_id not in self._turns:
            if self._turns and self._turns[-1] == self._just_served:
                # A guild that has had no turn yet goes ahead of the one served a moment ago.
                self._turns.insert(len(self._turns) - 1, job.guild_id)
            else:
                self._turns.append(job.guild_id)

    def remove(self, job_id: int) -> int | None:
        """Take a queued job out of line (cancelled); returns its guild when that queue moved."""
        guild = self._guild_of.pop(job_id, None)
        if guild is None:
            return None
        queue = self._queues.get(guild)
        if queue is None or job_id not in queue:
            return None
        queue.remove(job_id)
        if not queue:
            del self._queues[guild]
            self._turns.remove(guild)
        return guild

    def take_next(self, eligible: Callable[[int], bool] | None = None) -> tuple[int, int] | None:
        """``(job_id, guild_id)`` of the head of the next guild's queue in round-robin order.

        With `eligible`, guilds for which it answers False are passed over and keep their place in
        the round (each API key admits its own jobs: a guild whose key is saturated must not lose its
        turn to guilds on other keys). The job counts as started (position 1) until :meth:`finished`
        is called for it.
        """
        for guild in list(self._turns):
            queue = self._queues.get(guild)
            if not queue:
                self._queues.pop(guild, None)
                self._turns.remove(guild)
                continue
            if eligible is not None and not eligible(guild):
                continue
            self._just_served = None
            self._turns.remove(guild)
            job_id = queue.popleft()
            self._guild_of.pop(job_id, None)
            if queue:
                self._turns.append(guild)
                self._just_served = guild
            else:
                del self._queues[guild]
            self._started.add(job_id)
            return job_id, guild
        return None

    def started(self, job_id: int) -> None:
        """Mark a job that is being worked on without having been queued (restored after a restart)."""
        self._started.add(job_id)

    def finished(self, job_id: int) -> None:
        """The job is no longer being started or worked on."""
        self._started.discard(job_id)

    def queued(self, guild_id: int) -> list[int]:
        """The guild's queued job ids, head first."""
        return list(self._queues.get(guild_id, ()))

    def total(self) -> int:
        """How many jobs wait in all queues together."""
        return len(self._guild_of)

    def ahead(self, job_id: int, in_scope: Callable[[int], bool] | None = None) -> int | None:
        """How many queued jobs round-robin starts before `job_id` (None: not queued).

        Across all guilds, or only those for which `in_scope` answers True (the guilds on the same
        API key: the others' jobs do not wait for this key's budget).
        """
        guild = self._guild_of.get(job_id)
        if guild is None:
            return None
        mine = self._queues[guild].index(job_id)  # whole rounds before this job's turn
        before = True  # guilds whose turn comes before this guild's in the current round
        count = mine
        for other in self._turns:
            if other == guild:
                before = False
                continue
            if in_scope is not None and not in_scope(other):
                continue
            count += min(len(self._queues.get(other, ())), mine + 1 if before else mine)
        return count

    def position(self, job_id: int) -> int | None:
        """1-based place of a queued job in its guild's queue (1 once it is being started), else None."""
        guild = self._guild_of.get(job_id)
        if guild is None:
            # Taken off the queue and starting: it is at the head until its state moves on.
            return 1 if job_id in self._started else None
        queue = self._queues.get(guild)
        if not queue:
            return None
        try:
            return queue.index(job_id) + 1
        except ValueError:
            return None
