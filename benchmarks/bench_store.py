"""Benchmark of the job store: an earlier commit's store on SQLite, and today's on SQLite and PostgreSQL.

Usage: ``python3 benchmarks/bench_store.py [--before 89f4980] [--ops 1000] [--history 50000] [--dir data] [--pg URL]``

Each store runs the same workload in its own subprocess, side by side in one run:

* ``before sqlite``: the store of commit ``--before`` (default 89f4980, the last one with the SQLite
  fast path on aiosqlite's internals; 0493314 is the last hand-written store, ``framecast/store.py``),
  extracted with ``git archive`` into a temporary directory put first on ``sys.path`` (skipped with
  a line if git or the commit is missing);
* ``sqlite``: ``framecast.storage.Store`` on a file (WAL, ``synchronous=FULL``);
* ``postgres``: the same store on a throw-away database of the server at ``--pg`` (default
  ``postgresql://postgres@127.0.0.1:5432/postgres``; skipped with a line when none answers).

Each cell is operations a second, p50 / p99 latency, and the event loop's own CPU time per operation
(``time.thread_time()`` of the loop's thread: what the store takes from everything else the bot does).

Every write is committed before the call returns, so SQLite figures are mostly the disk's fsync
latency. SQLite databases are created under ``--dir`` (default ``data/``, where ``DATABASE_PATH``
lives by default: the file system the bot writes to) and removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "a slow dolly shot of a lighthouse at dusk, 35mm film, 一只猫 🎬"
IMPLS = ("before sqlite", "sqlite", "postgres")


def new_job(i: int) -> Any:
    from framecast.values import JobKind, NewJob

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


async def measure(ops: int, in_flight: int, op: Callable[[int], Awaitable[object]]) -> dict[str, float]:
    """Run ``op(0..ops-1)`` with at most ``in_flight`` outstanding: ops/s and latency percentiles (ms)."""
    latencies: list[float] = []
    gate = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with gate:
            start = time.perf_counter()
            await op(i)
            latencies.append(time.perf_counter() - start)

    start, cpu = time.perf_counter(), time.thread_time()
    if in_flight == 1:
        for i in range(ops):
            await one(i)
    else:
        await asyncio.gather(*(one(i) for i in range(ops)))
    ordered = sorted(latencies)
    pct = {q: ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1000 for q in (50, 95, 99)}
    took, cpu_us = time.perf_counter() - start, (time.thread_time() - cpu) / ops * 1e6
    return {"rate": ops / took, "p50": pct[50], "p95": pct[95], "p99": pct[99], "cpu": cpu_us}


async def history(where: str, rows: int) -> None:
    """Insert ``rows`` finished jobs directly: a bot that has been running for months."""
    params = json.dumps({"model": "svc-video-v2.0", "prompt": PROMPT}, ensure_ascii=False)
    now = time.time()
    data = [
        ("delivered" if i % 10 else "failed", 2_000_000 + i % 50, i % 5000, params, now, now)
        for i in range(rows)
    ]
    sql = (
        "INSERT INTO jobs (kind, state, guild_id, channel_id, user_id, locale, params, created_at, updated_at,"
        " discord) VALUES ('video', {}, {}, 42, {}, 'en-US', {}, {}, {}, '{{}}')"
    )
    if where.startswith("postgresql:"):
        import asyncpg

        conn = await asyncpg.connect(where)
        await conn.executemany(sql.format(*(f"${i}" for i in range(1, 7))), data)
        await conn.close()
    else:
        with sqlite3.connect(where) as lite:
            lite.executemany(sql.format(*"??????"), data)
        lite.close()


async def workload(impl: str, where: str, ops: int, rows: int) -> dict[str, dict[str, float]]:
    """The same calls on whichever store this process imported; one figure set per row."""
    from framecast.values import JobState

    # An old tree (first on sys.path in that subprocess) may have framecast.store, later ones framecast.storage.
    hand_written = importlib.util.find_spec("framecast.store") is not None
    module, name = ("framecast.store", "JobStore") if hand_written else ("framecast.storage", "Store")
    opener: Any = getattr(importlib.import_module(module), name)
    out: dict[str, dict[str, float]] = {}
    store: Any = await opener.open(where)
    try:
        ids: list[int] = []

        async def add(i: int) -> None:
            ids.append((await store.add(new_job(i), member_limit=2, guild_cap=25)).id)

        out["add (limits checked)"] = await measure(ops, 1, add)
        seq = list(ids)
        out["transition queued->submitting"] = await measure(
            ops, 1, lambda i: store.transition(seq[i], JobState.SUBMITTING, expect=JobState.QUEUED)
        )
        out["transition ->running (+task_id)"] = await measure(
            ops, 1, lambda i: store.transition(seq[i], JobState.RUNNING, task_id=f"t{i}", started_at=1.0)
        )
        out["update progress"] = await measure(ops, 1, lambda i: store.update(seq[i], progress=i / ops))
        out["patch_discord (read, write)"] = await measure(
            ops, 1, lambda i: store.patch_discord(seq[i], {"status_message_id": i})
        )
        out["get (read)"] = await measure(ops, 1, lambda i: store.get(seq[i]))
        ids.clear()
        out["add, 32 in flight"] = await measure(ops, 32, lambda i: add(ops + i))
        conc = list(ids)
        out["transition, 32 in flight"] = await measure(
            ops, 32, lambda i: store.transition(conc[i], JobState.CANCELLED, expect=JobState.QUEUED)
        )
        out[f"active(): {ops} unfinished"] = await measure(20, 1, lambda i: store.active())
    finally:
        await store.close()
    if rows:
        await history(where, rows)
        store = await opener.open(where)
        try:
            out[f"add, {rows} jobs in history"] = await measure(
                ops, 1, lambda i: store.add(new_job(3 * ops + i), member_limit=2, guild_cap=25)
            )
        finally:
            await store.close()
    return out


def child(impl: str, where: str, ops: int, rows: int, before: str) -> dict[str, Any]:
    """Run one store's workload in a subprocess (the earlier tree first on sys.path for that store)."""
    tree = where_tree = None
    if impl == "before sqlite":
        tree = Path(tempfile.mkdtemp(prefix="bench-old-tree-"))
        try:
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", before, "framecast"], capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            shutil.rmtree(tree, ignore_errors=True)
            return {"skipped": f"store of {before} not extracted from git ({type(exc).__name__})"}
        where_tree = str(tree)
    env = {**os.environ, "PYTHONPATH": where_tree or str(ROOT)}
    args = [
        sys.executable,
        __file__,
        "--child",
        impl,
        "--where",
        where,
        "--ops",
        str(ops),
        "--history",
        str(rows),
    ]
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    finally:
        if tree is not None:
            shutil.rmtree(tree, ignore_errors=True)
    if done.returncode != 0:
        return {
            "skipped": f"failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
        }
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def pg_database(admin: str) -> tuple[str, Callable[[], None]] | str:
    """A throw-away database on the server at ``admin`` and its dropper, or why there is none."""
    import asyncpg

    name = f"framecast_bench_{secrets.token_hex(4)}"

    async def run(sql: str) -> None:
        conn = await asyncpg.connect(admin, timeout=3)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    try:
        asyncio.run(run(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001 - any failure means: no server to benchmark
        return f"PostgreSQL not reachable at {admin.rsplit('@', 1)[-1]} ({type(exc).__name__})"
    return admin.rsplit("/", 1)[0] + f"/{name}", lambda: asyncio.run(
        run(f'DROP DATABASE "{name}" WITH (FORCE)')
    )


def print_table(results: dict[str, dict[str, Any]]) -> None:
    """One row per operation; per store ops/s, p50/p99 ms and loop CPU, and today's SQLite p50 over before's."""
    for impl, res in results.items():
        if "skipped" in res:
            print(f"{impl}: skipped: {res['skipped']}")
    shown = [i for i in IMPLS if "skipped" not in results[i]]
    rows = list(dict.fromkeys(name for i in shown for name in results[i]))
    head = (
        "| operation | "
        + " | ".join(f"{i} ops/s | p50 / p99 ms | CPU µs" for i in shown)
        + " | sqlite / before p50 |"
    )
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name in rows:
        cells = []
        for i in shown:
            r = results[i].get(name)
            cells.append(
                f"{r['rate']:.0f} | {r['p50']:.2f} / {r['p99']:.2f} | {r['cpu']:.0f}" if r else "- | - | -"
            )
        old, new = results["before sqlite"].get(name), results["sqlite"].get(name)
        ratio = f"{new['p50'] / old['p50']:.2f}x" if old and new else "-"
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="89f4980", help="the commit whose SQLite store to compare")
    parser.add_argument("--ops", type=int, default=1000, help="operations per row (default 1000)")
    parser.add_argument(
        "--history", type=int, default=50_000, help="finished jobs for the last row (0: skip)"
    )
    parser.add_argument("--dir", type=Path, default=Path("data"), help="where to create the SQLite files")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres", help="admin URL")
    parser.add_argument("--child", choices=IMPLS, help=argparse.SUPPRESS)
    parser.add_argument("--where", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        # The old store's tree predates framecast/values/: this file names its values as today.
        import older_trees  # beside this file (the script's folder is first on sys.path)

        older_trees.alias_moved_values()
        print(json.dumps(asyncio.run(workload(args.child, args.where, args.ops, args.history))))
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="bench-store-", dir=args.dir))
    results: dict[str, dict[str, Any]] = {}
    try:
        print(
            f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, SQLite files in {base.resolve()}"
        )
        for impl in ("before sqlite", "sqlite"):
            where = str(base / f"{impl.replace(' ', '-')}.sqlite3")
            results[impl] = child(impl, where, args.ops, args.history, args.before)
        pg = pg_database(args.pg)
        if isinstance(pg, str):
            results["postgres"] = {"skipped": pg}
        else:
            try:
                results["postgres"] = child("postgres", pg[0], args.ops, args.history, args.before)
            finally:
                pg[1]()
        print_table(results)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
