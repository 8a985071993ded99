"""Child process for the store's crash test (not a test module itself).

Usage: ``python3 tests/storage/_crash_child.py DB_PATH``

Opens the store, then forever: adds jobs and drives them through the state machine from a few
concurrent coroutines. After each call returns (i.e. after its commit) it prints one line
``<job id> <state>`` and flushes, so the parent knows exactly what was acknowledged. The parent
SIGKILLs it at an arbitrary moment and checks that everything reported is in the database.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from framecast.storage import Store  # noqa: E402
from framecast.values import JobKind, JobState, NewJob  # noqa: E402

PROMPT = "crash 🎬 你好 नमस्ते مرحبا 👩‍👩‍👧 e\u0301"
WORKERS = 4


def report(job_id: int, state: JobState) -> None:
    sys.stdout.write(f"{job_id} {state.value}\n")
    sys.stdout.flush()


async def worker(store: Store, worker_no: int) -> None:
    n = 0
    while True:
        n += 1
        job = await store.add(
            NewJob(
                JobKind.VIDEO,
                guild_id=1 + worker_no % 2,
                channel_id=10,
                user_id=100 + worker_no,
                locale="en-US",
                params={"model": "m", "prompt": f"{PROMPT} {worker_no}/{n}"},
                discord={"message_id": n},
            ),
            member_limit=None,
            guild_cap=None,
        )
        report(job.id, job.state)
        job = await store.transition(job.id, JobState.SUBMITTING, expect=JobState.QUEUED)
        report(job.id, job.state)
        job = await store.transition(job.id, JobState.RUNNING, task_id=f"task-{job.id}", started_at=1.0)
        report(job.id, job.state)
        await store.update(job.id, progress=0.5)
        if n % 4 == 0:
            job = await store.transition(job.id, JobState.CANCELLED, expect=JobState.RUNNING)
            report(job.id, job.state)
            continue
        job = await store.transition(job.id, JobState.DELIVERING, result_url="https://example.invalid/r")
        report(job.id, job.state)
        job = await store.transition(job.id, JobState.DELIVERED, expect=JobState.DELIVERING)
        report(job.id, job.state)


async def main(path: Path) -> None:
    store = await Store.open(path)
    await asyncio.gather(*(worker(store, i) for i in range(WORKERS)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
