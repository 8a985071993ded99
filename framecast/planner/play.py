"""The key played forward, for what members are told (:mod:`framecast.planner.estimate`): when each
running task's next poll goes out ("left"), and when each queued job starts ("starts in").

The budget is played as it serves (each slot to the due request of the lowest priority, the
earliest first), and admission (:func:`~framecast.planner.policy.admits`) is asked at each slot
over the key as it will be then: the queue moves in bursts, which no even pace follows. Pure: times
are on whatever clock the caller uses.
"""

from __future__ import annotations

import enum
import functools
import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from framecast.planner.policy import IMAGE_REQUESTS, KeyView, Planned, Requests, admits
from framecast.planner.tuning import PlannerTuning
from framecast.values import JobKind
from framecast.values.service_requests import Priority

__all__ = ["Played", "Slots", "play"]


class Slots:
    """When the key's budget grants its next slots, as the play spends them: as its rolling window
    does when its use is known (`frees`, when each used slot frees), else (other processes spend
    the key too) one every `spacing` seconds after the `free` ones now."""

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


class _Create(enum.Enum):
    """What a create waiting in the play is for."""

    VIDEO = enum.auto()  # a video's: its polls follow
    IMAGE = enum.auto()  # a queued image's: it starts, its download follows
    SENT = enum.auto()  # an image's in flight: its download follows (its window: ``images_sent``)


@dataclass
class Played:
    """What one play found, on the play's clock."""

    #: When each running task's next poll goes out, by job id (past the horizon: the horizon's end).
    polls: dict[int, float] = field(default_factory=dict)
    #: When each queued image starts, then each queued video, in queue order within the horizon.
    images: list[float] = field(default_factory=list)
    videos: list[float] = field(default_factory=list)


def play(
    *,
    now: float,
    planned: Sequence[Planned],
    slots: Slots,
    tuning: PlannerTuning,
    window: float,
    allowed: float,
    weighed: Callable[[float], Sequence[Requests]],
    expected: Callable[[float], Sequence[Requests]],
    horizon: float,
    step: float,
    videos: int = 0,
    images: int = 0,
    images_first: bool = False,
    images_sent: Sequence[float] = (),
    in_flight: tuple[int, int] = (0, 0),
) -> Played:
    """Play the key forward from `now` until every task's next poll went out and the queued
    `videos` and `images` started, or for `horizon` seconds.

    `planned` (the running tasks' requests), the creates `in_flight` (videos, images) and the
    `images` waiting (first of all with `images_first`) are served by `slots` (a `window` holding
    `allowed`) in the budget's order. A video starts when no create waits (the scheduler sends one
    at a time) and :func:`admits` says so, asked every `step` and weighing `weighed(t)`; its
    requests `expected(t)` follow its create. An image's requests hold a window from its create,
    as the `images_sent` do.
    """
    played = Played()
    # Each request waiting: [priority, due, order, requests left, job id of a next poll, create of].
    pending: list[list[Any]] = []
    order = itertools.count()

    def add(
        at: float, n: float, priority: Priority, job_id: int | None = None, create: _Create | None = None
    ) -> None:
        if n > 0:
            pending.append([priority, at, next(order), n, job_id, create])

    for request in planned:
        add(request.at, request.requests, request.priority, request.job_id)
    unsent = {request.job_id for request in planned if request.job_id is not None}
    for _ in range(in_flight[0]):
        add(now, 1.0, Priority.HIGH, create=_Create.VIDEO)
    for _ in range(in_flight[1]):
        add(now, 1.0, Priority.NORMAL, create=_Create.SENT)
    for _ in range(images):
        add(now, 1.0, Priority.FIRST if images_first else Priority.NORMAL, create=_Create.IMAGE)
    creates = in_flight[0] + in_flight[1] + images  # creates waiting for their slot
    held = sorted(images_sent)  # when each image's create went: its requests hold a window from then
    while unsent or len(played.images) < images or len(played.videos) < videos:
        at = slots.first()
        if at > now + horizon:
            played.polls.update(dict.fromkeys(unsent, now + horizon))  # later, at the least
            break
        if not creates and len(played.videos) < videos:
            ahead = [(max(t, at), n) for _, t, _, n, _, _ in pending]
            view = KeyView(
                now=at,
                window=window,
                allowed=allowed,
                profile=functools.partial(list, ahead),
                new_video=functools.partial(weighed, at),
                demand=sum(n for t, n in ahead if t < at + window),
                images_spent=IMAGE_REQUESTS * sum(1 for t in held if t >= at - window),
                videos_waiting=videos - len(played.videos),
            )
            if admits(view, JobKind.VIDEO, tuning):
                played.videos.append(at)
                creates += 1
                add(at, 1.0, Priority.HIGH, create=_Create.VIDEO)
        due = [entry for entry in pending if entry[1] <= at]
        if not due:
            wake = min((entry[1] for entry in pending), default=math.inf)
            slots.idle(min(wake, at + step) if len(played.videos) < videos else wake)
            continue
        entry = min(due)  # the budget's order: priority, then the earliest due
        entry[3] -= 1.0
        if entry[3] <= 1e-9:
            pending.remove(entry)
        job_id, create = entry[4], entry[5]
        if create is not None:
            creates -= 1
        if create is _Create.VIDEO:
            for t, n in expected(at):
                add(t, n, Priority.HIGH)
        elif create is not None:
            add(at, IMAGE_REQUESTS - 1, Priority.HIGH)  # the image's download
            if create is _Create.IMAGE:
                played.images.append(at)
                held.append(at)
        elif job_id in unsent:
            unsent.discard(job_id)
            played.polls[job_id] = at
        slots.spend()
    return played
