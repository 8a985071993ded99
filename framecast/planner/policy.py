"""Whether one more job starts on a key now: the admission policy, a pure function of a snapshot.

The planner asks :func:`admits` over a read-only :class:`KeyView`, recording nothing; the forecast's
"starts in" asks it over the snapshots the key will pass through (:func:`~framecast.planner.play.play`).

**The objective**: the sum over jobs of what members wait, command to file, under the key's budget
(no self-inflicted 429) and the fairness between servers (the queues' turns, not the budget's).

What admission weighs:

* one video's create waits for the budget at a time; images' creates may wait together;
* more than one create backing off after a failure stops admission;
* an image's create goes before the polls that cannot see a result yet, all of them within a borrow;
* a video waits while a poll sent only to learn a task is due, or an image has waited a window;
* a video waits until the next window has room (or lends it a slot, or would idle);
* and until every later window its polls fall in has room for them (:func:`peak_with`).

Tuned numbers: :class:`~framecast.planner.tuning.PlannerTuning`; history and figures:
``docs/ARCHITECTURE.md`` and ``benchmarks/README.md``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from framecast.planner.tuning import PlannerTuning
from framecast.values import JobKind
from framecast.values.service_requests import Priority

__all__ = [
    "IMAGE_REQUESTS",
    "MAX_DEFERRED",
    "MIN_REQUESTS_PER_VIDEO",
    "KeyView",
    "Planned",
    "Requests",
    "admits",
    "peak_with",
    "video_fits",
]

#: Requests a video costs at the least: its create, the poll that sees it done, the download.
MIN_REQUESTS_PER_VIDEO = 3.0
#: Requests an image costs: its create and the download of the result the create answered.
IMAGE_REQUESTS = 2.0

#: Creates backing off after a failure that admission looks past: two mean the service refuses creates.
MAX_DEFERRED = 1

#: ``(time, requests)``: requests expected at a moment (fractions are expectations).
Requests = tuple[float, float]


@dataclass(frozen=True)
class Planned:
    """Requests a running task is expected to make at a moment; `job_id` marks its next poll."""

    at: float
    requests: float
    priority: Priority
    job_id: int | None = None


@dataclass(frozen=True)
class KeyView:
    """A read-only snapshot of one key, as admission weighs it (monotonic times; unset fields are zero)."""

    now: float
    window: float  # the budget's window (seconds)
    allowed: float  # requests a window holds (this process's part of the key's)
    profile: Callable[[], Sequence[Requests]]  # the running tasks' requests ahead (computed when read)
    new_video: Callable[[], Sequence[Requests]]  # what a video created now adds: its create, its polls
    demand: float = 0.0  # requests the running tasks need within the next window
    images_spent: float = 0.0  # requests of the images whose create was sent within the last window
    videos_waiting: int = 0  # videos queued for this key
    images_waiting: int = 0  # images queued for this key
    running: int = 0  # jobs occupying the service (the scheduler's count)
    ceiling: int | None = None  # the most tasks at once (None: no fixed number)
    deferred: int = 0  # creates backing off after a failure
    sending: int = 0  # of the started jobs, those whose create is being sent
    polled: int = 0  # tasks on the service this process polls
    others: float = 0.0  # the other processes' demand within the next window (0 with nothing running here)
    ahead_of_images: float = 0.0  # of the demand, the polls expected to see a result and their downloads
    images_first: bool = False  # an image has waited a whole window: it goes before those polls too
    learning_due: bool = False  # a poll sent only to learn a task is due

    @property
    def creating(self) -> int:
        """Started jobs whose create has not gone through (and is not backing off)."""
        return self.running - self.deferred - self.polled


def video_fits(
    tuning: PlannerTuning,
    *,
    window: float,
    allowed: float,
    due: float,
    images: int,
    videos: int,
    peak: Callable[[], float],
    ahead: Callable[[float], float] | None = None,
) -> bool:
    """Whether a video fits a window of `allowed` requests with `due` planned; `peak()`: the fullest
    later window with its polls; `ahead(seconds)`: requests planned that far ahead (None: none lend)."""
    wanted = due + 1 + IMAGE_REQUESTS * images
    if 0 < videos <= tuning.last_creates:
        return wanted <= tuning.borrow * allowed  # the batch's last: no creates follow to need the room
    if wanted > allowed:
        if ahead is None or tuning.spread <= 1 or images:
            return False  # nothing lends; or images wait: they go first, within this window
        # The next `spread` windows have room: the polls the create displaces slip into them.
        lent = ahead(tuning.spread * window) + 1
        return lent <= tuning.spread * allowed and peak() <= allowed
    if due <= tuning.idle * allowed:
        return True  # the key would idle (the mixed shape's videos waited out whole windows)
    return peak() <= allowed  # the windows its polls fall in have room for them too


def admits(view: KeyView, kind: JobKind, tuning: PlannerTuning) -> bool:
    """Whether one more job of `kind` may start now (see the module docstring)."""
    if view.ceiling is not None and view.running >= view.ceiling:
        return False
    creating = view.creating
    if creating > 0 and kind is JobKind.VIDEO:
        return False
    if view.deferred > MAX_DEFERRED:
        return False
    # Started jobs whose create is not sent yet hold an image's two requests each (only images pass one).
    spending = view.images_spent + IMAGE_REQUESTS * max(0, creating - view.sending)
    planned = view.demand + view.others + spending
    if kind is JobKind.IMAGE:
        ahead = 0.0 if view.images_first else view.ahead_of_images
        if ahead + view.others + spending + IMAGE_REQUESTS > view.allowed:
            return False
        return planned + IMAGE_REQUESTS <= tuning.borrow * view.allowed
    if view.learning_due or view.images_first:
        return False  # a learning poll yields to images only; an image waited a window

    def peak() -> float:
        # The later windows its polls fall in (this one is checked with the other processes' demand).
        return peak_with(view.profile(), view.new_video(), window=view.window, start=view.now + 1e-6)

    def planned_within(span: float) -> float:
        until = view.now + span
        polls = sum(n for at, n in view.profile() if at < until)
        return polls + view.others * span / view.window + spending

    return video_fits(
        tuning,
        window=view.window,
        allowed=view.allowed,
        due=planned,
        images=view.images_waiting,
        videos=view.videos_waiting,
        peak=peak,
        ahead=planned_within,
    )


def peak_with(
    planned: Sequence[Requests], added: Sequence[Requests], *, window: float, start: float
) -> float:
    """The most requests a window ``[s, s + window)``, ``s >= start``, holding one of `added` would hold."""
    events = sorted([*planned, *added])
    times = [t for t, _ in events]
    counts = [0.0]
    for _, n in events:
        counts.append(counts[-1] + n)

    def held(s: float) -> float:
        lo = bisect.bisect_left(times, s)
        hi = bisect.bisect_left(times, s + window)
        return counts[hi] - counts[lo]

    peak = 0.0
    for at, _ in added:
        # A window holding `at` starts in (at - window, at]; its count changes only at a request.
        first = max(start, at - window + 1e-6)
        if first > at:
            continue
        starts = [
            first,
            *(t for t in times[bisect.bisect_left(times, first) : bisect.bisect_right(times, at)]),
        ]
        peak = max(peak, *(held(s) for s in starts))
    return peak
