"""A store that cannot answer is a pause, not a job's end: the job's reads and writes wait it out.

A job that meets a store outage (:mod:`framecast.jobs.outage`) keeps its place (the runner's state
in memory, its lease, its service slot) and waits until the store answers; then it goes on from
where it stood. Nothing is repeated that the service already did: a task id or a result the store
could not take yet is kept in memory and saved first (:class:`PatientJobs`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from framecast.jobs.leases import LeaseCheck, LeaseUnknown, check_held
from framecast.jobs.outage import StoreOutage
from framecast.storage.faults import is_store_outage
from framecast.values import InvalidTransition, Job, JobState

if TYPE_CHECKING:
    from framecast.storage import Store

__all__ = ["PatientJobs"]


class PatientJobs:
    """The job writes and reads of the runner and the scheduler, each waiting out a store outage in place.

    A write is tried again until the store takes it, with what the caller holds in memory (a task
    id, a result's link): a create is never repeated because its answer could not be saved. Before
    a write is tried again, the lease is checked (:func:`~framecast.jobs.leases.check_held`): a
    process cut off longer than a lease lets the job go to the process that took it over. A state
    change whose answer was lost may have been committed: when the retry finds the job already
    moved there with the same fields, that is its answer.
    """

    def __init__(self, store: Store, outage: StoreOutage, leases: LeaseCheck | None) -> None:
        self._store = store
        self.outage = outage
        self._leases = leases

    def __repr__(self) -> str:
        return f"<PatientJobs {self.outage!r}>"

    async def check_lease(self, job_id: int) -> None:
        """:func:`~framecast.jobs.leases.check_held`, waiting out an outage: a lease check that cannot
        reach the store waits for it (no request is sent meanwhile), then answers."""
        # A lease with time left answers from memory: no proof that the store is back.
        await self.outage.patiently(
            lambda: check_held(self._leases, job_id), who=f"job {job_id}", proof=False
        )

    def gate(self, job_id: int) -> Callable[[], Awaitable[None]]:
        """The lease check a request makes after its budget grant, right before it is sent.

        One try: a store outage raises :class:`~framecast.jobs.leases.LeaseUnknown`, so the request
        is not sent and its slot is given back at once; the job waits for the store outside it.
        """

        async def gate() -> None:
            try:
                await check_held(self._leases, job_id)
            except Exception as exc:
                if not is_store_outage(exc):
                    raise
                self.outage.met(exc)
                raise LeaseUnknown(
                    f"job {job_id}: its lease could not be checked (the store does not answer)"
                ) from None

        return gate

    async def was_outage(self, exc: BaseException, job_id: int) -> bool:
        """Whether `exc`, escaped from a step that talks to more than the store (the chat side's
        delivery, say), is a store outage (then noted): a driver's own error is; a bare timeout or
        ``OSError`` may be anyone's, and is the store's only if the store does not answer now."""
        if not is_store_outage(exc, bare=False):
            if not is_store_outage(exc):
                return False
            try:
                await self._store.get(job_id)
                return False  # the store answers: the timeout was someone else's
            except Exception as probe:
                if not is_store_outage(probe):
                    raise
                exc = probe
        self.outage.met(exc)
        return True

    async def get(self, job_id: int) -> Job | None:
        """:meth:`Store.get`, waiting out an outage."""
        return await self.outage.patiently(lambda: self._store.get(job_id), who=f"job {job_id}")

    async def update(self, job_id: int, **fields: Any) -> Job:
        """:meth:`Store.update`, waiting out an outage (writing the same fields again is harmless)."""
        tries = 0

        async def once() -> Job:
            nonlocal tries
            tries += 1
            if tries > 1:
                await check_held(self._leases, job_id)
            return await self._store.update(job_id, **fields)

        return await self.outage.patiently(once, who=f"job {job_id}")

    async def transition(
        self, job_id: int, to: JobState, *, expect: JobState | Collection[JobState], **fields: Any
    ) -> Job:
        """:meth:`Store.transition`, waiting out an outage (see the class docstring)."""
        tries = 0

        async def once() -> Job:
            nonlocal tries
            tries += 1
            if tries > 1:
                await check_held(self._leases, job_id)
            try:
                return await self._store.transition(job_id, to, expect=expect, **fields)
            except InvalidTransition:
                if tries > 1:
                    current = await self._store.get(job_id)
                    if current is not None and _written(current, to, fields):
                        return current  # the lost answer's write did commit
                raise

        return await self.outage.patiently(once, who=f"job {job_id}")


def _written(job: Job, to: JobState, fields: dict[str, Any]) -> bool:
    """Whether `job` is in state `to` with `fields` (a state change committed before its answer was lost)."""
    if job.state is not to:
        return False
    return all(getattr(job, name, _MISSING) == value for name, value in fields.items())


_MISSING = object()
