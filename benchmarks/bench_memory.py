"""Memory benchmark: 20 jobs whose 100 MiB results are all ready at once, with and without the bound.

Each configuration runs in its own child process: the real :class:`~framecast.jobs.runner.JobRunner` with
the real :class:`~framecast.storage.Store` and :class:`~framecast.service.GenerationClient`, over
HTTP against the fake generation service (which runs in this parent process, so its own buffers
are not counted). Only the chat side is a stand-in: a reporter whose upload limit is above the
result size (no re-encode) and whose "upload" reads every byte and takes as long as a 400 MiB/s link
would. The 20 jobs are started together; each is created, polled once, and finished, so all 20
results are ready at about the same moment.

The child reports its peak RSS (``VmHWM``) and the RSS before the jobs started. ``RESULTS_AT_ONCE``
bounds the results downloaded or held at once; "naive" sets it to the number of jobs, which is what
the bot did before the bound existed (every finished job downloaded its result at once).

Run: ``python3 benchmarks/bench_memory.py [--jobs 20] [--mib 100] [--bounds 2,20]``
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from framecast.jobs.chat_side import Delivered, ResultFile  # noqa: E402

if TYPE_CHECKING:
    from framecast.jobs.chat_side import DeliveryOutcome, ResultToDeliver

MiB = 1024 * 1024
UPLOAD_BYTES_PER_SECOND = 400 * MiB


def padded_mp4(size: int) -> bytes:
    """A real small MP4 followed by a ``free`` box, `size` bytes in all (a valid, large video file)."""
    from tests.fakes.media import make_mp4

    clip = make_mp4(320, 240, 24, 24)
    pad = size - len(clip)
    return clip + pad.to_bytes(4, "big") + b"free" + bytes(pad - 8)


def rss_mib(field: str = "VmRSS") -> float:
    """This process's current (VmRSS) or peak (VmHWM) resident memory, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- child: the runner under load -----------------------------------------------------------------


class UploadingReporter:
    """The chat side: every result is read through and "uploaded" at a fixed speed; nothing kept."""

    def __init__(self) -> None:
        self.delivered = 0
        self.digests: set[str] = set()

    async def job_changed(self, job: Any, *, urgent: bool = False) -> None:
        return None

    async def upload_limit(self, job: Any, refused: int | None = None) -> int:
        return 1 << 40  # no re-encode: the benchmark measures holding results, not fitting them

    async def delivery_pending(self, job: Any) -> None:
        return None

    async def deliver(self, job: Any, result: ResultToDeliver) -> DeliveryOutcome:
        if not isinstance(result, ResultFile):
            raise AssertionError("every result fits: no link expected")
        self.digests.add(hashlib.blake2b(result.data, digest_size=8).hexdigest())
        await asyncio.sleep(len(result.data) / UPLOAD_BYTES_PER_SECOND)
        self.delivered += 1
        return Delivered()

    async def was_delivered(self, job: Any) -> bool:
        return False


async def child(base_url: str, key: str, jobs: int, at_once: int, download_max: int) -> dict[str, Any]:
    import aiohttp

    from framecast.clock import SystemClock
    from framecast.config import Secret
    from framecast.jobs.runner import JobRunner, RunnerSettings
    from framecast.keys.budget import RequestBudget
    from framecast.service import GenerationClient
    from framecast.storage import Store
    from framecast.values import JobKind, JobState, NewJob
    from tests.fakes.keys import SingleKey

    clock = SystemClock()
    reporter = UploadingReporter()
    with tempfile.TemporaryDirectory() as tmp:
        store = await Store.open(Path(tmp) / "bench.sqlite3", clock=clock)
        async with aiohttp.ClientSession() as session:
            budget = RequestBudget(100_000, 1.0, clock=clock, backoff_base=0.05, backoff_max=0.5)
            client = GenerationClient(
                session,
                base_url=base_url,
                api_key=Secret(key),
                budget=budget,
                clock=clock,
                request_timeout=60,
                rng=random.Random(1),
            )
            runner = JobRunner(
                store=store,
                accounts=SingleKey(client),
                reporter=reporter,
                clock=clock,
                results_dir=Path(tmp) / "results",
                settings=RunnerSettings(
                    poll_interval=0.05,
                    poll_timeout=600,
                    download_max_bytes=download_max,
                    download_timeout=600,
                    backoff_base=0.05,
                    backoff_max=0.5,
                    results_at_once=at_once,
                    image_max_pixels=40_000_000,
                    reencode_timeout=300,
                ),
            )
            params = {
                "model": "svc-video-v2.0",
                "prompt": "a heavy clip",
                "width": 320,
                "height": 240,
                "num_frames": 24,
                "frame_rate": 24,
            }
            added = [
                await store.add(
                    NewJob(JobKind.VIDEO, 1, 2, n, "en", dict(params)), member_limit=None, guild_cap=None
                )
                for n in range(jobs)
            ]
            before = rss_mib()
            started = time.perf_counter()
            finals = await asyncio.gather(*(runner.run(j, release_service_slot=lambda: None) for j in added))
            elapsed = time.perf_counter() - started
            await client.close()
        await store.close()
    assert all(f.state is JobState.DELIVERED for f in finals), [f.error_code for f in finals]
    assert reporter.delivered == jobs and len(reporter.digests) == 1
    return {"at_once": at_once, "before": before, "peak": rss_mib("VmHWM"), "seconds": elapsed}


# -- parent: the fake service and the table -------------------------------------------------------


async def measure(jobs: int, size: int, bounds: list[int]) -> None:
    from tests.fakes.gen_service import FakeService

    payload = padded_mp4(size)
    async with FakeService() as fake:
        fake.video_payload = payload
        fake.file_chunked = True  # streamed in 64 KiB writes: the fake's memory stays flat
        rows = []
        for at_once in bounds:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "--child",
                fake.base_url,
                fake.api_key,
                str(jobs),
                str(at_once),
                str(2 * size),
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await proc.communicate()
            if proc.returncode != 0:
                raise SystemExit(f"child with RESULTS_AT_ONCE={at_once} failed ({proc.returncode})")
            rows.append(json.loads(out.decode().strip().splitlines()[-1]))
    print(
        f"{jobs} jobs, each result {size / MiB:.0f} MiB, all finished together; uploads at "
        f"{UPLOAD_BYTES_PER_SECOND // MiB} MiB/s, no re-encode"
    )
    print(
        f"| {'RESULTS_AT_ONCE':>15} | {'RSS before':>10} | {'peak RSS':>9} | {'peak - before':>13} | "
        f"{'per held result':>15} | {'all delivered':>13} |"
    )
    print(f"|{'-' * 17}|{'-' * 12}|{'-' * 11}|{'-' * 15}|{'-' * 17}|{'-' * 15}|")
    for row in rows:
        grown = row["peak"] - row["before"]
        label = f"{row['at_once']}" + (" (naive)" if row["at_once"] >= jobs else "")
        print(
            f"| {label:>15} | {row['before']:>6.0f} MiB | {row['peak']:>5.0f} MiB | {grown:>9.0f} MiB | "
            f"{grown / min(row['at_once'], jobs):>11.0f} MiB | {row['seconds']:>11.1f} s |"
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        base_url, key, jobs, at_once, download_max = sys.argv[2:7]
        result = asyncio.run(child(base_url, key, int(jobs), int(at_once), int(download_max)))
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--mib", type=int, default=100, help="size of each result")
    parser.add_argument("--bounds", default="2,20", help="RESULTS_AT_ONCE values to run, comma-separated")
    args = parser.parse_args()
    asyncio.run(measure(args.jobs, args.mib * MiB, [int(b) for b in args.bounds.split(",")]))


if __name__ == "__main__":
    main()
