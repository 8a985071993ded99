"""The results the runner saves itself (framecast.jobs.results): which ones a start-up sweep keeps."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framecast.jobs.results import LocalResults
from framecast.storage import Store
from framecast.values import PARKED, JobKind, JobState, NewJob
from tests.fakes.media import make_png


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with await Store.open(tmp_path / "jobs.sqlite3") as opened:
        yield opened


async def job_in(store: Store, *path: JobState) -> int:
    """A new image job of Alice's, moved through the states `path`."""
    new = NewJob(JobKind.IMAGE, 11, 100, 7, "en-US", {"prompt": "a heron", "model": "m"}, discord={})
    job = await store.add(new, member_limit=None, guild_cap=None)
    for state in path:
        await store.transition(job.id, state)
    return job.id


async def test_the_sweep_keeps_the_files_of_unfinished_and_parked_jobs_only(
    store: Store, tmp_path: Path
) -> None:
    results = LocalResults(tmp_path / "results")
    picture = make_png(16, 16)
    queued = await job_in(store)
    creating = await job_in(store, JobState.SUBMITTING)  # the create answered with the image
    delivering = await job_in(store, JobState.SUBMITTING, JobState.DELIVERING)
    delivered = await job_in(store, JobState.SUBMITTING, JobState.DELIVERING, JobState.DELIVERED)
    parked = await job_in(store, JobState.SUBMITTING, JobState.DELIVERING, JobState.DELIVERED)
    await store.patch_discord(parked, {PARKED: True})
    failed = await job_in(store, JobState.SUBMITTING, JobState.FAILED)
    cancelled = await job_in(store, JobState.SUBMITTING, JobState.CANCELLED)
    for job_id in (queued, creating, delivering, delivered, parked, failed, cancelled, 424_242):
        results.save(job_id, picture)
    (results.directory / f"job-{failed}.png.tmp").write_bytes(b"half")
    (results.directory / "notes.txt").write_text("not ours")

    assert await results.sweep(store.get) == 4  # delivered, failed, cancelled, and no such job

    kept = {queued, creating, delivering, parked}
    assert sorted(p.name for p in results.directory.iterdir()) == sorted(
        ["notes.txt", *(f"job-{job_id}.png" for job_id in kept)]
    )
    assert await results.sweep(store.get) == 0


async def test_a_sweep_without_a_results_directory_deletes_nothing(store: Store, tmp_path: Path) -> None:
    assert await LocalResults(tmp_path / "never made").sweep(store.get) == 0
