"""A result that could be posted nowhere, handed to its requester (framecast.app.parked).

The core is the real one on the fake service: a parked job's saved image is read back from the
runner's results directory, a parked video is downloaded again from the service's link with the
job's key, both are fitted to the asking interaction's limit, and only the requester gets them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from framecast.app import (
    PARKED,
    Actor,
    Job,
    JobKind,
    JobState,
    ParkedFile,
    ParkedProblem,
    ParkedUnavailable,
)
from framecast.app.core import Core
from framecast.clock import Clock
from framecast.config import Secret, Settings
from framecast.jobs.queues import QueuePositions
from framecast.jobs.results import LocalResults
from framecast.ops.metrics import Metrics
from framecast.planner.estimate import Estimates
from framecast.storage import Store
from framecast.values import NewJob
from tests.fakes.chat_side import QuietChat
from tests.fakes.gen_service import FakeService
from tests.fakes.media import make_png

WAIT = 20.0
MiB = 1024 * 1024
ALICE, BOB = 11, 12


def quiet_chat(
    *, store: Store, positions: QueuePositions, estimates: Estimates, clock: Clock, metrics: Metrics
) -> QuietChat:
    return QuietChat()


@pytest.fixture
async def core(fake_service: FakeService, tmp_path: Path) -> AsyncIterator[Core[QuietChat]]:
    settings = Settings(  # type: ignore[call-arg]
        discord_token=Secret("discord-token-not-used-here"),
        gen_api_base_url=fake_service.base_url,
        gen_api_key=Secret(fake_service.api_key),
        database_path=tmp_path / "data" / "framecast.sqlite3",
        shutdown_timeout=2.0,
        gen_backoff_base=0.01,  # a failed download's retries in milliseconds, not the real minute
        gen_backoff_max=0.05,
    )
    opened = await asyncio.wait_for(Core.open(settings, reporter=quiet_chat), WAIT)
    try:
        yield opened
    finally:
        await opened.close()


def saved(core: Core[Any]) -> LocalResults:
    """The runner's results directory (where it keeps inline images)."""
    return LocalResults(core.settings.database_path.parent / "results")


async def delivered_job(
    core: Core[Any],
    kind: JobKind,
    *,
    parked: bool = True,
    image: bytes | None = None,
    url: str | None = None,
) -> Job:
    """Alice's personal job, delivered (parked unless told otherwise) as the runner leaves it.

    `image`: an inline image, saved where the runner saves it; else the service's link `url`.
    """
    params: dict[str, Any] = (
        {"prompt": "a heron", "model": "m", "size": "64x64"}
        if kind is JobKind.IMAGE
        else {
            "prompt": "a heron",
            "model": "m",
            "width": 64,
            "height": 64,
            "num_frames": 12,
            "frame_rate": 12,
        }
    )
    new = NewJob(kind, ALICE, 100, ALICE, "en-US", params, discord={"context": "dm"})
    job = await core.store.add(new, member_limit=None, guild_cap=None)
    await core.store.transition(job.id, JobState.SUBMITTING)
    if image is not None:
        saved(core).save(job.id, image)
        await core.store.transition(job.id, JobState.DELIVERING, result_local=True)
    else:
        await core.store.transition(job.id, JobState.DELIVERING, result_url=url)
    await core.store.transition(job.id, JobState.DELIVERED)
    return await core.store.patch_discord(job.id, {PARKED: True} if parked else {"message_id": 5})


async def test_the_requester_gets_a_saved_image_and_once_handed_over_the_copy_goes(
    core: Core[QuietChat],
) -> None:
    picture = make_png(64, 64)
    job = await delivered_job(core, JobKind.IMAGE, image=picture)
    assert job.parked

    got = await core.parked.fetch(Actor(ALICE, ALICE), job.id, limit=10 * MiB)

    assert isinstance(got, ParkedFile)
    assert got.data == picture and got.ext == "png" and not got.reencoded
    assert got.filename == f"framecast-{job.id}.png"
    # Fetching records nothing: until it is shown, the job waits (a failed answer can try again).
    still = await core.store.get(job.id)
    assert still is not None and still.parked and saved(core).find(job.id) is not None

    assert await core.parked.handed_over(Actor(ALICE, ALICE), job.id) is True
    after = await core.store.get(job.id)
    assert after is not None and not after.parked and after.state is JobState.DELIVERED
    assert after.discord["context"] == "dm"  # the chat side's record is otherwise kept
    assert saved(core).find(job.id) is None
    again = await core.parked.fetch(Actor(ALICE, ALICE), job.id, limit=10 * MiB)
    assert again == ParkedUnavailable(job.id, ParkedProblem.NOT_PARKED)
    assert await core.parked.handed_over(Actor(ALICE, ALICE), job.id) is False


async def test_nobody_but_the_requester_gets_it_or_ends_the_wait(core: Core[QuietChat]) -> None:
    job = await delivered_job(core, JobKind.IMAGE, image=make_png(64, 64))
    # Bob, even acting "in" Alice's own queue.
    for actor in (Actor(BOB, BOB), Actor(BOB, ALICE, manages_guild=True)):
        refused = await core.parked.fetch(actor, job.id, limit=10 * MiB)
        assert refused == ParkedUnavailable(job.id, ParkedProblem.NOT_YOURS)
        assert await core.parked.handed_over(actor, job.id) is False
    assert await core.parked.fetch(Actor(ALICE, ALICE), 999, limit=MiB) == ParkedUnavailable(
        999, ParkedProblem.NOT_YOURS
    )
    stored = await core.store.get(job.id)
    assert stored is not None and stored.parked and saved(core).find(job.id) is not None


async def test_a_posted_result_is_not_parked(core: Core[QuietChat], fake_service: FakeService) -> None:
    job = await delivered_job(core, JobKind.VIDEO, parked=False, url=f"{fake_service.base_url}/files/v.mp4")
    got = await core.parked.fetch(Actor(ALICE, ALICE), job.id, limit=10 * MiB)
    assert got == ParkedUnavailable(job.id, ParkedProblem.NOT_PARKED)
    assert not [r for r in fake_service.requests if r.path.startswith("/files/")]


async def test_a_parked_video_is_downloaded_again_with_the_jobs_key(
    core: Core[QuietChat], fake_service: FakeService
) -> None:
    job = await delivered_job(core, JobKind.VIDEO, url=f"{fake_service.base_url}/files/v.mp4")
    got = await core.parked.fetch(Actor(ALICE, ALICE), job.id, limit=10 * MiB)
    assert isinstance(got, ParkedFile)
    assert got.data == fake_service.video_bytes() and got.ext == "mp4"
    [download] = [r for r in fake_service.requests if r.path.startswith("/files/")]
    assert download.key == fake_service.api_key  # the operator's key: the one that ran the job


async def test_a_failed_download_keeps_the_job_parked_for_a_later_try(
    core: Core[QuietChat], fake_service: FakeService
) -> None:
    job = await delivered_job(core, JobKind.VIDEO, url=f"{fake_service.base_url}/files/v.mp4")
    fake_service.file_status = 503
    failed = await core.parked.fetch(Actor(ALICE, ALICE), job.id, limit=10 * MiB)
    assert failed == ParkedUnavailable(job.id, ParkedProblem.DOWNLOAD_FAILED)
    stored = await core.store.get(job.id)
    assert stored is not None and stored.parked

    fake_service.file_status = None
    assert isinstance(await core.parked.fetch(Actor(ALICE, ALICE), job.id, limit=10 * MiB), ParkedFile)


async def test_an_error_page_where_the_video_was_is_no_file(
    core: Core[QuietChat], fake_service: FakeService
) -> None:
    job = await delivered_job(core, JobKind.VIDEO, url=f"{fake_service.base_url}/files/v.mp4")
    fake_service.video_payload = b"<html><body>gone</body></html>"
    failed = await core.parked.fetch(Actor(ALICE, ALICE), job.id, limit=10 * MiB)
    assert failed == ParkedUnavailable(job.id, ParkedProblem.DOWNLOAD_FAILED)


async def test_a_saved_image_that_is_missing_is_gone(core: Core[QuietChat]) -> None:
    job = await delivered_job(core, JobKind.IMAGE, image=make_png(64, 64))
    saved(core).forget(job.id)
    got = await core.parked.fetch(Actor(ALICE, ALICE), job.id, limit=10 * MiB)
    assert got == ParkedUnavailable(job.id, ParkedProblem.GONE)


async def test_it_is_fitted_to_the_asking_interactions_limit(core: Core[QuietChat]) -> None:
    picture = make_png(512, 512, noise=True)
    job = await delivered_job(core, JobKind.IMAGE, image=picture)
    limit = len(picture) // 3
    got = await core.parked.fetch(Actor(ALICE, ALICE), job.id, limit=limit)
    assert isinstance(got, ParkedFile) and got.reencoded and len(got.data) <= limit
    # Nothing fits in a few bytes: it stays parked, and says why.
    tiny = await core.parked.fetch(Actor(ALICE, ALICE), job.id, limit=64)
    assert tiny == ParkedUnavailable(job.id, ParkedProblem.TOO_LARGE)
    assert saved(core).find(job.id) is not None


async def test_a_restart_deletes_the_saved_copies_nobody_waits_for_and_keeps_the_parked_one(
    core: Core[QuietChat],
) -> None:
    """A stop between a job's end and the deletion of its saved image leaves the file behind for
    ever: the next start deletes it (a half-written copy and a file of no job too), and keeps the
    parked result, still waiting for its requester."""
    picture = make_png(64, 64)
    parked = await delivered_job(core, JobKind.IMAGE, image=picture)
    posted = await delivered_job(core, JobKind.IMAGE, image=picture, parked=False)  # never forgotten
    results = saved(core)
    (results.directory / f"job-{posted.id}.png.tmp").write_bytes(picture[:10])
    results.save(999_999, picture)
    await core.close()

    again = await asyncio.wait_for(Core.open(core.settings, reporter=quiet_chat), WAIT)
    try:
        assert sorted(p.name for p in results.directory.iterdir()) == [f"job-{parked.id}.png"]
        got = await again.parked.fetch(Actor(ALICE, ALICE), parked.id, limit=10 * MiB)
        assert isinstance(got, ParkedFile) and got.data == picture
    finally:
        await again.close()
