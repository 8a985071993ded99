"""Benchmark of the Redis-backed budget (framecast.keys.shared_budget.RedisBudget) against RequestBudget.

Run from the repository root with Redis on 127.0.0.1:6379:  python3 benchmarks/bench_sharedbudget.py [--quick]

Prints grants per second and Redis round trips per grant: with a limit that never binds (the pure
cost of a grant), and with a binding limit shared by several budgets (separate connections) whose
tasks all compete for one key. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from framecast.clock import SystemClock  # noqa: E402
from framecast.keys.budget import RequestBudget  # noqa: E402
from framecast.keys.shared_budget import KEY_PREFIX, RedisBudget  # noqa: E402

Budget = RequestBudget | RedisBudget


def redis_budget(limit: int, window: float, key_id: str) -> RedisBudget:
    client = aioredis.Redis(host="127.0.0.1", port=6379, retry=Retry(NoBackoff(), 0))
    return RedisBudget(limit, window, clock=SystemClock(), redis=client, key_id=key_id, owns_redis=True)


async def run(budgets: list[Budget], tasks_each: int, seconds: float) -> int:
    """Tasks take slot after slot for `seconds`; returns the grants."""
    stop = time.perf_counter() + seconds
    grants = 0

    async def worker(budget: Budget) -> None:
        nonlocal grants
        while time.perf_counter() < stop:
            async with budget.slot():
                grants += 1

    await asyncio.gather(*(worker(b) for b in budgets for _ in range(tasks_each)))
    return grants


async def case(
    name: str, shared: bool, n: int, limit: int, window: float, tasks: int, seconds: float
) -> None:
    key_id = f"bench-{uuid.uuid4().hex[:10]}"
    budgets: list[Budget]
    if shared:
        budgets = [redis_budget(limit, window, key_id) for _ in range(n)]
    else:
        budgets = [RequestBudget(limit, window, clock=SystemClock())]
    t0 = time.perf_counter()
    grants = await run(budgets, tasks, seconds)
    dt = time.perf_counter() - t0
    trips = sum(b.round_trips for b in budgets if isinstance(b, RedisBudget))
    for b in budgets:
        if isinstance(b, RedisBudget):
            await b.aclose()
        else:
            b.close()
    cleanup = aioredis.Redis()
    await cleanup.delete(
        f"{KEY_PREFIX}{key_id}", f"{KEY_PREFIX}{key_id}:pause", f"{KEY_PREFIX}{key_id}:epoch"
    )
    await cleanup.aclose()
    ceiling = limit / window
    kind = f"redis x{n}" if shared else "in-process"
    trips_text = f"{trips / grants:5.2f}" if shared and grants else "    -"
    print(
        f"{name:<34} {kind:<11} {grants / dt:>10.0f}/s  {trips_text} trips/grant"
        + (f"  (ceiling {ceiling:.0f}/s)" if ceiling < 1e6 else "")
    )


async def main(quick: bool) -> None:
    seconds = 1.0 if quick else 3.0
    print(f"{'case':<34} {'budget':<11} {'grants':>12}  round trips")
    await case("not binding, 1 task", False, 1, 10**9, 60.0, 1, seconds)
    await case("not binding, 1 task", True, 1, 10**9, 60.0, 1, seconds)
    await case("not binding, 4 budgets x 8 tasks", True, 4, 10**9, 60.0, 8, seconds)
    await case("binding 100/0.5s, 20 tasks", False, 1, 100, 0.5, 20, seconds)
    await case("binding 100/0.5s, 3 x 20 tasks", True, 3, 100, 0.5, 20, seconds)
    await case("binding 16/0.25s, 3 x 10 tasks", True, 3, 16, 0.25, 10, seconds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 s per case instead of 3")
    asyncio.run(main(parser.parse_args().quick))
