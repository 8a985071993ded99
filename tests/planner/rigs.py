"""The planner's test rig: a real store, budget, queues and planner of one key on a ManualClock.

One place builds it (:meth:`Rig.opened`), with parameters for what the tests really vary: the
budget (requests a window, the window), the poll intervals, the running ceiling, the guilds the key
serves, a state shared with other processes, a clock shared with another rig. A module that needs
more (a scripted service, a scheduler) subclasses :class:`Rig` or builds on the one it yields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Self

from framecast.jobs.queues import GuildQueues
from framecast.keys.budget import RequestBudget
from framecast.keys.shared_plan import SharedPlanState
from framecast.planner.planner import Planner, PlannerSettings
from framecast.planner.tuning import PlannerTuning
from framecast.storage import Store
from framecast.values import Job, JobKind, JobState
from tests.fakes.clock import ManualClock
from tests.planner.jobs import IMAGE, VIDEO, add_job
from tests.planner.spending import spend

__all__ = ["Rig"]


@dataclasses.dataclass
class Rig:
    """One key's planner over a real store, budget and queues; closed by :meth:`opened`."""

    clock: ManualClock
    store: Store
    budget: RequestBudget
    queues: GuildQueues
    settings: PlannerSettings  #: what the key's planners open with unless told otherwise
    planner: Planner = dataclasses.field(init=False)  #: the key's planner (:meth:`reopen` replaces it)

    @classmethod
    @asynccontextmanager
    async def opened(
        cls,
        directory: Path,
        *,
        name: str = "db.sqlite3",
        limit: int = 16,
        window: float = 60.0,
        interval: float = 30.0,
        max_interval: float | None = None,
        ceiling: int | None = None,
        scope: Callable[[int], bool] | None = None,
        shared: SharedPlanState | None = None,
        clock: ManualClock | None = None,
    ) -> AsyncIterator[Self]:
        """A rig on the SQLite file `name` in `directory`: a budget of `limit` requests every `window`
        clock seconds, a poll every `interval` at the most often and `max_interval` (6 intervals by
        default) at the least, `ceiling` tasks at once (None: learned). `scope`, `shared`: as
        :meth:`Planner.open` takes them (the caller closes `shared`). `clock`: one shared with
        another rig (a fresh one from 0 by default). The budget and store are closed afterwards."""
        clock = ManualClock() if clock is None else clock
        store = await Store.open(directory / name, clock=clock)
        budget = RequestBudget(limit, window, clock=clock)
        try:
            settings = PlannerSettings(
                poll_interval=interval,
                poll_max_interval=6 * interval if max_interval is None else max_interval,
                ceiling=ceiling,
            )
            rig = cls(clock, store, budget, GuildQueues(), settings)
            rig.planner = await rig.open_planner(scope=scope, shared=shared)
            yield rig
        finally:
            budget.close()
            await store.close()

    async def job(
        self,
        guild: int = 1,
        *,
        kind: JobKind = JobKind.VIDEO,
        params: dict[str, Any] | None = None,
        running: bool = True,
    ) -> Job:
        """A job of `guild` stored as intake does (`params`: :data:`VIDEO`'s or :data:`IMAGE`'s by
        `kind`), and unless not `running`, as the runner holds it once its task was created."""
        if params is None:
            params = VIDEO if kind is JobKind.VIDEO else IMAGE
        job = await add_job(self.store, guild, kind=kind, params=params)
        if running:
            job = dataclasses.replace(
                job, state=JobState.RUNNING, started_at=self.clock.time(), task_id=f"t{job.id}"
            )
        return job

    async def spend(self, slots: int, *, every: float = 0.0) -> None:
        """Spend `slots` of the budget, one every `every` seconds (the last one now)."""
        await spend(self.budget, self.clock, slots, every=every)

    async def open_planner(
        self,
        settings: PlannerSettings | None = None,
        *,
        scope: Callable[[int], bool] | None = None,
        shared: SharedPlanState | None = None,
        tuning: PlannerTuning | None = None,
    ) -> Planner:
        """A planner of the key over the rig's store, budget and queues (`settings`: the rig's);
        `scope`, `shared`, `tuning` as :meth:`Planner.open` takes them."""
        return await Planner.open(
            budget=self.budget,
            clock=self.clock,
            store=self.store,
            queues=self.queues,
            settings=settings or self.settings,
            scope=scope,
            shared=shared,
            tuning=tuning,
        )

    async def reopen(self, **settings: Any) -> Planner:
        """The key's planner opened again (a restart) on the same store, budget and queues, with
        `settings` changed; it replaces :attr:`planner`."""
        self.planner = await self.open_planner(dataclasses.replace(self.settings, **settings))
        return self.planner

    async def planner_for(self, scope: Callable[[int], bool]) -> Planner:
        """Another key's planner over the same queues: its guilds are the ones `scope` accepts."""
        return await self.open_planner(scope=scope)
