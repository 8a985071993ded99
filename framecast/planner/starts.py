"""When queued videos start: the key's admission rule (its one owner), and that rule played forward.

Admission (:meth:`Planner.may_start <framecast.planner.planner.Planner.may_start>`) starts a video
while the requests due in the next window leave room for its create and the windows its own polls
will fall in have room for them too (:func:`~framecast.planner.horizon.peak_with`), unless the key
would idle now (half the next window or less planned); the batch's last few creates may borrow
from the planned polls; and a full next window lends a create its slot while the next few windows
together have room (the polls it displaces slip into them). :class:`VideoAdmission` is that rule.

The queue therefore does not move at an even pace. While the running tasks owe little (a batch's
start: most of its tasks wait for the scouts that learn their kind, see
:mod:`framecast.planner.polls`), creates go out as fast as the budget frees slots; when their
completions come due, the key's slots go to polls and creates wait; then about one create for each
task's worth of requests. A pace (what a task costs over the key's rate) is right only on average
and wrong by minutes at either end, so the forecast's "starts in" plays the same rule forward
(:func:`play_starts`) over the requests the plan expects, one budget slot at a time. Pure: times
are whatever clock the caller uses (the planner's monotonic).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from framecast.planner.costs import IMAGE_REQUESTS
from framecast.planner.horizon import Requests, peak_with

__all__ = ["Slots", "VideoAdmission", "play_starts"]


@dataclass(frozen=True)
class VideoAdmission:
    """Whether one more video fits the key's budget now (the planner's rule, and the forecast's)."""

    window: float  # the budget's window (seconds)
    allowed: float  # requests a window holds (this process's part of the key's)
    last_creates: int  # videos waiting at most for the batch's last creates
    borrow: float  # how far (in windows) the batch's last creates may borrow from the planned polls
    idle: float  # the window's share planned at most for the key to idle without this video
    spread: float = 0.0  # windows that together may lend a full next window a create's slot (0: none)

    def fits(
        self,
        *,
        due: float,
        images: int,
        videos: int,
        peak: Callable[[], float],
        ahead: Callable[[float], float] | None = None,
    ) -> bool:
        """Whether a video may start, `due` requests planned within the next window.

        `images`: images waiting on the key (they go first: two requests each); `videos`: videos
        waiting on it, this one included; `peak()`: the most requests a later window would hold
        with the new video's requests (asked only when the next window has room, or lends it);
        `ahead(seconds)`: the requests planned within that many seconds (None: nothing lends).
        While the next ``spread`` windows together have room for everything planned and this
        create, and no image waits, a full next window lends it a slot (issue 17): its create goes
        in turn with the polls due then, and the ones it displaces slip into the windows after,
        where the room is.
        A batch's completions coming due together otherwise held every create until they were
        all delivered, and the key then idled while the next wave of videos ran.
        The batch's last creates (`videos` at most ``last_creates``) may borrow up to ``borrow``
        windows: no creates follow them to take that room later, and starting them late only ends
        the batch a whole task later. Bounded, so a steady trickle of videos stays planned.
        While no more than ``idle`` of the window is planned, the later windows are not looked at:
        the key would idle now, and a slot left idle is lost for good, whereas polls that crowd a
        later window only wait a little for the one after it.
        """
        wanted = due + 1 + IMAGE_REQUESTS * images
        if 0 < videos <= self.last_creates:
            return wanted <= self.borrow * self.allowed
        if wanted > self.allowed:
            if ahead is None or self.spread <= 1 or images:
                return False  # nothing lends; or images wait: they go first, within this window
            lent = ahead(self.spread * self.window) + 1
            return lent <= self.spread * self.allowed and peak() <= self.allowed
        if due <= self.idle * self.allowed:
            # The key would idle (measured: the mixed shape's videos waited out whole windows
            # behind a peak a request or two above the line: 1.5-1.7x the bound one run in four).
            return True
        # Over the horizon: the windows its polls will fall in must have room for them too, or its
        # completion waits for the budget behind the others due then (issue 17).
        return peak() <= self.allowed


class Slots:
    """When the key's budget grants its next slots, as the play spends them.

    With the budget's use known (one process: `frees`, when each used slot frees), exactly as a
    rolling window does: the free ones now, the used ones as they age out, and each slot the play
    spends free again a window later (a batch's first creates go out at once, the next ones a
    window on). Otherwise (other processes spend the key too) one every `spacing` seconds, this
    process's even part of the key's rate, after the `free` ones now.
    """

    def __init__(
        self,
        *,
        now: float,
        window: float,
        allowed: int,
        free: int,
        frees: Sequence[float] | None,
        spacing: float,
    ) -> None:
        self._window = window
        self._spacing = spacing
        self._exact = frees is not None
        if frees is not None:
            times = [now] * max(0, allowed - len(frees)) + [max(now, t) for t in frees]
            self._heap = sorted(times)[: max(1, allowed)]
        else:
            self._heap = [now] * free or [now + spacing]
        self._next_even = self._heap[-1] + spacing  # the next even slot (inexact)

    def first(self) -> float:
        """When the next slot is free."""
        return self._heap[0]

    def spend(self) -> None:
        """The next slot is spent on a request."""
        at = heapq.heappop(self._heap)
        if self._exact:
            heapq.heappush(self._heap, at + self._window)
        elif not self._heap:
            heapq.heappush(self._heap, max(self._next_even, at))
            self._next_even = max(self._next_even, at) + self._spacing

    def idle(self, until: float) -> None:
        """Nothing wants the next slot before `until`: it stays free till then."""
        heapq.heapreplace(self._heap, max(until, self._heap[0]))


def play_starts(
    *,
    now: float,
    count: int,
    planned: Sequence[Requests],
    slots: Slots,
    rule: VideoAdmission,
    weighed: Callable[[float], Sequence[Requests]],
    expected: Callable[[float], Sequence[Requests]],
    horizon: float,
    step: float,
    creates_first: int = 0,
) -> list[float]:
    """When each of the first `count` queued videos starts (times as `now`'s), in queue order.

    `planned`: the requests the running tasks and waiting images are expected to make (a request
    due before `now` waits for a slot); `slots`: when the budget grants them; `weighed(t)`: what
    admission weighs for a video started at `t` (its create first); `expected(t)`: what such a video
    will ask after its create. Each slot goes to the earliest request due by then, else to the
    create of the video admitted last (a request that comes due while that create waits goes after
    it: they share the budget's priority); a video is admitted when the rule passes and no create of an
    earlier one still waits (the scheduler sends one at a time), looked at again every `step`
    seconds while it does not. Stops at `horizon` seconds: the list is shorter when the rest start
    later. `creates_first`: creates that go out before any video is admitted (the images waiting:
    they go first, and the scheduler sends one create at a time).
    """
    pending: list[list[float]] = sorted([at, n] for at, n in planned if n > 0)
    starts: list[float] = []
    create_waits = False
    create_since = -math.inf  # when the waiting create asked for its slot
    while len(starts) < count:
        at = slots.first()
        if at > now + horizon:
            break
        if creates_first > 0:
            creates_first -= 1
            slots.spend()
            continue
        if not create_waits:
            end = at + rule.window
            due = sum(n for t, n in pending if t < end)

            def peak(at: float = at) -> float:
                return peak_with(
                    [(max(t, at), n) for t, n in pending], weighed(at), window=rule.window, start=at + 1e-6
                )

            def ahead(span: float, at: float = at) -> float:
                return sum(n for t, n in pending if t < at + span)

            if rule.fits(due=due, images=0, videos=count - len(starts), peak=peak, ahead=ahead):
                starts.append(at)
                create_waits, create_since = True, at
                for t, n in expected(at):
                    bisect.insort(pending, [t, n])
        # This slot's request: the earliest one due before the waiting create asked (the budget
        # serves the create in turn with the polls: see Planner.create_priority), else the create.
        if pending and pending[0][0] <= (create_since if create_waits else at):
            pending[0][1] -= 1.0
            if pending[0][1] <= 1e-9:
                pending.pop(0)
            slots.spend()
        elif create_waits:
            create_waits = False
            slots.spend()
        else:
            slots.idle(min(pending[0][0] if pending else math.inf, at + step))
    return starts
