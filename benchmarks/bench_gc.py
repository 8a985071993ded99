"""Garbage-collector stalls at scale: 25,000 guilds over 10 shards in one process, a burst of commands.

The real ``bot.py`` (``SHARD_COUNT=10``, every shard in one process) runs against the fake Discord,
which serves every guild's GUILD_CREATE through the gateway, so discord.py fills its cache through
its own parsing path. Once the bot is ready, 200 ``/video`` commands arrive at once, one per guild
spread over the shards, and the fake measures each acknowledgement (from the INTERACTION_CREATE
written to the socket to the ``defer`` callback received). Another burst follows a few seconds
later, and so on (``--bursts``, default 4, 4 s apart), with the earlier bursts' jobs running. The
figures are per burst and over all bursts' acknowledgements together. Three bots, one after the
other, against the same world:

* **untreated**: the collector as CPython sets it, no freeze (the bot before the heap policy);
* **treated**: the bot as it is (framecast/ops/heap.py: full collection + ``gc.freeze()`` at
  ``on_ready``);
* **gc off**: untreated with ``gc.disable()``, the reference the issue measured against.

Each bot runs as ``benchmarks/bench_gc.py --child VARIANT``, which imports ``bot.py`` and runs its
``main()``. Two things differ from ``python bot.py``: discord.py's 5 s wait before each further
shard's IDENTIFY (Discord's identify rate, which only lengthens the start-up here) is skipped, and
for the untreated variants the heap policy is replaced by one that never sweeps. The child records
every collection through ``gc.callbacks`` (generation, start, duration) and writes them at exit,
so the figures say which collections fell inside each burst.

This process (the fakes) freezes its own heap before each burst, so its collections of the fake's
25,000 guilds cannot delay the acknowledgements it measures.

Whether one of CPython's own full collections falls inside a burst is chance (it depends on how
many objects survived since the last one). ``--collect-in-burst`` removes the chance: as each
burst begins, the parent signals the bot (not the gc-off one), whose handler runs ``gc.collect()``
on the loop's thread, the same stall a collection falling due there would cause.

Run: ``python3 benchmarks/bench_gc.py [--guilds 25000] [--shards 10] [--commands 200] [--channels 5]
[--collect-in-burst]`` (under a minute per variant at 25,000 guilds on 2 vCPUs; ``--variants
treated`` runs one).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parent.parent
sys.path.insert(0, str(REPO))

VARIANTS = ("untreated", "treated", "gc-off")
MEMBER_PERMS = (1 << 10) | (1 << 11) | (1 << 31)
SETTLE_SECONDS = 2.0
BETWEEN_BURSTS_SECONDS = 4.0


# -- child: the bot ----------------------------------------------------------------------------------
def child(variant: str, gc_log: Path) -> int:
    """Run bot.py's main() as `variant`, recording every collection into `gc_log` at exit."""
    import atexit

    sys.argv = [str(REPO / "bot.py")]
    import bot
    from framecast.ops.heap import HeapFreezer, Sweep

    async def identify_now(self: Any, shard_id: int | None, *, initial: bool = False) -> None:
        return None

    bot.Framecast.before_identify_hook = identify_now  # type: ignore[method-assign]

    class NeverSweeps(HeapFreezer):
        def ready(self, guilds: int) -> Sweep:  # type: ignore[override]
            return None  # type: ignore[return-value]

        def guilds_changed(self, changed: int, guilds: int) -> Sweep | None:
            return None

    if variant != "treated":
        bot.HeapFreezer = NeverSweeps  # type: ignore[misc]
    if variant == "gc-off":
        gc.disable()

    collections: list[tuple[int, float, float]] = []
    started: dict[str, float] = {}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started["t"] = time.perf_counter()
            started["wall"] = time.time()
        else:
            collections.append((info["generation"], started["wall"], time.perf_counter() - started["t"]))

    gc.callbacks.append(on_gc)

    def collect_now(signum: int, frame: Any) -> None:
        # --collect-in-burst: a full collection falling due as the burst arrives, on purpose. A
        # signal handler runs in the main thread between bytecodes, so it stops the loop just as a
        # collection CPython's thresholds start would.
        gc.collect()

    signal.signal(signal.SIGUSR1, collect_now)

    def dump() -> None:
        gc.callbacks.remove(on_gc)
        tracked = len(gc.get_objects()) + gc.get_freeze_count()
        gc_log.write_text(json.dumps({"collections": collections, "tracked": tracked}))

    atexit.register(dump)
    return bot.main([])


def probe(guilds: int, shards: int, channels: int) -> None:
    """Time one full collection over discord.py's cache of `guilds` guilds, before and after
    ``gc.freeze()``: the stall a collection falling due inside a burst costs, without the chance of
    when CPython's thresholds make one fall due. Prints one JSON line."""
    import discord

    from tests.fakes.discord_api import DISCORD_EPOCH_MS, FakeDiscord

    fake = FakeDiscord(validate_requests=False)
    base_ms = int(time.time() * 1000) - DISCORD_EPOCH_MS - 86400_000 * 60
    for n in range(guilds):
        guild = fake.add_guild(f"guild {n}", guild_id=guild_id(n, shards, base_ms))
        for c in range(channels):
            fake.add_channel(guild, f"channel-{c}")
    payloads = [
        g.to_payload(full=True, bot_member=g.members.get(fake.bot_user.id), all_members=False)
        for g in fake.guilds
    ]
    del fake, guild
    client = discord.AutoShardedClient(intents=discord.Intents.none(), shard_count=shards)
    state = client._connection
    for payload in payloads:  # what GUILD_CREATE does: ConnectionState._get_create_guild
        state._add_guild(discord.Guild(data=payload, state=state))  # type: ignore[arg-type]
    del payloads
    gc.collect()

    def full_ms() -> float:
        began = time.perf_counter()
        gc.collect()
        return (time.perf_counter() - began) * 1000

    before = [full_ms() for _ in range(3)]
    gc.freeze()
    young = [[i] for i in range(20_000)]  # tracked objects a burst leaves alive, unfrozen
    after = [full_ms() for _ in range(3)]
    print(
        json.dumps({"frozen": gc.get_freeze_count(), "before": before, "after": after, "young": len(young)})
    )


# -- parent: the fakes and the bursts ---------------------------------------------------------------
def guild_id(n: int, shards: int, base_ms: int) -> int:
    """The n-th guild's id: guilds dealt round-robin over the shards (``(id >> 22) % shards``)."""
    return ((base_ms + n) << 22) | (n & 0xFFF)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def read(path: Path) -> str:
    """A log file's text so far."""
    return path.read_text(errors="replace") if path.exists() else ""


async def wait_log(path: Path, text: str, proc: asyncio.subprocess.Process, timeout: float) -> None:
    """Wait until the bot logged `text`."""
    deadline = time.monotonic() + timeout
    while text not in read(path):
        if proc.returncode is not None:
            raise RuntimeError(f"the bot exited ({proc.returncode}):\n{read(path)[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{text!r} never logged:\n{read(path)[-3000:]}")
        await asyncio.sleep(0.1)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run_variant(
    world: Any, picks: list[tuple[Any, Any, Any]], variant: str, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    """Start the bot as `variant`, fire the bursts once it is ready, stop it; its figures."""
    from tests.e2e.harness import ack_latency

    fake = world.discord
    log_path, gc_log = tmp / f"{variant}.log", tmp / f"{variant}.gc.json"
    env = {
        **world.env,
        "DATABASE_PATH": str(tmp / variant / "framecast.sqlite3"),
        "SHARD_COUNT": str(args.shards),
        "LOG_LEVEL": "INFO",
    }
    mark = fake.identify_count
    began = time.monotonic()
    with open(log_path, "wb") as out:  # noqa: ASYNC230 - opened once per variant
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(SCRIPT),
            "--child",
            variant,
            "--gc-log",
            str(gc_log),
            cwd=str(REPO),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    result: dict[str, Any] = {"variant": variant}
    try:
        await fake.wait_ready(timeout=900, after=mark, count=args.shards)
        await wait_log(log_path, "connected as", proc, timeout=900)
        if variant == "treated":
            await wait_log(log_path, "heap frozen (ready)", proc, timeout=120)
        result["startup_s"] = time.monotonic() - began
        await asyncio.sleep(SETTLE_SECONDS)
        bursts: list[dict[str, Any]] = []
        for burst in range(args.bursts):
            if burst:
                await asyncio.sleep(BETWEEN_BURSTS_SECONDS)
            for session in fake.sessions:  # no resume in this run: drop the replay buffers
                session.events.clear()
            gc.collect()
            gc.freeze()  # this process's own heap (the fake's guilds) out of its collector's way
            wall0 = time.time()
            if args.collect_in_burst and variant != "gc-off":
                proc.send_signal(signal.SIGUSR1)
            its = await asyncio.gather(
                *[
                    fake.slash(g, ch, member, "video", {"prompt": f"gc bench {variant} {burst} {i}"})
                    for i, (g, ch, member) in enumerate(picks)
                ]
            )
            await asyncio.gather(*[it.wait_response(timeout=60) for it in its])
            wall1 = time.time()
            acks = [ack_latency(it) * 1000 for it in its]
            bursts.append({"acks": acks, "window": (wall0, wall1)})
        result["bursts"] = bursts
        result["rss_mib"] = peak_rss_mib(proc.pid)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    record: dict[str, Any] = json.loads(read(gc_log) or '{"collections": [], "tracked": 0}')
    result["tracked"] = record["tracked"]
    for b in result.get("bursts", []):
        lo, hi = b["window"]
        inside = [(g, d) for g, start, d in record["collections"] if lo <= start <= hi]
        b["full"] = [d * 1000 for g, d in inside if g == 2]
        b["young_ms"] = sum(d for g, d in inside if g < 2) * 1000
        b["young"] = sum(1 for g, _ in inside if g < 2)
    full_all = [d * 1000 for g, _, d in record["collections"] if g == 2]
    result["full_max_ms"] = max(full_all, default=0.0)
    result["full_count"] = len(full_all)
    text = read(log_path)
    frozen = [line for line in text.splitlines() if "heap frozen" in line]
    result["freeze"] = frozen[0].split("heap frozen", 1)[1].strip() if frozen else ""
    return result


async def run_probe(args: argparse.Namespace) -> dict[str, Any]:
    """Run :func:`probe` in a child of its own (this process's heap would count in its timings)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        "--child",
        "probe",
        "--guilds",
        str(args.guilds),
        "--shards",
        str(args.shards),
        "--channels",
        str(args.channels),
        cwd=str(REPO),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    found: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return found


async def run(args: argparse.Namespace) -> None:
    from tests.e2e.harness import close_world, make_world
    from tests.fakes.discord_api import DISCORD_EPOCH_MS
    from tests.fakes.gen_service import TaskPlan

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not args.no_probe:
        found = await run_probe(args)
        print(
            f"one full collection over discord.py's cache of {args.guilds} guilds ({found['frozen']:,} objects): "
            f"{' / '.join(f'{ms:.0f}' for ms in found['before'])} ms; after gc.freeze(), with "
            f"{found['young']:,} young objects: {' / '.join(f'{ms:.1f}' for ms in found['after'])} ms",
            flush=True,
        )
    with tempfile.TemporaryDirectory(prefix="bench-gc-") as tmpdir:
        tmp = Path(tmpdir)
        world = await make_world(
            tmp,
            guilds=0,
            extra_env={
                "GEN_RATE_LIMIT": "100000/1",
                "GEN_MAX_RUNNING": "32",
                "GUILD_QUEUE_CAP": "1000",
                "EDIT_INTERVAL": "0.2",
                "SHUTDOWN_TIMEOUT": "5",
            },
            validate_requests=False,  # the spec check costs the fake ms per request; e2e tests run it
        )
        world.service.default_plan = TaskPlan(duration=0.2)
        fake = world.discord
        built = time.monotonic()
        base_ms = int(time.time() * 1000) - DISCORD_EPOCH_MS - 86400_000 * 60
        step = max(1, args.guilds // args.commands)
        picks: list[tuple[Any, Any, Any]] = []
        for n in range(args.guilds):
            guild = fake.add_guild(f"guild {n}", guild_id=guild_id(n, args.shards, base_ms))
            channels = [fake.add_channel(guild, f"channel-{c}") for c in range(args.channels)]
            if n % step == 0 and len(picks) < args.commands:
                member = fake.add_member(guild, f"member {n}", permissions=MEMBER_PERMS)
                picks.append((guild, channels[0], member))
        gc.collect()
        gc.freeze()
        print(
            f"world: {args.guilds} guilds x {args.channels} channels over {args.shards} shards, "
            f"{len(picks)} commands per burst, {args.bursts} bursts "
            f"(built in {time.monotonic() - built:.1f} s)",
            flush=True,
        )
        results = []
        try:
            for variant in variants:
                results.append(await run_variant(world, picks, variant, args, tmp))
                r = results[-1]
                print(
                    f"  {variant}: ready in {r['startup_s']:.1f} s, {r['tracked']:,} objects tracked",
                    flush=True,
                )
        finally:
            await close_world(world)
    print()
    print(
        f"{'variant':<10} {'burst':>5} {'ack p50 ms':>11} {'ack p99 ms':>11} {'ack max ms':>11} "
        f"{'full GCs in burst (ms)':>24} {'young GCs (ms)':>15}"
    )
    for r in results:
        for i, b in enumerate(r["bursts"]):
            full = ", ".join(f"{d:.0f}" for d in b["full"]) or "-"
            print(
                f"{r['variant']:<10} {i + 1:>5} {percentile(b['acks'], 0.5):>11.1f} "
                f"{percentile(b['acks'], 0.99):>11.1f} {max(b['acks']):>11.1f} {full:>24} "
                f"{b['young']:>6} ({b['young_ms']:.0f})"
            )
        every = [a for b in r["bursts"] for a in b["acks"]]
        full_all = sum(len(b["full"]) for b in r["bursts"])
        print(
            f"{r['variant']:<10} {'all':>5} {percentile(every, 0.5):>11.1f} {percentile(every, 0.99):>11.1f} "
            f"{max(every):>11.1f} {str(full_all) + ' in all':>24}"
        )
    print()
    for r in results:
        print(
            f"{r['variant']:<10} start-up {r['startup_s']:.1f} s, peak RSS {r['rss_mib']:.0f} MiB, "
            f"{r['full_count']} full collections in the whole run (longest {r['full_max_ms']:.0f} ms)"
            + (f"; heap frozen {r['freeze']}" if r["freeze"] else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guilds", type=int, default=25_000)
    parser.add_argument("--shards", type=int, default=10)
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--channels", type=int, default=5, help="text channels per guild")
    parser.add_argument("--bursts", type=int, default=4)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--no-probe", action="store_true", help="skip the timed full collections")
    parser.add_argument(
        "--collect-in-burst",
        action="store_true",
        help="start a full collection in the bot as each burst begins (not in gc-off): the stall the "
        "issue met, without waiting for CPython's thresholds to make one fall due inside a burst",
    )
    parser.add_argument("--child", choices=(*VARIANTS, "probe"), help=argparse.SUPPRESS)
    parser.add_argument("--gc-log", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "probe":
        probe(args.guilds, args.shards, args.channels)
        return
    if args.child:
        sys.exit(child(args.child, args.gc_log))
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
