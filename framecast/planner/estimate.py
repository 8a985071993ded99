"""What the bot may honestly say about a job between polls, without spending the key.

A running job's message says how long its generation has left; a queued one's when it starts
(``cogs/views/render.py`` words them). Both are the planner's own plan played forward, and both are
checked against what happened in ``benchmarks/bench_planner.py`` (``benchmarks/estimate_error.py``):

* **"left" counts to the poll that will see the task done**, not to its predicted end: the
  message says "Generating…" until the bot has seen the result. With progress that poll is the
  plan's; without, each poll of the ladder (:mod:`framecast.planner.polls`) has a chance of being
  the one, from the durations given that the last poll found the task running, and the figure
  shown is the one most likely to be close (:func:`likeliest_close`). A poll due on a busy key
  goes out when the key played forward sends it, behind the requests before it in the budget.
* **"starts in" is the same play** (:func:`~framecast.planner.play.play` asks
  :func:`~framecast.planner.policy.admits` slot by slot; the images waiting go first), and behind
  a ceiling on tasks at once waits for a slot to free. Jobs beyond the play's horizon start at the
  key's pace. Members who arrive meanwhile and go first are not counted: counting the videos that
  arrived in as long a time before moved the median error at 110 % load by a point, within the
  spread of one code run twice (``benchmarks/README.md``, "The planner package smaller").

The forecast reads the planner's state only as snapshots: each task as :class:`TaskView
<framecast.planner.polls.TaskView>`, the rest of the key as :class:`KeyNow`.
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
from framecast.planner.polls import TOP, PollPlan, TaskView, ladder_quantile, poll_at
from framecast.planner.predict import DurationKey
from framecast.planner.tuning import PlannerTuning
from framecast.service.budget import Budget
from framecast.values import Job, JobKind, JobState

__all__ = [
    "DurationCdf",
    "Estimate",
    "Estimates",
    "Forecast",
    "KeyNow",
    "expected_seen",
    "first_poll_at",
    "likeliest_close",
    "mean_wait",
    "seen_chances",
]

#: Polls followed ahead when timing the one that sees a task done (a guard: the rule converges).
_MAX_POLLS_AHEAD = 64
#: What makes a figure shown close: within this share of the truth (the estimates' goal, not tuned).
CLOSE = 0.25


@dataclass(frozen=True)
class Estimate:
    """A job's estimated progress and timing, computed locally.

    ``progress`` is a fraction in ``0..1`` estimated for now (``None``: nothing honest to say);
    ``remaining`` the seconds until the result is expected (``None``: unknown); ``starts_in``, for
    a queued job, the seconds until it is expected to start (``None``: unknown or not queued).
    ``measured`` is true when ``progress`` is the service's own last report rather than an
    estimate between polls.
    """

    progress: float | None = None
    remaining: float | None = None
    starts_in: float | None = None
    measured: bool = False


class Estimates(Protocol):
    """Where the chat side gets a job's :class:`Estimate` (the key's planner implements it)."""

    def estimate(self, job: Job) -> Estimate:
        """The job's estimate now."""
        ...


def first_poll_at(target: float, next_poll: float, *, interval: float, max_interval: float) -> float:
    """When the first poll at or after `target` comes, under the planner's rule for a known end.

    The planner polls a task at its predicted end, but never sooner than `interval` after the last
    poll nor later than `max_interval` after it; `next_poll` is the poll already planned.
    """
    at = next_poll
    # The planned poll was timed by the same rule: a hair before the target (the wall and monotonic
    # clocks are read at different instants) is that poll, not one an interval later.
    slack = 0.05 * interval
    for _ in range(_MAX_POLLS_AHEAD):
        if at >= target - slack:
            break
        at = poll_at(at, target, interval=interval, max_interval=max_interval)
    return at


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
    """The chance that each of the planned `polls` is the one that sees the task done.

    `done_by(t)`: the chance the task is done by wall time `t`, given what was seen of it. Each poll
    sees it done with the chance it finished since the one before (the last one takes the rest).
    """
    chances, before = [], 0.0
    for n, at in enumerate(polls):
        done = 1.0 if n == len(polls) - 1 else min(1.0, max(before, done_by(at)))
        chances.append(done - before)
        before = done
    return chances


def expected_seen(polls: Sequence[float], done_by: Callable[[float], float]) -> float:
    """When the task is expected to be seen done: the mean over the planned `polls` (what sums of
    waits need; a figure shown to a member is :func:`likeliest_close`'s)."""
    return mean_wait(polls, seen_chances(polls, done_by))


def mean_wait(polls: Sequence[float], chances: Sequence[float]) -> float:
    """The mean of the `polls` weighted by the chance of each (see :func:`seen_chances`)."""
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
    the one off by least on average. Two near polls (90 s, 120 s): a figure between them is close
    to either; far apart (10 s, 40 s): none is, and this bets on the likelier, where the mean would
    be far from both.
    """
    weights: dict[float, float] = {}
    for wait, chance in zip(waits, chances, strict=True):
        weights[max(0.0, wait)] = weights.get(max(0.0, wait), 0.0) + chance
    points = sorted(weights.items())
    times = [t for t, _ in points]
    # A shown x is within `within` of a true t when t's band holds x; both ends of the band grow
    # with t, so the t whose band holds x are a run of the sorted ones: found by bisection.
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

    # The likeliest share is reached on an overlap of bands: at one of their ends or a time in it.
    candidates = sorted({max(0.0, x) for x in (*lows, *highs, *times)})
    shares = [round(covered(x), 9) for x in candidates]
    best = max(shares)
    return min((x for x, share in zip(candidates, shares, strict=True) if share == best), key=mean_error)


@dataclass(frozen=True)
class KeyNow:
    """What the forecast reads of its key besides the poll plan, as the planner sees it at one
    moment (:meth:`Planner.key_now <framecast.planner.planner.Planner.key_now>`: a read-only
    snapshot): how fast its queue moves, and what holds its slots."""

    requests_per_task: float  # what a task costs on average, learned (at least a video's minimum)
    processes: int  # processes spending the key's rate (this one included)
    ceiling: int | None  # the most tasks at once (None: no fixed number)
    occupied: int  # jobs occupying the service (running, or being created)
    images_first: bool = False  # an image waiting has waited a whole window: the images go first
    images_sent: Sequence[float] = ()  # when the images' creates sent within the last window went (monotonic)
    in_flight: tuple[int, int] = (0, 0)  # creates handed to the budget, not answered yet: (videos, images)

    def per_second(self, budget: Budget) -> float:
        """Requests a second this process may spend on the key: the key's rate is spent by every
        process with tasks on it, ours an even part."""
        return max(1, budget.allowed) / budget.window / self.processes


class Forecast:
    """The estimates of one key's planner (``Planner.estimate``): reads its poll plan, queues and
    budget, and the key as the planner sees it (:class:`KeyNow`), and changes none of them."""

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
        # The key as last played forward (monotonic), when, for how many queued videos and images,
        # and whether the plan changed since (see :meth:`_play`).
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
        """The job's progress and timing as far as they are known (see :class:`Estimate`)."""
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
        """Wall time the planner's polls are expected to see `task` done (None: nothing known): the
        mean over :meth:`left`'s polls, what a queue behind a cap adds up."""
        outlook = self._outlook(task, now, late=self._late(task, key))
        if outlook is None:
            return None
        polls, chances = outlook
        return mean_wait(polls, chances)

    def left(self, task: TaskView, now: float, key: KeyNow) -> float | None:
        """Seconds "left" shown for `task`: until the poll that sees it done (None: nothing known),
        the likeliest close figure (:func:`likeliest_close`). The polls as planned, the next one as
        late as the play sends it (:meth:`_late`; adding how late polls came lately did worse)."""
        outlook = self._outlook(task, now, late=self._late(task, key))
        if outlook is None:
            return None
        polls, chances = outlook
        return likeliest_close([at - now for at in polls], chances, floor=self._plan.interval)

    def _outlook(self, task: TaskView, now: float, *, late: float) -> tuple[list[float], list[float]] | None:
        """The polls that may see `task` done (wall times) and the chance of each (None: unknown).

        `late`: how late its planned poll is expected to go out.
        """
        plan = self._plan
        next_poll = self._next_poll(task, now, late)
        if task.aim is not None:
            # Progress gives the end: the planner aims its poll just after it (its margin included).
            at = first_poll_at(task.aim, next_poll, interval=plan.interval, max_interval=plan.max_interval)
            return [at], [1.0]
        if task.key is None or not plan.learned(task.key):
            return None
        key = task.key

        def quantile(q: float) -> float:
            return plan.quantile(key, q)

        cdf = DurationCdf(quantile)
        # The last poll found it still running: only the durations beyond that age are left.
        past = cdf(0.0 if task.last_at is None else task.last_at - task.started)

        def done_by(at: float) -> float:
            return (cdf(at - task.started) - past) / (1.0 - past) if past < 1.0 else 1.0

        polls = self._ladder(next_poll, task.started, task.polls, task.first, quantile, done_by)
        return polls, seen_chances(polls, done_by)

    def _late(self, task: TaskView, key: KeyNow) -> float:
        """How late the task's planned poll is expected to go out: when the play sends it, behind
        the requests before it in the budget (a batch's first polls went out one after another,
        20-60 s late, where "left" had counted to the plan)."""
        if not task.goes_first:
            return 0.0  # a poll that cannot see a result yet goes after creates: its figure is the plan's
        sent = self._play(key).polls.get(task.job_id)
        return 0.0 if sent is None else max(0.0, sent - task.next_at)

    def _slots(self, now: float, key: KeyNow) -> Slots:
        """When this process's budget grants its next slots (see :class:`~framecast.planner.play.Slots`)."""
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
        """Seconds from a new task's create until the bot is expected to see it done (None: unknown):
        its ladder from the rung a task created now starts on, the mean of when a poll sees it done."""
        plan = self._plan
        key = DurationKey.for_params(job.params)
        if key is None or not plan.learned(key):
            return None

        def quantile(q: float) -> float:
            return plan.quantile(key, q)

        cdf = DurationCdf(quantile)
        rung = plan.first_rung()
        polls = self._ladder(max(plan.interval, quantile(rung)), 0.0, 0, rung, quantile, cdf)
        return expected_seen(polls, cdf)

    def _ladder(
        self,
        first: float,
        started: float,
        polled: int,
        rung: float,
        quantile: Callable[[float], float],
        done_by: Callable[[float], float],
    ) -> list[float]:
        """The polls the planner will make of a task without progress, from the `first` one planned
        (`polled` made so far, `rung` its first rung), up the ladder until it is almost surely done."""
        plan = self._plan
        polls = [first]
        for k in range(1, _MAX_POLLS_AHEAD):
            if ladder_quantile(polled + k - 1, rung) >= TOP or done_by(polls[-1]) >= 0.99:
                break
            at = polls[-1]
            target = started + quantile(ladder_quantile(polled + k, rung))
            polls.append(poll_at(at, target, interval=plan.interval, max_interval=plan.max_interval))
        return polls

    # -- queued: when the job starts ------------------------------------------------------------------
    def starts_in(self, ahead: int, job: Job, key: KeyNow) -> float | None:
        """Seconds until a queued job with `ahead` jobs of its kind before it starts (None: unknown):
        when the key played forward starts it (:meth:`_play`); past the play's horizon, at the
        key's pace (behind the images waiting, for a video); behind a ceiling, when a slot frees
        for it."""
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
        # When each slot frees: free now, when a running task is seen done, or unknown (inf); a
        # job being created holds its slot for a whole typical duration.
        frees = [0.0] * max(0, ceiling - occupied)
        for task in running:
            seen = self.seen_done(task, now, key)
            frees.append(math.inf if seen is None else max(0.0, seen - now))
        frees += [math.inf if duration is None else duration] * max(0, occupied - len(running))
        heapq.heapify(frees)
        for _ in range(ahead):
            at = heapq.heappop(frees)
            heapq.heappush(frees, math.inf if duration is None else at + duration)
        at = heapq.heappop(frees) if frees else math.inf
        return None if math.isinf(at) else max(by_rate, at)

    def _play(self, key: KeyNow) -> Played:
        """The key played forward (:func:`~framecast.planner.play.play`) from now. Played again when
        the queues changed, when the plan did at most every quarter slot, else every slot."""
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
