"""When queued videos start: the admission policy (:func:`~framecast.planner.policy.admits`) played
forward over the budget's slots, for the forecast's "starts in".

The queue does not move at an even pace (a batch's creates go out as fast as slots free, then wait
while their completions come due): a pace is right only on average and wrong by minutes at either
end, so the policy is asked at each budget slot over the requests the plan expects. Pure: times are
whatever clock the caller uses (the planner's monotonic).
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
from collections.abc import Callable, Sequence

from framecast.planner.policy import IMAGE_REQUESTS, KeyView, Requests, admits
from framecast.planner.tuning import PlannerTuning
from framecast.values import JobKind

__all__ = ["Slots", "play_starts"]


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
    tuning: PlannerTuning,
    window: float,
    allowed: float,
    weighed: Callable[[float], Sequence[Requests]],
    expected: Callable[[float], Sequence[Requests]],
    horizon: float,
    step: float,
    creates_first: int = 0,
    images_sent: Sequence[float] = (),
    in_flight: tuple[int, int] = (0, 0),
) -> list[float]:
    """When each of the first `count` queued videos starts (times as `now`'s), in queue order; the
    list stops at `horizon` seconds (the rest start later).

    `planned`: the running tasks' and waiting images' requests (one due before `now` waits for a
    slot), served by `slots` (a `window` holding `allowed`); `weighed(t)`: what admission weighs for
    a video started at `t`; `expected(t)`: what it asks after its create. Each slot goes to the
    earliest request due, else to the create of the video admitted last (they share the budget's
    priority). A video is admitted when :func:`admits` says so over the key as it will be then and
    no earlier create still waits (the scheduler sends one at a time), asked again every `step`.
    First go the creates in flight (`in_flight`: videos, images; a video's polls after it), then
    the images waiting (`creates_first`). An image's two requests hold the window from its create's
    send, `images_sent` and the play's own alike, as ``KeyView.images_spent`` weighs them (without
    them "starts in" came out early at 110 % load: ``benchmarks/README.md``).
    """
    pending: list[list[float]] = sorted([at, n] for at, n in planned if n > 0)
    starts: list[float] = []
    create_waits = False
    create_since = -math.inf  # when the waiting create asked for its slot
    held = sorted(images_sent)  # when each image's create went: its requests hold a window from then
    flying_videos, flying_images = in_flight
    while len(starts) < count:
        at = slots.first()
        if at > now + horizon:
            break
        if flying_videos + flying_images > 0:
            if flying_videos > 0:
                flying_videos -= 1
                for t, n in expected(at):
                    bisect.insort(pending, [t, n])
            else:
                flying_images -= 1  # its requests are held already (`images_sent`)
            slots.spend()
            continue
        if creates_first > 0:
            creates_first -= 1
            held.append(at)
            slots.spend()
            continue
        if not create_waits:
            view = KeyView(
                now=at,
                window=window,
                allowed=allowed,
                profile=functools.partial(_from, pending, at),
                new_video=functools.partial(weighed, at),
                demand=sum(n for t, n in pending if t < at + window),
                images_spent=IMAGE_REQUESTS * (len(held) - bisect.bisect_left(held, at - window)),
                videos_waiting=count - len(starts),
            )
            if admits(view, JobKind.VIDEO, tuning):
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


def _from(pending: Sequence[Sequence[float]], at: float) -> list[Requests]:
    """The requests still to come, as seen at `at` (one already due waits for a slot then)."""
    return [(max(t, at), n) for t, n in pending]
