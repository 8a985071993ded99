"""Which process runs a job: leases on jobs, renewed while they run, taken over when they lapse.

:class:`Leases` claims a job (``lease_owner``, ``lease_until`` on its row) before working on it,
renews its leases every third of a lease, and hands the jobs whose lease lapsed to the scheduler.
Fencing (:meth:`Leases.holds`, asked right before each request and delivery) and the outage rule
(:meth:`Leases.take_over`): ``docs/ARCHITECTURE.md``, "Rules and their one owner".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from framecast.clock import Clock
from framecast.jobs.outage import StoreOutage
from framecast.storage.faults import is_store_outage
from framecast.values import Job

__all__ = ["LeaseCheck", "LeaseLost", "LeaseStore", "LeaseUnknown", "Leases", "check_held"]

log = logging.getLogger(__name__)


class LeaseStore(Protocol):
    """The lease half of the store (:meth:`framecast.storage.Store.claim` and ``claimable``)."""

    async def claim(self, job_id: int, owner: str, until: float) -> bool: ...

    async def claimable(self, now: float) -> list[Job]: ...


class LeaseLost(Exception):
    """Another process now holds the job (expected, not an error)."""


class LeaseUnknown(Exception):
    """A request's lease check met a store outage: the request is not sent, its budget slot is given
    back at once (other processes may use it), and the runner waits for the store."""


class LeaseCheck(Protocol):
    """What the runner asks before a step that spends a request (:meth:`Leases.holds`)."""

    async def holds(self, job_id: int) -> bool: ...


async def check_held(leases: LeaseCheck | None, job_id: int) -> None:
    """Raise :class:`LeaseLost` unless this process still holds the job (always, without leases)."""
    if leases is not None and not await leases.holds(job_id):
        raise LeaseLost(f"job {job_id}: another process holds its lease now")


class Leases:
    """This process's leases (see the module docstring)."""

    def __init__(
        self,
        store: LeaseStore,
        *,
        owner: str,
        lease_seconds: float,
        clock: Clock,
        serves: Callable[[int], bool] | None = None,
        outage: StoreOutage | None = None,
    ) -> None:
        """`owner` names this process (stable across its restarts); `serves(guild_id)`: its shards' guilds;
        `outage`: the process's view of store outages (the upkeep's are noted there)."""
        self._store = store
        self._outage = outage or StoreOutage(clock=clock)
        self.owner = owner
        self._lease = lease_seconds
        self._clock = clock
        #: Whether this process serves a guild (its gateway shards).
        self.serves: Callable[[int], bool] = serves or (lambda _guild: True)
        # The jobs held here -> the lease_until this process last wrote for each (its clock's epoch seconds).
        self._until: dict[int, float] = {}
        self._adopt: Callable[[Job], Awaitable[None]] | None = None
        self._lost: Callable[[int], Awaitable[None]] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def held(self) -> frozenset[int]:
        """Ids of the jobs this process holds."""
        return frozenset(self._until)

    async def take(self, job: Job) -> bool:
        """Claim `job` for this process; False when another live process holds it."""
        return await self._claim(job.id, self._clock.time() + self._lease, take=True)

    async def holds(self, job_id: int) -> bool:
        """Whether this process still holds the job's lease; a lost one is dropped. A process paused
        past its leases lets go of the jobs taken meanwhile before it spends a request on them."""
        if job_id not in self._until:
            return False
        now = self._clock.time()
        if now + self._lease / 3 < self._until[job_id]:
            return True  # no I/O while the lease last written has a third of a lease to run
        if await self._claim(job_id, now + self._lease):
            return True
        log.info("job %s: its lease was taken over (or the job ended elsewhere); letting it go", job_id)
        return False

    def done(self, job_id: int) -> None:
        """The job finished here (or left this process): stop renewing it."""
        self._until.pop(job_id, None)

    async def _claim(self, job_id: int, until: float, *, take: bool = False) -> bool:
        # Take (`take`) or renew the lease until `until`; on refusal the job is no longer held here.
        ok = await self._store.claim(job_id, self.owner, until)
        if not ok:
            self.done(job_id)
        elif take or job_id in self._until:  # a renewal does not bring back a job that meanwhile left
            self._until[job_id] = until
        return ok

    def start(self, adopt: Callable[[Job], Awaitable[None]], lost: Callable[[int], Awaitable[None]]) -> None:
        """Start renewing; lapsed jobs go to `adopt`, and to `lost` a job taken or ended elsewhere."""
        self._adopt, self._lost = adopt, lost
        self._task = asyncio.create_task(self._run_forever(), name="framecast-leases")

    async def close(self) -> None:
        """Stop the loop. Leases are kept: they lapse unless this process comes back (same owner)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run_forever(self) -> None:
        # Restarted if it dies: a process that stops renewing would lose its jobs to another one.
        while True:
            try:
                await self._clock.sleep(self._lease / 3)
                await self.renew()
                await self.take_over()
                self._outage.answered()
            except Exception as exc:  # not CancelledError (a BaseException): close() ends the loop
                if not is_store_outage(exc):
                    log.exception("lease upkeep failed; trying again")
                else:  # the outage is logged once, for the whole process; upkeep goes on when it ends
                    self._outage.met(exc)

    async def renew(self) -> None:
        """Extend every lease this process holds (a job found finished or taken is dropped: `lost`)."""
        until = self._clock.time() + self._lease
        for job_id in sorted(self._until):
            # A job may have finished while an earlier renewal waited.
            if job_id in self._until and not await self._claim(job_id, until) and self._lost is not None:
                await self._lost(job_id)

    async def take_over(self) -> list[Job]:
        """Claim the jobs whose lease lapsed and hand them to the scheduler; returns them. Not during a
        store outage nor for a lease after it (a lease that lapsed while nobody could write is no sign
        of a dead process); a process cut off alone loses its jobs."""
        if not self._outage.settled(self._lease):
            return []
        now = self._clock.time()
        taken: list[Job] = []
        for job in await self._store.claimable(now):
            if job.id in self._until:
                continue
            if now - job.created_at < self._lease:
                continue  # accepted a moment ago, not yet claimed by its intake: it would queue twice
            if not self.serves(job.guild_id) and now - job.updated_at < self._lease:
                continue  # another shard's job: its own shard's process gets the first chance
            if await self.take(job):
                log.info("job %s taken over from a lapsed lease", job.id)
                taken.append(job)
                if self._adopt is not None:
                    try:
                        await self._adopt(job)
                    except Exception:
                        # Not adopted: its lease must lapse again (renewed for a job nobody runs,
                        # it would strand it), and the next round takes it over anew.
                        self.done(job.id)
                        raise
        return taken
