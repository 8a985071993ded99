"""Benchmark: what one hostile (or large) answer of the service costs the bot (issue 16, item 1).

    python3 benchmarks/bench_answers.py            # every case, prints a Markdown table
    python3 benchmarks/bench_answers.py --quick    # 8 MiB bombs instead of 48 MiB (a smoke run)

Each case runs in a fresh child process. A small HTTP server in a thread of that process serves
the answer (a 48 KB gzip that inflates to just under the image answer's 48 MiB cap, or a large
legitimate image answer). On the event loop, the answer is read and parsed either

* naively (the baseline): the body inflated whole within the cap, then ``json.loads``; or
* the bot's way: ``GenerationClient.create_image``, i.e. :func:`~framecast.service.body.read_body`
  with the incremental :class:`~framecast.service.jsonscan.JsonScan`, then a bounded parse.

Figures: wall time of the call; peak RSS above the RSS just before it (``VmHWM`` reset through
``/proc/self/clear_refs`` where allowed, else ``ru_maxrss``); the longest stall of the event loop
(a 5 ms heartbeat's worst lateness); and how long another member's request (a small create
answer from the same server, due 0.3 s after the answer was asked for) took to be answered,
counted from when it was due.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MiB = 1024 * 1024
CAP = 50_331_648  # GEN_IMAGE_JSON_MAX_BYTES' default

#: name: (answer, how it is parsed, answer size in MiB; None: just under the 48 MiB cap)
CASES: dict[str, tuple[str, str, int | None]] = {
    "objects/naive": ("objects", "naive", None),
    "objects/framecast": ("objects", "framecast", None),
    "lists/naive": ("lists", "naive", None),
    "lists/framecast": ("lists", "framecast", None),
    "image-12MiB/naive": ("image", "naive", 12),
    "image-12MiB/framecast": ("image", "framecast", 12),
    "image-36MiB/naive": ("image", "naive", 36),
    "image-36MiB/framecast": ("image", "framecast", 36),
}


def gzip_of_repeats(head: bytes, unit: bytes, tail: bytes, size: int) -> bytes:
    """The gzip of `head` + `unit`*n + `tail`, n as large as fits in `size`, built in pieces."""
    count = (size - len(head) - len(tail)) // len(unit)
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [packer.compress(head)]
    block = unit * (1 << 16)
    whole, rest = divmod(count, 1 << 16)
    for _ in range(whole):
        out.append(packer.compress(block))
    out += [packer.compress(unit * rest + tail), packer.flush()]
    return b"".join(out)


def payload(kind: str, size: int) -> tuple[bytes, dict[str, str]]:
    """The answer's bytes on the wire and its headers."""
    if kind == "objects":
        return gzip_of_repeats(b'{"data": [', b"{},", b"{}]}", size), {"Content-Encoding": "gzip"}
    if kind == "lists":
        return gzip_of_repeats(b'{"data": [', b"[[[[]]]],", b"[]]}", size), {"Content-Encoding": "gzip"}
    image = random.Random(1).randbytes(size * 3 // 4)  # its base64 is `size` bytes
    body = b'{"data": [{"b64_json": "' + base64.b64encode(image) + b'"}]}'
    return body, {}


def serve(answer: bytes, headers: dict[str, str]) -> ThreadingHTTPServer:
    """A server in a thread: ``/big`` is the answer, anything else a small create answer."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 -- the name http.server calls
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body, extra = (
                (answer, headers) if self.path.startswith("/v1/images") else (b'{"video_id": "t1"}', {})
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def rss_kib(field: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


async def naive(session: Any, base: str) -> str:
    """The baseline: the body inflated whole within the cap, then json.loads, all on the loop."""
    async with session.post(
        base + "/v1/images/generations", json={"prompt": "x"}, auto_decompress=False
    ) as resp:
        raw = await resp.read()
    if resp.headers.get("Content-Encoding") == "gzip":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        raw = inflater.decompress(raw, CAP + 1)
    data = json.loads(raw)
    return f"parsed ({type(data).__name__})"


async def framecast_way(session: Any, base: str) -> str:
    from framecast.clock import SystemClock
    from framecast.config import Secret
    from framecast.keys.budget import RequestBudget
    from framecast.service import GenerationClient
    from framecast.service.errors import BadResponse
    from framecast.service.types import ImageParams

    clock = SystemClock()
    client = GenerationClient(
        session,
        base_url=base,
        api_key=Secret("bench-key"),
        budget=RequestBudget(
            1000, 1.0, clock=clock, backoff_base=0.01, backoff_max=0.05, rng=random.Random(1)
        ),
        clock=clock,
        request_timeout=60.0,
        retry_max=1,
        backoff_base=0.01,
        backoff_max=0.05,
        rng=random.Random(2),
    )
    try:
        result = await client.create_image(ImageParams(model="m", prompt="x", size="512x512"))
        return f"image of {len(result.data or b'')} bytes"
    except BadResponse as exc:
        return f"refused: {exc.message.split(': ', 1)[1][:48]}"
    finally:
        await client.close()


async def run_case(kind: str, way: str, size: int) -> dict[str, Any]:
    import aiohttp

    import framecast.service  # noqa: F401 -- imported before the clock starts (imports block the loop)

    answer, headers = payload(kind, size)
    server = serve(answer, headers)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    stalls: list[float] = []
    done = asyncio.Event()

    async def heartbeat() -> None:
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            stalls.append(time.perf_counter() - before - 0.005)

    async with aiohttp.ClientSession() as session:
        async with session.post(base + "/v1/videos", json={}) as resp:  # warm up the connection pool
            await resp.read()
        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.05)
        peak_reset = reset_peak()
        before = rss_kib("VmRSS") if peak_reset else rss_kib("VmHWM")
        started = time.perf_counter()
        ended: list[float] = []

        async def timed() -> str:
            try:
                return await (naive(session, base) if way == "naive" else framecast_way(session, base))
            finally:
                ended.append(time.perf_counter())

        call = asyncio.create_task(timed())
        # Another member's /video, meant 0.3 s later (as in the issue): its latency counts from
        # then, so a blocked loop that delays even the sending of it is counted too.
        await asyncio.sleep(0.3)
        async with session.post(base + "/v1/videos", json={}) as resp:
            await resp.read()
        member_latency = time.perf_counter() - started - 0.3
        outcome = await call
        wall = ended[0] - started
        peak = rss_kib("VmHWM")
        done.set()
        await beat
    server.shutdown()
    return {
        "wire_kib": round(len(answer) / 1024),
        "outcome": outcome,
        "wall_s": round(wall, 3),
        "rss_delta_mib": round((peak - before) / 1024, 1),
        "max_stall_ms": round(max(stalls) * 1000, 1),
        "member_ms": round(member_latency * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 MiB answers instead of 48 MiB")
    parser.add_argument("--case", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = 8 * MiB if args.quick else CAP - 16
    if args.case:
        kind, way, mib = CASES[args.case]
        if mib is not None:
            size = mib * MiB // (4 if args.quick else 1)
        print(json.dumps(asyncio.run(run_case(kind, way, size))))
        return
    print(
        "| Answer | Parsed | On the wire | Outcome | Wall | Peak RSS Δ | Max loop stall | Member's request |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in CASES:
        command = [sys.executable, __file__, "--case", name] + (["--quick"] if args.quick else [])
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ})
        if done.returncode != 0:
            print(f"| {name} | failed: {done.stderr.strip().splitlines()[-1:]} |")
            continue
        r = json.loads(done.stdout)
        kind, way = name.split("/")
        print(
            f"| {kind} | {way} | {r['wire_kib']:,} KiB | {r['outcome']} | {r['wall_s']:.2f} s | "
            f"{r['rss_delta_mib']:,} MiB | {r['max_stall_ms']:,} ms | {r['member_ms']:,} ms |"
        )


if __name__ == "__main__":
    main()
