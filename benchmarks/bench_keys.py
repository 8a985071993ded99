"""A burst of one ``/video`` per server, each server on its own API key: CPU per job and time to start.

Runs the real :class:`~framecast.jobs.scheduler.Scheduler`, :class:`~framecast.jobs.queues.GuildQueues`
and :class:`~framecast.keys.accounts.Accounts` (one budget and planner per key) in this process, on a
SQLite store in a temporary directory, with a manual clock that never moves (no request is sent:
the runner records that the job started and holds its slot). Each server sets its own key first
(not measured); then, measured, every server's job is submitted and drawn with its estimate (what
the intake replies), drawn once more (the chat side redraws a waiting job every ``EDIT_INTERVAL``),
and the dispatcher starts them all; a moved queue is drawn again as the chat side does. The burst
ends when the last job has started.

Three variants at each key count, each in its own process:

* **this code**: the working tree;
* **before**: the framecast of ``--before REV`` (default ``74d132a``, the code in which a freed slot
  still asked every waiting key; ``89f4980`` is the code before the per-key index), taken out of
  git as ``bench_planner.py --code`` does;
* **floor**: this code without keys (a fixed admission, no planner): the queue, the dispatcher and
  the store's read-back alone, what a job costs whatever the keys do.

A second shape, **steady** (``--shapes burst,steady``, at ``--steady-keys``): two videos per server,
each key one task at a time; the first of each starts, then each frees its slot in turn while every
other key is full (one dispatch round per freed slot).

``python3 benchmarks/bench_keys.py [--keys 10,100,300,1000] [--steady-keys 10,100,300,1000] [--runs 3]
[--before 74d132a] [--variants this,before,floor] [--shapes burst,steady]`` prints one Markdown row
per shape, variant and key count (the median of ``--runs`` runs). ``--profile N [--steady]`` runs
this code's burst (or steady shape) once at N keys under cProfile instead. Figures: ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))


def _code_from_git() -> str | None:
    """``--code REV`` (the child's flag): the framecast of that commit first on ``sys.path``."""
    if "--code" not in sys.argv:
        return None
    rev = sys.argv[sys.argv.index("--code") + 1]
    into = Path(tempfile.mkdtemp(prefix="framecast-code-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "framecast"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    sys.path.insert(0, str(into))
    return rev


CODE = _code_from_git()

import older_trees  # noqa: E402  (beside this file: today's names for an older tree's values)

older_trees.alias_moved_values()

from cryptography.fernet import Fernet  # noqa: E402

from framecast.config import RateLimit, Secret, Settings  # noqa: E402
from framecast.jobs.queues import GuildQueues  # noqa: E402
from framecast.jobs.scheduler import Scheduler  # noqa: E402
from framecast.keys.vault import KeyVault  # noqa: E402
from framecast.planner.planner import PlannerSettings  # noqa: E402
from framecast.storage import Store, StoreTimeouts  # noqa: E402
from framecast.values import Job, JobKind, NewJob  # noqa: E402

try:
    from framecast.accounts.accounts import Accounts
except ImportError:  # a tree from before the accounts left keys/ (--code 89f4980)
    from framecast.keys.accounts import Accounts  # type: ignore[no-redef]
from tests.fakes.clock import ManualClock  # noqa: E402

ADMIN = 77
FIRST_GUILD = 10_000


async def _through_at_once(sent_now: Callable[[], Any]) -> None:
    """A create that goes through as it is sent (no request is sent)."""
    sent_now()


class HoldingRunner:
    """Does with the key's planner what the runner does when a job starts (binds the job to its
    account, sends its create, plans its first poll), records the start and holds the job's service
    slot until the end. No request is sent: what is measured is the bot's own work."""

    def __init__(self, accounts: Accounts | None, clock: ManualClock) -> None:
        self.started = 0
        self.releases: list[Callable[[], None]] = []  # each started job's, in start order
        self._changed = asyncio.Event()
        self._hold = asyncio.Event()
        self._accounts = accounts
        self._clock = clock

    async def wait_started(self, count: int) -> None:
        while self.started < count:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), timeout=600)

    async def run(self, job: Job, *, release_service_slot: Any) -> None:
        if self._accounts is not None:
            account = self._accounts.for_job(job)
            assert account is not None
            self._accounts.bind(job.id, account)
            plan: Any = account.plan(job)  # this tree's handle, or an older one (--before)
            if hasattr(plan, "create"):  # one call for the create, sent and through at once
                await plan.create(_through_at_once, failure=lambda exc: None, sleep=self._clock.sleep)
            else:  # before the handle had one call per phase: the create sent, then through
                plan.creating()
                plan.created()
            plan.pacer().next_poll(self._clock.monotonic(), None)
        self.started += 1
        self.releases.append(release_service_slot)
        self._changed.set()
        await self._hold.wait()

    def begin_shutdown(self) -> None:
        self._hold.set()

    def in_critical_section(self, job_id: int) -> bool:
        return False

    async def wait_critical_done(self, job_ids: set[int]) -> None:
        return None


def _video(guild: int) -> NewJob:
    params = {"model": "svc-video-v2.0", "prompt": "a lighthouse", "width": 64, "height": 64}
    return NewJob(JobKind.VIDEO, guild, 10, 7, "en-US", params | {"num_frames": 12, "frame_rate": 12})


async def burst(keys: int, *, floor: bool, tmp: Path, steady: bool = False) -> dict[str, float]:
    """One burst of `keys` videos, one per server, each server on its own key (or no keys: `floor`).

    `steady`: two videos per server, each key one task at a time (``GEN_MAX_RUNNING=1``): the first
    of each starts (not measured), then, measured, each frees its slot in turn and the server's
    second starts, while every other key is full.
    """
    import aiohttp

    clock = ManualClock()
    settings = Settings(
        discord_token=Secret("discord-token-not-used-here"),
        gen_api_base_url="http://127.0.0.1:9",  # never asked: the runner sends nothing
        gen_api_key=Secret("operator-key-0123456789abcdef"),
        gen_rate_limit=RateLimit(16, 60.0),
        database_path=tmp / "framecast.sqlite3",
        key_encryption_secret=Secret(Fernet.generate_key().decode()),
    )
    # The clock never moves, so a read cut off by a loaded machine would wait out its "outage" forever.
    store = await Store.open(settings.database_path, timeouts=StoreTimeouts(600, 600, 600, 600))
    session = aiohttp.ClientSession()
    queues = GuildQueues()
    guilds = [FIRST_GUILD + i for i in range(keys)]
    accounts: Accounts | None = None
    try:
        if not floor:
            accounts = await Accounts.open(
                settings=settings,
                session=session,
                clock=clock,
                store=store,
                queues=queues,
                vault=KeyVault(enabled=True, secret=settings.key_encryption_secret),
                planner_settings=PlannerSettings(
                    poll_interval=30.0, poll_max_interval=120.0, ceiling=1 if steady else None
                ),
            )
            for guild in guilds:
                await accounts.set_guild_key(guild, f"server-key-{guild}-0123456789abcdef", by=ADMIN)
        jobs: dict[int, Job] = {}
        runner = HoldingRunner(accounts, clock)

        def draw(job: Job) -> None:
            if accounts is not None:
                accounts.estimate(job)
            queues.position(job.id)

        def moved(guild: int, queued: list[int]) -> None:
            for job_id in queued:  # the chat side redraws the guild's queued jobs
                draw(jobs[job_id])

        scheduler = Scheduler(
            store=store,
            runner=runner,
            admission=accounts if accounts is not None else len(guilds),
            queues=queues,
            on_positions_changed=moved,
            clock=clock,
        )
        await scheduler.start()
        # The jobs as the intake wrote them: they arrive faster than they start, so all are queued.
        for guild in guilds * (2 if steady else 1):
            job = await store.add(_video(guild), member_limit=None, guild_cap=None)
            jobs[job.id] = job
        wall, cpu = time.perf_counter(), time.process_time()
        for job in jobs.values():
            scheduler.submit(job)
            draw(job)
        for job in jobs.values():  # and redrawn once, as every EDIT_INTERVAL while they wait
            draw(job)
        await runner.wait_started(len(guilds))
        if steady:  # measured from here: the second wave, one job freeing its slot at a time
            wall, cpu = time.perf_counter(), time.process_time()
            for n, release in enumerate(list(runner.releases)):
                release()
                await runner.wait_started(len(guilds) + n + 1)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        await scheduler.close(timeout=1.0)
        started = len(guilds)
        return {"keys": keys, "jobs": started, "cpu_ms_per_job": 1000 * cpu / started, "start_s": wall}
    finally:
        if accounts is not None:
            await accounts.close()
        await session.close()
        await store.close()


def child(args: argparse.Namespace) -> None:
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-keys-") as tmp:
        if args.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            out = asyncio.run(burst(args.profile, floor=False, tmp=Path(tmp), steady=args.steady))
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
            print(json.dumps(out))
            return
        print(json.dumps(asyncio.run(burst(args.one, floor=args.floor, tmp=Path(tmp), steady=args.steady))))


def run_one(variant: str, keys: int, before: str, shape: str) -> dict[str, float]:
    cmd = [sys.executable, str(HERE), "--one", str(keys)] + (["--steady"] if shape == "steady" else [])
    if variant == "before":
        cmd += ["--code", before]
    elif variant == "floor":
        cmd += ["--floor"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="10,100,300,1000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", default="74d132a")
    parser.add_argument("--variants", default="this,before,floor")
    parser.add_argument("--shapes", default="burst,steady")
    parser.add_argument("--steady-keys", default="10,100,300,1000", help="the key counts of the steady shape")
    parser.add_argument("--steady", action="store_true", help="with --profile: the steady shape")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--code", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--profile", type=int, default=None)
    args = parser.parse_args()
    if args.one is not None or args.profile:
        child(args)
        return
    names = {"this": "this code", "before": f"before ({args.before})", "floor": "floor (no keys)"}
    print(f"{args.runs} run(s) each, median; CPU of the whole process while the burst starts")
    print()
    print("| shape | variant | keys | CPU per job ms | time to start them s |")
    print("|---|---|---:|---:|---:|")
    for shape in args.shapes.split(","):
        for keys in [int(k) for k in (args.steady_keys if shape == "steady" else args.keys).split(",")]:
            for variant in args.variants.split(","):
                runs = [run_one(variant, keys, args.before, shape) for _ in range(args.runs)]
                cpu = statistics.median(r["cpu_ms_per_job"] for r in runs)
                start = statistics.median(r["start_s"] for r in runs)
                print(f"| {shape} | {names[variant]} | {keys:,} | {cpu:.2f} | {start:.2f} |", flush=True)


if __name__ == "__main__":
    main()
