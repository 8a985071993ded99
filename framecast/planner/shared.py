"""What the planners of one API key share across processes, through Redis (``REDIS_URL``).

With several processes on one key the :class:`~framecast.keys.shared_budget.RedisBudget` keeps the
key's window safe, but each planner would still admit tasks as if the whole budget were its own
(more tasks than the key can poll in time, starts told too early). So each process publishes per
key its ``demand`` (requests its running tasks need within the next window), its ``running`` tasks
and its pushback state, and reads the others'.

One hash per key, ``framecast:plan:<key_id>`` (``key_id`` from
:func:`~framecast.keys.shared_budget.budget_key_id`: an HMAC under ``REDIS_KEY_SECRET``, never the
key), one field per process (:attr:`SharedPlanState.owner`), each stamped with the Redis server
time of its last write: the publishing script drops fields older than
:attr:`SharedPlanState.stale_after` (two windows), so a dead process stops counting. One round trip
publishes ours and reads the others' every window/4 (of the clock), from a background task; the
planner reads only the cached :class:`SharedView` (admission never waits for Redis).

Pushback (:class:`Pushback`: what a refused create does to the ceiling) is one key-wide fact, so it
spreads as the *latest* change: each change carries a revision one above every one seen, and every
planner adopts the freshest (ties: the lower ceiling).

Redis unreachable: the view falls back to "nobody else" and the outage is logged once; it also
expires on its own if no refresh succeeded for two windows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from framecast.clock import Clock
from framecast.keys.redis_names import redis_error
from framecast.planner.tuning import PlannerTuning
from framecast.values.service_requests import RefusalKind

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = [
    "KEY_PREFIX",
    "Pushback",
    "Share",
    "SharedPlanState",
    "SharedView",
]

log = logging.getLogger(__name__)

KEY_PREFIX = "framecast:plan:"
#: Real seconds between refreshes at the least, however small the window (keeps Redis calm).
_MIN_PERIOD = 0.02
#: Real seconds one refresh may take before it counts as failed.
_CALL_TIMEOUT = 2.0
#: How far a refused probe's wait may grow (it doubles with each probe the service refuses): two
#: doublings (a rule, not a tuned figure: the wait itself is ``PlannerTuning.probe_after``).
_PROBE_GROWTH = 4

# KEYS[1] plan hash; ARGV owner, payload, stale_ms. Writes "<server ms> <payload>" for the owner,
# drops fields not refreshed for stale_ms, and returns the other live fields (field, value, ...).
_PUBLISH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now) .. ' ' .. ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local at = tonumber(string.match(all[i + 1], '^(%d+) '))
  if at == nil or at < now - stale then
    redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] ~= ARGV[1] then
    table.insert(out, all[i])
    table.insert(out, all[i + 1])
  end
end
redis.call('PEXPIRE', KEYS[1], stale)
return out
"""


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


_NOBODY = SharedView()


class SharedPlanState:
    """One process's side of a key's shared planning state (see the module docstring).

    `window` is the key's budget window in `clock` seconds; a clock with a ``scale``
    (ScaledClock) is converted to real time for Redis. Attach the planner's reading with
    :meth:`attach`, then :meth:`start` the refresh task; :meth:`aclose` withdraws this process's
    share. :meth:`refresh` does one round trip (the task calls it every :attr:`period`).
    """

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        key_id: str,
        clock: Clock,
        window: float,
        owner: str | None = None,
    ) -> None:
        if not key_id or any(c.isspace() for c in key_id):
            raise ValueError("key_id must be a non-empty word")
        if not window > 0:
            raise ValueError("window must be > 0")
        self.key_id = key_id
        self.key = f"{KEY_PREFIX}{key_id}"
        # One field per planner instance: two accounts on the same key in one process (a key set
        # again while jobs still run on the old account) each count their own tasks.
        self.owner = owner or uuid.uuid4().hex[:16]
        self._redis = redis
        self._clock = clock
        self._scale = float(getattr(clock, "scale", 1.0))  # clock seconds per real second
        self.window = float(window)
        #: Clock seconds between refreshes.
        self.period = max(self.window / 4, _MIN_PERIOD * self._scale)
        #: Clock seconds after which a silent process (or our own stale cache) stops counting.
        self.stale_after = max(2 * self.window, 4 * self.period)
        self._publish = redis.register_script(_PUBLISH)
        self._reader: Callable[[], Share] = Share
        self._listener: Callable[[], None] | None = None
        self._view = _NOBODY
        self._read_at = -math.inf  # clock monotonic time of the last successful refresh
        self._outage = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        view = self.view
        return (
            f"<SharedPlanState key_id={self.key_id} owner={self.owner} others={view.processes} "
            f"demand={view.demand:g} running={view.running}>"
        )

    # -- the planner's side -------------------------------------------------------------------------
    def attach(self, reader: Callable[[], Share], listener: Callable[[], None] | None = None) -> None:
        """Publish what `reader()` says at each refresh; call `listener()` when the view changed."""
        self._reader = reader
        self._listener = listener

    @property
    def view(self) -> SharedView:
        """The others' share as last read (nobody, when Redis has not answered for two windows)."""
        if self._clock.monotonic() - self._read_at > self.stale_after:
            return _NOBODY
        return self._view

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the refresh task (in the running event loop); idempotent."""
        if self._closed:
            raise RuntimeError("the shared plan state is closed")
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="framecast-plan-share")

    async def aclose(self) -> None:
        """Stop refreshing and withdraw this process's share (best effort: it expires anyway)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # Bounded: a cancellation swallowed inside the Redis client must not hold up shutdown
            # (the loop below also ends at its next turn, since it checks `_closed`).
            done, _ = await asyncio.wait({task}, timeout=_CALL_TIMEOUT)
            if done:
                await asyncio.gather(task, return_exceptions=True)  # its outcome, retrieved
            else:
                log.warning("the shared planning state's refresh did not stop when cancelled")
        try:
            async with asyncio.timeout(_CALL_TIMEOUT):
                await self._redis.hdel(self.key, self.owner)
        except (redis_error(), OSError, TimeoutError):
            pass  # the field goes stale within two windows

    async def refresh(self) -> bool:
        """Publish ours and read the others' (one round trip); False when Redis did not answer."""
        share = self._reader()
        try:
            async with asyncio.timeout(_CALL_TIMEOUT):
                raw = await self._publish(
                    keys=[self.key], args=[self.owner, share.to_json(), self._ms(self.stale_after)]
                )
        except (redis_error(), OSError, TimeoutError) as exc:
            self._went_down(exc)
            return False
        if self._outage:
            self._outage = False
            log.info("Redis reachable again for the shared planning state")
        self._set_view(_sum(raw), read_at=self._clock.monotonic())
        return True

    # -- internals --------------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._closed:
            await self.refresh()
            await self._clock.sleep(self.period)

    def _went_down(self, exc: BaseException) -> None:
        if not self._outage:
            self._outage = True
            # The class name only: messages may carry the address, and the URL may carry a password.
            log.warning(
                "Redis unreachable for the shared planning state (%s); planning on this process's own "
                "view until it is back",
                type(exc).__name__,
            )
        self._set_view(_NOBODY, read_at=self._read_at)

    def _set_view(self, view: SharedView, *, read_at: float) -> None:
        before = self.view
        self._view, self._read_at = view, read_at
        if self.view != before and self._listener is not None:
            self._listener()

    def _ms(self, clock_seconds: float) -> int:
        """Clock seconds as real milliseconds for Redis."""
        return max(1, math.ceil(clock_seconds / self._scale * 1000))


def _sum(raw: list[object]) -> SharedView:
    """The others' fields (as the publishing script returns them) summed into one view."""
    demand, running, processes, active = 0.0, 0, 0, 0
    pushback = Pushback()
    for value in raw[1::2]:
        text = value.decode() if isinstance(value, bytes) else str(value)
        try:
            share = Share.from_json(text.partition(" ")[2])
        except (ValueError, KeyError, TypeError):
            continue  # not a field this version understands: ignore rather than fail planning
        demand += share.demand
        running += share.running
        processes += 1
        active += share.active
        if share.pushback.newer_than(pushback):
            pushback = share.pushback
    return SharedView(demand=demand, running=running, processes=processes, active=active, pushback=pushback)
