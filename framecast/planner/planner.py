"""The request planner of one API key: what each request of its budget is spent on.

The key's budget (16 requests a minute) decides how many videos members get, so every request
should buy as much as it can. The planner decides three things, from what it predicts about each
task on the service (:mod:`framecast.planner.predict`):

* **When each task is polled, and how urgently.** A task is polled when it is likely to have
  finished: from the slope of its reported progress, or else from the durations learned from
  finished tasks of the same model and size, corrected by the ones still running (a batch's
  first to finish are its shortest: :mod:`framecast.planner.survival`). Such polls (and
  downloads) go first in the budget; polls that can only refresh progress come after creates.
  Never more often than ``GEN_POLL_INTERVAL``; never longer apart than ``GEN_POLL_MAX_INTERVAL``,
  so a wrong estimate corrects itself. Without progress, polls climb a quantile ladder
  (:mod:`framecast.planner.ladder`). Until a kind of task has been seen to finish a few times,
  polls come every interval, as a cautious bot would (after images' creates while the task is
  younger than the prior duration of its kind: such a poll is sent to learn it).
* **How many tasks run at once** (adaptive concurrency): the scheduler starts the next job only
  while the budget can sustain the requests the running tasks are expected to need within the
  next window plus one create, and the windows its own polls will fall in have room for them
  (:mod:`framecast.planner.horizon`); one video's create at a time waits for the budget (so the
  queues, not the budget, keep the order); a create the service failed, backing off before its
  next try, does not count as that one (two such stop admission: creates then fail). An image
  (a create and a download, spent at once) is admitted on its own rule and goes before waiting
  videos, and before polls that cannot see a result yet, when the key is short (see
  :meth:`Planner.may_start`). ``GEN_MAX_RUNNING`` is an optional ceiling. When the service
  pushes back on creates for the key's rate (429s on creates), the planner lowers its own
  ceiling to what runs now and raises it again by one per create that goes through. When it
  refuses creates for the key's tasks at once (a concurrency cap: "too many tasks", or creates
  refused while polls pass, :mod:`framecast.service.refusals`), the ceiling is the learned cap,
  held there and probed one above now and then (:class:`~framecast.planner.shared.Pushback`);
  the refused create waits for one of the key's tasks to end (:meth:`Planner.after_refusal`).
* **What members are told between polls** (:class:`~framecast.planner.estimate.Estimate`),
  computed locally: no request is spent on it.

One planner per key in each process. When several processes use one key (``REDIS_URL``), their
planners share through :class:`~framecast.planner.shared.SharedPlanState` what the key's budget
must cover: admission counts the other processes' demand too, the pushback ceiling is key-wide
(less what the others run), and start estimates divide the key's rate among the processes
spending it. Only a cached view is read here; without Redis each planner plans on its own.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from framecast.clock import Clock
from framecast.jobs import Job, JobKind
from framecast.jobs.queues import GuildQueues
from framecast.keys.budget import Budget, Priority
from framecast.planner.estimate import Estimate, Forecast
from framecast.planner.horizon import Requests, peak_with
from framecast.planner.ladder import LEARNED_AFTER, ladder_quantile
from framecast.planner.predict import DurationKey, DurationModel, ProgressTrack
from framecast.planner.shared import Pushback, Share, SharedPlanState, SharedView
from framecast.planner.survival import Survival
from framecast.service import TaskStatus
from framecast.service.refusals import RefusalKind
from framecast.storage import Store

__all__ = ["Planner", "PlannerSettings"]

log = logging.getLogger(__name__)

#: Requests a video costs at the least: create, the poll that sees it done, the download.
_MIN_REQUESTS_PER_TASK = 3.0
#: Requests an image costs: its create and the download of the result the create answered.
_IMAGE_REQUESTS = 2.0
#: Videos waiting on the key at most for the batch's last creates (see Planner.may_start).
_LAST_CREATES = 4
#: How far the batch's last creates may borrow from the planned window (its share).
_BORROW = 1.5
#: How far images may push back the planned polls that cannot see a result yet (in windows).
_IMAGES_PUSH = 2.0
#: Images' creates that may wait for the budget at once (see Planner.may_start).
_IMAGE_CREATES_AT_ONCE = 4
#: Creates backing off after a failure that admission looks past (see Planner.may_start).
_MAX_DEFERRED = 1
#: The view without other processes (no shared state).
_NOBODY_ELSE = SharedView()


@dataclass(frozen=True)
class PlannerSettings:
    """The planner's knobs (from configuration)."""

    poll_interval: float  # never poll one task more often (GEN_POLL_INTERVAL)
    poll_max_interval: float  # never leave a running task unpolled longer (GEN_POLL_MAX_INTERVAL)
    ceiling: int | None = None  # GEN_MAX_RUNNING; None: automatic


@dataclass
class _Task:
    """What the planner knows of one task on the service."""

    job_id: int
    key: DurationKey | None  # None: parameters the model cannot bucket (never predicted)
    started: float  # wall clock (the job's started_at)
    track: ProgressTrack
    # Wall time of the last known contact with the task before this planner saw it: its creation,
    # or for a job restored after a restart its last recorded poll (the job's updated_at).
    seen_at: float = 0.0
    polls: int = 0
    next_at: float = 0.0  # monotonic time of the next poll, as last planned
    likely_done: bool = False  # the next poll is expected to find it finished
    learning: bool = False  # the planned poll is sent only to learn the task (see Planner._plan)
    cold: bool = False  # polled every interval before anything was known of its end
    seen_progress: float | None = None


class Planner:
    """Spends one key's :class:`~framecast.keys.budget.Budget` (see the module docstring)."""

    def __init__(
        self,
        *,
        budget: Budget,
        clock: Clock,
        store: Store,
        queues: GuildQueues,
        model: DurationModel,
        settings: PlannerSettings,
        scope: Callable[[int], bool] | None = None,
        shared: SharedPlanState | None = None,
    ) -> None:
        """`scope(guild_id)`: whether a guild's jobs run on this planner's key (None: every guild's).

        `shared`: the key's state shared with other processes (``REDIS_URL``); this planner
        publishes its share through it (the caller starts and closes it). None: this process alone.
        """
        self._budget = budget
        self._scope = scope
        self._clock = clock
        self._store = store
        self._queues = queues
        self._model = model
        self._survival = Survival()  # recent durations, corrected for the tasks still running
        self._video_key: DurationKey | None = None  # the kind of video last started
        self._settings = settings
        self._tasks: dict[int, _Task] = {}
        self._deferred: set[int] = set()  # jobs whose create is backing off after a failure
        self._images_started: deque[float] = deque()  # monotonic times images were admitted
        self._occupied = 0  # jobs occupying the service when admission was last asked
        # The ceiling after the service pushed back on creates; key-wide when shared (see ceiling()).
        self._pushback = Pushback()
        self._room_waiters: list[asyncio.Future[None]] = []  # refused creates waiting for a task to end
        self._shared = shared
        self._listener: Callable[[], None] | None = None
        self._requests_per_task = _MIN_REQUESTS_PER_TASK + 0.5  # learned as tasks finish
        self._forecast = Forecast(self)  # what members are told (reads this planner's plan)
        if shared is not None:
            shared.attach(self._share, self._changed)

    def __repr__(self) -> str:
        return f"<Planner tasks={len(self._tasks)} ceiling={self.ceiling()}>"

    @classmethod
    async def open(
        cls,
        *,
        budget: Budget,
        clock: Clock,
        store: Store,
        queues: GuildQueues,
        settings: PlannerSettings,
        scope: Callable[[int], bool] | None = None,
        shared: SharedPlanState | None = None,
    ) -> Planner:
        """A planner whose duration model starts from what the store learned before a restart.

        Every key's planner learns from the same durations (the service is the same); `scope` says
        which guilds' queued jobs wait for this key (see :meth:`estimate`).
        """
        # Cautious priors in poll intervals: they only shape estimates until real durations arrive.
        model = DurationModel(video_prior=4 * settings.poll_interval, image_prior=settings.poll_interval)
        model.restore(await store.load_durations())
        return cls(
            budget=budget,
            clock=clock,
            store=store,
            queues=queues,
            model=model,
            settings=settings,
            scope=scope,
            shared=shared,
        )

    # -- admission (the scheduler asks before starting the next job) ---------------------------------
    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` whenever admission may have changed (the scheduler's wake-up)."""
        self._listener = listener

    def ceiling(self) -> int | None:
        """The most tasks this process may have on the service now (None: no fixed number).

        ``GEN_MAX_RUNNING`` is this process's own; the pushback ceiling counts every process's tasks
        on the key, so what the others run is taken off it.
        """
        limits: list[float] = [] if self._settings.ceiling is None else [self._settings.ceiling]
        pushback = self._current_pushback().limit()
        if pushback is not None:
            limits.append(pushback - self._others().running)
        return max(1, math.floor(min(limits))) if limits else None

    def concurrency(self) -> int:
        """Tasks this planner has on the service now (what adaptive concurrency has reached)."""
        return len(self._tasks)

    def may_start(self, running: int, kind: JobKind = JobKind.VIDEO) -> bool:
        """Whether one more job of `kind` may start now, with `running` jobs occupying the service.

        A video adds polls for minutes: it starts only while the running tasks' polls of the next
        window leave room for its create. An image costs its create and download, spent within
        seconds and never again; its create goes before the polls that cannot see a result yet
        (see :meth:`_plan`), so only the polls expected to see one, and their downloads, must leave
        it room (issue 17); the others wait a window at most. The requests of images started
        within the last window are counted against it too (they hold their slots). A video also
        leaves room for every image waiting on this key (two requests each): the short jobs go
        first when the key is short, so an image never waits behind videos that wait for the
        budget (issue 17); when both fit, the queue's order decides, unless an image has waited a
        whole window already: then no video starts before it.

        Over the horizon (issue 17): a video's first poll comes when it is likely done, minutes
        later, so a video also waits until the windows its polls will fall in have room for them
        (:meth:`_profile`, :func:`~framecast.planner.horizon.peak_with`): creates go ahead while
        the windows their completions fall in are still free, and a window where completions
        come due is spent on their polls. The batch's last few videos may borrow up to half a
        window from the planned polls (no creates follow them to take that room later).
        """
        self._occupied = running  # for the estimated start of queued jobs
        now = self._clock.monotonic()
        ceiling = self.ceiling()
        if ceiling is not None and running >= ceiling:
            return False
        deferred = len(self._deferred)
        creating = running - deferred - len(self._tasks)  # started jobs whose create has not gone through
        if creating > 0 and (kind is JobKind.VIDEO or creating >= _IMAGE_CREATES_AT_ONCE):
            # One video's create waits for the budget at a time, so the queues (round-robin,
            # cancellable) keep the order, not the budget. A few images' creates wait together (served
            # in the order they started): one by one, a slot freed meanwhile goes to a later poll.
            return False
        if deferred > _MAX_DEFERRED:
            # More than one create failing: the service likely refuses creates altogether; more
            # jobs taken off the queues would only retry in a crowd (and out of turn) later.
            return False
        # The other processes' tasks on this key are polled from the same window. A process with
        # nothing on the key may still start one: whoever sees a task end first (its own, at once;
        # the others a refresh later) would otherwise always win, and shut other shards' guilds out.
        others = self._others().demand if running > 0 else 0.0
        spending = self._images_spending()
        planned = self.demand() + others + spending
        if kind is JobKind.IMAGE:
            # Its create goes before the polls that cannot see a result yet: only the polls that
            # will see one (and their downloads) must fit beside it; a stream of images holds the
            # others back a window at most (issue 17: not minutes of waiting for two requests).
            if self._ahead_of_images() + others + spending + _IMAGE_REQUESTS > self._budget.allowed:
                return False
            if planned + _IMAGE_REQUESTS > _IMAGES_PUSH * self._budget.allowed:
                return False
            self._images_started.append(now)
            return True
        if any(t.learning and t.next_at <= now for t in self._tasks.values()):
            return False  # a poll sent to learn a task is due: it yields to images only (see _plan)
        # The images waiting for this key go first (the short jobs): a video starts only while the
        # window also leaves room for every image waiting on its key.
        images, since = self._queues.waiting(JobKind.IMAGE, self._scope)
        if since <= self._clock.time() - self._budget.window:
            # An image has waited a whole window: videos wait until it has started.
            return False
        videos, _ = self._queues.waiting(JobKind.VIDEO, self._scope)
        if 0 < videos <= _LAST_CREATES:
            # The batch's last creates: no more creates follow them, so the windows ahead hold only
            # polls, and these may borrow up to half a window of them now rather than start last
            # and end the batch a whole task later. Bounded, so a steady trickle stays planned.
            return planned + 1 + _IMAGE_REQUESTS * images <= _BORROW * self._budget.allowed
        if planned + 1 + _IMAGE_REQUESTS * images > self._budget.allowed:
            return False
        # Over the horizon: the windows after this one that its polls will fall in must have room
        # for them too, or its completion waits for the budget behind the others due then (issue 17).
        later = now + 1e-6  # this window was checked above (with the other processes' demand)
        peak = peak_with(
            self._profile(now), self._new_video_requests(now), window=self._budget.window, start=later
        )
        return peak <= self._budget.allowed

    def _profile(self, now: float) -> list[Requests]:
        """The running tasks' expected requests over the horizon, at monotonic times."""
        interval = self._settings.poll_interval
        to_mono = now - self._clock.time()
        planned: list[Requests] = []
        for task in self._tasks.values():
            at = max(now, task.next_at)  # a poll already due waits for the budget now
            if task.likely_done:
                planned.append((at, 2.0))  # the poll that sees it done, then the download
                continue
            done = self._predicted_done(task)
            planned += [(at, 1.0), (max(at + interval, at if done is None else done + to_mono), 2.0)]
        return planned

    def _new_video_requests(self, now: float) -> list[Requests]:
        """A video created now: its create, then its first poll at the median (half the time one more)."""
        interval = self._settings.poll_interval
        key = self._video_key  # videos of the kind last started
        if key is None or self._model.expected(key).count < LEARNED_AFTER:
            return [(now, 1.0), (now + interval, 2.0)]  # nothing learned: as the running ones count
        first = max(interval, self._quantile(key, 0.5))
        return [(now, 1.0), (now + first, 1.5), (now + first + interval, 1.0)]

    def _images_spending(self) -> float:
        """Requests of the images started within the last window (their slots are still held)."""
        since = self._clock.monotonic() - self._budget.window
        while self._images_started and self._images_started[0] < since:
            self._images_started.popleft()
        return _IMAGE_REQUESTS * len(self._images_started)

    def demand(self) -> float:
        """Requests the running tasks are expected to need within the next window."""
        now = self._clock.monotonic()
        horizon = now + self._budget.window
        interval = self._settings.poll_interval
        total = 0.0
        for task in self._tasks.values():
            if task.next_at > horizon:
                continue
            if task.likely_done:
                total += 2  # the poll that sees it done, then the download
            else:
                total += 1 + math.floor((horizon - max(now, task.next_at)) / interval)
        return total

    def _ahead_of_images(self) -> float:
        """Requests of the next window an image's create cannot go before: the polls expected to
        see a result, and their downloads (the others come after creates: see :meth:`_plan`)."""
        horizon = self._clock.monotonic() + self._budget.window
        return sum(
            2.0 for t in self._tasks.values() if t.likely_done and not t.learning and t.next_at <= horizon
        )

    def recheck_in(self) -> float:
        """Clock seconds after which admission should be asked again even without a change."""
        return max(0.05, self._settings.poll_interval / 4)

    def create_deferred(self, job_id: int) -> None:
        """The job's create failed for now and waits before trying again (the service's 5xx).

        A create backing off (for as long as the poll timeout allows) is not the one create in
        flight: the next job, of this or another guild, may start meanwhile.
        """
        self._deferred.add(job_id)
        self._changed()

    def create_resumed(self, job_id: int) -> None:
        """The job's deferred create is tried again (or given up)."""
        if job_id in self._deferred:
            self._deferred.discard(job_id)
            self._changed()

    def create_finished(
        self, *, ok: bool, pushed_back: bool = False, refusal: RefusalKind = RefusalKind.RATE
    ) -> None:
        """A create ended: `ok`, or refused because the service has too many tasks (`pushed_back`).

        `refusal` says which "too many": the key's rate (the ceiling backs off and climbs back), or
        its tasks at once (the ceiling holds at the learned cap; see :class:`Pushback`).
        """
        p = self._current_pushback()
        # A change is one revision above every one seen, so every process adopts it (see shared).
        rev = p.rev + 1
        if pushed_back:
            # The service counts the key's tasks, whichever process created them.
            self._pushback = p.refused(refusal, self._on_key(), rev)
            if refusal is RefusalKind.CONCURRENCY and p.cap:
                log.info("the service refused a create at %d tasks; holding there", self._on_key())
            elif refusal is RefusalKind.CONCURRENCY:
                log.warning(
                    "the service runs at most %d of this key's tasks at once; holding there", self._on_key()
                )
            else:
                log.warning(
                    "the service pushed back on a create; running at most %d tasks for now", self.ceiling()
                )
        elif ok:
            self._pushback = p.went_through(rev)
        self._changed()

    async def after_refusal(self, fallback: float) -> None:
        """Wait, after a concurrency refusal, until the key has room again: one of its tasks ended.

        Retrying sooner would only be refused again. When none of the key's tasks is known to run
        (another client of the key holds the cap), or none ends for ``poll_max_interval``, it waits
        `fallback` clock seconds or that long instead, then the create is tried again.
        """
        if self._on_key() == 0:
            await self._clock.sleep(fallback)
            return
        room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._room_waiters.append(room)
        timer = asyncio.ensure_future(self._clock.sleep(self._settings.poll_max_interval))
        try:
            await asyncio.wait((room, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if room in self._room_waiters:
                self._room_waiters.remove(room)

    def _on_key(self) -> int:
        """Tasks on the service with this key, this process's and the others'."""
        return len(self._tasks) + self._others().running

    def _wake_refused(self) -> None:
        """Let creates refused for the key's tasks at once try again, once there is room."""
        if not self._room_waiters:
            return
        ceiling = self._current_pushback().ceiling
        if ceiling is not None and self._on_key() >= ceiling:
            return
        waiters, self._room_waiters = self._room_waiters, []
        for room in waiters:
            if not room.done():
                room.set_result(None)

    # -- what is shared with the other processes on this key ---------------------------------------
    def _others(self) -> SharedView:
        """The other processes on this key as last read (nobody without shared state)."""
        return self._shared.view if self._shared is not None else _NOBODY_ELSE

    def _current_pushback(self) -> Pushback:
        """The freshest pushback change, ours or another process's (adopted as ours)."""
        theirs = self._others().pushback
        if theirs.newer_than(self._pushback):
            self._pushback = theirs
        return self._pushback

    def _share(self) -> Share:
        """What this planner publishes for the other processes."""
        return Share(demand=self.demand(), running=len(self._tasks), pushback=self._current_pushback())

    # -- polling (the client's wait loop asks through a pacer) ------------------------------------
    def pacer(self, job: Job) -> TaskPacer:
        """The poll pacer of `job`'s task (registers the task; a restored job keeps its times)."""
        task = self._tasks.get(job.id)
        if task is None:
            now_wall = self._clock.time()
            started = job.started_at if job.started_at is not None else now_wall
            # The runner records every poll on the job (updated_at), so a restarted bot knows when
            # the task was last asked about and keeps the next poll a whole interval from it.
            # Never later than now: a clock that went back must not postpone the poll for ever.
            seen_at = min(max(started, job.updated_at), max(started, now_wall))
            task = _Task(
                job_id=job.id,
                key=DurationModel.key_for_params(job.params),
                started=started,
                track=ProgressTrack(started),
                seen_at=seen_at,
            )
            if job.progress is not None:
                # Restored after a restart: the last progress was saved with the job.
                task.track.observe(job.updated_at, job.progress)
                task.seen_progress = job.progress
            self._tasks[job.id] = task
            if job.kind is JobKind.VIDEO:
                self._video_key = task.key
            p = self._current_pushback()
            raised = p.seen_running(self._on_key(), p.rev + 1)
            if raised is not None:
                # The service took a task above the learned cap (a probe): the cap is higher now.
                self._pushback = raised
                log.info("the service runs %d of this key's tasks at once now", self._on_key())
            self._changed()
        return TaskPacer(self, task)

    def forget(self, job_id: int) -> None:
        """The job stopped waiting for its task (failed, cancelled, or paused for a shutdown)."""
        if self._tasks.pop(job_id, None) is not None:
            self._changed()

    async def finished(self, job: Job, *, completed: bool) -> None:
        """The task ended; a completed one teaches the duration model (persisted)."""
        task = self._tasks.pop(job.id, None)
        self._changed()
        if task is None or not completed:
            return
        # The track places the end between the last "pending" poll and the one that saw it done.
        bounds = task.track.bounds()
        if bounds is None:
            return  # no poll saw it complete (the runner reports completion only after one does)
        if not task.cold:  # a cold task's polls say nothing of what the queued jobs will cost
            self._requests_per_task += 0.1 * ((task.polls + 2) - self._requests_per_task)
        if task.key is None:
            return
        self._survival.finished(task.key, *bounds)
        seconds = self._model.typical_within(task.key, *bounds)
        row = self._model.learn(task.key, seconds, at=self._clock.time())
        if row is not None:
            try:
                await self._store.save_duration(row)
            except Exception:  # losing one lesson must not fail the job
                log.exception("could not save a learned duration")

    def _plan(self, task: _Task, now: float, last_poll: float | None) -> tuple[float, int]:
        s = self._settings
        now_wall = self._clock.time()
        to_mono = now - now_wall  # monotonic = wall + to_mono
        if last_poll is None:
            # The first poll: one interval after the create, or after the last poll recorded
            # before a restart (kept across it: a restart never makes a poll come sooner).
            last_poll = task.seen_at + to_mono
        earliest = last_poll + s.poll_interval
        latest = last_poll + s.poll_max_interval
        done_at = self._predicted_done(task)
        if done_at is None:
            # Nothing learned yet: poll as often as allowed (counted as likely done, the cautious
            # count). Such a poll is sent to learn the task: until the task is as old as the prior
            # says, it is unlikely to see a result, and an image should not wait for it (issue 17);
            # a video's create still does (may_start), as before a poll that may see one.
            when, likely = earliest, True
            task.cold = True
            age = when - to_mono - task.started
            learning = task.key is not None and age < self._model.quantile(task.key, 0.5)
        else:
            when = min(max(earliest, done_at + to_mono), max(earliest, latest))
            likely, learning = done_at + to_mono <= when + 1e-9, False
        task.next_at = when
        task.likely_done = likely
        task.learning = learning
        return when, Priority.HIGH if likely and not learning else Priority.PROGRESS

    def _predicted_done(self, task: _Task) -> float | None:
        """Wall time the task is expected to be done, or None when nothing is known yet."""
        done = task.track.predicted_done()
        if done is not None:
            # Aim a little after the predicted end, so the poll finds it done: missing it by a
            # hair costs a whole interval. Reports in whole percents blur the end by ~1 %.
            margin = max(0.1 * self._settings.poll_interval, 0.02 * (done - task.started))
            return done + margin
        if not self._learned(task):
            return None
        assert task.key is not None  # without progress: up the ladder from the learned median
        return task.started + self._quantile(task.key, ladder_quantile(task.polls))

    def _quantile(self, key: DurationKey, q: float) -> float:
        """The learned duration quantile, corrected by the tasks still running (see survival)."""
        learned = self._model.quantile(key, q)
        if self._survival.count(key) < LEARNED_AFTER:
            return learned  # after a restart: the persisted model until this process saw more
        pending = [
            t.track.last_at - t.started
            for t in self._tasks.values()
            if t.key == key and t.track.last_at is not None and not t.track.completed
        ]
        value, largest = self._survival.quantile(key, q, pending)
        return value if value is not None else max(learned, largest)

    def _learned(self, task: _Task) -> bool:
        return task.key is not None and self._model.expected(task.key).count >= LEARNED_AFTER

    def _observed(self, task: _Task, status: TaskStatus | None) -> None:
        self._forecast.polled(task.next_at, self._clock.monotonic(), likely_done=task.likely_done)
        task.polls += 1
        task.learning = False  # answered; the next poll is planned afresh
        if status is not None and status.state == "completed":
            task.track.complete(self._clock.time())
        elif status is not None and status.state == "pending":
            task.track.observe(self._clock.time(), status.progress)
            if status.progress is not None:
                task.seen_progress = status.progress
        self._changed()

    # -- estimates (what the chat side shows between polls) -----------------------------------------
    def estimate(self, job: Job) -> Estimate:
        """The job's progress and timing as far as they are known (see :class:`Forecast`)."""
        return self._forecast.estimate(job)

    def _changed(self) -> None:
        self._wake_refused()
        if self._listener is not None:
            self._listener()


class TaskPacer:
    """One task's :class:`~framecast.service.PollPacer`, backed by its planner."""

    def __init__(self, planner: Planner, task: _Task) -> None:
        self._planner = planner
        self._task = task

    def __repr__(self) -> str:
        return f"<TaskPacer job={self._task.job_id}>"

    def next_poll(self, now: float, last_poll: float | None) -> tuple[float, int]:
        """When to poll next and at which budget priority."""
        return self._planner._plan(self._task, now, last_poll)

    def observed(self, status: TaskStatus | None) -> None:
        """Learn from the poll's answer."""
        self._planner._observed(self._task, status)
