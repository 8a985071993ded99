"""Benchmark of log masking (framecast.logsetup.RedactingFilter) against the old replace loop.

Run from the repository root:  python3 benchmarks/bench_masking.py [--quick]

For 10, 1,000 and 100,000 servers' keys being masked (plus the operator's Discord token and API
key), prints the time one log record spends in the filter, for two lines (one with nothing secret,
one holding a key), with:

* **old**: the filter as of commit ``af845e3`` (every record sorts every secret, longest first, and
  runs ``str.replace`` once per secret), taken out of git with ``git show`` (skipped with a line
  when git or the commit is not there);
* **new**: this tree's filter (secrets indexed by their first characters, the line scanned once).

Two shapes of keys: alike, as keys of one service are (``sk-proj-`` and 32 hex digits: one head,
so candidates are found with ``str.find``), and random (40 characters with random beginnings: many
heads, so the line is scanned with one dict lookup per character). Not part of the tests.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import time
import types
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from framecast.logsetup import RedactingFilter, mask_secrets  # noqa: E402

OLD_COMMIT = "af845e3"
DISCORD_TOKEN = "MTAxMjM0NTY3ODkwMTIzNDU2Nw.GAbcDe.s3cr3t-discord-token_value"
API_KEY = "sk-live-0123456789abcdef"
COUNTS = (10, 1_000, 100_000)


def old_module() -> types.ModuleType | None:
    """framecast/logsetup.py as of OLD_COMMIT, loaded under another name (None: not available)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{OLD_COMMIT}:framecast/logsetup.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("old_logsetup")
    sys.modules[module.__name__] = module  # dataclass-free, but keep it importable-looking
    exec(compile(source, f"{OLD_COMMIT}:framecast/logsetup.py", "exec"), module.__dict__)
    return module


def per_record(filt: logging.Filter, line: str, budget: float) -> tuple[float, int]:
    """Median microseconds per record over repeats of batches, spending about `budget` seconds."""

    def one() -> None:
        filt.filter(logging.LogRecord("bench", logging.INFO, __file__, 1, "%s", (line,), None))

    t0 = time.perf_counter()
    one()
    first = time.perf_counter() - t0
    batch = max(1, min(2_000, int(budget / 5 / max(first, 1e-7))))
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(batch):
            one()
        samples.append((time.perf_counter() - t0) / batch * 1e6)
    return statistics.median(samples), batch * 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (noisier figures)")
    args = parser.parse_args()
    budget = 0.3 if args.quick else 1.5
    shapes = {
        "sk-proj-": [f"sk-proj-{uuid.uuid4().hex}" for _ in range(max(COUNTS))],
        "random": [(uuid.uuid4().hex + uuid.uuid4().hex)[:40] for _ in range(max(COUNTS))],
    }
    old = old_module()
    if old is None:
        print(f"old filter: skipped (git or commit {OLD_COMMIT} not available)")
    print(f"Python {sys.version.split()[0]}; per record, median of 5 batches\n")
    print("| keys | secrets | line | old us/record | new us/record | old/new |")
    print("|---|---|---|---|---|---|")
    owner = object()
    for (shape, keys), count in ((item, count) for item in shapes.items() for count in COUNTS):
        lines = {
            "clean": "guild 123456789012345678: job 4567 created video task v1a2b00042 "
            "(model svc-video-v2.0, 5 s, 1280x720) in 0.84 s",
            "with a key": f"list models: connection problem (ClientOSError: key {keys[7]} refused) retry 2/3",
        }
        published = keys[:count]
        mask_secrets(owner, published)
        new_filter = RedactingFilter([DISCORD_TOKEN, API_KEY])
        old_filter: logging.Filter | None = None
        if old is not None:
            old._RUNTIME_SECRETS.clear()
            add: Callable[[str], None] = old.add_secret
            for key in published:
                add(key)
            old_filter = old.RedactingFilter([DISCORD_TOKEN, API_KEY])
        for name, line in lines.items():
            new_us, _ = per_record(new_filter, line, budget)
            if old_filter is not None:
                old_us, _ = per_record(old_filter, line, budget)
                ratio = old_us / new_us
                print(f"| {shape} | {count:,} | {name} | {old_us:,.1f} | {new_us:,.1f} | {ratio:,.1f}x |")
            else:
                print(f"| {shape} | {count:,} | {name} | - | {new_us:,.1f} | - |")
    mask_secrets(owner, ())


if __name__ == "__main__":
    main()
