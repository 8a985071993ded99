"""The waiting line: one first-in-first-out queue per guild, served round-robin.

:class:`GuildQueues` is plain bookkeeping (no I/O, no tasks): the scheduler pushes accepted jobs
and takes the next one to start; anyone may ask where a job stands. It is built before the
scheduler and the chat side, so both can be handed it without a forward reference.

No job waits behind a job of another kind that cannot start yet (an image would otherwise wait for
the budget of the videos ahead of it): when a guild's turn comes, its queue is read head first, one
job per kind (the first video, the first image), and the first of them the key admits is taken. A video the key admits is therefore never overtaken, an
image whose two requests fit goes ahead of videos waiting for the budget, and within a kind the
order is first come, first served. Places follow the same rule: a job's place is counted among
the queued jobs of its own kind (see :meth:`GuildQueues.position`).

Each API key's planner counts only its own guilds' jobs (how many wait, the places ahead), on every
admission and every estimate. Asked through a :class:`Scope`, the queues answer from an index of the
guilds per key, so a key with one guild walks one guild, not every queued guild: a predicate asked
of every queued guild would make those answers grow with keys x guilds when many servers have
their own key.

The dispatcher takes the next job with :meth:`GuildQueues.take_awake`, which looks only at the
lanes (the guilds of one key, :mod:`framecast.jobs.lanes`) woken since their key last refused:
with every key full, a freed slot asks its own key, not every key with waiting guilds.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Protocol

from framecast.jobs.lanes import Lanes
from framecast.values import Job, JobKind

__all__ = ["GuildQueues", "QueuePositions", "Scope"]


class QueuePositions(Protocol):
    """Where a job stands in its guild's queue (what the chat side shows)."""

    def position(self, job_id: int) -> int | None:
        """1-based place of a queued job among its guild's queued jobs of its kind (1 once it is
        being started), else None."""
        ...


class Scope:
    """The guilds whose jobs run on one API key, as the predicate ``scope(guild_id) -> bool`` the
    planner is given; made by :meth:`GuildQueues.scope`.

    Which scope a guild is in is said by the function given to :meth:`GuildQueues.assign_scopes`.
    The queues index their guilds by it (read when a guild joins the rotation, and again by
    :meth:`GuildQueues.regroup` when a guild's key changes), so what a planner asks about its own
    guilds walks those guilds only.
    """

    __slots__ = ("_queues",)

    def __init__(self, queues: GuildQueues) -> None:
        self._queues = queues

    def __repr__(self) -> str:
        return f"<Scope {id(self):#x}>"

    def __call__(self, guild_id: int) -> bool:
        """Whether `guild_id`'s jobs run on this scope's key (now)."""
        return self._queues.scope_of(guild_id) is self


class GuildQueues:
    """Per-guild FIFO queues, the round-robin order of guilds, and the jobs taken off to start."""

    def __init__(self) -> None:
        self._queues: dict[int, deque[int]] = {}
        self._guild_of: dict[int, int] = {}
        self._kind_of: dict[int, JobKind] = {}  # every queued job's kind
        self._since: dict[int, float] = {}  # every queued job's created_at (wall clock)
        self._turns: deque[int] = deque()  # guilds with queued jobs, in round-robin order
        self._just_served: int | None = None  # the guild the last take put back at the tail
        self._started: set[int] = set()  # taken off (or restored) and not finished: "first in line"
        # The same jobs per kind and guild, and each such line's earliest created_at: admission and
        # the forecast ask how many of a kind wait (and since when) on every decision, so a count
        # walks the guilds with jobs of that kind, never every queued job (thousands may wait).
        self._of_kind: dict[JobKind, dict[int, deque[int]]] = {kind: {} for kind in JobKind}
        self._earliest: dict[JobKind, dict[int, float]] = {kind: {} for kind in JobKind}
        # Each guild in the rotation's place in it (ascending, not contiguous): "is its turn before
        # that one's" without walking the rotation.
        self._turn_of: dict[int, int] = {}
        self._next_turn = 0
        # The guilds in the rotation per scope (each API key's), and the scope each was filed under.
        self._scope_fn: Callable[[int], Scope | None] = lambda guild: None
        self._members: dict[Scope, dict[int, None]] = {}
        self._filed: dict[int, Scope | None] = {}
        # The same guilds per lane (the key the dispatcher counts their slots on), in rotation order.
        self._lanes = Lanes(self._turn_of)

    def __repr__(self) -> str:
        return f"<GuildQueues queued={len(self._guild_of)} started={len(self._started)}>"

    def push(self, job: Job) -> None:
        """Put `job` at the tail of its guild's queue."""
        queue = self._queues.setdefault(job.guild_id, deque())
        queue.append(job.id)
        kind = JobKind(job.kind)
        self._guild_of[job.id] = job.guild_id
        self._kind_of[job.id] = kind
        self._since[job.id] = job.created_at
        self._of_kind[kind].setdefault(job.guild_id, deque()).append(job.id)
        earliest = self._earliest[kind]
        earliest[job.guild_id] = min(earliest.get(job.guild_id, math.inf), job.created_at)
        if job.guild_id not in self._turn_of:
            self._join(job.guild_id)
        # Its key may admit this job's kind though it refused the ones queued before.
        self._lanes.wake(self._lanes.lane_of(job.guild_id))

    def remove(self, job_id: int) -> int | None:
        """Take a queued job out of line (cancelled); returns its guild when that queue moved."""
        guild = self._guild_of.get(job_id)
        if guild is None:
            return None
        queue = self._queues[guild]
        self._forget(job_id, guild)
        queue.remove(job_id)
        # One job fewer waits for its key: the key's answer may change (its planner counts them).
        self._lanes.wake(self._lanes.lane_of(guild))
        if not queue:
            del self._queues[guild]
            self._leave(guild)
        return guild

    def take_next(self, eligible: Callable[[int, JobKind], bool] | None = None) -> tuple[int, int] | None:
        """``(job_id, guild_id)`` of the next job to start: the guilds in round-robin order, each
        guild's queue read head first, one job per kind.

        `eligible(guild_id, kind)` says whether the key of that guild admits a job of that kind now
        (None: everything is admitted, so the head of the next guild's queue is taken). A guild
        whose head is refused offers its first job of another kind instead (an image behind videos
        waiting for the budget); a guild with nothing admitted is passed over and keeps its place
        in the round (each API key admits its own jobs: a guild whose key is saturated must not
        lose its turn to guilds on other keys). The job counts as started (position 1) until
        :meth:`finished` is called for it.
        """
        for guild in list(self._turns):
            queue = self._queues.get(guild)
            if not queue:
                self._queues.pop(guild, None)
                self._leave(guild)
                continue
            job_id = queue[0] if eligible is None else self._first_admitted(guild, queue, eligible)
            if job_id is not None:
                self._take_off(guild, queue, job_id)
                return job_id, guild
        return None

    def take_awake(self, eligible: Callable[[int, JobKind], bool]) -> tuple[int, int] | None:
        """:meth:`take_next` among the guilds of the awake lanes only (see :meth:`assign_lanes`).

        `eligible(guild_id, kind)` is asked of one guild of a lane and its answer holds for every
        guild of that lane (a lane is one key). The result is what :meth:`take_next` would take if
        the sleeping lanes' keys refused everything: the awake lanes are looked at in rotation
        order, each from its first guild that may be served. A lane with nothing admitted falls
        asleep until :meth:`wake` (or a job queued or cancelled in it) wakes it again.
        """
        lanes = self._lanes
        found_in: dict[Hashable, tuple[int, int] | None] = {}  # nothing changes until a job is taken
        while (first := lanes.first()) is not None:
            lane, bound = first
            if lane not in found_in:
                found_in[lane] = self._first_in_lane(lane, eligible)
            found = found_in[lane]
            if found is None:
                lanes.sleep(lane)
                continue
            guild, job_id = found
            turn = self._turn_of[guild]
            if turn > bound:
                lanes.rebound(lane, turn)  # another lane's guild may come before this one
                continue
            self._take_off(guild, self._queues[guild], job_id)
            lanes.wake(lane)  # its key is asked again (one job more on it), from its head
            return job_id, guild
        return None

    def _first_in_lane(
        self, lane: Hashable, eligible: Callable[[int, JobKind], bool]
    ) -> tuple[int, int] | None:
        """The lane's first guild in rotation order with a job its key admits, and that job."""
        answers: dict[JobKind, bool] = {}

        def admitted(guild: int, kind: JobKind) -> bool:
            answer = answers.get(kind)
            if answer is None:
                answer = answers[kind] = eligible(guild, kind)
            return answer

        for guild in self._lanes.guilds(lane):
            job_id = self._first_admitted(guild, self._queues[guild], admitted)
            if job_id is not None:
                return guild, job_id
            if len(answers) == len(JobKind) and not any(answers.values()):
                break  # the key refuses every kind: no guild of the lane is served
        return None

    def _take_off(self, guild: int, queue: deque[int], job_id: int) -> None:
        """`job_id` leaves `guild`'s queue to start: the guild to the tail of the round (or out of it)."""
        self._just_served = None
        queue.remove(job_id)
        self._forget(job_id, guild)
        if queue:
            # To the tail of the round, keeping its scope and lane.
            self._turns.remove(guild)
            self._turns.append(guild)
            self._turn_of[guild] = self._new_turn()
            self._lanes.served(guild)
            self._just_served = guild
        else:
            del self._queues[guild]
            self._leave(guild)
        self._started.add(job_id)

    def _new_turn(self) -> int:
        self._next_turn += 1
        return self._next_turn

    def _join(self, guild: int) -> None:
        """`guild` has its first queued job: into the rotation, and filed under its scope."""
        turns = self._turns
        if turns and turns[-1] == self._just_served:
            # A guild that has had no turn yet goes ahead of the one served a moment ago: it takes
            # that one's place in the order, which moves to a new last one.
            served = turns[-1]
            turns.insert(len(turns) - 1, guild)
            self._turn_of[guild] = self._turn_of[served]
            self._turn_of[served] = self._new_turn()
            self._lanes.join(guild, before=served)
        else:
            turns.append(guild)
            self._turn_of[guild] = self._new_turn()
            self._lanes.join(guild)
        self._file(guild)

    def _leave(self, guild: int) -> None:
        """`guild` has no queued job left: out of the rotation and of its scope."""
        self._turns.remove(guild)
        self._lanes.leave(guild)
        del self._turn_of[guild]
        self._unfile(guild)

    def _file(self, guild: int) -> None:
        scope = self._scope_fn(guild)
        self._filed[guild] = scope
        if scope is not None:
            self._members.setdefault(scope, {})[guild] = None

    def _unfile(self, guild: int) -> None:
        scope = self._filed.pop(guild, None)
        if scope is not None:
            members = self._members[scope]
            del members[guild]
            if not members:
                del self._members[scope]

    def _first_admitted(
        self, guild: int, queue: deque[int], eligible: Callable[[int, JobKind], bool]
    ) -> int | None:
        """The first job of `queue` that is the first of its kind and whose kind `eligible` admits.

        Each kind is asked once, so the look-ahead is bounded by the number of kinds and the
        order within a kind is kept.
        """
        asked: set[JobKind] = set()
        for job_id in queue:
            kind = self._kind_of[job_id]
            if kind in asked:
                continue
            if eligible(guild, kind):
                return job_id
            asked.add(kind)
            if len(asked) == len(JobKind):
                break
        return None

    def _forget(self, job_id: int, guild: int) -> None:
        """Drop a queued job from the per-kind lines (it leaves its guild's queue)."""
        del self._guild_of[job_id]
        kind = self._kind_of.pop(job_id)
        since = self._since.pop(job_id)
        line = self._of_kind[kind][guild]
        line.remove(job_id)
        if not line:
            del self._of_kind[kind][guild]
            del self._earliest[kind][guild]
        elif since <= self._earliest[kind][guild]:
            # It was (one of) the line's earliest: the next earliest is among the ones left.
            self._earliest[kind][guild] = min(self._since[j] for j in line)

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

    # -- scopes (the guilds of each API key) ---------------------------------------------------------
    def scope(self) -> Scope:
        """A new scope (one per API key); its guilds are those :meth:`assign_scopes`' function names it for."""
        return Scope(self)

    def assign_scopes(self, scope_of: Callable[[int], Scope | None]) -> None:
        """`scope_of(guild_id)`: the scope a guild's jobs run in now (None: none of them).

        Call :meth:`regroup` when a guild's answer changes (its key was set or removed).
        """
        self._scope_fn = scope_of
        for guild in list(self._turn_of):
            self.regroup(guild)

    def scope_of(self, guild_id: int) -> Scope | None:
        """The scope a guild's jobs run in now."""
        return self._scope_fn(guild_id)

    def regroup(self, guild_id: int) -> None:
        """The guild's scope and lane may have changed: file its queued jobs under the ones it has now."""
        if guild_id not in self._turn_of:
            return
        if self._filed.get(guild_id) is not self._scope_fn(guild_id):
            self._unfile(guild_id)
            self._file(guild_id)
        self._lanes.refile(guild_id)

    # -- lanes (the guilds whose jobs take the slots of one key) ----------------------------------------
    def assign_lanes(self, lane_of: Callable[[int], Hashable]) -> None:
        """`lane_of(guild_id)`: the lane (the dispatcher's slot key) a guild's jobs run in now.

        :meth:`regroup` (one guild) or :meth:`regroup_lanes` (all) files them again when that
        changes. Every lane is awake after this.
        """
        self._lanes.assign(lane_of, self._turns)

    def regroup_lanes(self) -> None:
        """Any guild's lane may have changed: all of them filed again, and every lane awake."""
        self._lanes.refile_all(self._turns)

    def wake(self, lane: Hashable) -> None:
        """:meth:`take_awake` looks at `lane` again (its key's answer may have changed)."""
        self._lanes.wake(lane)

    def wake_all(self) -> None:
        """:meth:`take_awake` looks at every lane again."""
        self._lanes.wake_all()

    def _with_kind(self, kind: JobKind, in_scope: Callable[[int], bool] | None) -> Iterable[int]:
        """The guilds with queued jobs of `kind` for which `in_scope` answers True (all: None)."""
        lines = self._of_kind[kind]
        if in_scope is None:
            return lines
        if isinstance(in_scope, Scope) and in_scope._queues is self:
            return [guild for guild in self._members.get(in_scope, ()) if guild in lines]
        return [guild for guild in lines if in_scope(guild)]

    def waiting(self, kind: JobKind, in_scope: Callable[[int], bool] | None = None) -> tuple[int, float]:
        """How many jobs of `kind` are queued (in the guilds for which `in_scope` answers True), and
        the earliest of their ``created_at`` (inf when none)."""
        count, since = 0, math.inf
        earliest = self._earliest[kind]
        lines = self._of_kind[kind]
        for guild in self._with_kind(kind, in_scope):
            count += len(lines[guild])
            since = min(since, earliest[guild])
        return count, since

    def ahead(self, job_id: int, in_scope: Callable[[int], bool] | None = None) -> int | None:
        """How many queued jobs of its kind round-robin starts before `job_id` (None: not queued).

        Across all guilds, or only those for which `in_scope` answers True (the guilds on the same
        API key: the others' jobs do not wait for this key's budget). Jobs of the other kind are
        not counted: one that can start starts at once, one that cannot is gone ahead of.
        """
        guild = self._guild_of.get(job_id)
        if guild is None:
            return None
        kind = self._kind_of[job_id]
        mine = self._same_kind(guild, kind).index(job_id)  # whole rounds before this job's turn
        turn = self._turn_of[guild]  # guilds whose turn comes before it get one more in this round
        count = mine
        lines = self._of_kind[kind]
        for other in self._with_kind(kind, in_scope):
            if other != guild:
                count += min(len(lines[other]), mine + 1 if self._turn_of[other] < turn else mine)
        return count

    def position(self, job_id: int) -> int | None:
        """1-based place of a queued job among its guild's queued jobs of its kind (1 once it is
        being started), else None.

        Counted per kind because the order is kept per kind: an image never waits for a video
        that cannot start yet, so the videos ahead of it are not places ahead of it (/queue and
        the job's own message both show this number).
        """
        guild = self._guild_of.get(job_id)
        if guild is None:
            # Taken off the queue and starting: it is at the head until its state moves on.
            return 1 if job_id in self._started else None
        try:
            return self._same_kind(guild, self._kind_of[job_id]).index(job_id) + 1
        except ValueError:
            return None

    def _same_kind(self, guild: int, kind: JobKind) -> Sequence[int]:
        """The guild's queued jobs of `kind`, head first."""
        return self._of_kind[kind].get(guild, ())
