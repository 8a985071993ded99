"""What the bot may honestly say about a job between polls, without spending the key.

* **"left"** counts to the poll that will see the task done (the message says "Generating…" until
  then): the one the plan aims just after the end progress predicts or, without progress, the
  figure among the ladder's polls most likely to be close (:func:`likeliest_close`); a poll due on a
  busy key counts from when the key played forward (:mod:`framecast.planner.play`) sends it.
* **"starts in"** is the same play; past its horizon the key's pace, and behind a ceiling on tasks
  at once, when a slot frees.

It reads the planner only as snapshots (:class:`~framecast.planner.polls.TaskView`, :class:`KeyNow`)
and changes nothing. How the figures are checked: ``benchmarks/README.md``.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from framecast.clock import Clock
from framecast.jobs.queues import GuildQueues
from framecast.planner.play import Played, Slots, play
from framecast.planner.policy import IMAGE_REQUESTS
from framecast.planner.polls import PollPlan, TaskView
from framecast.planner.tuning import PlannerTuning
from framecast.service.budget import Budget
from framecast.values import Job, JobKind, JobState
from framecast.values.durations import DurationKey

__all__ = [
    "DurationCdf",
    "Estimate",
    "Estimates",
    "Forecast",
    "KeyNow",
    "expected_seen",
    "likeliest_close",
    "mean_wait",
    "seen_chances",
]

#: What makes a figure shown close: within this share of the truth (the estimates' goal, not tuned).
CLOSE = 0.25


@dataclass(frozen=True)
class Estimate:
    """A job's `progress` now (0..1; `measured`: the service's own last report), seconds until its
    result (`remaining`) or, queued, until it starts (`starts_in`); None: nothing honest to say."""

    progress: float | None = None
    remaining: float | None = None
    starts_in: float | None = None
    measured: bool = False


class Estimates(Protocol):
    """Where the chat side gets a job's :class:`Estimate` (the key's planner implements it)."""

    def estimate(self, job: Job) -> Estimate:
        """The job's estimate now."""
        ...


class DurationCdf:
    """A kind of task's durations as a cdf, interpolated on a grid of its quantiles."""

    _GRID = (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98)

    def __init__(self, quantile: Callable[[float], float]) -> None:
        """`quantile(q)`: the duration a fraction `q` of such tasks finish within (non-decreasing)."""
        self._points = [(max(0.0, quantile(q)), q) for q in self._GRID]

    def __call__(self, age: float) -> float:
        """The chance that such a task is done within `age` seconds."""
        points = self._points
        if age <= 0:
            return 0.0
        first_d, first_q = points[0]
        if age < first_d:
            return first_q * age / first_d
        for (d0, q0), (d1, q1) in zip(points, points[1:], strict=False):
            if age < d1:
                return q0 if d1 <= d0 else q0 + (q1 - q0) * (age - d0) / (d1 - d0)
        return points[-1][1]


def seen_chances(polls: Sequence[float], done_by: Callable[[float], float]) -> list[float]:
    """The chance that each of the `polls` sees the task done, by `done_by(t)` (the last takes the rest)."""
    chances, before = [], 0.0
    for n, at in enumerate(polls):
        done = 1.0 if n == len(polls) - 1 else min(1.0, max(before, done_by(at)))
        chances.append(done - before)
        before = done
    return chances


def expected_seen(polls: Sequence[float], done_by: Callable[[float], float]) -> float:
    """When the task is expected to be seen done: the mean over the `polls` (see :func:`seen_chances`)."""
    return mean_wait(polls, seen_chances(polls, done_by))


def mean_wait(polls: Sequence[float], chances: Sequence[float]) -> float:
    """The mean of the `polls` weighted by the chance of each."""
    return sum(at * chance for at, chance in zip(polls, chances, strict=True))


def likeliest_close(
    waits: Sequence[float],
    chances: Sequence[float],
    *,
    floor: float,
    within: float = CLOSE,
) -> float:
    """The wait to show when the true one is one of `waits` with these `chances`: the figure most
    likely within `within` of the truth (error ``|shown - true| / max(true, floor)``), among those
    the one off by least on average: of two far polls the likelier, where their mean is near neither."""
    weights: dict[float, float] = {}
    for wait, chance in zip(waits, chances, strict=True):
        weights[max(0.0, wait)] = weights.get(max(0.0, wait), 0.0) + chance
    points = sorted(weights.items())
    times = [t for t, _ in points]
    # Both ends of a true t's band grow with t, so the bands holding a shown x are a run of the
    # sorted ones: found by bisection.
    lows = [t - within * max(t, floor) for t in times]
    highs = [t + within * max(t, floor) for t in times]
    cumulative = [0.0]
    for _, weight in points:
        cumulative.append(cumulative[-1] + weight)

    def covered(x: float) -> float:
        first = bisect.bisect_left(highs, x - 1e-9)
        last = bisect.bisect_right(lows, x + 1e-9)
        return cumulative[last] - cumulative[first] if last > first else 0.0

    def mean_error(x: float) -> float:
        return sum(weight * abs(x - t) / max(t, floor) for t, weight in points)

    # The likeliest share is reached at an end of a band or at a true time.
    candidates = sorted({max(0.0, x) for x in (*lows, *highs, *times)})
    shares = [round(covered(x), 9) for x in candidates]
    best = max(shares)
    return min((x for x, share in zip(candidates, shares, strict=True) if share == best), key=mean_error)


@dataclass(frozen=True)
class KeyNow:
    """The key besides its poll plan at one moment (``Planner.key_now``): its pace, what holds its slots."""

    requests_per_task: float  # what a task costs on average, learned (at least a video's minimum)
    processes: int  # processes spending the key's rate (this one included)
    ceiling: int | None  # the most tasks at once (None: no fixed number)
    occupied: int  # jobs occupying the service (running, or being created)
    images_first: bool = False  # an image waiting has waited a whole window: the images go first
    images_sent: Sequence[float] = ()  # when the images' creates sent within the last window went (monotonic)
    in_flight: tuple[int, int] = (0, 0)  # creates handed to the budget, not answered yet: (videos, images)
    abandoned: Sequence[float] = ()  # seconds until each task let go stops counting (outside `ceiling`)

    def per_second(self, budget: Budget) -> float:
        """Requests a second this process may spend on the key: an even part of its rate."""
        return max(1, budget.allowed) / budget.window / self.processes


class Forecast:
    """The estimates of one key's planner, read from its plan, queues, budget and :class:`KeyNow`."""

    def __init__(
        self,
        plan: PollPlan,
        *,
        clock: Clock,
        budget: Budget,
        queues: GuildQueues,
        scope: Callable[[int], bool] | None,
        tuning: PlannerTuning,
    ) -> None:
        """`scope(guild_id)`: whether a guild's jobs wait for this key (None: every guild's);
        `tuning`: the admission policy's numbers (the policy is played forward)."""
        self._plan = plan
        self._clock = clock
        self._budget = budget
        self._queues = queues
        self._scope = scope
        self._tuning = tuning
        # The last play (monotonic), when, for how many queued (videos, images), and whether the
        # plan changed since (see :meth:`_play`).
        self._played = Played()
        self._played_at = -math.inf
        self._played_for = (0, 0)
        self._stale = True

    def __repr__(self) -> str:
        return f"<Forecast of {self._plan!r}>"

    def changed(self) -> None:
        """The plan or the queues changed: the key is played again when next read."""
        self._stale = True

    def estimate(self, job: Job, key: KeyNow) -> Estimate:
        """The job's progress and timing as far as they are known."""
        if job.state is JobState.QUEUED:
            # Only jobs on this key wait for its budget: other keys' guilds start on their own.
            ahead = self._queues.ahead(job.id, self._scope)
            if ahead is None:
                return Estimate()
            return Estimate(starts_in=self.starts_in(ahead, job, key))
        now = self._clock.time()
        task = self._plan.view(job.id, now)
        if job.state is not JobState.RUNNING or task is None:
            return Estimate()
        return Estimate(progress=task.progress, remaining=self.left(task, now, key), measured=task.measured)

    # -- running: when the bot will see the task done ------------------------------------------------
    def seen_done(self, task: TaskView, now: float, key: KeyNow) -> float | None:
        """Wall time the polls are expected to see `task` done, the mean of :meth:`left`'s (None: unknown)."""
        outlook = self._outlook(task, now, key)
        if outlook is None:
            return None
        polls, chances = outlook
        return mean_wait(polls, chances)

    def left(self, task: TaskView, now: float, key: KeyNow) -> float | None:
        """Seconds "left" for `task`: the likeliest close wait for the poll that sees it done, or None."""
        outlook = self._outlook(task, now, key)
        if outlook is None:
            return None
        polls, chances = outlook
        return likeliest_close([at - now for at in polls], chances, floor=self._plan.interval)

    def _outlook(self, task: TaskView, now: float, key: KeyNow) -> tuple[list[float], list[float]] | None:
        """The polls that may see `task` done (wall times), the next one as late as the play sends it,
        and the chance of each (None: unknown)."""
        plan = self._plan
        next_poll = self._next_poll(task, now, self._late(task, key))
        if task.aim is not None:
            # Wall and monotonic clocks are read at different instants: a poll a hair before the
            # aim is the planned one, not one an interval later.
            return [plan.first_poll_at(task.aim, next_poll, slack=0.05 * plan.interval)], [1.0]
        kind = task.key
        if kind is None or not plan.learned(kind):
            return None
        cdf = DurationCdf(lambda q: plan.quantile(kind, q))
        # The last poll found it still running: only the durations beyond that age are left.
        past = cdf(0.0 if task.last_at is None else task.last_at - task.started)

        def done_by(at: float) -> float:
            return (cdf(at - task.started) - past) / (1.0 - past) if past < 1.0 else 1.0

        polls = plan.ladder(kind, next_poll, task.started, task.polls, task.first, done_by)
        return polls, seen_chances(polls, done_by)

    def _late(self, task: TaskView, key: KeyNow) -> float:
        """How late the task's planned poll goes out, behind the requests before it as the play sends them."""
        if not task.goes_first:
            return 0.0  # a poll that cannot see a result yet goes after creates: its figure is the plan's
        sent = self._play(key).polls.get(task.job_id)
        return 0.0 if sent is None else max(0.0, sent - task.next_at)

    def _slots(self, now: float, key: KeyNow) -> Slots:
        """When this process's budget grants its next slots."""
        budget = self._budget
        return Slots(
            now=now,
            window=budget.window,
            allowed=max(1, budget.allowed),
            free=int(budget.available() / key.processes),
            frees=budget.frees_at() if key.processes == 1 else None,
            spacing=1.0 / key.per_second(budget),
        )

    def _next_poll(self, task: TaskView, now: float, late: float) -> float:
        """Wall time of the task's next poll as planned, `late` seconds late (now, when one is due)."""
        if task.next_at > 0:
            at = task.next_at + late + (self._clock.time() - self._clock.monotonic())
        else:  # not planned yet: the first poll comes an interval after the create
            at = task.seen_at + self._plan.interval
        return max(at, now)

    def typical_seen(self, job: Job) -> float | None:
        """Seconds from a new task's create until a poll is expected to see it done (None: unknown)."""
        plan = self._plan
        key = DurationKey.for_params(job.params)
        if key is None or not plan.learned(key):
            return None
        cdf = DurationCdf(lambda q: plan.quantile(key, q))
        rung = plan.first_rung()
        polls = plan.ladder(key, max(plan.interval, plan.quantile(key, rung)), 0.0, 0, rung, cdf)
        return expected_seen(polls, cdf)

    # -- queued: when the job starts ------------------------------------------------------------------
    def starts_in(self, ahead: int, job: Job, key: KeyNow) -> float | None:
        """Seconds until a queued job with `ahead` jobs of its kind before it starts (None: unknown):
        when the play starts it, else at the key's pace, and behind a ceiling once a slot frees."""
        played = self._play(key)
        starts = played.videos if job.kind is JobKind.VIDEO else played.images
        if ahead < len(starts):
            by_rate = max(0.0, starts[ahead] - self._clock.monotonic())
        else:  # at the key's pace: every job ahead costs what a task costs on average
            requests = (ahead + 1) * key.requests_per_task
            if job.kind is JobKind.VIDEO:
                images, _ = self._queues.waiting(JobKind.IMAGE, self._scope)
                requests += IMAGE_REQUESTS * images
            by_rate = requests / key.per_second(self._budget)
        ceiling, occupied = key.ceiling, key.occupied
        if ceiling is None or ahead + 1 <= ceiling - occupied:
            return by_rate
        now = self._clock.time()
        running = self._plan.views(now)
        duration = self.typical_seen(job)
        # When each slot frees: now, when a running task is seen done, or unknown (inf); a job
        # being created holds its slot for a whole typical duration; a task let go, until it ends.
        frees = [0.0] * max(0, ceiling - occupied) + list(key.abandoned)
        for task in running:
            seen = self.seen_done(task, now, key)
            frees.append(math.inf if seen is None else max(0.0, seen - now))
        frees += [math.inf if duration is None else duration] * max(0, occupied - len(running))
        heapq.heapify(frees)
        for _ in range(ahead if frees else 0):
            at = heapq.heappop(frees)
            heapq.heappush(frees, math.inf if duration is None else at + duration)
        at = heapq.heappop(frees) if frees else math.inf
        return None if math.isinf(at) else max(by_rate, at)

    def _play(self, key: KeyNow) -> Played:
        """The key played forward from now: again when the queues changed, when the plan did at most
        every quarter slot, else every slot."""
        now = self._clock.monotonic()
        spacing = 1.0 / key.per_second(self._budget)
        videos, _ = self._queues.waiting(JobKind.VIDEO, self._scope)
        images, _ = self._queues.waiting(JobKind.IMAGE, self._scope)
        age = now - self._played_at
        same = (videos, images) == self._played_for
        if same and (age < spacing / 4 or (age < spacing and not self._stale)):
            return self._played
        plan = self._plan
        self._played = play(
            now=now,
            planned=plan.requests(now),
            slots=self._slots(now, key),
            tuning=self._tuning,
            window=self._budget.window,
            allowed=max(1, self._budget.allowed) / key.processes,
            weighed=plan.new_video_requests,
            expected=plan.new_video_cost,
            # Long enough for the queue at twice a task's cost, and a whole task's polls beyond.
            horizon=2 * (videos + images + 1) * key.requests_per_task * spacing + 2 * plan.max_interval,
            step=spacing,
            videos=videos,
            images=images,
            images_first=key.images_first,
            images_sent=key.images_sent,
            in_flight=key.in_flight,
        )
        self._played_at, self._played_for, self._stale = now, (videos, images), False
        return self._played
