"""What the planners of one API key share across processes: the values and how they combine.

Each process's planner publishes per key its :class:`Share` (``demand``: requests its running tasks
need within the next window; its ``running`` tasks; its pushback state) through
:class:`~framecast.keys.shared_plan.SharedPlanState`, and reads the others' summed into one
:class:`SharedView` (:func:`summed`).

Pushback (:class:`Pushback`: what a refused create does to the ceiling) is one key-wide fact, so it
spreads as the *latest* change: each change carries a revision one above every one seen, and every
planner adopts the freshest (ties: the lower ceiling).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

from framecast.planner.tuning import PlannerTuning
from framecast.values.service_requests import RefusalKind

__all__ = [
    "Pushback",
    "Share",
    "SharedView",
    "summed",
]

#: How far a refused probe's wait may grow (it doubles with each probe the service refuses): two
#: doublings (a rule, not a tuned figure: the wait itself is ``PlannerTuning.probe_after``).
_PROBE_GROWTH = 4


@dataclass(frozen=True)
class Pushback:
    """The key-wide ceiling after the service pushed back on creates, as last changed anywhere.

    After a rate refusal (:class:`~framecast.service.refusals.RefusalKind`) the ceiling drops to what
    runs and climbs back by one per create that goes through, lifted after `base`
    (``PlannerTuning.probe_after``) of them; after a concurrency refusal it is the learned cap
    (`cap`), held, and probed one above after `probe_after` creates (twice as many after each
    refused probe, at most four times `base`): a probe the service accepts is a higher cap.
    `ceiling` counts every process's tasks on the key (None: none binds); `successes`: creates
    through since the last change; `rev` orders changes across processes (0: never changed).
    """

    ceiling: float | None = None
    successes: int = 0
    rev: int = 0
    cap: bool = False
    probe_after: int = PlannerTuning.probe_after
    base: int = dataclasses.field(default=PlannerTuning.probe_after, compare=False)

    @property
    def probing(self) -> bool:
        """Whether one task above the learned cap may be tried now (see :meth:`limit`)."""
        return self.cap and self.ceiling is not None and self.successes >= self.probe_after

    def limit(self) -> float | None:
        """The most tasks the key may run now: the ceiling, one more while a probe is due."""
        if self.ceiling is None:
            return None
        return self.ceiling + 1 if self.probing else self.ceiling

    def refused(self, refusal: RefusalKind, running: int, rev: int) -> Pushback:
        """After a create refused with `running` tasks of the key on the service (change `rev`)."""
        ceiling = float(max(1, running))
        if refusal is RefusalKind.RATE:
            return Pushback(ceiling=ceiling, successes=0, rev=rev, base=self.base)
        # The service counts no more of the key's tasks than we do (a task it finished may not be
        # seen yet): the cap is at most `running`, so holding there never needs a collapse below.
        after = min(_PROBE_GROWTH * self.base, 2 * self.probe_after) if self.probing else self.probe_after
        if not self.cap:
            after = self.base
        return Pushback(ceiling=ceiling, successes=0, rev=rev, cap=True, probe_after=after, base=self.base)

    def went_through(self, rev: int) -> Pushback:
        """After a create that went through (the ceiling unchanged when none binds)."""
        if self.ceiling is None:
            return self
        successes = self.successes + 1
        if self.cap:
            return dataclasses.replace(self, successes=successes, rev=rev)
        # Additive increase: one more task per create that went through, until none binds.
        raised = None if successes > self.base else self.ceiling + 1
        return Pushback(ceiling=raised, successes=successes, rev=rev, base=self.base)

    def seen_running(self, running: int, rev: int) -> Pushback | None:
        """The key runs `running` tasks: above a learned cap while probing, the cap is higher.

        Only a probe counts: other processes' tasks are read from a cached view, which may still
        count a task that ended, and must not pass for a higher cap.
        """
        if self.probing and self.ceiling is not None and running > self.ceiling:
            return Pushback(
                ceiling=float(running), successes=0, rev=rev, cap=True, probe_after=self.base, base=self.base
            )
        return None

    def newer_than(self, other: Pushback) -> bool:
        """Whether this change wins over `other` (a later revision; at a tie, the lower ceiling)."""
        if self.rev != other.rev:
            return self.rev > other.rev
        mine = math.inf if self.ceiling is None else self.ceiling
        theirs = math.inf if other.ceiling is None else other.ceiling
        return mine < theirs


@dataclass(frozen=True)
class Share:
    """What one process's planner has on the key (published; read back for the others)."""

    demand: float = 0.0
    running: int = 0
    pushback: Pushback = Pushback()

    @property
    def active(self) -> bool:
        """Whether the process is spending the key's budget now (its tasks need requests)."""
        return self.running > 0 or self.demand > 0

    def to_json(self) -> str:
        """The payload stored in Redis (after the server time)."""
        p = self.pushback
        return json.dumps(
            {
                "d": round(self.demand, 3),
                "r": self.running,
                "c": p.ceiling,
                "s": p.successes,
                "v": p.rev,
                "k": int(p.cap),
                "p": p.probe_after,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str) -> Share:
        """Parse a payload; raises ValueError (or KeyError/TypeError) on one that is not ours."""
        data = json.loads(raw)
        ceiling = data.get("c")
        return cls(
            demand=max(0.0, float(data["d"])),
            running=max(0, int(data["r"])),
            pushback=Pushback(
                ceiling=None if ceiling is None else float(ceiling),
                successes=int(data.get("s", 0)),
                rev=int(data.get("v", 0)),
                # Written by a version that learns caps ("k", "p"); an older one's field has neither.
                cap=bool(data.get("k", 0)),
                probe_after=max(1, int(data.get("p", PlannerTuning.probe_after))),
            ),
        )


@dataclass(frozen=True)
class SharedView:
    """The other live processes on the key, summed (the empty view: nobody else)."""

    demand: float = 0.0  # requests their running tasks need within the next window
    running: int = 0  # their tasks on the service
    processes: int = 0  # live processes publishing for the key
    active: int = 0  # of those, the ones with tasks on the service
    pushback: Pushback = Pushback()  # the freshest pushback change among them


def summed(payloads: list[str]) -> SharedView:
    """The other processes' payloads (:meth:`Share.to_json`) summed into one view.

    A payload this version cannot parse is skipped: planning never fails on it.
    """
    demand, running, processes, active = 0.0, 0, 0, 0
    pushback = Pushback()
    for payload in payloads:
        try:
            share = Share.from_json(payload)
        except (ValueError, KeyError, TypeError):
            continue  # not a field this version understands: ignore rather than fail planning
        demand += share.demand
        running += share.running
        processes += 1
        active += share.active
        if share.pushback.newer_than(pushback):
            pushback = share.pushback
    return SharedView(demand=demand, running=running, processes=processes, active=active, pushback=pushback)
