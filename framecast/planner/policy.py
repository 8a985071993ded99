"""Whether one more job starts on a key now: the admission policy, a pure function of a snapshot.

The planner (:meth:`Planner.may_start <framecast.planner.planner.Planner.may_start>`) takes a
read-only :class:`KeyView` of its key (the running tasks' requests, the queues, the budget, the
other processes' share) and asks :func:`admits`; nothing is recorded by asking. The forecast's
"starts in" asks the same function over the snapshots the key will pass through
(:func:`~framecast.planner.play.play`): one policy, asked now and played ahead. Every
tuned number comes from :class:`~framecast.planner.tuning.PlannerTuning`.

**The objective** (the one the whole planner serves): the sum over jobs of what members wait,
command to file, subject to the key's budget (never more requests in a window than it holds: no
self-inflicted 429) and the servers taking turns in the queues (fairness is the queues', not the
budget's). A request slot spent on one thing is not spent on another, so each rule below is one
answer to "what does the next slot lower that sum most by": a poll that will see a result (a file
sooner), an image's create (two slots for a whole file), a video's create (a file one task later,
and its polls taken from the windows they fall in), or nothing (a poll that sees nothing costs
every member waiting a slot). Makespan and requests per video follow; they are not goals.

What the policy weighs (each rule's figure: ``benchmarks/README.md``, and the tuned numbers'
lines in :class:`~framecast.planner.tuning.PlannerTuning`):

* one video's create waits for the budget at a time (the queues keep the order, not the budget);
  images' creates may wait together; more than one create backing off after a failure stops
  admission (the service likely refuses creates altogether);
* an image's create goes before the polls that cannot see a result yet, so only the polls that will
  see one (and their downloads) must fit beside it; all the planned requests within a borrow;
* a video waits while a poll sent only to learn a task is due, while an image has waited a whole
  window, and until the next window has room for it and the images waiting (or lends it a slot, or
  would idle), and every later window its own polls fall in has room for them (:func:`peak_with`:
  looking at the next window only started tasks whose completions then fell together into one
  later window).
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

#: Creates backing off after a failure that admission looks past: one may be a passing error;
#: two mean the service refuses creates, and more jobs taken off the queues would only retry in a
#: crowd (and out of turn) later. A rule, not a tuned figure.
MAX_DEFERRED = 1


#: ``(time, requests)``: requests expected at a moment (fractions are expectations).
Requests = tuple[float, float]


@dataclass(frozen=True)
class Planned:
    """Requests a running task is expected to make at a moment, at a budget priority. `job_id` marks
    the task's next poll (the one its "left" waits for); None marks its later requests."""

    at: float
    requests: float
    priority: Priority
    job_id: int | None = None


@dataclass(frozen=True)
class KeyView:
    """A read-only snapshot of one key, as admission weighs it (monotonic times; what is not given
    is zero: the play forward, :func:`~framecast.planner.play.play`, fills only its part)."""

    now: float
    window: float  # the budget's window (seconds)
    allowed: float  # requests a window holds (this process's part of the key's)
    #: The running tasks' expected requests over the horizon (computed when first read).
    profile: Callable[[], Sequence[Requests]]
    #: What a video created now adds: its create, then its polls.
    new_video: Callable[[], Sequence[Requests]]
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
    """Whether a video fits a window of `allowed` requests, `due` of them planned, `images` and
    `videos` (this one included) waiting on the key; `peak()`: the most requests a later window
    would hold with the new video's; `ahead(seconds)`: the requests planned within that many
    seconds (None: nothing lends)."""
    wanted = due + 1 + IMAGE_REQUESTS * images
    if 0 < videos <= tuning.last_creates:
        return wanted <= tuning.borrow * allowed  # the batch's last: no creates follow to need the room
    if wanted > allowed:
        if ahead is None or tuning.spread <= 1 or images:
            return False  # nothing lends; or images wait: they go first, within this window
        # The next `spread` windows have room: the create goes in turn with the polls due, and the
        # ones it displaces slip into the windows after (a batch's completions held every create).
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
    # The jobs started whose create is not sent yet hold two requests each too (images: a video's
    # create waiting blocks the videos above, so only images are admitted past one).
    spending = view.images_spent + IMAGE_REQUESTS * max(0, creating - view.sending)
    planned = view.demand + view.others + spending
    if kind is JobKind.IMAGE:
        ahead = 0.0 if view.images_first else view.ahead_of_images
        if ahead + view.others + spending + IMAGE_REQUESTS > view.allowed:
            return False
        return planned + IMAGE_REQUESTS <= tuning.borrow * view.allowed
    if view.learning_due or view.images_first:
        return False  # a poll sent to learn a task yields to images only; an image waited a window

    def peak() -> float:
        # The windows after this one (checked with the other processes' demand) its polls fall in.
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
    """The most requests one window would hold with `added` on top of `planned`.

    Only windows ``[s, s + window)`` with ``s >= start`` that hold one of `added`'s requests count:
    the windows the new requests would make fuller (earlier ones are the budget's past).
    """
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
        # A window holding `at` starts in (at - window, at]; the count changes only where a
        # window's left edge passes a request, so those starts (and the earliest) are enough.
        first = max(start, at - window + 1e-6)
        if first > at:
            continue
        starts = [
            first,
            *(t for t in times[bisect.bisect_left(times, first) : bisect.bisect_right(times, at)]),
        ]
        peak = max(peak, *(held(s) for s in starts))
    return peak
