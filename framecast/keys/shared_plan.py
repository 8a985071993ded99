"""What each process publishes for one API key, and reads of the others', through Redis (``REDIS_URL``).

With several processes on one key the :class:`~framecast.keys.shared_budget.RedisBudget` keeps the
key's window safe; what else they must know of each other (the planner's demand, tasks and
pushback: :mod:`framecast.planner.shared`) each publishes here as a payload, and reads the others'.
What a payload means is the caller's: :class:`SharedPlanState` publishes any :class:`Payload`
and hands the others' payload texts to its `read`.

One hash per key, ``framecast:plan:<key_id>`` (``key_id`` from
:func:`~framecast.keys.shared_budget.budget_key_id`: an HMAC under ``REDIS_KEY_SECRET``, never the
key), one field per process (:attr:`SharedPlanState.owner`), each stamped with the Redis server
time of its last write: the publishing script drops fields older than
:attr:`SharedPlanState.stale_after` (two windows), so a dead process stops counting. One round trip
publishes ours and reads the others' every window/4 (of the clock), from a background task; the
reader reads only the cached :attr:`~SharedPlanState.view` (it never waits for Redis).

Redis unreachable: the view falls back to "nobody else" and the outage is logged once; it also
expires on its own if no refresh succeeded for two windows.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from framecast.clock import Clock
from framecast.keys.redis_names import redis_error

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = ["KEY_PREFIX", "Payload", "SharedPlanState"]

log = logging.getLogger(__name__)

KEY_PREFIX = "framecast:plan:"
#: Real seconds between refreshes at the least, however small the window (keeps Redis calm).
_MIN_PERIOD = 0.02
#: Real seconds one refresh may take before it counts as failed.
_CALL_TIMEOUT = 2.0

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

#: What the others' payloads read as (see :attr:`SharedPlanState.view`).
V = TypeVar("V")


class Payload(Protocol):
    """What one process publishes for the key: its text in Redis (after the server time)."""

    def to_json(self) -> str: ...


class SharedPlanState(Generic[V]):
    """One process's side of a key's shared state (see the module docstring).

    `window` is the key's budget window in `clock` seconds; a clock with a ``scale``
    (ScaledClock) is converted to real time for Redis. `read` turns the other live processes'
    payloads into the view; `nobody` is the view without them. Attach what to publish with
    :meth:`attach`, then :meth:`start` the refresh task; :meth:`aclose` withdraws this process's
    payload. :meth:`refresh` does one round trip (the task calls it every :attr:`period`).
    """

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        key_id: str,
        clock: Clock,
        window: float,
        read: Callable[[list[str]], V],
        nobody: V,
        owner: str | None = None,
    ) -> None:
        if not key_id or any(c.isspace() for c in key_id):
            raise ValueError("key_id must be a non-empty word")
        if not window > 0:
            raise ValueError("window must be > 0")
        self.key_id = key_id
        self.key = f"{KEY_PREFIX}{key_id}"
        # One field per instance: two accounts on the same key in one process (a key set again
        # while jobs still run on the old account) each count their own tasks.
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
        self._read = read
        self._nobody = nobody
        self._reader: Callable[[], Payload] | None = None
        self._listener: Callable[[], None] | None = None
        self._view = nobody
        self._read_at = -math.inf  # clock monotonic time of the last successful refresh
        self._outage = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<SharedPlanState key_id={self.key_id} owner={self.owner} view={self.view!r}>"

    # -- the reader's side --------------------------------------------------------------------------
    def attach(self, reader: Callable[[], Payload], listener: Callable[[], None] | None = None) -> None:
        """Publish what `reader()` says at each refresh; call `listener()` when the view changed."""
        self._reader = reader
        self._listener = listener

    @property
    def view(self) -> V:
        """The others' payloads as last read (nobody, when Redis has not answered for two windows)."""
        if self._clock.monotonic() - self._read_at > self.stale_after:
            return self._nobody
        return self._view

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the refresh task (in the running event loop); idempotent. Attach a reader first."""
        if self._closed:
            raise RuntimeError("the shared plan state is closed")
        if self._reader is None:
            raise RuntimeError("nothing attached to publish")
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="framecast-plan-share")

    async def aclose(self) -> None:
        """Stop refreshing and withdraw this process's payload (best effort: it expires anyway)."""
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
        if self._reader is None:
            raise RuntimeError("nothing attached to publish")
        payload = self._reader()
        try:
            async with asyncio.timeout(_CALL_TIMEOUT):
                raw = await self._publish(
                    keys=[self.key], args=[self.owner, payload.to_json(), self._ms(self.stale_after)]
                )
        except (redis_error(), OSError, TimeoutError) as exc:
            self._went_down(exc)
            return False
        if self._outage:
            self._outage = False
            log.info("Redis reachable again for the shared planning state")
        self._set_view(self._read(_payloads(raw)), read_at=self._clock.monotonic())
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
        self._set_view(self._nobody, read_at=self._read_at)

    def _set_view(self, view: V, *, read_at: float) -> None:
        before = self.view
        self._view, self._read_at = view, read_at
        if self.view != before and self._listener is not None:
            self._listener()

    def _ms(self, clock_seconds: float) -> int:
        """Clock seconds as real milliseconds for Redis."""
        return max(1, math.ceil(clock_seconds / self._scale * 1000))


def _payloads(raw: list[object]) -> list[str]:
    """The others' payloads from the publishing script's answer (field, "<ms> <payload>", ...)."""
    texts = (value.decode() if isinstance(value, bytes) else str(value) for value in raw[1::2])
    return [text.partition(" ")[2] for text in texts]
