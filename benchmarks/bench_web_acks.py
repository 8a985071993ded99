"""Whole-bot benchmark: do the web pages slow the bot's acknowledgements? The real bot.py (WEB_PORT
on) against both fakes, a server with 100,000 delivered jobs, 50 logged-in viewers paging its
gallery, and members' /image commands arriving meanwhile.

Run: ``python3 benchmarks/bench_web_acks.py [--jobs 100000] [--viewers 50] [--commands 60] [--think 0]``

Two phases on the same bot: the commands alone, then the same number of commands while every viewer
pages the gallery (`--think` seconds between a viewer's pages; 0: as fast as the bot answers, the
worst case). Printed: the acknowledgement (Discord's 3-second rule) p50 / p99 / max of each phase,
and the gallery pages served meanwhile. The gallery shares the bot's event loop and its database
connection: this is what that costs the members.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_web import fill  # noqa: E402

from framecast.storage import Store  # noqa: E402
from tests.e2e.harness import ack_latency, close_world, make_world  # noqa: E402
from tests.e2e.webpages import Browser, enable_web  # noqa: E402
from tests.fakes.gen_service import TaskPlan  # noqa: E402


def quantiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    return f"{p(0.5):8.1f} {p(0.99):8.1f} {ms[-1]:8.1f}"


async def commands(world: object, count: int, spacing: float) -> list[float]:
    """`count` /image commands from the members in turn, `spacing` seconds apart; their acks."""
    its = []
    for i in range(count):
        member = world.members[0][i % len(world.members[0])]  # type: ignore[attr-defined]
        its.append(
            await world.discord.slash(world.guild, world.channel, member, "image", {"prompt": f"ack {i}"})  # type: ignore[attr-defined]
        )
        await asyncio.sleep(spacing)
    await asyncio.gather(*[it.wait_response(timeout=30) for it in its])
    return [ack_latency(it) for it in its]


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        world = await make_world(
            Path(tmp),
            members=args.viewers,
            extra_env={
                "GEN_RATE_LIMIT": "100000/1",
                "GEN_MAX_RUNNING": "32",
                "LOG_LEVEL": "WARNING",
                "GUILD_QUEUE_CAP": "1000",
                "MEMBER_JOB_LIMIT": "100",
                "EDIT_INTERVAL": "0.2",
            },
        )
        browsers: list[Browser] = []
        stop = asyncio.Event()
        pages: list[float] = []
        try:
            base = enable_web(world)
            path = Path(world.env["DATABASE_PATH"])
            store = await Store.open(path)
            await store.close()
            fill(
                path,
                args.jobs,
                guild=world.guild.id,
                channels=[world.channel.id],
                members=[m.id for m in world.members[0]],
            )
            await world.start_bot()
            world.service.default_plan = TaskPlan(duration=0.05)
            quiet = await commands(world, args.commands, 0.05)
            for member in world.members[0][: args.viewers]:
                browser = Browser(world, base)
                browsers.append(browser)
                await browser.login(member, then=f"/g/{world.guild.id}")

            async def browse(browser: Browser) -> None:
                path = f"/g/{world.guild.id}"
                while not stop.is_set():
                    started = time.perf_counter()
                    status, page, _ = await browser.get(path)
                    pages.append(time.perf_counter() - started)
                    assert status == 200, status
                    nxt = (
                        page.split('rel="next"')[0].rsplit('href="', 1)[-1].split('"')[0]
                        if 'rel="next"' in page
                        else ""
                    )
                    path = nxt.replace("&amp;", "&") if nxt and len(pages) % 5 else f"/g/{world.guild.id}"
                    if args.think:
                        await asyncio.sleep(args.think)

            viewers = [asyncio.create_task(browse(b)) for b in browsers]
            await asyncio.sleep(1.0)  # the viewers at full pace before the commands come
            served_before = len(pages)
            loaded = await commands(world, args.commands, 0.05)
            served = len(pages) - served_before
            stop.set()
            await asyncio.gather(*viewers)
        finally:
            for browser in browsers:
                await browser.close()
            await close_world(world)
    print(
        f"{args.jobs} delivered jobs in the server; {args.viewers} viewers; {args.commands} /image commands a phase"
    )
    print(f"{'phase':<40} {'ack p50':>8} {'ack p99':>8} {'ack max':>8}  (ms)")
    print(f"{'commands alone':<40} {quantiles(quiet)}")
    print(f"{f'while {args.viewers} viewers page the gallery':<40} {quantiles(loaded)}")
    print(
        f"gallery pages meanwhile: {served}, as the viewers saw them: p50 / p99 / max {quantiles(pages)} ms"
    )
    print(
        f"mean ack alone {statistics.mean(quiet) * 1000:.1f} ms, under load {statistics.mean(loaded) * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--viewers", type=int, default=50)
    parser.add_argument("--commands", type=int, default=60)
    parser.add_argument("--think", type=float, default=0.0)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
