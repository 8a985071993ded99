"""Benchmark of the shared request budget (framecast.keys.budget.RequestBudget).

Run from the repository root:  python3 benchmarks/bench_budget.py [--quick]

Measures the budget's own overhead (acquisitions at a limit that never binds), the cost of many
parked waiters, and grant latency and throughput under contention at a limit that does bind.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from framecast.clock import ScaledClock, SystemClock  # noqa: E402
from framecast.config import Secret  # noqa: E402
from framecast.keys.budget import RequestBudget  # noqa: E402
from framecast.keys.spent import SpentRequests  # noqa: E402
from framecast.values.service_requests import Priority  # noqa: E402

Row = tuple[str, int, float, str]


async def sequential(n: int) -> Row:
    """One caller, slot after slot, limit never reached: the pure per-acquisition overhead."""
    budget = RequestBudget(10**9, 60.0, clock=SystemClock())
    t0 = time.perf_counter()
    for _ in range(n):
        async with budget.slot():
            pass
    dt = time.perf_counter() - t0
    return ("sequential, limit not binding", n, dt, f"{dt / n * 1e6:.2f} us/acquisition")


async def sequential_recorded(n: int) -> Row:
    """As :func:`sequential`, with every grant and end recorded on disk (framecast.keys.spent)."""
    with tempfile.TemporaryDirectory() as folder:
        clock = SystemClock()
        spent = SpentRequests.open(Path(folder) / "spent", window=60.0, clock=clock)
        budget = RequestBudget(10**9, 60.0, clock=clock, spent=spent.on_key(Secret("sk-bench")))
        t0 = time.perf_counter()
        for _ in range(n):
            async with budget.slot():
                pass
        dt = time.perf_counter() - t0
        await spent.flush()  # the writer thread's share: until the last line is written
        written = time.perf_counter() - t0
        await spent.close()
    result = f"{dt / n * 1e6:.2f} us/acquisition on the loop; all written after {written:.2f} s"
    return ("sequential, each request recorded on disk", n, dt, result)


async def many_keys(n: int, *, recorded: bool) -> float:
    """Seconds of `n` requests spread over 1,000 keys of 16 a minute, time running x1000 (each key
    sends about 6 a minute: under its limit), recorded on disk or not."""
    with tempfile.TemporaryDirectory() as folder:
        clock = ScaledClock(1000)
        spent = SpentRequests.open(Path(folder) / "spent", window=60.0, clock=clock) if recorded else None
        budgets = [
            RequestBudget(16, 60.0, clock=clock, spent=spent.on_key(Secret(f"sk-{i}")) if spent else None)
            for i in range(1000)
        ]
        t0 = time.perf_counter()
        for i in range(n):
            async with budgets[i % 1000].slot():
                pass
        dt = time.perf_counter() - t0
        if spent is not None:
            await spent.close()
    return dt


async def many_keys_row(n: int) -> Row:
    """The record's cost where each key's window holds what real keys hold (the row above keeps every
    request of the run in one window, so each rewrite of the file formats all of them)."""
    bare, recorded = await many_keys(n, recorded=False), await many_keys(n, recorded=True)
    result = (
        f"{recorded / n * 1e6:.2f} us/acquisition on the loop (the same run without: {bare / n * 1e6:.2f})"
    )
    return ("1000 keys at their rate, recorded on disk", n, recorded, result)


async def concurrent(n: int) -> Row:
    """n tasks each take one slot at once, limit never reached (includes task creation)."""
    budget = RequestBudget(10**9, 60.0, clock=SystemClock())

    async def one() -> None:
        async with budget.slot(Priority.NORMAL):
            await asyncio.sleep(0)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    dt = time.perf_counter() - t0
    return (f"{n} concurrent tasks, not binding", n, dt, f"{dt / n * 1e6:.2f} us/acquisition")


async def baseline_tasks(n: int) -> Row:
    """The same task pattern without a budget, to separate asyncio's cost from the budget's."""

    async def one() -> None:
        await asyncio.sleep(0)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    dt = time.perf_counter() - t0
    return (f"{n} concurrent tasks, no budget", n, dt, f"{dt / n * 1e6:.2f} us/task (baseline)")


async def parked(n: int) -> Row:
    """n waiters queued behind a full budget; all granted together one window after it frees."""
    window = 0.05
    budget = RequestBudget(n, window, clock=SystemClock())
    gate = asyncio.Event()

    async def hold() -> None:
        async with budget.slot():
            await gate.wait()

    holders = [asyncio.create_task(hold()) for _ in range(n)]  # every slot in flight
    await asyncio.sleep(0)

    async def wait_one() -> None:
        async with budget.slot(random.choice(list(Priority))):
            pass

    t0 = time.perf_counter()
    waiters = [asyncio.create_task(wait_one()) for _ in range(n)]
    await asyncio.sleep(0)
    enqueue = time.perf_counter() - t0
    assert budget.waiting == n, budget.waiting
    gate.set()
    await asyncio.gather(*holders)
    t1 = time.perf_counter()
    await asyncio.gather(*waiters)
    drain = time.perf_counter() - t1
    return (
        f"{n} parked waiters",
        n,
        enqueue + drain,
        f"enqueue {enqueue / n * 1e6:.1f} us each; all granted {(drain - window) * 1e3:.1f} ms after the window",
    )


async def cancel_storm(n: int) -> Row:
    """n parked waiters all cancelled: lazy removal must keep this linear."""
    budget = RequestBudget(1, 3600.0, clock=SystemClock())
    async with budget.slot():
        pass

    async def wait_one() -> None:
        async with budget.slot():
            pass

    tasks = [asyncio.create_task(wait_one()) for _ in range(n)]
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    dt = time.perf_counter() - t0
    assert budget.waiting == 0
    budget.close()
    return (f"{n} waiters cancelled", n, dt, f"{dt / n * 1e6:.2f} us/cancel")


async def contention(
    limit: int, window: float, requests: int, workers: int, hold: float
) -> tuple[Row, list[str]]:
    """Binding limit on the real clock: throughput against the ideal and grant latency per priority."""
    budget = RequestBudget(limit, window, clock=SystemClock())
    latencies: dict[Priority, list[float]] = {p: [] for p in Priority}
    remaining = [requests]
    rng = random.Random(1)

    async def worker() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            prio = rng.choice(list(Priority))
            t = time.perf_counter()
            async with budget.slot(prio):
                latencies[prio].append(time.perf_counter() - t)
                await asyncio.sleep(hold)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    dt = time.perf_counter() - t0
    # `limit` slots in parallel, each busy for `hold` and then blocked for `window` (the last round
    # does not wait for its window).
    rounds = requests / limit
    ideal = rounds * hold + (rounds - 1) * window
    row = (
        f"contention {limit}/{window * 1e3:.0f}ms, {workers} workers, hold {hold * 1e3:.0f}ms",
        requests,
        dt,
        f"{requests / dt:.0f} req/s, {ideal / dt * 100:.1f}% of ideal",
    )
    notes = []
    for prio, values in latencies.items():
        values.sort()
        p50 = statistics.median(values)
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        notes.append(
            f"    {prio.name:<6} n={len(values):<5} wait p50 {p50 * 1e3:7.1f} ms   p99 {p99 * 1e3:7.1f} ms"
        )
    return row, notes


async def scaled(limit: int, window: float, scale: float, requests: int) -> Row:
    """The default 16/60 budget under a ScaledClock, as the tests use it."""
    clock = ScaledClock(scale)
    budget = RequestBudget(limit, window, clock=clock)

    async def one() -> None:
        async with budget.slot():
            await asyncio.sleep(0)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(requests)))
    dt = time.perf_counter() - t0
    ideal = (requests / limit - 1) * window / scale
    return (
        f"{limit}/{window:g}s under ScaledClock({scale:g})",
        requests,
        dt,
        f"ideal {ideal:.2f} s real, overshoot {(dt - ideal) * 1e3:.0f} ms",
    )


async def main(quick: bool) -> None:
    k = 1 if quick else 10
    rows: list[Row] = []
    notes: list[str] = []
    gc.collect()
    rows.append(await sequential(10_000 * k))
    rows.append(await sequential_recorded(10_000 * k))
    rows.append(await many_keys_row(10_000 * k))
    rows.append(await baseline_tasks(1_000 * k))
    rows.append(await concurrent(1_000 * k))
    rows.append(await parked(1_000 * k))
    rows.append(await cancel_storm(1_000 * k))
    row, extra = await contention(16, 0.05, 320 if quick else 1600, 200, 0.002)
    rows.append(row)
    notes.extend(extra)
    rows.append(await scaled(16, 60.0, 600.0, 160 if quick else 480))

    width = max(len(r[0]) for r in rows)
    print(f"{'scenario':<{width}}  {'ops':>7}  {'wall s':>7}  result")
    print("-" * (width + 60))
    for name, ops, seconds, result in rows:
        print(f"{name:<{width}}  {ops:>7}  {seconds:>7.3f}  {result}")
    print()
    print("grant latency under contention (time waiting for a slot, by priority):")
    print("\n".join(notes))
    print(f"\npython {sys.version.split()[0]}, {sys.platform}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the work (a few seconds)")
    args = parser.parse_args()
    asyncio.run(main(args.quick))
