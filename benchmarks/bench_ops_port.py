"""Benchmark: the operator port under 2,000 idle clients (issue 16, item 2).

    python3 benchmarks/bench_ops_port.py [--clients 2000] [--soft-limit 1024]

An :class:`~framecast.ops.http.OpsServer` with its defaults runs in a child process whose soft
descriptor limit is the common 1,024 (what the bot had before it raised its own at start-up). This
process opens `--clients` connections to it on 127.0.0.1, each sending half a request head and
then nothing (a slowloris), then asks ``/healthz`` ten times. Printed: connections the child holds
(from its own count, read through a pipe), descriptors it has open, and the ``/healthz`` latency.
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHILD = """
import asyncio, os, sys
from framecast.ops import Metrics, OpsServer

async def main():
    server = OpsServer(Metrics(), host="127.0.0.1", port=0)
    await server.start()
    print(server.port, flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.readline():  # each line asks: how many connections and descriptors now?
        held = getattr(server, "connections", -1)  # -1: a version that does not count them
        try:
            fds = len(os.listdir("/proc/self/fd"))
        except OSError:  # not even one descriptor left to list them
            fds = -1
        print(held, fds, flush=True)

asyncio.run(main())
"""


def healthz(port: int) -> float:
    started = time.perf_counter()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
        assert resp.status == 200
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--soft-limit", type=int, default=1024)
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the tree to import framecast from (compare versions)"
    )
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.clients + 200)), hard))

    def limit_child() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(args.soft_limit, hard), hard))

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=args.root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=limit_child,
    )
    assert child.stdin is not None and child.stdout is not None
    port = int(child.stdout.readline())

    def ask() -> tuple[int, int]:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("?\n")
        child.stdin.flush()
        line = child.stdout.readline().split()
        if len(line) != 2:  # the child is stuck or gone (no descriptor left even to answer)
            return -1, -1
        return int(line[0]), int(line[1])

    idle: list[socket.socket] = []
    try:
        quiet = [healthz(port) for _ in range(10)]
        started = time.perf_counter()
        for _ in range(args.clients):
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=3)
            except OSError as exc:  # the old server: its backlog full, nothing accepted any more
                print(f"connection {len(idle) + 1} failed: {exc!r}; stopped opening")
                break
            idle.append(client)
            try:
                client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            except OSError:
                pass
        opened = time.perf_counter() - started
        time.sleep(0.5)
        held, fds = ask()
        loaded: list[float] = []
        for _ in range(10):
            try:
                loaded.append(healthz(port))
            except OSError as exc:  # the old server: no descriptor left to accept the probe
                print(f"/healthz failed: {exc}")
                loaded.append(float("inf"))
        print(
            f"child soft descriptor limit: {args.soft_limit}; idle clients opened: {len(idle)} in {opened:.2f} s"
        )
        print(f"connections the server holds: {held}; descriptors the child has open: {fds}")
        print(
            f"/healthz latency, idle port: median {statistics.median(quiet) * 1000:.1f} ms, "
            f"max {max(quiet) * 1000:.1f} ms"
        )
        print(
            f"/healthz latency, {len(idle)} idle clients: median {statistics.median(loaded) * 1000:.1f} ms, "
            f"max {max(loaded) * 1000:.1f} ms"
        )
    finally:
        for client in idle:
            client.close()
        child.kill()
        child.wait(10)


if __name__ == "__main__":
    main()
