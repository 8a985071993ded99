"""Benchmark framecast.media: time and peak memory of fit_video / fit_image.

    python3 benchmarks/bench_media.py            # all cases, prints a table
    python3 benchmarks/bench_media.py --quick    # smaller sources (a smoke run)

Sources are made with tests/fakes/media.py (PyAV, deterministic) into a temporary directory. Each
case then runs in a fresh child process so the figures don't leak into each other:

* wall / CPU: ``time.perf_counter`` and ``resource.getrusage(RUSAGE_SELF)`` (user + system, all
  threads, so FFmpeg's and x264's worker threads count) around the call;
* py peak: ``tracemalloc`` peak of Python allocations during the call (the bytes objects and
  BytesIO buffers; FFmpeg's own C allocations are not traced);
* rss before->peak: the process's peak RSS (``VmHWM``, else ``ru_maxrss``) before the call (interpreter, PyAV,
  the source bytes, a warm-up probe) and after it; this one includes FFmpeg/x264 memory (decoder,
  encoder lookahead, frames);
* tries: encodes fit_video made (counted from its debug log).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MiB = 1024 * 1024


class _CountAttempts(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("fit_video attempt"):
            self.count += 1


def _maxrss_mib() -> float:
    """Peak RSS of this process in MiB.

    Linux's ``ru_maxrss`` survives ``execve`` (a child starts with its parent's peak), so prefer
    ``VmHWM`` from /proc, which belongs to the current image only.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child(kind: str, path: str, limit: int) -> dict:
    """Run one case in this (fresh) process and return its figures."""
    import av

    from framecast import media

    data = Path(path).read_bytes()
    counter = _CountAttempts()
    logger = logging.getLogger("framecast.media")
    logger.addHandler(counter)
    logger.setLevel(logging.DEBUG)
    # Warm up PyAV/FFmpeg (codec registration, first-use allocations) outside the measurement.
    media.sniff(data)
    if kind == "video":
        media.probe_video(data)
    rss0, cpu0 = _maxrss_mib(), _cpu()
    tracemalloc.start()
    t0 = time.perf_counter()
    if kind == "video":
        out = media.fit_video(data, limit)
        ext = "mp4"
    else:
        fitted = media.fit_image(data, limit)
        out, ext = fitted if fitted is not None else (None, "-")
    wall = time.perf_counter() - t0
    _, py_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    cpu, rss1 = _cpu() - cpu0, _maxrss_mib()
    geometry = "-"
    if out is not None:
        with av.open(io.BytesIO(out)) as container:
            stream = container.streams.video[0]
            geometry = f"{stream.codec_context.width}x{stream.codec_context.height}"
    return {
        "out_bytes": len(out) if out is not None else None,
        "ext": ext,
        "geometry": geometry,
        "wall": wall,
        "cpu": cpu,
        "py_peak_mib": py_peak / MiB,
        "rss_before_mib": rss0,
        "rss_peak_mib": rss1,
        "tries": counter.count if kind == "video" else None,
    }


def _make_sources(directory: Path, quick: bool) -> list[tuple[str, str, Path, int]]:
    from tests.fakes.media import make_large_mp4, make_large_png

    if quick:
        w, h, seconds = 576, 384, 2.0
    else:
        w, h, seconds = 1152, 768, 121 / 24
    sources = {
        "video grain": ("video", make_large_mp4(
            (6 if quick else 20) * MiB, width=w, height=h, fps=24, seconds=seconds, noise=24)),
        "video noise": ("video", make_large_mp4(
            (8 if quick else 30) * MiB, width=w, height=h, fps=24, seconds=seconds, noise=255)),
        "image noise": ("image", make_large_png((3 if quick else 12) * MiB)),
    }  # fmt: skip
    limits = {
        "video": [10 * MiB, 2 * MiB] if not quick else [4 * MiB, 1 * MiB],
        "image": [8 * MiB, 2 * MiB, MiB // 2] if not quick else [2 * MiB, MiB // 2],
    }
    cases = []
    for name, (kind, data) in sources.items():
        path = directory / name.replace(" ", "_")
        path.write_bytes(data)
        for limit in limits[kind]:
            cases.append((name, kind, path, limit))
    return cases


def _describe(path: Path, kind: str) -> str:
    from framecast import media

    data = path.read_bytes()
    if kind == "video":
        info = media.probe_video(data)
        return f"{info.width}x{info.height} {info.frames}f {len(data) / MiB:.1f} MiB"
    return f"png {len(data) / MiB:.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sources, for a smoke run")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "PATH", "LIMIT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path, limit = args.child
        print(json.dumps(_child(kind, path, int(limit))))
        return

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_media_") as tmp:
        t0 = time.perf_counter()
        cases = _make_sources(Path(tmp), args.quick)
        print(f"sources generated in {time.perf_counter() - t0:.1f} s\n", flush=True)
        header = (
            f"{'case':<12} {'source':<26} {'limit':>9} {'result':>10} {'out':<13} {'tries':>5} "
            f"{'wall s':>7} {'cpu s':>6} {'py peak':>8} {'rss before->peak':>17}"
        )
        print(header)
        print("-" * len(header))
        for name, kind, path, limit in cases:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", kind, str(path), str(limit)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            result = "None" if r["out_bytes"] is None else f"{r['out_bytes'] / MiB:.2f} MiB"
            out = f"{r['ext']} {r['geometry']}" if r["out_bytes"] is not None else "-"
            tries = "-" if r["tries"] is None else str(r["tries"])
            print(
                f"{name:<12} {_describe(path, kind):<26} {limit / MiB:>5.2f} MiB {result:>10} {out:<13} "
                f"{tries:>5} {r['wall']:>7.2f} {r['cpu']:>6.2f} {r['py_peak_mib']:>5.1f} MiB "
                f"{r['rss_before_mib']:>6.0f} ->{r['rss_peak_mib']:>4.0f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()
