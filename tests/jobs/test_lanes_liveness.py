"""No job waits in the queue while its key would start it: a model check of the dispatcher's wake-ups.

The dispatcher asks only the keys woken since they last refused (:mod:`framecast.jobs.lanes`). A
missed wake-up is a job stuck in the queue for good, so random sequences of what moves a key's
answer (jobs queued, finished, cancelled; a slot released early; a guild moved to another key as
Accounts does; a key's capacity or its appetite for queued work changed, with its notification; a
key closed until a clock time it says to be asked again at; the clock moved; a dispatch round that
crashes) drive a real Scheduler, GuildQueues and Lanes on a SQLite store. After every step the
scheduler settles (no real sleep: until its wake-up event is clear and every started job is in the
runner), and then no key may admit one of its queued jobs. Every job taken must be the one the
plain round-robin (:meth:`GuildQueues.take_next`, asking every key directly) would take: the
awake lanes change what is asked, never what starts.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from framecast.jobs import scheduler as scheduler_module
from framecast.jobs.queues import GuildQueues
from framecast.jobs.scheduler import Admission, Scheduler
from framecast.storage import Store
from framecast.values import Job, JobKind, NewJob
from tests.fakes.clock import ManualClock

KEYS = ("k0", "k1", "k2")
GUILDS = tuple(range(3001, 3007))
KINDS = tuple(JobKind)
SETTLE_TURNS = 10  # loop turns with nothing moving before the scheduler counts as settled
WAIT = 10.0  # real seconds: a scheduler that never settles fails the example instead of hanging


def new_job(guild: int, kind: JobKind) -> NewJob:
    params: dict[str, Any] = {"model": "svc-video-v2.0", "prompt": "a cat", "width": 1152, "height": 768}
    if kind is JobKind.VIDEO:
        params["seconds"] = 5
    return NewJob(kind=kind, guild_id=guild, channel_id=guild * 10, user_id=7, locale="en-US", params=params)


class FakeKey:
    """One key's admission, as the test sets it: slots per kind, closed until a clock time (and says
    so through ``recheck_in``), and a least number of its own queued jobs of a kind before it starts
    one (an answer that moves with its queue, as a planner's does)."""

    def __init__(self, name: str, clock: ManualClock, waiting: Callable[[str, JobKind], int]) -> None:
        self.name, self.clock, self._waiting = name, clock, waiting
        self.slots = {kind: 1 for kind in JobKind}
        self.closed_until = 0.0
        self.least_waiting = 0
        self.most_waiting = 99
        self.explode = False  # the next may_start raises (a crashing round)
        self._listeners: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        waiting = f"{self.least_waiting}..{self.most_waiting}"
        return f"<FakeKey {self.name} {self.slots} closed<{self.closed_until} waiting {waiting}>"

    def answer(self, running: int, kind: JobKind) -> bool:
        return (
            self.clock.monotonic() >= self.closed_until
            and running < self.slots[kind]
            and self.least_waiting <= self._waiting(self.name, kind) <= self.most_waiting
        )

    def may_start(self, running: int, kind: JobKind = JobKind.VIDEO) -> bool:
        if self.explode:
            self.explode = False
            raise RuntimeError("admission exploded")
        return self.answer(running, kind)

    def recheck_in(self) -> float:
        return max(0.0, self.closed_until - self.clock.monotonic()) or float("inf")

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def changed(self) -> None:
        for listener in self._listeners:
            listener()


class Keys:
    """Guilds on keys, each key its own admission (what Accounts provides the scheduler)."""

    def __init__(self, keys: dict[str, FakeKey], key_of: dict[int, str]) -> None:
        self.keys, self.key_of = keys, key_of
        self.admission_listeners: list[Callable[[], None]] = []
        self.key_listeners: list[Callable[[Hashable], None]] = []
        for name, key in keys.items():
            key.on_change(lambda name=name: self._key_changed(name))  # type: ignore[misc]

    def _key_changed(self, name: str) -> None:
        for listener in self.key_listeners:
            listener(name)

    def admission_for(self, guild_id: int) -> tuple[Hashable, Admission]:
        name = self.key_of[guild_id]
        return name, self.keys[name]

    def admission_for_job(self, job: Job) -> tuple[Hashable, Admission]:
        return self.admission_for(job.guild_id)

    def on_admission_change(self, listener: Callable[[], None]) -> None:
        self.admission_listeners.append(listener)

    def on_key_change(self, listener: Callable[[Hashable], None]) -> None:
        self.key_listeners.append(listener)


class CheckedQueues(GuildQueues):
    """The real queues; each take compared with the plain round-robin asking every key directly."""

    keys: Keys
    scheduler: Scheduler
    taken: list[tuple[int, int]]
    wrong: list[str]

    def reference(self) -> tuple[int, int] | None:
        """What :meth:`take_next` would take if every key were asked now (read only)."""

        def direct(guild: int, kind: JobKind) -> bool:
            name = self.keys.key_of[guild]
            return self.keys.keys[name].answer(self.scheduler._running_on(name), kind)

        for guild in self._turns:
            job_id = self._first_admitted(guild, self._queues[guild], direct)
            if job_id is not None:
                return job_id, guild
        return None

    def take_awake(self, eligible: Callable[[int, JobKind], bool]) -> tuple[int, int] | None:
        expected = self.reference()
        taken = super().take_awake(eligible)
        if taken != expected:  # raised here, it would be taken for a crashed round and retried
            self.wrong.append(f"took {taken}, round-robin over every key takes {expected}")
        if taken is not None:
            self.taken.append(taken)
        return taken


class HoldingRunner:
    """Holds each started job until the test ends it."""

    def __init__(self) -> None:
        self.running: dict[int, tuple[Callable[[], None], asyncio.Event]] = {}

    async def run(self, job: Job, *, release_service_slot: Callable[[], None]) -> None:
        done = asyncio.Event()
        self.running[job.id] = (release_service_slot, done)
        try:
            await done.wait()
        finally:
            del self.running[job.id]

    def begin_shutdown(self) -> None:
        pass

    def in_critical_section(self, job_id: int) -> bool:
        return False

    async def wait_critical_done(self, job_ids: set[int]) -> None:
        pass


class RestartNow:
    """The scheduler module's ``asyncio`` with the crashed dispatcher's pause made one loop turn
    (counted, so settling waits for the restart)."""

    def __init__(self) -> None:
        self.pausing = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, seconds: float) -> None:
        self.pausing += 1
        try:
            await asyncio.sleep(0)
        finally:
            self.pausing -= 1


Op = tuple[Any, ...]
STEPS: dict[str, st.SearchStrategy[Op]] = {
    "submit": st.tuples(st.just("submit"), st.sampled_from(GUILDS), st.sampled_from(KINDS)),
    "finish": st.tuples(st.just("finish"), st.integers(0, 20)),
    "release": st.tuples(st.just("release"), st.integers(0, 20)),
    "cancel_queued": st.tuples(st.just("cancel_queued"), st.integers(0, 40)),
    "cancel_running": st.tuples(st.just("cancel_running"), st.integers(0, 20)),
    "move": st.tuples(st.just("move"), st.sampled_from(GUILDS), st.sampled_from(KEYS)),
    "slots": st.tuples(st.just("slots"), st.sampled_from(KEYS), st.sampled_from(KINDS), st.integers(0, 3)),
    "appetite": st.tuples(
        st.just("appetite"), st.sampled_from(KEYS), st.integers(0, 2), st.sampled_from((1, 2, 99))
    ),
    "close": st.tuples(st.just("close"), st.sampled_from(KEYS), st.sampled_from((0.5, 1.0, 2.5))),
    "advance": st.tuples(st.just("advance"), st.sampled_from((0.25, 0.5, 1.0, 3.0))),
    "crash": st.tuples(st.just("crash"), st.sampled_from(KEYS)),
}
# Weighted: enough jobs queued and running for the keys to refuse some of them.
WEIGHTS = {"submit": 8, "finish": 3, "advance": 2}
ops = st.sampled_from([name for name in STEPS for _ in range(WEIGHTS.get(name, 1))]).flatmap(
    STEPS.__getitem__
)


class Model:
    def __init__(self, store: Store, clock: ManualClock) -> None:
        self.clock = clock
        self.store = store
        self.key_of = {guild: KEYS[i % len(KEYS)] for i, guild in enumerate(GUILDS)}
        self.queues = CheckedQueues()
        self.keys = Keys({name: FakeKey(name, self.clock, self._waiting) for name in KEYS}, self.key_of)
        self.runner = HoldingRunner()
        self.restart = RestartNow()
        self.scheduler = Scheduler(
            store=store, runner=self.runner, admission=self.keys, queues=self.queues, clock=self.clock
        )
        self.queues.keys, self.queues.scheduler, self.queues.taken = self.keys, self.scheduler, []
        self.queues.wrong = []
        self.queued: dict[int, tuple[int, JobKind]] = {}  # job id -> guild, kind (the test's own view)
        self.slot_of: dict[int, str] = {}  # started job -> the key whose slot it holds

    def _waiting(self, name: str, kind: JobKind) -> int:
        return self.queues.waiting(kind, lambda guild: self.key_of[guild] == name)[0]

    async def settle(self) -> None:
        """Until the dispatcher waits with nothing to wake it and every started job is in the runner."""
        loop = asyncio.get_running_loop()
        deadline, quiet = loop.time() + WAIT, 0
        while quiet < SETTLE_TURNS:
            await asyncio.sleep(0)
            tasks = self.scheduler._tasks
            if (
                self.scheduler._wakeup.is_set()
                or self.restart.pausing
                or any(not t.done() and jid not in self.runner.running for jid, t in tasks.items())
            ):
                quiet = 0
            else:
                quiet += 1
            assert loop.time() < deadline, "the scheduler did not settle"
        self._account_takes()

    def _account_takes(self) -> None:
        for job_id, guild in self.queues.taken:
            line = [
                j for j, (g, kind) in self.queued.items() if g == guild and kind == self.queued[job_id][1]
            ]
            assert job_id == min(line), f"job {job_id} of guild {guild} went ahead of {min(line)} (same kind)"
            del self.queued[job_id]
            self.slot_of[job_id] = self.key_of[guild]
        self.queues.taken.clear()

    def check(self) -> None:
        assert not self.queues.wrong, self.queues.wrong
        held = Counter(self.slot_of.values())
        assert dict(self.scheduler._holding_per_key) == dict(held)
        assert set(self.queues._guild_of) == set(self.queued)
        stuck = self.queues.reference()
        assert stuck is None, (
            f"job {stuck[0]} of guild {stuck[1]} waits though its key admits it: {self.keys.keys}"
        )

    def _pick(self, items: list[int], index: int) -> int | None:
        return sorted(items)[index % len(items)] if items else None

    async def apply(self, op: Op) -> None:
        self._account_takes()  # what rounds run since the last step took (steps may not settle)
        name, *args = op
        if name == "submit":
            guild, kind = args
            job = await self.store.add(new_job(guild, kind), member_limit=None, guild_cap=None)
            self.queued[job.id] = (guild, kind)
            self.scheduler.submit(job)
        elif name in ("finish", "release", "cancel_running"):
            job_id = self._pick(list(self.runner.running), args[0])
            if job_id is None:
                return
            release, done = self.runner.running[job_id]
            if name == "release":
                release()
                self.slot_of.pop(job_id, None)
                return
            self.slot_of.pop(job_id, None)
            if name == "finish":
                done.set()
            else:
                await self.scheduler.cancel(job_id)
        elif name == "cancel_queued":
            job_id = self._pick(list(self.queued), args[0])
            if job_id is not None:
                await self.scheduler.cancel(job_id)
                self._account_takes()  # it may have been taken meanwhile: its task ends it
                self.queued.pop(job_id, None)
                self.slot_of.pop(job_id, None)
        elif name == "move":  # as Accounts sets or removes a server's key: refiled, then everyone told
            guild, key = args
            self.key_of[guild] = key
            self.queues.regroup(guild)
            await asyncio.sleep(0)
            for listener in self.keys.admission_listeners:
                listener()
        elif name == "slots":
            key, kind, slots = args
            self.keys.keys[key].slots[kind] = slots
            self.keys.keys[key].changed()
        elif name == "appetite":
            key, least, most = args
            self.keys.keys[key].least_waiting, self.keys.keys[key].most_waiting = least, most
            self.keys.keys[key].changed()
        elif name == "close":
            key, seconds = args
            fake = self.keys.keys[key]
            until = self.clock.monotonic() + seconds
            sooner = self.clock.monotonic() < fake.closed_until and until < fake.closed_until
            fake.closed_until = until
            # A later time needs no notification (a refusing key says when to ask it again), an
            # earlier one does: the time it gave may have been the old one.
            if sooner:
                fake.changed()
        elif name == "advance":
            await self.clock.advance(args[0])
        elif name == "crash":
            self.keys.keys[args[0]].explode = True
            self.keys.keys[args[0]].changed()  # asked now, so the round crashes now
        else:  # pragma: no cover
            raise AssertionError(name)

    async def drain(self) -> None:
        """Every key opened and every job finished, round after round: the queue empties."""
        for key in self.keys.keys.values():
            key.slots, key.closed_until = {kind: 2 for kind in JobKind}, 0.0
            key.least_waiting, key.most_waiting = 0, 99
            key.changed()
        for _ in range(len(self.queued) + 1):
            await self.settle()
            self.check()
            for job_id in list(self.runner.running):
                self.slot_of.pop(job_id, None)
                self.runner.running[job_id][1].set()
        assert not self.queued


async def run_model(slots: list[int], steps: list[tuple[Op, bool]], where: Path) -> None:
    clock = ManualClock()
    store = await Store.open(where / "db.sqlite3", clock=clock)
    model = Model(store, clock)
    for i, (key, kind) in enumerate((key, kind) for key in KEYS for kind in KINDS):
        model.keys.keys[key].slots[kind] = slots[i]
    try:
        with mock.patch.object(scheduler_module, "asyncio", model.restart):
            await model.scheduler.start()
            for op, settle in steps:
                await model.apply(op)
                if settle:  # else the next step comes before the dispatcher looked: rounds see several
                    await model.settle()
                    model.check()
            await model.settle()
            model.check()
            await model.drain()
            await model.scheduler.close(timeout=1.0)
    finally:
        await store.close()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.lists(st.integers(0, 2), min_size=len(KEYS) * len(KINDS), max_size=len(KEYS) * len(KINDS)),
    st.lists(st.tuples(ops, st.booleans()), min_size=10, max_size=40),
)
def test_no_job_waits_while_its_key_would_start_it(slots: list[int], steps: list[tuple[Op, bool]]) -> None:
    """`slots`: each key's slots per kind at first (some kinds refused from the start)."""
    with tempfile.TemporaryDirectory() as where:
        asyncio.run(run_model(slots, steps, Path(where)))
