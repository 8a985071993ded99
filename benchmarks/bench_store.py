"""Benchmark of the SQLite job store (framecast/store.py) with its real settings (WAL, synchronous=FULL).

Usage: ``python3 benchmarks/bench_store.py [--ops 1000] [--history 50000] [--dir data]``

Every write is one ``BEGIN IMMEDIATE`` transaction fsynced before the call returns, so these figures
are mostly the disk's fsync latency. The database is created in a temporary directory under ``--dir``
(default ``data/``, where ``DATABASE_PATH`` lives by default: the same file system the bot writes to)
and removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framecast.jobs import JobKind, JobState, NewJob  # noqa: E402
from framecast.store import JobStore  # noqa: E402

PROMPT = "a slow dolly shot of a lighthouse at dusk, 35mm film, 一只猫 🎬"


@dataclass
class Result:
    """One benchmark row."""

    name: str
    ops: int
    in_flight: int
    seconds: float
    latencies: list[float]  # seconds, one per operation

    @property
    def rate(self) -> float:
        return self.ops / self.seconds

    def pct(self, q: float) -> float:
        """Latency percentile in milliseconds."""
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1000


def new_job(i: int) -> NewJob:
    # 20 members per guild, so the limits are checked but never refuse.
    return NewJob(
        JobKind.VIDEO,
        guild_id=1_000_000 + i // 20,
        channel_id=42,
        user_id=i,
        locale="en-US",
        params={"model": "svc-video-v2.0", "prompt": PROMPT, "width": 1280, "height": 720, "num_frames": 121},
        discord={"interaction_token": "x" * 180, "status_message_id": 1234567890123456789},
    )


async def measure(name: str, ops: int, in_flight: int, op: Callable[[int], Awaitable[object]]) -> Result:
    """Run ``op(0..ops-1)`` with at most ``in_flight`` outstanding; time each call and the whole."""
    latencies: list[float] = []
    gate = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with gate:
            start = time.perf_counter()
            await op(i)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    if in_flight == 1:
        for i in range(ops):
            await one(i)
    else:
        await asyncio.gather(*(one(i) for i in range(ops)))
    return Result(name, ops, in_flight, time.perf_counter() - start, latencies)


def add_history(path: Path, rows: int) -> None:
    """Insert ``rows`` finished jobs directly (one transaction): a bot that has been running for months."""
    conn = sqlite3.connect(path)
    params = json.dumps({"model": "svc-video-v2.0", "prompt": PROMPT}, ensure_ascii=False)
    now = time.time()
    with conn:
        conn.executemany(
            "INSERT INTO jobs (kind, state, guild_id, channel_id, user_id, locale, params, created_at,"
            " updated_at, discord) VALUES ('video', ?, ?, 42, ?, 'en-US', ?, ?, ?, '{}')",
            (
                (
                    JobState.DELIVERED.value if i % 10 else JobState.FAILED.value,
                    2_000_000 + i % 50,
                    i % 5000,
                    params,
                    now,
                    now,
                )
                for i in range(rows)
            ),
        )
    conn.close()


def fsync_baseline(base: Path, ops: int) -> Result:
    """Append 200 bytes + fsync, ``ops`` times: the floor under every synchronous=FULL commit."""
    latencies: list[float] = []
    start = time.perf_counter()
    with open(base / "fsync.bin", "ab") as fh:
        for _ in range(ops):
            t = time.perf_counter()
            fh.write(b"x" * 200)
            fh.flush()
            os.fsync(fh.fileno())
            latencies.append(time.perf_counter() - t)
    return Result("baseline: write + fsync (no SQLite)", ops, 1, time.perf_counter() - start, latencies)


async def run(ops: int, history: int, base: Path) -> list[Result]:
    results: list[Result] = [fsync_baseline(base, ops)]
    store = await JobStore.open(base / "bench.sqlite3")
    try:
        ids: list[int] = []

        async def add(i: int) -> None:
            ids.append((await store.add(new_job(i), member_limit=2, guild_cap=25)).id)

        results.append(await measure("add (limits checked)", ops, 1, add))
        sequential = list(ids)
        results.append(
            await measure(
                "transition queued->submitting",
                ops,
                1,
                lambda i: store.transition(sequential[i], JobState.SUBMITTING, expect=JobState.QUEUED),
            )
        )
        results.append(
            await measure(
                "transition ->running (+task_id)",
                ops,
                1,
                lambda i: store.transition(
                    sequential[i],
                    JobState.RUNNING,
                    expect=JobState.SUBMITTING,
                    task_id=f"t{i}",
                    started_at=1.0,
                ),
            )
        )
        results.append(
            await measure("update progress", ops, 1, lambda i: store.update(sequential[i], progress=i / ops))
        )
        results.append(await measure("get (read)", ops, 1, lambda i: store.get(sequential[i])))
        ids.clear()
        results.append(await measure("add, 32 in flight", ops, 32, lambda i: add(ops + i)))
        concurrent = list(ids)
        results.append(
            await measure(
                "transition, 32 in flight",
                ops,
                32,
                lambda i: store.transition(concurrent[i], JobState.CANCELLED, expect=JobState.QUEUED),
            )
        )
        results.append(await measure(f"active(): {ops} unfinished", 20, 1, lambda i: store.active()))
    finally:
        await store.close()

    if history:
        add_history(base / "bench.sqlite3", history)
        store = await JobStore.open(base / "bench.sqlite3")
        try:
            results.append(
                await measure(
                    f"add, {history} finished jobs in history",
                    ops,
                    1,
                    lambda i: store.add(new_job(3 * ops + i), member_limit=2, guild_cap=25),
                )
            )
            results.append(
                await measure(
                    f"active(): {2 * ops} unfinished + {history} done", 20, 1, lambda i: store.active()
                )
            )
        finally:
            await store.close()
    return results


def print_table(results: list[Result]) -> None:
    header = (
        f"| {'operation':<40} | {'ops':>5} | {'in flight':>9} | {'ops/s':>8} | {'p50 ms':>7} | "
        f"{'p95 ms':>7} | {'p99 ms':>7} | {'max ms':>7} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(cell)) for cell in header.split("|")[1:-1]) + "|")
    for r in results:
        print(
            f"| {r.name:<40} | {r.ops:>5} | {r.in_flight:>9} | {r.rate:>8.0f} | {r.pct(50):>7.2f} | "
            f"{r.pct(95):>7.2f} | {r.pct(99):>7.2f} | {max(r.latencies) * 1000:>7.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1000, help="operations per row (default 1000)")
    parser.add_argument(
        "--history", type=int, default=50_000, help="finished jobs for the last rows (0: skip)"
    )
    parser.add_argument("--dir", type=Path, default=Path("data"), help="where to create the temporary DB")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="bench-store-", dir=args.dir))
    try:
        print(
            f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, WAL + synchronous=FULL, "
            f"database in {base.resolve()}"
        )
        print_table(asyncio.run(run(args.ops, args.history, base)))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
