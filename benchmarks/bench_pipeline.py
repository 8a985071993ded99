"""Whole-bot benchmark: the real bot.py against both fakes, under a burst of slash commands.

Measures what members feel: acknowledgement latency (Discord's 3-second rule) under load, the time
until every job's file is delivered, and the bot process's peak memory. The service's rate limit
is lifted here (so the budget does not dominate the figures); delivery throughput under the real
16-per-minute budget is simply 16 requests/minute divided by about three requests per job.

Run: ``python3 benchmarks/bench_pipeline.py [--jobs 200] [--guilds 10]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.harness import ack_latency, close_world, make_world  # noqa: E402
from tests.fakes.gen_service import TaskPlan  # noqa: E402


def peak_rss_mib(pid: int) -> float:
    """VmHWM of a live process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run(jobs: int, guilds: int) -> None:
    members = max(1, -(-jobs // (guilds * 2)))
    with tempfile.TemporaryDirectory() as tmp:
        world = await make_world(
            Path(tmp),
            guilds=guilds,
            members=members,
            extra_env={
                "GEN_RATE_LIMIT": "100000/1",
                "GEN_MAX_RUNNING": "32",
                "LOG_LEVEL": "WARNING",
                "GUILD_QUEUE_CAP": str(jobs),
                "EDIT_INTERVAL": "0.2",
            },
        )
        try:
            await world.start_bot()
            world.service.default_plan = TaskPlan(duration=0.2)
            plan = [(g, m, j) for j in range(2) for m in range(members) for g in range(guilds)][:jobs]
            started = time.perf_counter()
            its = await asyncio.gather(
                *[
                    world.discord.slash(
                        world.guilds[g],
                        world.channels[g],
                        world.members[g][m],
                        "video",
                        {"prompt": f"bench {g}/{m}/{j}"},
                    )
                    for g, m, j in plan
                ]
            )
            await asyncio.gather(*[it.wait_response(timeout=30) for it in its])
            await asyncio.gather(*[world.delivered(it, timeout=600) for it in its])
            elapsed = time.perf_counter() - started
            acks = sorted(ack_latency(it) for it in its)
            assert world.bot is not None and world.bot.proc is not None
            rss = peak_rss_mib(world.bot.proc.pid)
        finally:
            await close_world(world)
    p = lambda q: acks[min(len(acks) - 1, int(q * len(acks)))]  # noqa: E731
    print(
        f"{'jobs':>6} {'guilds':>6} {'ack p50 ms':>11} {'ack p99 ms':>11} {'ack max ms':>11} "
        f"{'all delivered s':>16} {'jobs/s':>7} {'bot peak RSS MiB':>17}"
    )
    print(
        f"{jobs:>6} {guilds:>6} {p(0.5) * 1000:>11.1f} {p(0.99) * 1000:>11.1f} {acks[-1] * 1000:>11.1f} "
        f"{elapsed:>16.2f} {jobs / elapsed:>7.1f} {rss:>17.1f}"
    )
    print(f"mean ack {statistics.mean(acks) * 1000:.1f} ms over {len(acks)} interactions")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--guilds", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(run(args.jobs, args.guilds))


if __name__ == "__main__":
    main()
