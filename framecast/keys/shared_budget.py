"""The request budget of one API key shared by every process through Redis (``REDIS_URL``).

:class:`RedisBudget` is a drop-in for :class:`~framecast.keys.budget.RequestBudget` (same public
interface) for a bot that runs as several processes on one key: together they never send more
than N requests in any rolling window of the key.

The window lives in one Redis sorted set per key, ``framecast:budget:<key_id>`` (``key_id`` is an
HMAC of the key under ``REDIS_KEY_SECRET``, never the key nor a plain hash of it). Each member is one request; its score is the Redis
server time (microseconds) at which it stops counting:

* granted, still in flight: ``now + lease + window``, refreshed every ``lease / 3`` while the
  request runs, so the slot of a process that died comes back on its own;
* ended: ``end + window``. As in RequestBudget the window counts from the request's *end*, not its
  grant: counting from the grant would let a slow request and a fast later one land in one window
  at the server (see the proof in :mod:`framecast.keys.budget`, which holds here across processes).

A grant is one atomic Lua script (EVALSHA): drop members whose score has passed, and if fewer than
N remain add ours and answer "granted", else answer how long until the earliest one can leave. The
script reads the server's clock (``TIME``), so processes with skewed clocks agree; the local clock
only paces the waiting. A 429 pause is shared too: ``framecast:budget:<key_id>:pause`` with a PX
expiry that the grant script honours. Priorities stay local: each process keeps its own heap of
waiters and asks Redis only for a slot for its head waiter.

**Redis losing its data** (a restart without persistence, a flush, a failover to an empty replica)
would empty the window while the key's last requests still count at the service. The grant script
keeps an epoch, ``framecast:budget:<key_id>:epoch`` (a token and the moment it was made), which
each process remembers; a process that finds it gone or changed knows the window was lost since it
last looked, and every grant pauses until a window after the new epoch was made (what the lost
window held is unknown; anything older than a window no longer counts). A process that never saw
an epoch (a fresh start) starts one without a pause.

Without Redis nothing is granted (fail closed: waiting is better than a storm of 429s); the budget
retries with backoff and logs the outage once.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import uuid
from collections.abc import Coroutine
from enum import IntEnum
from types import TracebackType
from typing import TYPE_CHECKING, Any

from framecast.backoff import Backoff
from framecast.clock import Clock
from framecast.config import Secret, Settings
from framecast.keys.budget import Pushback, RequestBudget, SpendRecord
from framecast.keys.redis_names import budget_key_id, connect, redis_error
from framecast.values.service_requests import Priority

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = ["KEY_PREFIX", "RedisBudget", "budget_key_id", "open_budget"]

log = logging.getLogger(__name__)

KEY_PREFIX = "framecast:budget:"
_RELEASE_WAIT = 1.0  # real seconds a caller waits for its release to reach Redis
#: How long a key's epoch outlives its last grant: long enough that no running process sees it
#: expire (which would read as a loss: a needless pause of a window).
_EPOCH_TTL_MS = 30 * 24 * 3600 * 1000

# KEYS[1] window set, KEYS[2] pause key, KEYS[3] epoch key; ARGV limit, window_us, lease_us, member,
# the epoch this process knows ('' for none yet), a token for a new epoch, the epoch's expiry (ms).
# Returns {status, microseconds, epoch}: GRANTED (0), FULL (wait until a slot may free), PAUSED
# (pause left).
_GRANT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local epoch = redis.call('GET', KEYS[3])
if not epoch then
  epoch = ARGV[6] .. ':' .. t[1] .. ':' .. t[2]
  redis.call('SET', KEYS[3], epoch, 'PX', ARGV[7])
else
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
end
if ARGV[5] ~= '' and ARGV[5] ~= epoch then
  -- The window was lost since this process last looked: nothing is granted until a window after
  -- the new epoch began (the lost requests ended before it).
  local s, us = string.match(epoch, ':(%d+):(%d+)$')
  local began = s and tonumber(s) * 1000000 + tonumber(us) or now
  local left = math.ceil((began + window - now) / 1000)
  if left > redis.call('PTTL', KEYS[2]) then redis.call('SET', KEYS[2], '1', 'PX', left) end
end
local pause = redis.call('PTTL', KEYS[2])
if pause > 0 then return {2, pause * 1000, epoch} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now + lease + window, ARGV[4])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], math.ceil((tonumber(last[2]) - now) / 1000) + 1)
  return {0, 0, epoch}
end
local first = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2])
-- Only members still in flight score beyond now + window; any of them ending now frees at now + window.
if first > now + window then first = now + window end
return {1, math.max(1, math.ceil(first - now)), epoch}
"""

# KEYS[1] window set; ARGV window_us, member. The request ended: it counts for one window from now.
_RELEASE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], now + window, ARGV[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.ceil((tonumber(last[2]) - now) / 1000) + 1)
return 1
"""

# KEYS[1] window set; ARGV lease_us, window_us, members...: still in flight, keep counting them.
_KEEP = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[2])
local score = now + tonumber(ARGV[1]) + window
for i = 3, #ARGV do
  -- A member that ended meanwhile scores at most now + window: leave it alone.
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) > now + window then redis.call('ZADD', KEYS[1], 'XX', 'GT', score, ARGV[i]) end
end
redis.call('PEXPIRE', KEYS[1], math.ceil((score - now) / 1000) + 1)
return 1
"""

# KEYS[1] pause key; ARGV ms. Lengthen the shared pause, never shorten it; returns the pause left (ms).
_PAUSE = """
local ms = tonumber(ARGV[1])
local left = redis.call('PTTL', KEYS[1])
if left < ms then redis.call('SET', KEYS[1], '1', 'PX', ms) return ms end
return left
"""


class _Answer(IntEnum):
    GRANTED = 0
    FULL = 1
    PAUSED = 2


def open_budget(
    settings: Settings, key: Secret, *, clock: Clock, redis: aioredis.Redis | None, spent: SpendRecord | None
) -> RequestBudget | RedisBudget:
    """The budget of `key`: shared through `redis` when there is one, else this process's (`spent`)."""
    limit, window = settings.gen_rate_limit.requests, settings.gen_rate_limit.window
    base, cap = settings.gen_backoff_base, settings.gen_backoff_max
    if redis is None:
        return RequestBudget(limit, window, clock=clock, backoff_base=base, backoff_max=cap, spent=spent)
    if settings.redis_key_secret is None:
        raise ValueError("REDIS_KEY_SECRET is needed with REDIS_URL")
    key_id = budget_key_id(key, settings.redis_key_secret)
    return RedisBudget(
        limit, window, clock=clock, redis=redis, key_id=key_id, backoff_base=base, backoff_max=cap
    )


class _Waiter:
    __slots__ = ("future", "priority", "seq")

    def __init__(self, priority: int, seq: int, future: asyncio.Future[str]) -> None:
        self.priority = priority
        self.seq = seq
        self.future = future

    def __lt__(self, other: _Waiter) -> bool:
        return (self.priority, self.seq) < (other.priority, other.seq)


class _Slot:
    """The async context manager returned by :meth:`RedisBudget.slot`."""

    __slots__ = ("_budget", "_member", "_priority")

    def __init__(self, budget: RedisBudget, priority: int) -> None:
        self._budget = budget
        self._priority = priority
        self._member: str | None = None

    async def __aenter__(self) -> None:
        self._member = await self._budget._acquire(self._priority)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        member, self._member = self._member, None
        if member is not None:
            # The request may have reached the server even if it failed or was cancelled half-way,
            # so its end always counts.
            await self._budget._release(member)


class RedisBudget:
    """At most `limit` requests per rolling `window` seconds for one key, across every process.

    Same use as :class:`~framecast.keys.budget.RequestBudget`: ``async with budget.slot(priority): <one
    HTTP request>``, :meth:`penalize` on a 429, :meth:`reward` on a success. `window`, `lease` and
    the backoff knobs are in seconds of `clock`; a clock with a ``scale`` (ScaledClock) is
    converted to real seconds for Redis. Build it with :meth:`from_url`, or pass a client (best
    with redis-py's own retries off, ``retry=Retry(NoBackoff(), 0)``: the budget retries itself).
    """

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        clock: Clock,
        redis: aioredis.Redis,
        key_id: str,
        backoff_base: float = 2.0,
        backoff_max: float = 120.0,
        rng: random.Random | None = None,
        lease: float = 60.0,
        retry_base: float = 0.1,
        retry_max: float = 5.0,
        owns_redis: bool = False,
    ) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        if not window > 0:
            raise ValueError("window must be > 0")
        if backoff_base <= 0 or backoff_max <= 0:
            raise ValueError("backoff_base and backoff_max must be > 0")
        if not lease > 0:
            raise ValueError("lease must be > 0")
        if not key_id or any(c.isspace() for c in key_id):
            raise ValueError("key_id must be a non-empty word")
        self.limit = int(limit)
        self.window = float(window)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.lease = float(lease)
        self.key_id = key_id
        self.key = f"{KEY_PREFIX}{key_id}"
        self.pause_key = f"{self.key}:pause"
        self.epoch_key = f"{self.key}:epoch"
        self._clock = clock
        self._scale = float(getattr(clock, "scale", 1.0))  # clock seconds per real second
        self._rng = rng or random.Random()
        self._redis = redis
        self._owns_redis = owns_redis
        self._grant = redis.register_script(_GRANT)
        self._end = redis.register_script(_RELEASE)
        self._keep = redis.register_script(_KEEP)
        self._pause = redis.register_script(_PAUSE)
        self._retry = Backoff(base=retry_base, cap=retry_max, rng=self._rng)
        self._origin = uuid.uuid4().hex[:12]  # members are unique across processes
        self._epoch = ""  # the key's epoch as this process last saw it (see the module docstring)
        self._members = itertools.count()
        self._in_flight = 0
        self._held: set[str] = set()  # members granted here and not yet ended
        self._waiters: list[_Waiter] = []  # heap; cancelled entries are dropped lazily
        self._live_waiters = 0
        self._seq = itertools.count()
        # The one 429 rule (framecast.keys.budget.Pushback): the pause, and our share of the window.
        self._push = Pushback(self.limit, backoff_base=backoff_base, backoff_max=backoff_max, rng=self._rng)
        self._granted_total = 0
        self._round_trips = 0
        self._outage = False
        self._wake = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._pause_write: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: Secret | str,
        api_key: Secret | str,
        secret: Secret | str,
        limit: int,
        window: float,
        *,
        clock: Clock,
        **knobs: Any,
    ) -> RedisBudget:
        """A budget with its own Redis connection pool (closed by :meth:`aclose`), named under `secret`."""
        client = connect(url)
        key_id = budget_key_id(api_key, secret)
        return cls(limit, window, clock=clock, redis=client, key_id=key_id, owns_redis=True, **knobs)

    # -- public API ---------------------------------------------------------------------------------
    def slot(self, priority: Priority | int = Priority.NORMAL) -> _Slot:
        """Wait for a slot (priority first, FIFO within a priority, in this process) and hold it.

        The window counts from the request's end (the ``async with`` block's exit). A caller
        cancelled while waiting leaves no trace, here or in Redis.
        """
        return _Slot(self, int(priority))

    def penalize(self, retry_after: float | None = None) -> float:
        """Record a 429: pause every grant of every process and return the pause in clock seconds.

        The delay follows RequestBudget's rule (Retry-After honoured, else exponential backoff, both
        jittered); the local pause starts at once and the shared one is written to Redis before
        this process releases any slot, so no other process slips a request in between.
        """
        delay, new = self._push.penalize(self._clock.monotonic(), retry_after)
        if new:
            log.info(
                "shared request budget paused for %.2fs after a 429 (streak %d)", delay, self._push.streak
            )
            self._share_pause(delay)
            self._poke()
        return delay

    def reward(self) -> None:
        """Record a success: the next 429 starts the backoff from the beginning."""
        if self._push.reward():
            self._poke()  # leave probing

    # -- introspection ------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Requests of this process currently holding a slot."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Callers of this process waiting for a slot."""
        return self._live_waiters

    @property
    def streak(self) -> int:
        """Consecutive 429s seen by this process since its last success."""
        return self._push.streak

    @property
    def granted_total(self) -> int:
        """Slots granted to this process since creation."""
        return self._granted_total

    @property
    def allowed(self) -> int:
        """Requests per window this process allows itself (the limit, less after 429s)."""
        return int(self._push.allowed)

    @property
    def round_trips(self) -> int:
        """Redis script calls made so far (benchmarks)."""
        return self._round_trips

    def paused_for(self) -> float:
        """Clock seconds left in a 429 pause, as far as this process knows (0 when not paused)."""
        return max(0.0, self._push.paused_until - self._clock.monotonic())

    def available(self) -> int:
        """Slots this process could still take without asking Redis (a local upper bound: the shared
        count lives in Redis only, and reading it would cost a round trip)."""
        return max(0, self.allowed - self._in_flight)

    def used(self) -> int:
        """Requests this process has in flight (the other processes' are counted in Redis only)."""
        return self._in_flight

    def frees_at(self) -> None:
        """Not known here: the other processes' requests are counted in Redis only."""
        return None

    def close(self) -> None:
        """Stop the internal tasks (waiters still parked stay parked; slots in flight expire in Redis)."""
        self._closed = True
        for task in (self._pump, self._keeper, *self._tasks):
            if task is not None:
                task.cancel()
        self._pump = self._keeper = None

    async def aclose(self) -> None:
        """Let pending releases finish (briefly), :meth:`close`, and close an owned Redis client."""
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=2.0)
        self.close()
        if self._owns_redis:
            await self._redis.aclose()

    def __repr__(self) -> str:
        return (
            f"<RedisBudget {self.limit}/{self.window:g}s key_id={self.key_id} in_flight={self._in_flight} "
            f"waiting={self._live_waiters} streak={self._push.streak}>"
        )

    # -- internals --------------------------------------------------------------------------------
    def _us(self, clock_seconds: float) -> int:
        """Clock seconds as real microseconds for Redis."""
        return max(1, int(clock_seconds / self._scale * 1_000_000))

    def _poke(self) -> None:
        self._wake.set()

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _acquire(self, priority: int) -> str:
        if self._closed:
            raise RuntimeError("the budget is closed")
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, _Waiter(priority, next(self._seq), fut))
        self._live_waiters += 1
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._run(), name="redis-budget")
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # Granted but cancelled before it could run: the request was never sent.
                self._in_flight -= 1
                self._held.discard(fut.result())
                self._spawn(self._forget(fut.result()), "redis-budget-forget")
                self._poke()
            else:
                self._live_waiters -= 1  # its heap entry is skipped lazily
            raise

    async def _release(self, member: str) -> None:
        self._in_flight -= 1
        self._held.discard(member)
        self._poke()  # a probing process may send its next request
        task = self._spawn(self._ended(member), "redis-budget-release")
        # Usually one round trip; during an outage the release goes on in the background rather than
        # holding up the caller (its slot counts as in flight until then, which errs on the safe side).
        await asyncio.wait([task], timeout=_RELEASE_WAIT)

    def _head(self) -> _Waiter | None:
        while self._waiters and self._waiters[0].future.done():
            heapq.heappop(self._waiters)
        return self._waiters[0] if self._waiters else None

    async def _run(self) -> None:
        """Ask Redis for a slot for the head waiter, one at a time, until nobody waits."""
        while self._live_waiters and self._head() is not None:
            now = self._clock.monotonic()
            if now < self._push.paused_until:
                await self._nap(self._push.paused_until - now)
                continue
            if self._push.streak and self._in_flight:
                await self._nap(None)  # after a 429 one request probes; its end pokes us
                continue
            member = f"{self._origin}:{next(self._members)}"
            try:
                self._round_trips += 1
                status, micros, epoch = await self._grant(
                    keys=[self.key, self.pause_key, self.epoch_key],
                    args=[
                        *(self.allowed, self._us(self.window), self._us(self.lease), member),
                        *(self._epoch, self._origin, _EPOCH_TTL_MS),
                    ],
                )
            except redis_error() as exc:
                # The script may have run before the answer was lost: never leave a slot nobody uses.
                self._spawn(self._forget(member), "redis-budget-forget")
                await self._nap(self._outage_delay(exc))
                continue
            self._back_online()
            self._epoch_seen(epoch.decode() if isinstance(epoch, bytes) else str(epoch))
            wait = int(micros) / 1_000_000 * self._scale
            if status == _Answer.GRANTED:
                head = self._head()
                if head is None:  # everyone left while we asked
                    self._spawn(self._forget(member), "redis-budget-forget")
                    break
                heapq.heappop(self._waiters)
                self._live_waiters -= 1
                self._in_flight += 1
                self._granted_total += 1
                self._held.add(member)
                self._ensure_keeper()
                head.future.set_result(member)
            elif status == _Answer.PAUSED:
                self._push.paused_until = max(self._push.paused_until, self._clock.monotonic() + wait)
            else:
                await self._nap(wait)

    def _epoch_seen(self, epoch: str) -> None:
        if self._epoch and epoch != self._epoch:
            log.warning("Redis lost the shared request budget's window; no grants for one window")
        self._epoch = epoch

    async def _nap(self, seconds: float | None) -> None:
        """Sleep `seconds` of the clock (None: indefinitely) or until poked."""
        self._wake.clear()
        poked = asyncio.ensure_future(self._wake.wait())
        waits: set[asyncio.Future[Any]] = {poked}
        if seconds is not None:
            waits.add(asyncio.ensure_future(self._clock.sleep(seconds)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    def _outage_delay(self, exc: BaseException) -> float:
        if not self._outage:
            self._outage = True
            # The class name only: messages may carry the address, and the URL may carry a password.
            log.warning(
                "Redis unreachable for the shared request budget (%s); no grants until it is back",
                type(exc).__name__,
            )
            self._spawn(self._drop_idle_connections(), "redis-budget-drop-idle")
        return self._retry.next()

    def _back_online(self) -> None:
        if self._outage:
            self._outage = False
            log.info("Redis reachable again for the shared request budget")
        self._retry.reset()

    async def _drop_idle_connections(self) -> None:
        # As an outage begins, the pooled connections idle then may be dead sockets that look alive
        # (a reset connection is not seen until used): each would fail once more after Redis is
        # back, and say "unreachable" again. Dropped now, they connect afresh when next taken.
        try:
            await self._redis.connection_pool.disconnect(inuse_connections=False)
        except (redis_error(), OSError) as exc:
            log.debug("dropping idle Redis connections failed (%s)", type(exc).__name__)

    async def _with_retry(self, what: str, call: Any) -> None:
        """Run one Redis write until it succeeds (or the budget closes)."""
        backoff = Backoff(base=0.05 * self._scale, cap=2.0 * self._scale, rng=self._rng)
        while True:
            try:
                self._round_trips += 1
                await call()
                self._back_online()
                return
            except redis_error() as exc:
                log.debug("shared request budget: %s failed (%s), retrying", what, type(exc).__name__)
                delay = self._outage_delay(exc)
                await self._clock.sleep(min(delay, backoff.next()))

    async def _ended(self, member: str) -> None:
        pause = self._pause_write
        if pause is not None and not pause.done():
            # The 429's pause must be in Redis before this slot frees, or another process slips in.
            await asyncio.wait([pause])
        await self._with_retry(
            "release", lambda: self._end(keys=[self.key], args=[self._us(self.window), member])
        )

    async def _forget(self, member: str) -> None:
        await self._with_retry("forget", lambda: self._redis.zrem(self.key, member))

    def _share_pause(self, delay: float) -> None:
        ms = max(1, int(delay / self._scale * 1000))
        previous = self._pause_write

        async def write() -> None:
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            await self._with_retry("pause", lambda: self._pause(keys=[self.pause_key], args=[ms]))

        self._pause_write = self._spawn(write(), "redis-budget-pause")

    def _ensure_keeper(self) -> None:
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.get_running_loop().create_task(
                self._keep_alive(), name="redis-budget-keeper"
            )

    async def _keep_alive(self) -> None:
        """Every lease/3, tell Redis our long requests are still running (a dead process stops)."""
        while self._held:
            await self._clock.sleep(self.lease / 3)
            members = list(self._held)
            if not members:
                break
            try:
                self._round_trips += 1
                await self._keep(
                    keys=[self.key], args=[self._us(self.lease), self._us(self.window), *members]
                )
            except redis_error() as exc:
                self._outage_delay(exc)
