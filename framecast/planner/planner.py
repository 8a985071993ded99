"""The request planner of one API key: what each request of its budget is spent on.

It holds what the policy (:mod:`framecast.planner.policy`, where the objective is written) reads,
and answers the scheduler (which job starts now: :meth:`Planner.may_start`), each job's runner
(its handle, :class:`PlannedJob`: the create, the polls through its pacer, the end) and the chat
side (:meth:`Planner.estimate`, the same plan played forward; no request is spent on it). The
ceiling on tasks at once is ``GEN_MAX_RUNNING`` and, after the service refused creates, the
pushback ceiling (:class:`~framecast.planner.shared.Pushback`). With several processes on one key
(``REDIS_URL``) admission also counts the others' demand, read from a cached view (the transport:
:mod:`framecast.keys.shared_plan`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import statistics
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from framecast.clock import Clock
from framecast.jobs.job_keys import CreateFailure
from framecast.jobs.queues import GuildQueues
from framecast.keys.shared_plan import SharedPlanState
from framecast.planner.estimate import Estimate, Forecast, KeyNow
from framecast.planner.policy import IMAGE_REQUESTS, MIN_REQUESTS_PER_VIDEO, KeyView, admits
from framecast.planner.polls import PolledTask, PollPlan
from framecast.planner.shared import Pushback, Share, SharedView
from framecast.planner.survival import Survival
from framecast.planner.tuning import PlannerTuning
from framecast.service import TaskStatus
from framecast.service.budget import Budget
from framecast.storage import Store
from framecast.storage.faults import is_store_outage
from framecast.values import Job, JobKind
from framecast.values.durations import DurationKey
from framecast.values.service_requests import Priority, RefusalKind

__all__ = ["PlannedJob", "Planner", "PlannerSettings"]

log = logging.getLogger(__name__)

T = TypeVar("T")  # what a job's create returns (the runner's created task)
#: How long a task the runner stopped waiting for still counts as on the service, without progress:
#: until this share of its kind would have ended (a rule: a capped service refused every create
#: while cancelled tasks it still ran went uncounted).
_ABANDONED_QUANTILE = 0.9
#: The view without other processes (no shared state).
_NOBODY_ELSE = SharedView()


@dataclass(frozen=True)
class PlannerSettings:
    """The planner's settings (from configuration)."""

    poll_interval: float  # never poll one task more often (GEN_POLL_INTERVAL)
    poll_max_interval: float  # never leave a running task unpolled longer (GEN_POLL_MAX_INTERVAL)
    ceiling: int | None = None  # GEN_MAX_RUNNING; None: automatic


class Planner:
    """Spends one key's :class:`~framecast.keys.budget.Budget` (see the module docstring)."""

    def __init__(
        self,
        *,
        budget: Budget,
        clock: Clock,
        store: Store,
        queues: GuildQueues,
        durations: Survival,
        settings: PlannerSettings,
        scope: Callable[[int], bool] | None = None,
        shared: SharedPlanState[SharedView] | None = None,
        tuning: PlannerTuning | None = None,
    ) -> None:
        """`scope(guild_id)`: whether a guild's jobs run on this key (None: every guild's); `shared`:
        the key's state shared with other processes (the caller starts and closes it; None: this
        process alone); `tuning`: the tuned numbers (None: the defaults, as measured)."""
        self._tuning = tuning or PlannerTuning()
        self._budget = budget
        self._scope = scope
        self._clock = clock
        self._store = store
        self._queues = queues
        self._settings = settings
        self._polls = PollPlan(
            clock=clock,
            durations=durations,
            interval=settings.poll_interval,
            max_interval=settings.poll_max_interval,
            crowd=self.crowd,
            tuning=self._tuning,
        )
        self._deferred: set[int] = set()  # jobs whose create is backing off after a failure
        # Images whose create was sent, and when (monotonic): their two requests hold the window.
        self._images_sent: dict[int, float] = {}
        self._creating: set[int] = set()  # jobs whose create is being sent (see PlannedJob)
        self._unpolled: dict[int, Job] = {}  # jobs whose create went through, their task not polled yet
        # Tasks the runner stopped waiting for that the service may still run (cancelled, timed
        # out), until when (monotonic): they count against the key's tasks at once.
        self._abandoned: dict[int, float] = {}
        # The ceiling after the service pushed back on creates; key-wide when shared (see ceiling()).
        self._pushback = Pushback(probe_after=self._tuning.probe_after, base=self._tuning.probe_after)
        # Creates refused for the key's tasks at once, waiting for room (by job), and those woken
        # whose create is not sent yet: one is woken for each task that ends.
        self._room_waiters: dict[int, asyncio.Future[None]] = {}
        self._woken: set[int] = set()
        self._shared = shared
        self._listener: Callable[[], None] | None = None
        # What the last tasks seen done cost in requests (their create, polls and download).
        self._costs: deque[int] = deque(maxlen=self._tuning.memory)
        # What members are told: read from the poll plan, the queues and a snapshot (key_now()).
        self._forecast = Forecast(
            self._polls, clock=clock, budget=budget, queues=queues, scope=scope, tuning=self._tuning
        )
        if shared is not None:
            shared.attach(self._share, self._shared_changed)

    def __repr__(self) -> str:
        return f"<Planner tasks={len(self._polls)} ceiling={self.ceiling()}>"

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
        shared: SharedPlanState[SharedView] | None = None,
        tuning: PlannerTuning | None = None,
    ) -> Planner:
        """A planner whose duration model starts from what the store learned before a restart."""
        tuning = tuning or PlannerTuning()
        # Cautious priors in poll intervals: they only shape estimates until real durations arrive.
        durations = Survival(
            priors={"video": 4 * settings.poll_interval, "image": settings.poll_interval},
            keep=tuning.memory,
            learned_after=tuning.learned_after,
        )
        durations.restore(await store.load_durations())
        return cls(
            budget=budget,
            clock=clock,
            store=store,
            queues=queues,
            durations=durations,
            settings=settings,
            scope=scope,
            shared=shared,
            tuning=tuning,
        )

    # -- admission ----------------------------------------------------------------------------------
    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` whenever admission may have changed (the scheduler's wake-up)."""
        self._listener = listener

    def ceiling(self) -> int | None:
        """The most tasks this process may start on the service now (None: no fixed number): the cap
        less the tasks let go here that may still run."""
        cap = self._cap()
        return None if cap is None else max(0, cap - self._still_running())

    def _cap(self) -> int | None:
        """The most tasks of this process on the service, those let go included (None: no fixed number):
        the pushback ceiling counts every process's tasks on the key, ``GEN_MAX_RUNNING`` this one's."""
        limits: list[float] = [] if self._settings.ceiling is None else [self._settings.ceiling]
        if (pushback := self._current_pushback().limit()) is not None:
            limits.append(pushback - self._others().running)
        return max(1, math.floor(min(limits))) if limits else None

    def concurrency(self) -> int:
        """Tasks this planner has on the service now (what adaptive concurrency has reached)."""
        return len(self._polls)

    @property
    def polls(self) -> PollPlan:
        """The key's tasks on the service and their planned polls."""
        return self._polls

    def may_start(self, running: int, kind: JobKind = JobKind.VIDEO) -> bool:
        """Whether one more job of `kind` may start now, `running` occupying the service (the policy
        over :meth:`view`; asking records nothing)."""
        return admits(self.view(running), kind, self._tuning)

    def view(self, running: int) -> KeyView:
        """A read-only snapshot of the key for admission, `running` jobs occupying the service."""
        now = self._clock.monotonic()
        window = self._budget.window
        images, _ = self._queues.waiting(JobKind.IMAGE, self._scope)
        videos, _ = self._queues.waiting(JobKind.VIDEO, self._scope)
        # A process with nothing on the key may still start one: whoever sees a task end first
        # would otherwise always win, and shut other shards' guilds out.
        return KeyView(
            now=now,
            window=window,
            allowed=self._budget.allowed,
            running=running,
            ceiling=self.ceiling(),
            deferred=len(self._deferred),
            sending=len(self._creating),
            polled=len(self._polls),
            others=self._others().demand if running > 0 else 0.0,
            images_spent=self._images_spending(),
            demand=self.demand(),
            ahead_of_images=self._polls.ahead_of_images(now, window),
            images_first=self.images_first() > 0,
            learning_due=self._polls.learning_due(now),
            images_waiting=images,
            videos_waiting=videos,
            profile=functools.cache(functools.partial(self._polls.profile, now)),
            new_video=functools.partial(self._polls.new_video_requests, now),
        )

    def create_priority(self, job: Job) -> Priority:
        """The budget priority of `job`'s create: an image's first once it has waited a whole window;
        a video's in turn with the polls expected to see a result (admission made room for them)."""
        if job.kind is JobKind.IMAGE:
            return Priority.FIRST if self._waited_a_window(job.created_at) else Priority.NORMAL
        return Priority.HIGH

    def _waited_a_window(self, since: float) -> bool:
        """Whether a job queued at wall time `since` has waited a whole window."""
        return since <= self._clock.time() - self._budget.window

    def images_first(self) -> int:
        """Images waiting that go before the videos and the polls expected to see a result: all of
        them once one has waited a whole window, none before."""
        images, since = self._queues.waiting(JobKind.IMAGE, self._scope)
        return images if self._waited_a_window(since) else 0

    def crowd(self) -> float:
        """How many windows' worth of jobs wait for this key (a window's worth: what this process's
        part of the key's rate starts in a window at what a task has cost lately)."""
        videos, _ = self._queues.waiting(JobKind.VIDEO, self._scope)
        images, _ = self._queues.waiting(JobKind.IMAGE, self._scope)
        if videos + images == 0:
            return 0.0
        key = self.key_now()
        per_window = key.per_second(self._budget) * self._budget.window / key.requests_per_task
        return (videos + images) / per_window

    def _images_spending(self) -> float:
        """Requests of the images whose create was sent within the last window (their slots are held)."""
        return IMAGE_REQUESTS * len(self.images_sent())

    def creates_in_flight(self) -> tuple[int, int]:
        """The creates handed to the budget and not answered yet: (videos, images)."""
        images = len(self._creating & self._images_sent.keys())
        return len(self._creating) - images, images

    def images_sent(self) -> list[float]:
        """When the images whose create was sent within the last window were sent (monotonic)."""
        since = self._clock.monotonic() - self._budget.window
        return [at for at in self._images_sent.values() if at >= since]

    def demand(self) -> float:
        """Requests the running tasks are expected to need within the next window."""
        return self._polls.demand(self._clock.monotonic(), self._budget.window)

    def recheck_in(self) -> float:
        """Clock seconds after which admission should be asked again even without a change."""
        return max(0.05, self._settings.poll_interval / 4)

    def create_sent(self, job: Job) -> Priority:
        """`job`'s create is sent now, at this priority; an image's two requests hold the window from now."""
        self._creating.add(job.id)
        self._woken.discard(job.id)
        self._forecast.changed()  # "starts in" counts the creates in flight
        if job.kind is JobKind.IMAGE:
            now = self._clock.monotonic()
            since = now - self._budget.window  # the images sent before the window hold nothing now
            self._images_sent = {j: at for j, at in self._images_sent.items() if at >= since}
            self._images_sent.setdefault(job.id, now)
        return self.create_priority(job)

    def create_through(self, job: Job) -> None:
        """`job`'s create went through: its task is on the service."""
        self._creating.discard(job.id)
        self._unpolled[job.id] = job
        self.create_finished(ok=True)

    def create_failed(self, job_id: int, refusal: RefusalKind | None) -> None:
        """`job_id`'s create failed: refused for the key's rate or its tasks at once, or an error (None)."""
        self._creating.discard(job_id)
        pushed_back = refusal is not None
        self.create_finished(ok=False, pushed_back=pushed_back, refusal=refusal or RefusalKind.RATE)

    def create_deferred(self, job_id: int) -> None:
        """The job's create failed for now and backs off: meanwhile the next job may start."""
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
        """A create ended: `ok`, or refused for the key's rate or its tasks at once (`pushed_back`,
        `refusal`: see :class:`~framecast.planner.shared.Pushback`)."""
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
                    "the service runs at most %d of this key's tasks at once; holding there",
                    self._pushback.ceiling or 1,
                )
            else:
                log.warning(
                    "the service pushed back on a create; running at most %d tasks for now", self.ceiling()
                )
        elif ok:
            self._pushback = p.went_through(rev)
        self._changed()

    async def after_refusal(self, job_id: int, fallback: float) -> None:
        """Wait, after `job_id`'s create was refused for the key's tasks at once, until one of them
        ended (retrying sooner is refused again); `fallback` seconds when none is known to run, at
        most ``poll_max_interval`` or until an abandoned task stops counting."""
        if self._on_key() == 0:
            await self._clock.sleep(fallback)
            return
        while True:
            wait = self._settings.poll_max_interval
            if self._abandoned:
                wait = min(wait, max(0.0, min(self._abandoned.values()) - self._clock.monotonic()))
            room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._room_waiters[job_id] = room
            timer = asyncio.ensure_future(self._clock.sleep(wait))
            try:
                await asyncio.wait((room, timer), return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
                if self._room_waiters.get(job_id) is room:
                    del self._room_waiters[job_id]
            if room.done() or not (self._creating or self._woken):
                # Woken for a task's room, or the longest wait is over with no other create being
                # tried: this one tries (several tried at once were all refused but one).
                self._woken.add(job_id)
                return

    def _on_key(self) -> int:
        """Tasks on the service with this key: this process's and the others'."""
        return self._mine() + self._others().running

    def _mine(self) -> int:
        """This process's tasks on the service: polled, created and not polled yet, and those let go
        that it may still run."""
        return len(self._polls) + len(self._unpolled) + self._still_running()

    def _still_running(self) -> int:
        """Tasks abandoned here that the service may still run."""
        now = self._clock.monotonic()
        if any(until <= now for until in self._abandoned.values()):
            self._abandoned = {job_id: until for job_id, until in self._abandoned.items() if until > now}
        return len(self._abandoned)

    def _abandon(self, job_id: int, key: DurationKey | None, started: float, end: float | None) -> None:
        """The runner stopped waiting for a task the service may still run: it counts against the
        key's tasks at once until its progress says it ended (`end`, wall time), else until most of
        its kind would have; one already overdue (it timed out) for the longest gap between polls."""
        now_wall, now = self._clock.time(), self._clock.monotonic()
        if end is None and key is not None:
            end = started + self._polls.quantile(key, _ABANDONED_QUANTILE)
        if end is None or end < now_wall + self._settings.poll_interval:
            self._abandoned[job_id] = now + self._settings.poll_max_interval
        else:
            self._abandoned[job_id] = now + end - now_wall

    def _abandoned_ends(self) -> list[float]:
        """Seconds until each slot held by tasks let go here frees (past the cap: once fewer are left)."""
        now = self._clock.monotonic()
        ends = sorted(until - now for until in self._abandoned.values() if until > now)
        cap = self._cap()
        return ends[max(0, len(ends) - cap) :] if cap is not None else ends

    def _wake_refused(self) -> None:
        """Let creates refused for the key's tasks at once try again: one for each task's room."""
        if not self._room_waiters:
            return
        limit = self._current_pushback().limit()
        room = len(self._room_waiters)
        if limit is not None:
            room = math.floor(limit) - self._on_key() - len(self._creating) - len(self._woken)
        for job_id in list(self._room_waiters)[: max(0, room)]:
            waiter = self._room_waiters.pop(job_id)
            if not waiter.done():
                waiter.set_result(None)
                self._woken.add(job_id)

    # -- the other processes on this key ------------------------------------------------------------
    def _others(self) -> SharedView:
        """The other processes on this key as last read (nobody without shared state)."""
        return self._shared.view if self._shared is not None else _NOBODY_ELSE

    def _current_pushback(self) -> Pushback:
        """The freshest pushback change, ours or another process's."""
        theirs = self._others().pushback
        return theirs if theirs.newer_than(self._pushback) else self._pushback

    def _shared_changed(self) -> None:
        """The others' view changed: a fresher pushback is ours from now on."""
        self._pushback = self._current_pushback()
        self._changed()

    def _share(self) -> Share:
        """What this planner publishes for the other processes."""
        return Share(demand=self.demand(), running=self._mine(), pushback=self._current_pushback())

    # -- one job's handle -----------------------------------------------------------------------------
    def plan(self, job: Job) -> PlannedJob:
        """`job`'s handle: what its runner tells this planner, and asks it."""
        return PlannedJob(self, job)

    def release(self, job_id: int) -> None:
        """The runner is done with the job, however it ended: it occupies nothing of the key but a
        task created and never polled, which the service may still run (cancelled meanwhile)."""
        self._creating.discard(job_id)
        self._woken.discard(job_id)
        created = self._unpolled.pop(job_id, None)
        if created is not None:
            self._abandon(job_id, DurationKey.for_params(created.params), self._clock.time(), None)
            self._changed()
        self.create_resumed(job_id)

    # -- polling ------------------------------------------------------------------------------------
    def pacer(self, job: Job) -> TaskPacer:
        """The poll pacer of `job`'s task (registers the task; a restored job keeps its times)."""
        task = self._polls.get(job.id)
        self._unpolled.pop(job.id, None)
        self._abandoned.pop(job.id, None)  # polled again (a job resumed): counted once, as polled
        if task is None:
            task = self._polls.add(job, video=job.kind is JobKind.VIDEO)
            p = self._current_pushback()
            raised = p.seen_running(self._on_key(), p.rev + 1)
            if raised is not None:
                # The service took a task above the learned cap (a probe): the cap is higher now.
                self._pushback = raised
                log.info("the service runs %d of this key's tasks at once now", self._on_key())
            self._changed()
        return TaskPacer(self, task)

    def forget(self, job_id: int) -> None:
        """The job stopped waiting for its task (failed, cancelled, timed out, or paused for a
        shutdown); one no poll saw end may still run on the service (:meth:`_abandon`)."""
        task = self._polls.pop(job_id)
        if task is None:
            return
        if not task.over:
            self._abandon(job_id, task.key, task.started, task.track.predicted_done())
        self._changed()

    async def finished(self, job: Job, *, completed: bool) -> None:
        """The task ended; a completed one teaches the duration model (persisted)."""
        task = self._polls.pop(job.id)
        self._changed()
        if task is None or not completed or task.track.bounds() is None:
            return  # no poll saw it complete (the runner reports completion only after one does)
        if not task.cold:  # a cold task's polls say nothing of what the queued jobs will cost
            self._costs.append(task.polls + 2)
        row = self._polls.learn(task)
        if row is not None:
            try:
                await self._store.save_duration(row)
            except Exception as exc:  # losing one lesson must not fail the job
                if not is_store_outage(exc):
                    log.exception("could not save a learned duration")
                else:  # the outage itself is the runner's to report, once
                    log.info("a learned duration was not saved: the job store does not answer")

    def observed(self, task: PolledTask, status: TaskStatus | None) -> None:
        """A poll of `task` answered `status` (None: it failed): the plan and the forecast learn."""
        self._polls.observed(task, status)
        self._changed()

    # -- estimates ----------------------------------------------------------------------------------
    def estimate(self, job: Job) -> Estimate:
        """The job's progress and timing as far as they are known."""
        return self._forecast.estimate(job, self.key_now())

    def key_now(self) -> KeyNow:
        """The key as the forecast reads it now (a snapshot)."""
        return KeyNow(
            requests_per_task=max(MIN_REQUESTS_PER_VIDEO, statistics.fmean(self._costs or [0.0])),
            processes=1 + self._others().active,
            ceiling=self.ceiling(),
            occupied=len(self._polls) + len(self._creating | self._deferred),
            images_first=self.images_first() > 0,
            images_sent=self.images_sent(),
            in_flight=self.creates_in_flight(),
            abandoned=self._abandoned_ends(),
        )

    def _changed(self) -> None:
        self._forecast.changed()
        self._wake_refused()
        if self._listener is not None:
            self._listener()


class PlannedJob:
    """One job's handle on its key's planner (:class:`framecast.jobs.job_keys.JobPlan`)."""

    def __init__(self, planner: Planner, job: Job) -> None:
        self._planner = planner
        self._job = job

    def __repr__(self) -> str:
        return f"<PlannedJob job={self._job.id}>"

    async def create(
        self,
        send: Callable[[Callable[[], Priority]], Awaitable[T]],
        *,
        failure: Callable[[Exception], CreateFailure | None],
        sleep: Callable[[float], Awaitable[None]],
    ) -> T:
        """Create the job's task (:meth:`framecast.jobs.job_keys.JobPlan.create`), telling the planner
        of each attempt: sent, through or failed, then backing off. An exception `failure` does not
        judge leaves the create in flight until :meth:`Planner.release`."""
        planner, job = self._planner, self._job
        sent_now = functools.partial(planner.create_sent, job)
        while True:
            try:
                created = await send(sent_now)
            except Exception as exc:
                failed = failure(exc)
                if failed is None:
                    raise
                planner.create_failed(job.id, failed.refusal)
                if failed.retry_in is None:
                    raise
            else:
                planner.create_through(job)
                return created
            await self._back_off(failed.refusal, failed.retry_in, sleep)

    async def _back_off(
        self, refusal: RefusalKind | None, retry_in: float, sleep: Callable[[float], Awaitable[None]]
    ) -> None:
        """Wait before the next try of a failed create: for a task to end after a concurrency
        refusal, else `retry_in` seconds (after an error, not counted as the create in flight)."""
        planner, job_id = self._planner, self._job.id
        if refusal is RefusalKind.CONCURRENCY:
            await planner.after_refusal(job_id, retry_in)
            return
        if refusal is None:
            planner.create_deferred(job_id)
        try:
            await sleep(retry_in)
        finally:
            planner.create_resumed(job_id)

    def pacer(self) -> TaskPacer:
        """The task's poll pacer (registers the task; see :meth:`Planner.pacer`)."""
        return self._planner.pacer(self._job)

    async def ended(self, *, completed: bool) -> None:
        """The job stopped waiting for its task: seen completed (the model learns), or not."""
        if completed:
            await self._planner.finished(self._job, completed=True)
        else:
            self._planner.forget(self._job.id)


class TaskPacer:
    """One task's :class:`~framecast.service.PollPacer`, backed by its planner."""

    def __init__(self, planner: Planner, task: PolledTask) -> None:
        self._planner = planner
        self._task = task

    def __repr__(self) -> str:
        return f"<TaskPacer job={self._task.job_id}>"

    def next_poll(self, now: float, last_poll: float | None) -> tuple[float, int]:
        """When to poll next and at which budget priority."""
        return self._planner.polls.plan(self._task, now, last_poll)

    def observed(self, status: TaskStatus | None) -> None:
        """Learn from the poll's answer."""
        self._planner.observed(self._task, status)
