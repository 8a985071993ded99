"""The waiting guilds per API key ("lanes"), each in round-robin order, and which keys to ask.

A key that refused to start another job keeps refusing until something of its own changes: one
of its slots is freed, its planner's state moves, a job of its guilds is queued or cancelled, or
its time to be asked again comes. :class:`Lanes` lets the dispatcher ask only the keys woken by
such a change. Each awake lane has a lower bound on the rotation place of its first guild that
may be served, kept in a heap, so the next job is found by looking at the awake lanes in rotation
order, never by walking every queued guild: with every key full and one slot freed at a time,
each freed slot costs the same whether ten keys wait or a thousand.

Plain bookkeeping owned by :class:`~framecast.jobs.queues.GuildQueues`, which says where each
guild stands in the rotation (its turn number: ascending, the lower the sooner).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping

__all__ = ["Lanes"]


class Lanes:
    """The guilds in the rotation filed per lane (the key their jobs run on), and the awake lanes."""

    def __init__(self, turn_of: Mapping[int, int]) -> None:
        """`turn_of`: each guild in the rotation's place in it (the queues' own, read live)."""
        self._turn_of = turn_of
        self._lane_fn: Callable[[int], Hashable] = lambda guild: None
        # Each lane's guilds in rotation order (a dict as an ordered set: removal in O(1)).
        self._guilds: dict[Hashable, dict[int, None]] = {}
        self._lane: dict[int, Hashable] = {}
        # Awake lanes and a lower bound on the turn of the first guild each may serve. The heap
        # may hold outdated entries: one counts only while it carries its lane's current bound.
        self._bound: dict[Hashable, int] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._ties = 0  # a heap entry's tie-breaker: lanes need not be orderable

    def __repr__(self) -> str:
        return f"<Lanes lanes={len(self._guilds)} awake={len(self._bound)}>"

    # -- filing ---------------------------------------------------------------------------------------
    def assign(self, lane_of: Callable[[int], Hashable], rotation: Iterable[int]) -> None:
        """`lane_of(guild_id)`: the lane a guild's jobs run in; every guild of `rotation` refiled."""
        self._lane_fn = lane_of
        self.refile_all(rotation)

    def lane_of(self, guild: int) -> Hashable:
        """The lane `guild` is filed under (it must be in the rotation)."""
        return self._lane[guild]

    def join(self, guild: int, *, before: int | None = None) -> None:
        """`guild` joins the rotation: filed at its lane's tail, or just before `before` (the guild
        served a moment ago, whose place it took: the last of the rotation, so of its lane)."""
        lane = self._lane_fn(guild)
        self._lane[guild] = lane
        guilds = self._guilds.setdefault(lane, {})
        if before is not None and self._lane.get(before) == lane:
            del guilds[before]
            guilds[guild] = None
            guilds[before] = None
        else:
            guilds[guild] = None

    def served(self, guild: int) -> None:
        """`guild` went to the tail of the rotation (it keeps jobs queued): to its lane's tail too."""
        guilds = self._guilds[self._lane[guild]]
        del guilds[guild]
        guilds[guild] = None

    def leave(self, guild: int) -> None:
        """`guild` has no queued job left."""
        lane = self._lane.pop(guild)
        guilds = self._guilds[lane]
        del guilds[guild]
        if not guilds:
            del self._guilds[lane]
            self._bound.pop(lane, None)

    def refile(self, guild: int) -> None:
        """`guild`'s lane may have changed (its key was set or removed): filed under the one it has
        now, in rotation order; both lanes are woken (each counts one guild more or fewer)."""
        old = self._lane.get(guild)
        if old is None:
            return
        lane = self._lane_fn(guild)
        if lane == old:
            return
        self.leave(guild)
        self._lane[guild] = lane
        guilds = self._guilds.setdefault(lane, {})
        guilds[guild] = None
        if len(guilds) > 1:  # rare (an admin acted): a sort of that one lane
            ordered = sorted(guilds, key=self._turn_of.__getitem__)
            guilds.clear()
            guilds.update(dict.fromkeys(ordered))
        self.wake(old)
        self.wake(lane)

    def refile_all(self, rotation: Iterable[int]) -> None:
        """Every guild of `rotation` (in order) filed again by the lane function; all lanes awake."""
        self._guilds.clear()
        self._lane.clear()
        self._bound.clear()
        self._heap.clear()
        for guild in rotation:
            lane = self._lane_fn(guild)
            self._lane[guild] = lane
            self._guilds.setdefault(lane, {})[guild] = None
        self.wake_all()

    def guilds(self, lane: Hashable) -> Iterator[int]:
        """The lane's guilds in rotation order."""
        return iter(self._guilds.get(lane, ()))

    # -- awake lanes ----------------------------------------------------------------------------------
    def wake(self, lane: Hashable) -> None:
        """Look at `lane` again (its key's answer may have changed); nothing if it has no guild."""
        guilds = self._guilds.get(lane)
        if not guilds:
            return
        head = self._turn_of[next(iter(guilds))]
        if self._bound.get(lane) != head:
            self._push(lane, head)

    def wake_all(self) -> None:
        """Look at every lane again."""
        for lane in list(self._guilds):
            self.wake(lane)

    def first(self) -> tuple[Hashable, int] | None:
        """The awake lane with the lowest bound, and that bound (None: every lane sleeps)."""
        heap = self._heap
        while heap:
            bound, _, lane = heap[0]
            if self._bound.get(lane) == bound:
                return lane, bound
            heapq.heappop(heap)  # outdated: its lane sleeps, or has a newer bound
        return None

    def rebound(self, lane: Hashable, turn: int) -> None:
        """`lane` (awake) serves no guild before `turn`: it goes back in its place for that."""
        self._push(lane, turn)

    def _push(self, lane: Hashable, bound: int) -> None:
        self._bound[lane] = bound
        self._ties += 1
        heapq.heappush(self._heap, (bound, self._ties, lane))

    def sleep(self, lane: Hashable) -> None:
        """`lane` has nothing its key admits: not looked at until woken."""
        self._bound.pop(lane, None)
