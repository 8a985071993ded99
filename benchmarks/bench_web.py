"""Benchmark of the web gallery: a page of a server with 100,000 delivered jobs, 50 viewers at once.

Usage: ``python3 benchmarks/bench_web.py [--jobs 100000] [--viewers 50] [--rounds 6] [--dir data]``

One SQLite store (as the bot opens it) gets `--jobs` delivered jobs of one server, written in bulk:
10 channels, 200 members, one job in 50 deleted, a few prompts with the searched word. The real web
server (``web.server.WebServer``: routes, session cookie and row, the gallery use case, Jinja2) then
serves ``/g/<server>`` on 127.0.0.1 to `--viewers` logged-in viewers at once, each reading, per round:
the newest page, the next three older pages (keyset cursors), a prompt search and a member filter,
reading each page for `--think` seconds on average (exponential; 0: the next request at once, the
server saturated).
Each viewer can read 8 of the 10 channels (the rule cuts a fifth of the results). Who a viewer is in
the server comes from a fixed directory here (the bot fetches the member from Discord, cached 15 s).

Printed: per request kind, p50 / p95 / p99 / max of the time to the full answer as the client sees
it (loopback HTTP included: an upper bound of the server's time), and the use case alone
(``Gallery.page``, one at a time). The store's file goes under ``--dir`` and is removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from framecast.app import (  # noqa: E402
    Actor,
    Gallery,
    GalleryQuery,
    QueueViewer,
    ServerMember,
    WebCases,
    WebSessions,
)
from framecast.clock import SystemClock  # noqa: E402
from framecast.storage import Store  # noqa: E402
from framecast.storage.values import dumps  # noqa: E402
from framecast.values import Job  # noqa: E402
from web.pages import add_routes  # noqa: E402
from web.server import WebConfig, WebServer  # noqa: E402

GUILD = 1_000_000_000_000_000
CHANNELS = [GUILD + 1 + i for i in range(10)]
READABLE = frozenset(CHANNELS[:8])
MEMBERS = [2_000_000_000_000_000 + i for i in range(200)]
WORD = "lighthouse"


class FixedDirectory:
    """Every viewer is a member who reads 8 of the 10 channels (the bot asks Discord instead)."""

    async def member(self, guild_id: int, user_id: int, *, fresh: bool = False) -> ServerMember | None:
        return ServerMember(
            Actor(user_id, guild_id), QueueViewer(user_id, READABLE, frozenset(), True), "Bench"
        )

    def message_link(self, job: Job) -> str | None:
        return f"https://discord.com/channels/{job.guild_id}/{job.channel_id}/{job.id}"

    async def media_url(self, job: Job, asker: int) -> str | None:
        return None  # the gallery page never asks: a file is fetched when a viewer plays or opens it


def fill(
    path: Path,
    jobs: int,
    *,
    guild: int = GUILD,
    channels: list[int] = CHANNELS,
    members: list[int] = MEMBERS,
) -> None:
    """Write `jobs` delivered jobs of one server straight into the store's table (bulk, one commit)."""
    rng = random.Random(7)
    now = time.time()
    rows = []
    for i in range(jobs):
        prompt = f"a slow dolly shot number {i}, 35mm film, 一只猫 🎬"
        if i % 100 == 0:
            prompt += f" {WORD}"
        discord: dict[str, Any] = {"channel_message_id": 10**17 + i}
        if i % 50 == 7:
            discord.update({"deleted_at": now, "deleted_by": 1})
        created = now - (jobs - i) * 30.0
        rows.append(
            (
                "image" if i % 3 else "video",
                "delivered",
                guild,
                rng.choice(channels),
                rng.choice(members),
                "en-US",
                dumps({"prompt": prompt, "model": "svc-image-2.1-flash"}),
                created,
                created + 60,
                dumps(discord),
            )
        )
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO jobs (kind, state, guild_id, channel_id, user_id, locale, params, created_at,"
            " updated_at, discord) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def figures(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return f"| {name} | {len(ms)} | {q[49]:.1f} | {q[94]:.1f} | {q[98]:.1f} | {ms[-1]:.1f} |"


async def viewer(
    http: aiohttp.ClientSession,
    base: str,
    cookie: str,
    rounds: int,
    times: dict[str, list[float]],
    think: float = 0.0,
) -> None:
    headers = {"Cookie": f"fc_session={cookie}"}

    async def get(kind: str, path: str) -> str:
        started = time.perf_counter()
        async with http.get(base + path, headers=headers, allow_redirects=False) as response:
            text = await response.text()
            assert response.status == 200, (response.status, text[:200])
        times.setdefault(kind, []).append(time.perf_counter() - started)
        if think:  # a person reads the page before the next click (exponential, mean `think`)
            await asyncio.sleep(random.expovariate(1 / think))
        return text

    if think:  # people arrive at their own moments, not all in the same millisecond
        await asyncio.sleep(random.uniform(0, 2 * think))
    for _ in range(rounds):
        page = await get("newest page", f"/g/{GUILD}")
        for _ in range(3):
            cursor = page.split('rel="next"')[0].rsplit("before=", 1)[1].split('"')[0]
            page = await get("older page (cursor)", f"/g/{GUILD}?before={cursor}")
        await get("prompt search (1 in 100 match)", f"/g/{GUILD}?q={WORD}")
        await get("member filter", f"/g/{GUILD}?member={random.choice(MEMBERS)}")


def kind_of(request: web.Request) -> str:
    """Which of the benchmark's requests this is (by its query)."""
    if "q" in request.query:
        return "prompt search (1 in 100 match)"
    if "member" in request.query:
        return "member filter"
    if "before" in request.query:
        return "older page (cursor)"
    return "newest page"


class TimedServer(WebServer):
    """The real web server, with each request's time in the handler recorded (the server's time)."""

    times: dict[str, list[float]]

    def app(self) -> web.Application:
        app = super().app()
        self.times = {}

        @web.middleware
        async def timed(request: web.Request, handler: Any) -> web.StreamResponse:
            started = time.perf_counter()
            try:
                return cast(web.StreamResponse, await handler(request))
            finally:
                self.times.setdefault(kind_of(request), []).append(time.perf_counter() - started)

        app.middlewares.insert(0, timed)
        return app


async def serve(path: Path, viewers: int) -> None:
    """The server's process: serve the store at `path` until stdin closes, then print its times."""
    store = await Store.open(path)
    sessions = WebSessions(store.web.sessions, SystemClock())
    cases = WebCases(
        gallery=Gallery(store.web),
        sessions=sessions,
        admins=cast(Any, None),  # the gallery asks none of these
        styles=cast(Any, None),
        members=cast(Any, None),
        usage=cast(Any, None),
        my_jobs=cast(Any, None),
        directory=FixedDirectory(),
    )
    server = TimedServer(
        cases, WebConfig("127.0.0.1", 0, "http://127.0.0.1", "1", "secret", "s" * 40), add_routes
    )
    await server.start()
    cookies = [server.signer.sign("session", await sessions.open(m)) for m in MEMBERS[:viewers]]
    # The use case alone, one call at a time.
    alone: list[float] = []
    member = await FixedDirectory().member(GUILD, MEMBERS[0])
    assert member is not None
    cursor = None
    for _ in range(60):
        t = time.perf_counter()
        page = await cases.gallery.page(GUILD, member, GalleryQuery(before=cursor))
        alone.append(time.perf_counter() - t)
        cursor = page.older if page.older and len(alone) % 10 else None
    print(json.dumps({"port": server.port, "cookies": cookies}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    server.times["Gallery.page alone (no HTTP, one at a time)"] = alone
    print(json.dumps(server.times), flush=True)
    await server.close()
    await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--viewers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--think", type=float, default=1.0, help="mean seconds a viewer reads a page (0: none)"
    )
    parser.add_argument("--dir", default="data")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the server's own process
    args = parser.parse_args()
    if args.serve:
        await serve(Path(args.serve), args.viewers)
        return
    Path(args.dir).mkdir(exist_ok=True)  # noqa: ASYNC240 -- once, before anything runs
    tmp = Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-web-"))
    try:
        path = tmp / "jobs.sqlite3"
        store = await Store.open(path)
        await store.close()
        started = time.perf_counter()
        fill(path, args.jobs)
        print(f"{args.jobs} delivered jobs written in {time.perf_counter() - started:.1f} s")
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--serve",
            str(path),
            "--viewers",
            str(args.viewers),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert child.stdout is not None and child.stdin is not None
        hello = json.loads(await child.stdout.readline())
        base, cookies = f"http://127.0.0.1:{hello['port']}", hello["cookies"]
        times: dict[str, list[float]] = {}
        connector = aiohttp.TCPConnector(limit=args.viewers)
        async with aiohttp.ClientSession(connector=connector) as http:
            await viewer(http, base, cookies[0], 1, {})  # warm up
            started = time.perf_counter()
            await asyncio.gather(*(viewer(http, base, c, args.rounds, times, args.think) for c in cookies))
            elapsed = time.perf_counter() - started
        child.stdin.close()
        served = json.loads(await child.stdout.readline())
        await child.wait()
        total = sum(len(v) for v in times.values())
        print(
            f"{args.viewers} viewers (reading {args.think:g} s a page on average), {total} pages in"
            f" {elapsed:.1f} s ({total / elapsed:.0f} pages/s)"
        )
        print("Server time (in the handler, the server in its own process):")
        print("| request | n | p50 ms | p95 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|---|")
        for kind, samples in served.items():
            print(figures(kind, samples))
        print(f"Time to the full answer, as the {args.viewers} viewers see it (queueing included):")
        print("| request | n | p50 ms | p95 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|---|")
        for kind, samples in times.items():
            print(figures(kind, samples))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
