"""The dispatcher that shares the service between guilds, and the tasks of running jobs.

Jobs wait in :class:`~framecast.jobs.queues.GuildQueues` (a FIFO per guild, guilds served round-robin), so
a guild with thirty waiting jobs cannot make a guild with one wait behind all thirty. The one
dispatcher takes the next job whenever its :class:`Admission` says one more may start (the key's
planner: as many as the budget can sustain; or a fixed ``max_running``), and every request still
goes through the key's request budget. With several API keys (servers with their own key), each
key admits its own jobs (:class:`AccountAdmission`): slots are counted per key, and a guild whose
key is saturated is passed over without losing its turn. Admission is asked per kind of job, so a
job never waits behind one of another kind that cannot start yet (an image behind videos waiting
for the budget goes ahead of them; a video the key admits is never overtaken). What a job does
once started is the :class:`Runner`'s business.

A key that refused is not asked again until something of its own changes (a slot of its freed,
its planner's state, a job of its guilds queued or cancelled, or its ``recheck_in`` passed): with
hundreds of keys full, asking every waiting key on each freed slot made the cost of starting a
job grow with the number of keys. The queues keep the guilds per key (their lanes) for that.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import heapq
import itertools
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable
from typing import Protocol, runtime_checkable

from framecast.clock import Clock, SystemClock
from framecast.jobs.leases import LeaseLost, Leases
from framecast.jobs.outage import StoreOutage
from framecast.jobs.pause import PatientJobs
from framecast.jobs.queues import GuildQueues
from framecast.jobs.runner import ShuttingDown
from framecast.storage import Store
from framecast.values import InvalidTransition, Job, JobKind, JobState
from framecast.values.reasons import ErrorCode

log = logging.getLogger(__name__)

_NOT_HELD = object()
#: The states a cancel (or an abandon) ends: not yet delivering.
_STOPPABLE = frozenset({JobState.QUEUED, JobState.SUBMITTING, JobState.RUNNING})
_UNKNOWN = object()
#: Each key's answer per kind in one dispatch round, and that key's admission (asked again later).
_Answers = dict[tuple[Hashable, JobKind], tuple[bool, "Admission"]]


class CancelOutcome(enum.Enum):
    """What a cancel request achieved."""

    CANCELLED = "cancelled"
    TOO_LATE = "too_late"  # being delivered or already finished
    UNKNOWN = "unknown"


class Runner(Protocol):
    """What the scheduler needs of the runner (:class:`framecast.jobs.runner.JobRunner`)."""

    async def run(self, job: Job, *, release_service_slot: Callable[[], None]) -> object:
        """Take `job` to its end; call `release_service_slot` once it no longer occupies the service.

        Raises :class:`~framecast.jobs.runner.ShuttingDown` when it stopped for a shutdown.
        """
        ...

    def begin_shutdown(self) -> None:
        """Stop starting new steps: running jobs pause at their next safe point."""
        ...

    def in_critical_section(self, job_id: int) -> bool:
        """Whether the job is inside a step that must not be interrupted (a create, a delivery)."""
        ...

    async def wait_critical_done(self, job_ids: set[int]) -> None:
        """Return once none of `job_ids` is inside a critical step."""
        ...


class Admission(Protocol):
    """Whether the next job may start (:class:`framecast.planner.planner.Planner` implements it)."""

    def may_start(self, running: int, kind: JobKind = JobKind.VIDEO) -> bool:
        """With `running` jobs occupying the service, may one more of `kind` start now?"""
        ...

    def recheck_in(self) -> float:
        """Clock seconds after which a refusal should be asked again, even without a change."""
        ...

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` whenever the answer may have changed."""
        ...


@runtime_checkable
class AccountAdmission(Protocol):
    """Admission per API key (:class:`framecast.accounts.Accounts` implements it).

    Keys are opaque hashable values naming an account; slots are counted per key, and the queues
    file each waiting guild under its key (a key that refused is asked again only when told of a
    change of its own, or when its ``recheck_in`` passes: every change that may let it admit a job
    must reach :meth:`on_key_change` or :meth:`on_admission_change`).
    """

    def admission_for(self, guild_id: int) -> tuple[Hashable, Admission]:
        """The key a guild's next job would run on, and that key's admission."""
        ...

    def admission_for_job(self, job: Job) -> tuple[Hashable, Admission]:
        """The key an already started (or restored) job runs on, and that key's admission."""
        ...

    def on_admission_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` whenever the key of a guild may have changed (a key set, removed, opened
        or rejected): every guild's key is read again and every key asked again."""
        ...

    def on_key_change(self, listener: Callable[[Hashable], None]) -> None:
        """Call ``listener(key)`` whenever that key's answer may have changed (keys opened later too)."""
        ...


class SharedAdmission:
    """One :class:`Admission` for every guild: a single API key."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    def __repr__(self) -> str:
        return f"<SharedAdmission {self.admission!r}>"

    def admission_for(self, guild_id: int) -> tuple[Hashable, Admission]:
        """The one key."""
        return None, self.admission

    def admission_for_job(self, job: Job) -> tuple[Hashable, Admission]:
        """The one key."""
        return None, self.admission

    def on_admission_change(self, listener: Callable[[], None]) -> None:
        """Never: every guild is on the one key."""

    def on_key_change(self, listener: Callable[[Hashable], None]) -> None:
        """The one admission's changes."""
        self.admission.on_change(lambda: listener(None))


class FixedAdmission:
    """At most `max_running` jobs on the service at once (tests, and a fixed ceiling)."""

    def __init__(self, max_running: int) -> None:
        self.max_running = max_running

    def __repr__(self) -> str:
        return f"<FixedAdmission {self.max_running}>"

    def may_start(self, running: int, kind: JobKind = JobKind.VIDEO) -> bool:
        """Below the fixed number (whatever the kind: each job holds a slot while it is created)."""
        return running < self.max_running

    def recheck_in(self) -> float:
        """A fixed number only changes when a job releases its slot (which wakes the dispatcher)."""
        return math.inf

    def on_change(self, listener: Callable[[], None]) -> None:
        """Nothing changes by itself."""


class Scheduler:
    """Owns the dispatcher and the tasks of running jobs."""

    def __init__(
        self,
        *,
        store: Store,
        runner: Runner,
        admission: Admission | AccountAdmission | int,
        queues: GuildQueues | None = None,
        on_positions_changed: Callable[[int, list[int]], None] | None = None,
        clock: Clock | None = None,
        leases: Leases | None = None,
        outage: StoreOutage | None = None,
    ) -> None:
        """`admission`: per key (:class:`AccountAdmission`), the one key's planner, or a fixed number
        of jobs on the service at once.

        `on_positions_changed(guild_id, queued_job_ids)` is called when a guild's queue moves.
        `leases`: this process's job leases (several processes on one store); None: every job is ours.
        `outage`: the process's view of store outages (a job taken off the queue waits one out).
        """
        self._leases = leases
        self._store = store
        self._clock = clock or SystemClock()
        self._jobs = PatientJobs(store, outage or StoreOutage(clock=self._clock), leases)
        self._runner = runner
        if isinstance(admission, int):
            admission = FixedAdmission(admission)
        self._admissions: AccountAdmission = (
            admission if isinstance(admission, AccountAdmission) else SharedAdmission(admission)
        )
        self._queues = queues if queues is not None else GuildQueues()
        # The queues file each guild under its key (its lane), so a change is asked of that key only.
        self._queues.assign_lanes(lambda guild: self._admissions.admission_for(guild)[0])
        self._admissions.on_admission_change(self._rekey)
        self._admissions.on_key_change(self._wake_key)
        self._on_positions_changed = on_positions_changed
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._holding_slot: dict[int, Hashable] = {}  # job id -> the key whose slot it holds
        # Key -> jobs holding its slot (asked per key on every take: a count, not a walk of them all).
        self._holding_per_key: Counter[Hashable] = Counter()
        self._wakeup = asyncio.Event()
        # When each refusing key is to be asked again without a change (the clock's monotonic
        # seconds), and the same as a heap (outdated entries are skipped: see _wake_due).
        self._recheck_at: dict[Hashable, float] = {}
        self._rechecks: list[tuple[float, int, Hashable]] = []
        self._ties = itertools.count()  # keys need not be orderable
        self._dispatcher: asyncio.Task[None] | None = None
        self._closing = False
        self._ended_elsewhere: Callable[[Job], Awaitable[None]] | None = None

    def on_ended_elsewhere(self, listener: Callable[[Job], Awaitable[None]]) -> None:
        """Call ``listener(job)`` for a job queued here that ended in another process (a cancel
        there), as it is found: taken off the queue, read back, or let go (:meth:`let_go`)."""
        self._ended_elsewhere = listener

    def __repr__(self) -> str:
        return f"<Scheduler queues={self._queues!r} running={len(self._tasks)}>"

    # -- start-up and shutdown ----------------------------------------------------------------------
    async def start(self) -> list[Job]:
        """Restore the unfinished jobs from the store and start dispatching.

        With leases, only the jobs of this process's guilds that no other live process holds are
        restored (the others come through :meth:`adopt` once their lease lapses). Returns the
        restored jobs so the caller can tell their members they continue.
        """
        restored: list[Job] = []
        for job in await self._store.active():
            if self._leases is not None and not (
                self._leases.serves(job.guild_id) and await self._leases.take(job)
            ):
                continue
            restored.append(await self._restore(job))
        self._dispatcher = asyncio.create_task(self._dispatch_forever(), name="framecast-dispatcher")
        self._wakeup.set()
        log.info("scheduler started with %d unfinished job(s)", len(restored))
        return restored

    async def adopt(self, job: Job) -> Job | None:
        """Take on an unfinished job this process now holds (a lapsed lease); None if it already runs here."""
        if self._closing or job.id in self._tasks or self._queues.position(job.id) is not None:
            return None
        current = await self._store.get(job.id)
        if current is None or current.is_terminal:
            return None
        job = await self._restore(current)
        self._wakeup.set()
        return job

    async def _restore(self, job: Job) -> Job:
        if job.state is JobState.SUBMITTING:
            # The create may or may not have reached the service before the crash; the only safe
            # choice that loses nothing is to create again (the documented duplicate window).
            job = await self._store.transition(job.id, JobState.QUEUED, expect=JobState.SUBMITTING)
        if job.state is JobState.QUEUED:
            self._queues.push(job)
        else:
            # Already created on the service (or being delivered): re-attach, never re-create.
            self._start_task(job, holds_slot=job.state is JobState.RUNNING)
        return job

    async def close(self, timeout: float) -> None:
        """Stop taking work, let critical steps finish (within `timeout`), keep every job's state."""
        self._closing = True
        self._runner.begin_shutdown()
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            await asyncio.gather(self._dispatcher, return_exceptions=True)
        tasks = dict(self._tasks)
        critical = {jid for jid in tasks if self._runner.in_critical_section(jid)}
        for jid, task in tasks.items():
            if jid not in critical:
                task.cancel()
        if critical:
            try:
                await asyncio.wait_for(self._runner.wait_critical_done(critical), timeout)
            except TimeoutError:
                log.warning("shutdown: %d step(s) did not finish in %.0fs", len(critical), timeout)
        for task in tasks.values():
            task.cancel()
        if tasks:
            await asyncio.wait(tasks.values(), timeout=max(1.0, timeout / 4))

    # -- the queue ----------------------------------------------------------------------------------
    async def claim(self, job: Job) -> bool:
        """Claim a freshly accepted job for this process (always true without leases)."""
        return self._leases is None or await self._leases.take(job)

    def submit(self, job: Job) -> int:
        """Queue a freshly accepted (already persisted) job; returns its place in its guild's queue."""
        if job.id in self._tasks or self._queues.position(job.id) is not None:
            return self.position(job.id) or 1  # already here (adopted): never queued twice
        self._queues.push(job)
        self._wakeup.set()
        return self.position(job.id) or 1

    async def let_go(self, job_id: int) -> None:
        """A job queued here that this process no longer holds (it ended, or another process took
        it): out of its queue, and one that ended is told (:meth:`on_ended_elsewhere`)."""
        if self._queues.position(job_id) is None:
            return
        self._remove_queued(job_id)
        if (job := await self._store.get(job_id)) is not None and job.is_terminal:
            await self._tell_ended(job)

    async def _tell_ended(self, job: Job) -> None:
        log.info("job %s: ended in another process; out of this queue", job.id)
        if self._ended_elsewhere is not None:
            await self._ended_elsewhere(job)

    def position(self, job_id: int) -> int | None:
        """1-based place of a queued job in its guild's queue (1 once it is being started), else None."""
        return self._queues.position(job_id)

    async def cancel(self, job_id: int) -> tuple[CancelOutcome, Job | None]:
        """Cancel a queued or running job. Delivering or finished jobs cannot be cancelled."""
        return await self._stop(job_id, JobState.CANCELLED)

    async def abandon(self, job_id: int, code: ErrorCode) -> tuple[CancelOutcome, Job | None]:
        """Fail a queued or running job with `code`, as :meth:`cancel` ends it (out of its queue, its
        service task no longer polled): nothing of it could ever be shown (its channel is gone).

        A job being delivered is left to its delivery: its result exists, and its outcome stands.
        """
        return await self._stop(job_id, JobState.FAILED, error_code=code)

    async def _stop(self, job_id: int, state: JobState, **fields: object) -> tuple[CancelOutcome, Job | None]:
        job = await self._store.get(job_id)
        if job is None:
            return CancelOutcome.UNKNOWN, None
        if job.state not in _STOPPABLE:
            return CancelOutcome.TOO_LATE, job
        try:
            job = await self._store.transition(job_id, state, expect=_STOPPABLE, **fields)
        except InvalidTransition:
            return CancelOutcome.TOO_LATE, await self._store.get(job_id)
        self._remove_queued(job_id)
        task = self._tasks.get(job_id)
        if task is not None:
            # The service has no cancel call: we stop polling so the budget goes to other jobs.
            task.cancel()
        return CancelOutcome.CANCELLED, job

    # -- internals ----------------------------------------------------------------------------------
    def _remove_queued(self, job_id: int) -> None:
        guild = self._queues.remove(job_id)  # which wakes its key: one job fewer waits for it
        if guild is not None:
            self._positions_changed(guild)
            self._wakeup.set()

    def _positions_changed(self, guild: int) -> None:
        if self._on_positions_changed is not None:
            self._on_positions_changed(guild, self._queues.queued(guild))

    def _running_on(self, key: Hashable) -> int:
        """Jobs holding a service slot of `key`."""
        return self._holding_per_key[key]

    def _take_admitted(self, answers: _Answers) -> tuple[int, Hashable, int] | None:
        """``(job_id, key, guild_id)``: the next job whose key admits one more of its kind, in
        round-robin order, among the guilds of the keys woken since they last refused (a job behind
        one of another kind that cannot start yet may go ahead of it: see
        :meth:`GuildQueues.take_awake`).

        The job counts as started from now; None when no woken key admits anything (those keys
        sleep until woken again: see :meth:`_recheck_refused`).

        `answers`: what each key said so far in this dispatch round, kept across its takes (one
        round does nothing else meanwhile, so only a job started on a key changes that key's
        answer: it alone is asked again). Each key is asked once per kind and round, however many
        guilds wait on it and however many jobs the round starts: asking it per guild or per job
        made keys x guilds questions.
        """
        key_of: dict[int, Hashable] = {}

        def admitted(guild: int, kind: JobKind) -> bool:
            # A key's answer holds for every guild on it.
            key, admission = self._admissions.admission_for(guild)
            key_of[guild] = key
            answer = answers.get((key, kind))
            if answer is None:
                answer = answers[key, kind] = (admission.may_start(self._running_on(key), kind), admission)
            return answer[0]

        taken = self._queues.take_awake(admitted)
        if taken is None:
            return None
        job_id, guild = taken
        for kind in JobKind:
            answers.pop((key_of[guild], kind), None)
        return job_id, key_of[guild], guild

    def _recheck_refused(self, answers: _Answers) -> None:
        """Each key that refused in this round is asked again after its ``recheck_in`` (its answer
        may change with time alone), unless something of its own wakes it sooner."""
        now = self._clock.monotonic()
        due: dict[Hashable, float] = {}
        for (key, _), (ok, admission) in answers.items():
            if not ok:
                due[key] = min(due.get(key, math.inf), now + admission.recheck_in())
        for key, at in due.items():
            if math.isfinite(at) and self._recheck_at.get(key) != at:
                self._recheck_at[key] = at
                heapq.heappush(self._rechecks, (at, next(self._ties), key))

    def _next_recheck(self) -> float:
        """Clock seconds until the first key is due to be asked again (inf: none is)."""
        while self._rechecks:
            at, _, key = self._rechecks[0]
            if self._recheck_at.get(key) == at:
                return max(0.0, at - self._clock.monotonic())
            heapq.heappop(self._rechecks)  # outdated: that key was given a later time since
        return math.inf

    def _wake_due(self) -> None:
        """Wake the keys whose time to be asked again has come."""
        now = self._clock.monotonic()
        while self._rechecks and self._rechecks[0][0] <= now:
            at, _, key = heapq.heappop(self._rechecks)
            if self._recheck_at.get(key) == at:
                del self._recheck_at[key]
                self._queues.wake(key)

    async def _dispatch_forever(self) -> None:
        # Restarted if it ever dies: a dead dispatcher would silently stall every queue.
        while not self._closing:
            try:
                await self._dispatch()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dispatcher crashed; restarting it")
                await asyncio.sleep(0.5)
                # The round that failed may have left keys awake that nothing will wake again, and
                # put others to sleep without their time to be asked again: every key is asked.
                self._queues.wake_all()
                self._wakeup.set()

    def _wake_key(self, key: Hashable) -> None:
        """`key`'s answer may have changed: its guilds are looked at again."""
        self._queues.wake(key)
        self._wakeup.set()

    def _rekey(self) -> None:
        """Any guild's key may have changed: every guild filed again, every key asked again."""
        self._queues.regroup_lanes()
        self._wakeup.set()

    async def _dispatch(self) -> None:
        while not self._closing:
            await self._wait_for_wakeup(self._next_recheck())
            self._wakeup.clear()
            self._wake_due()
            answers: _Answers = {}  # this round's (see _take_admitted)
            while not self._closing and self._queues.total():
                taken = self._take_admitted(answers)
                if taken is None:
                    break
                job_id, key, guild = taken
                # The job's own task reads it back (still "first in line", position 1, meanwhile):
                # the dispatcher does no I/O, so a store outage can neither stop it nor drop the job.
                # Started before anyone is told of it: a job taken off the queue is never dropped.
                self._start_task(job_id, holds_slot=True, key=key)
                self._positions_changed(guild)
            self._recheck_refused(answers)

    async def _wait_for_wakeup(self, timeout: float) -> None:  # noqa: ASYNC109
        """Until woken, or `timeout` clock seconds (the admission may change with time alone)."""
        if math.isinf(timeout):
            await self._wakeup.wait()
            return
        waiter = asyncio.ensure_future(self._wakeup.wait())
        sleeper = asyncio.ensure_future(self._clock.sleep(timeout))
        try:
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            sleeper.cancel()

    def _start_task(self, job: Job | int, *, holds_slot: bool, key: Hashable = _UNKNOWN) -> None:
        """Start the job's task; `key`: the key whose slot it holds (default: asked for the job).

        A job id (one taken off the queue) is read back by its task, which runs it if still queued.
        """
        job_id = job if isinstance(job, int) else job.id
        if holds_slot:
            if key is _UNKNOWN:
                assert not isinstance(job, int)
                key, _ = self._admissions.admission_for_job(job)
            self._let_go(job_id)  # a job holds one slot at most, whatever starts it again
            self._holding_slot[job_id] = key
            self._holding_per_key[key] += 1
        self._queues.started(job_id)
        task = asyncio.create_task(self._run_job(job), name=f"framecast-job-{job_id}")
        self._tasks[job_id] = task
        task.add_done_callback(functools.partial(self._never_ran, job_id))

    def _never_ran(self, job_id: int, task: asyncio.Task[None]) -> None:
        """A task cancelled before its first step never runs its ``finally``: let go of its job here.

        That happens when a cancel's answer from the store comes in the loop turn in which the
        dispatcher started that very job (a slot had just been freed): its slot stayed taken for
        ever, the key ran one job fewer, and at one slot its queue stalled.
        """
        if self._tasks.get(job_id) is task:  # else its own ``finally`` (or a newer task) has it
            self._ended(job_id)

    def _release(self, job_id: int) -> None:
        key = self._let_go(job_id)
        if key is not _NOT_HELD:
            self._wake_key(key)  # a slot of that key is free: only its guilds may start now

    def _let_go(self, job_id: int) -> Hashable:
        """Drop the job's slot, if it holds one: the key it held (``_NOT_HELD``: none)."""
        key = self._holding_slot.pop(job_id, _NOT_HELD)
        if key is _NOT_HELD:
            return key
        self._holding_per_key[key] -= 1
        if self._holding_per_key[key] <= 0:
            del self._holding_per_key[key]  # keys come and go (servers' own keys): no zeros kept
        return key

    async def _run_job(self, queued: Job | int) -> None:
        job_id = queued if isinstance(queued, int) else queued.id
        try:
            if isinstance(queued, int):
                # Taken off the queue: read back (waiting out a store outage, the job keeping its
                # place); one cancelled meanwhile ends here.
                found = await self._jobs.get(queued)
                if found is not None and found.is_terminal:
                    await self._tell_ended(found)
                if found is None or found.state is not JobState.QUEUED:
                    return
                queued = found
            job = queued
            await self._runner.run(job, release_service_slot=lambda: self._release(job_id))
        except ShuttingDown:
            log.info("job %s paused for shutdown", job_id)
        except LeaseLost:
            # Expected (this process was paused past the lease): the new owner finishes the job.
            log.info("job %s: left to the process that holds its lease now", job_id)
        except asyncio.CancelledError:
            if not self._closing:
                log.info("job %s task cancelled", job_id)
        except Exception:
            log.exception("job %s: runner crashed", job_id)
        finally:
            self._ended(job_id)

    def _ended(self, job_id: int) -> None:
        """The job's task is over: out of the running, its slot and its lease let go."""
        self._tasks.pop(job_id, None)
        self._queues.finished(job_id)
        self._release(job_id)
        if self._leases is not None:
            self._leases.done(job_id)  # no task runs it here any more: its lease is not renewed
