"""One key's tasks on the service and when each is polled: the planner's poll plan.

* A task is polled when it is likely done: just after the end its progress predicts, else up the
  ladder of its kind's durations (:func:`ladder_quantile`), where each poll expects to see done the
  same share of the tasks still running: a long task costs a few polls more, not many. The first
  rung climbs while members wait (:func:`first_rung`), whom a poll that sees nothing delays. A task
  older than every one of its kind seen ending waits as long as it ran beyond them (a doubling search).
* Until a kind is learned, while members wait, only its oldest few videos (the scouts) are polled
  every interval; the others are parked at the longest gap.
* Between an interval and the longest gap after the last poll (:func:`poll_at`), so a wrong
  estimate corrects itself. Polls expected to see a result go first in the budget.
* The plan owns the walk of a task's future polls (:meth:`PollPlan.toward`, :meth:`PollPlan.ladder`),
  which the forecast asks, and says what its tasks will ask of the budget. History and figures:
  ``docs/ARCHITECTURE.md``, ``benchmarks/README.md``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from framecast.clock import Clock
from framecast.planner.policy import Planned, Requests
from framecast.planner.progress import ProgressTrack
from framecast.planner.survival import Survival
from framecast.planner.tuning import PlannerTuning
from framecast.service import TaskStatus
from framecast.values import Job
from framecast.values.durations import DurationKey, DurationRow
from framecast.values.service_requests import Priority

__all__ = ["FIRST", "TOP", "PollPlan", "PolledTask", "TaskView", "first_rung", "ladder_quantile", "poll_at"]

#: The first rung on a quiet key: the median.
FIRST = 0.5
#: The highest quantile the ladder reads (a quantile of 1 is infinite).
TOP = 0.98
#: Polls followed ahead when walking a task's future polls (a guard: the walks converge).
_MAX_POLLS_AHEAD = 64
#: The chance of being done by a poll past which the ladder is not followed.
_ALMOST_SURELY = 0.99


def first_rung(waiting: float, crowded: float) -> float:
    """The first rung of a task created while `waiting` windows' worth of jobs wait for the key:
    from the median on a quiet key up to `crowded` once a window's worth waits."""
    return FIRST + (crowded - FIRST) * min(1.0, max(0.0, waiting))


def ladder_quantile(polls: int, first: float = FIRST) -> float:
    """The duration quantile of the next poll after `polls` polls found the task running: each
    expects to see done the share of the tasks still running that the `first` rung did."""
    return min(TOP, 1.0 - (1.0 - first) ** (max(0, polls) + 1))


def poll_at(last: float, target: float, *, interval: float, max_interval: float) -> float:
    """The next poll after `last`, aimed at `target` but `interval` to `max_interval` after it."""
    earliest = last + interval
    return min(max(earliest, target), max(earliest, last + max_interval))


@dataclass
class PolledTask:
    """What the planner knows of one task on the service."""

    job_id: int
    key: DurationKey | None  # None: parameters the model cannot bucket (never predicted)
    started: float  # wall clock (the job's started_at)
    track: ProgressTrack
    # Wall time of the last contact before this planner saw it: its creation, or after a restart
    # its last recorded poll (the job's updated_at).
    seen_at: float = 0.0
    polls: int = 0
    next_at: float = 0.0  # monotonic time of the next poll, as last planned
    likely_done: bool = False  # the next poll is expected to find it finished
    learning: bool = False  # the planned poll is sent only to learn the task (see PollPlan.plan)
    cold: bool = False  # polled every interval before anything was known of its end
    over: bool = False  # a poll saw it end on the service (completed or failed)
    seen_progress: float | None = None
    first: float = FIRST  # the ladder's first rung: who waited at its create (FIRST once none)
    video: bool = True  # a video's task (an image's takes seconds: never parked)

    @property
    def goes_first(self) -> bool:
        """Whether its planned poll goes first in the budget: one expected to see a result."""
        return self.likely_done and not self.learning


@dataclass(frozen=True)
class TaskView:
    """A copy of one running task at one moment, as the forecast reads it (:meth:`PollPlan.view`)."""

    job_id: int
    key: DurationKey | None
    started: float  # wall clock
    seen_at: float  # wall time (PolledTask.seen_at)
    polls: int
    first: float  # the ladder's first rung
    next_at: float  # monotonic time of the next poll as planned (0: not planned yet)
    goes_first: bool  # its planned poll goes first in the budget
    aim: float | None  # wall time its progress predicts it done, the plan's margin added (None: no slope)
    last_at: float | None  # wall time it was last polled
    progress: float | None  # its estimated progress now (None: none reported)
    measured: bool  # `progress` is the service's own last report


class PollPlan:
    """The running tasks of one key and their planned polls (see the module docstring)."""

    def __init__(
        self,
        *,
        clock: Clock,
        durations: Survival,
        interval: float,
        max_interval: float,
        crowd: Callable[[], float] | None = None,
        tuning: PlannerTuning | None = None,
    ) -> None:
        """`interval`, `max_interval`: the least and most time between two polls of a task;
        `crowd()`: windows' worth of jobs waiting for the key now (None: nobody ever waits)."""
        self._tuning = tuning or PlannerTuning()
        self._clock = clock
        self._crowd = crowd
        self.interval = interval
        self.max_interval = max_interval
        self._durations = durations
        self._tasks: dict[int, PolledTask] = {}
        self.video_key: DurationKey | None = None  # the kind of video last started

    def __repr__(self) -> str:
        return f"<PollPlan tasks={len(self._tasks)}>"

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[PolledTask]:
        return iter(list(self._tasks.values()))

    def get(self, job_id: int) -> PolledTask | None:
        """The task of the job, if it runs on the service."""
        return self._tasks.get(job_id)

    def view(self, job_id: int, now_wall: float) -> TaskView | None:
        """The job's task as it stands at wall time `now_wall` (None: it does not run here)."""
        task = self._tasks.get(job_id)
        if task is None:
            return None
        track = task.track
        progress = track.progress_at(now_wall)
        return TaskView(
            job_id=task.job_id,
            key=task.key,
            started=task.started,
            seen_at=task.seen_at,
            polls=task.polls,
            first=task.first,
            next_at=task.next_at,
            goes_first=task.goes_first,
            aim=self.predicted_done(task) if track.predicted_done() is not None else None,
            last_at=track.last_at,
            progress=progress,
            measured=progress is not None and progress == task.seen_progress,
        )

    def views(self, now_wall: float) -> list[TaskView]:
        """Every running task as it stands at wall time `now_wall`."""
        return [view for job_id in list(self._tasks) if (view := self.view(job_id, now_wall)) is not None]

    # -- the tasks ------------------------------------------------------------------------------------
    def add(self, job: Job, *, video: bool) -> PolledTask:
        """Register the task of `job` (a restored job keeps its times and last progress)."""
        now_wall = self._clock.time()
        started = job.started_at if job.started_at is not None else now_wall
        # A restarted bot keeps the next poll a whole interval from the last one recorded
        # (updated_at), but never later than now: a clock gone back must not postpone it for ever.
        seen_at = min(max(started, job.updated_at), max(started, now_wall))
        key = DurationKey.for_params(job.params)
        task = PolledTask(
            job_id=job.id,
            key=key,
            started=started,
            track=ProgressTrack(started),
            seen_at=seen_at,
            # An image's task takes seconds: polled promptly, whoever waits.
            first=self.first_rung() if video else FIRST,
            video=video,
        )
        if job.progress is not None:
            task.track.observe(job.updated_at, job.progress)
            task.seen_progress = job.progress
        self._tasks[job.id] = task
        if video:
            self.video_key = task.key
        return task

    def pop(self, job_id: int) -> PolledTask | None:
        """Stop planning the job's task; the task, if there was one."""
        return self._tasks.pop(job_id, None)

    def learn(self, task: PolledTask) -> DurationRow | None:
        """A completed task teaches the durations; the model's row to persist, if it changed."""
        bounds = task.track.bounds()
        if bounds is None or task.key is None:
            return None  # no poll saw it complete, or parameters the model cannot bucket
        return self._durations.finished(task.key, *bounds, at=self._clock.time())

    # -- when each task is polled -------------------------------------------------------------------
    def plan(self, task: PolledTask, now: float, last_poll: float | None) -> tuple[float, int]:
        """When to poll `task` next (monotonic) and at which budget priority."""
        now_wall = self._clock.time()
        to_mono = now - now_wall  # monotonic = wall + to_mono
        if last_poll is None:
            # A restart never makes the first poll come sooner than an interval after the last contact.
            last_poll = task.seen_at + to_mono
        earliest = last_poll + self.interval
        if task.polls == 0 and task.first > FIRST and self._quiet():
            # Once nobody waits, a high rung would only hold the batch's last files while the key idles.
            task.first = FIRST
        done_at = self.predicted_done(task)
        if done_at is None and self._parked(task):
            # Polled at the longest gap, or on the ladder once the scouts have taught the kind
            # (the client asks the plan again every interval).
            when, likely, learning = max(earliest, last_poll + self.max_interval), True, False
            task.cold = True
        elif done_at is None:
            # Nothing learned yet: as often as allowed, counted as likely done (the cautious count).
            # Younger than the prior's median, the poll is sent only to learn the task.
            when, likely = earliest, True
            task.cold = True
            age = when - to_mono - task.started
            learning = task.key is not None and age < self._durations.quantile(task.key, 0.5)
        else:
            when = poll_at(
                last_poll, done_at + to_mono, interval=self.interval, max_interval=self.max_interval
            )
            likely, learning = done_at + to_mono <= when + 1e-9, False
        task.next_at = when
        task.likely_done = likely
        task.learning = learning
        return when, Priority.HIGH if task.goes_first else Priority.PROGRESS

    def observed(self, task: PolledTask, status: TaskStatus | None) -> None:
        """Learn from a poll's answer (None: the poll failed)."""
        task.polls += 1
        task.learning = False  # answered; the next poll is planned afresh
        task.over = task.over or (status is not None and status.state in ("completed", "failed"))
        if status is not None and status.state == "completed":
            task.track.complete(self._clock.time())
        elif status is not None and status.state == "pending":
            task.track.observe(self._clock.time(), status.progress)
            if status.progress is not None:
                task.seen_progress = status.progress

    def _parked(self, task: PolledTask) -> bool:
        """Whether a video waits for the scouts of its kind (the older ones) rather than being polled."""
        if not task.video or not self._scouting(task.key):
            return False
        order = (task.started, task.job_id)
        older = sum(1 for t in self._tasks.values() if t.key == task.key and (t.started, t.job_id) < order)
        return older >= self._tuning.scouts

    def _scouting(self, key: DurationKey | None) -> bool:
        """Whether members wait for the key and nothing is learned of the kind yet."""
        return key is not None and not self.learned(key) and self._crowd is not None and self._crowd() > 0

    def predicted_done(self, task: PolledTask) -> float | None:
        """Wall time the task is expected to be done, or None when nothing is known yet."""
        done = task.track.predicted_done()
        if done is not None:
            # Aim after the end by what the reports' whole percents blur it: missing it costs an interval.
            return done + 0.02 * (done - task.started)
        if not self.learned(task.key):
            return None
        assert task.key is not None
        rung = self._rung(task.key, task.started, task.polls, task.first)
        longest, last = self._durations.longest(task.key), task.track.last_at
        if longest is not None and last is not None and (beyond := last - task.started - longest) > 0:
            # Older than every task of its kind seen ending, where the model floors its rungs at the
            # running tasks' ages ("now": a poll every interval, 26 for one task in a soak). Each
            # poll waits as long as it has run beyond them (a doubling search), at most the longest gap.
            return max(rung, last + min(self.max_interval, beyond))
        return rung

    # -- a task's future polls (the plan's rule, which the forecast asks) ------------------------------
    def _rung(self, key: DurationKey, started: float, polls: int, first: float) -> float:
        """Wall time of a task's next rung, after `polls` polls up its ladder from `first`."""
        return started + self.quantile(key, ladder_quantile(polls, first))

    def toward(self, at: float, end: float) -> Iterator[float]:
        """A task's polls from `at` (the next one) on, each aimed at its known `end`; endless."""
        while True:
            yield at
            at = poll_at(at, end, interval=self.interval, max_interval=self.max_interval)

    def first_poll_at(self, end: float, at: float, *, slack: float) -> float:
        """The first of the polls from `at` on (:meth:`toward`) no more than `slack` before `end`."""
        for poll in itertools.islice(self.toward(at, end), _MAX_POLLS_AHEAD + 1):
            if poll >= end - slack:
                break
        return poll

    def ladder(
        self,
        key: DurationKey,
        at: float,
        started: float,
        polls: int,
        first: float,
        done_by: Callable[[float], float],
    ) -> list[float]:
        """A task's polls without progress from `at`, the next one (`polls` made, `first` its rung), up
        its ladder until `done_by(poll)`, the chance it is done by that poll, is almost sure."""
        ladder = [at]
        for k in range(1, _MAX_POLLS_AHEAD):
            if ladder_quantile(polls + k - 1, first) >= TOP or done_by(ladder[-1]) >= _ALMOST_SURELY:
                break
            target = self._rung(key, started, polls + k, first)
            ladder.append(poll_at(ladder[-1], target, interval=self.interval, max_interval=self.max_interval))
        return ladder

    def _quiet(self) -> bool:
        """Whether nobody waits for the key now."""
        return self._crowd is None or self._crowd() <= 0

    def first_rung(self) -> float:
        """The ladder's first rung for a video created now (:func:`first_rung`)."""
        return first_rung(0.0 if self._crowd is None else self._crowd(), self._tuning.crowded_rung)

    def quantile(self, key: DurationKey, q: float) -> float:
        """The duration quantile of `key`, the tasks still running counted (see survival)."""
        pending = [
            t.track.last_at - t.started
            for t in self._tasks.values()
            if t.key == key and t.track.last_at is not None and not t.track.completed
        ]
        return self._durations.quantile(key, q, pending)

    def learned(self, key: DurationKey | None) -> bool:
        """Whether enough tasks of this kind finished to time polls by their durations."""
        return key is not None and self._durations.count(key) >= self._tuning.learned_after

    def learning_due(self, now: float) -> bool:
        """Whether a poll sent only to learn a task of a kind not learned yet is due."""
        return any(t.learning and t.next_at <= now and not self.learned(t.key) for t in self._tasks.values())

    # -- what the running tasks ask of the budget ------------------------------------------------------
    def demand(self, now: float, window: float) -> float:
        """Requests the running tasks are expected to need within the window from `now`."""
        return sum(n for at, n in self.profile(now) if at <= now + window)

    def ahead_of_images(self, now: float, window: float) -> float:
        """Requests of the window from `now` an image's create cannot pass: likely-done polls, downloads."""
        horizon = now + window
        return sum(2.0 for t in self._tasks.values() if t.goes_first and t.next_at <= horizon)

    def profile(self, now: float) -> list[Requests]:
        """The running tasks' expected requests at monotonic times (:meth:`requests`, unprioritised)."""
        return [(p.at, p.requests) for p in self.requests(now)]

    def requests(self, now: float) -> list[Planned]:
        """The running tasks' expected requests at monotonic times: each task's polls as :meth:`plan`
        spaces them, then the one expected to see it done and its download."""
        to_mono = now - self._clock.time()
        planned: list[Planned] = []
        for task in self._tasks.values():
            at = max(now, task.next_at)  # a poll already due waits for the budget now
            done = None if task.likely_done else self.predicted_done(task)
            job_id: int | None = task.job_id  # the next poll; the later ones carry no id
            if done is not None:
                end = done + to_mono
                for poll in self.toward(at, end):
                    at = poll
                    if not end > at + 1e-9:
                        break  # the poll that sees it done
                    planned.append(Planned(at, 1.0, Priority.PROGRESS, job_id))
                    job_id = None
            elif not task.likely_done:
                planned.append(Planned(at, 1.0, Priority.PROGRESS, job_id))
                at += self.interval
                job_id = None
            # A poll sent to learn the task goes after creates.
            seen = Priority.PROGRESS if job_id is not None and not task.goes_first else Priority.HIGH
            planned.append(Planned(at, 2.0, seen, job_id))
        return planned

    def new_video_requests(self, now: float) -> list[Requests]:
        """What admission weighs for a video created now: its create, its first poll on the first
        rung and, by the chance it misses, one more; of a kind not learned yet, a poll an interval on,
        even for one to be parked behind the scouts (the key's idle slots now buy more)."""
        key = self.video_key  # videos of the kind last started
        if key is None or not self.learned(key):
            return [(now, 1.0), (now + self.interval, 2.0)]
        rung = self.first_rung()
        first = max(self.interval, self.quantile(key, rung))
        again = 1.0 - rung  # the chance the first poll finds it still running
        return [(now, 1.0), (now + first, 1.0 + rung), (now + first + self.interval, 2.0 * again)]

    def new_video_cost(self, now: float) -> list[Requests]:
        """What a video created now is expected to ask after its create (the forecast's)."""
        if self.parks_new():
            return [(now + self.max_interval, 2.0)]
        return self.new_video_requests(now)[1:]

    def parks_new(self) -> bool:
        """Whether a video created now would be parked behind the scouts of its kind."""
        key = self.video_key
        return (
            self._scouting(key)
            and sum(1 for t in self._tasks.values() if t.key == key) >= self._tuning.scouts
        )
