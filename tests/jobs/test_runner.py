"""The job runner against the real store, the real service client and the fake service (over HTTP).

Only the chat side is replaced, by :class:`RecordingReporter`: it records what would have reached
Discord and can hold deliveries, so a test can look at the runner while results are in its hands.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import random
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import exc as sa_exc

from framecast.clock import SystemClock
from framecast.config import Secret
from framecast.jobs.chat_side import (
    DeliveryOutcome,
    ResultToDeliver,
)
from framecast.jobs.leases import LeaseCheck, LeaseLost, Leases
from framecast.jobs.outage import StoreOutage
from framecast.jobs.results import LocalResults
from framecast.jobs.runner import JobRunner
from framecast.jobs.scheduler import Scheduler
from framecast.keys.budget import RequestBudget
from framecast.ops.metrics import Metrics
from framecast.service import GenerationClient
from framecast.storage import Store
from framecast.values import Job, JobKind, JobState, NewJob
from framecast.values.reasons import Note
from framecast.values.service_requests import Priority
from tests.fakes.chat_side import RUNNER_SETTINGS, RecordingReporter
from tests.fakes.clock import ManualClock
from tests.fakes.gen_service import FakeService, TaskPlan
from tests.fakes.keys import SingleKey
from tests.fakes.media import make_large_mp4, make_png, make_png_bomb

MiB = 1024 * 1024
HTML_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body><h1>502 Bad Gateway</h1></body></html>"
)
SETTINGS = RUNNER_SETTINGS


@dataclass
class Rig:
    fake: FakeService
    store: Store
    client: GenerationClient
    reporter: RecordingReporter
    results_dir: Path
    make_runner: Callable[..., JobRunner]

    async def run(self, kind: JobKind, prompt: str, runner: JobRunner | None = None) -> Job:
        job = await self.add(kind, prompt)
        return await (runner or self.make_runner()).run(job, release_service_slot=lambda: None)

    async def add(self, kind: JobKind, prompt: str) -> Job:
        if kind is JobKind.VIDEO:
            params: dict[str, Any] = {
                "model": "svc-video-v2.0",
                "prompt": prompt,
                "width": 64,
                "height": 64,
                "num_frames": 12,
                "frame_rate": 12,
            }
        else:
            params = {"model": "svc-image-2.1-flash", "prompt": prompt, "size": "64x64"}
        return await self.store.add(NewJob(kind, 1, 2, 3, "en-US", params), member_limit=None, guild_cap=None)

    def file_requests(self) -> int:
        return sum(1 for r in self.fake.requests if r.path.startswith("/files/"))


@pytest.fixture
async def rig(fake_service: FakeService, tmp_path: Path) -> AsyncIterator[Rig]:
    clock = SystemClock()
    store = await Store.open(tmp_path / "data" / "framecast.sqlite3", clock=clock)
    session = aiohttp.ClientSession()
    budget = RequestBudget(1000, 1.0, clock=clock, backoff_base=0.01, backoff_max=0.1)
    client = GenerationClient(
        session,
        base_url=fake_service.base_url,
        api_key=Secret(fake_service.api_key),
        budget=budget,
        clock=clock,
        request_timeout=5,
        retry_max=2,
        backoff_base=0.01,
        backoff_max=0.1,
        rng=random.Random(1),
    )
    reporter = RecordingReporter()
    results_dir = tmp_path / "data" / "results"

    def make_runner(
        leases: LeaseCheck | None = None,
        *,
        jobs: Any = None,
        key: GenerationClient | None = None,
        metrics: Metrics | None = None,
        outage: StoreOutage | None = None,
        **overrides: Any,
    ) -> JobRunner:
        # `jobs`: the store the runner writes through (a faulty one), `key`: another key's client.
        return JobRunner(
            store=jobs if jobs is not None else store,
            accounts=SingleKey(key or client),
            metrics=metrics,
            outage=outage,
            reporter=reporter,
            clock=clock,
            settings=replace(SETTINGS, **overrides),
            results_dir=results_dir,
            leases=leases,
        )

    try:
        yield Rig(fake_service, store, client, reporter, results_dir, make_runner)
    finally:
        await client.close()
        await session.close()
        await store.close()


# -- results the bot keeps itself ----------------------------------------------------------------


async def test_an_inline_image_is_kept_by_job_id_owner_only_and_delivered_from_there(rig: Rig) -> None:
    rig.fake.image_shape = "data_b64"
    rig.reporter.hold = True
    job = await rig.add(JobKind.IMAGE, "an inline picture")
    task = asyncio.create_task(rig.make_runner().run(job, release_service_slot=lambda: None))
    await rig.reporter.wait_until(lambda: rig.reporter.in_flight == 1)
    held = await rig.store.get(job.id)
    assert held is not None and held.state is JobState.DELIVERING
    assert held.result_local is True and held.result_url is None  # no URL of any kind is stored
    [saved] = list(rig.results_dir.iterdir())
    assert saved.name == f"job-{job.id}.png"
    assert rig.results_dir.stat().st_mode & 0o777 == 0o700 and saved.stat().st_mode & 0o777 == 0o600
    await rig.reporter.allow()
    final = await task
    assert final.state is JobState.DELIVERED
    assert rig.reporter.files == [(job.id, rig.fake.image_bytes(), f"framecast-{job.id}.png")]
    assert list(rig.results_dir.iterdir()) == []  # forgotten once delivered


async def test_an_inline_image_posted_nowhere_is_kept_for_its_requester(rig: Rig) -> None:
    # The chat side had nowhere to post it (a user install: token spent, DMs refused).
    rig.fake.image_shape = "data_b64"
    rig.reporter.parked = True
    final = await rig.run(JobKind.IMAGE, "a picture nobody can be shown")
    assert final.state is JobState.DELIVERED
    # Kept, owner-only, for framecast.app.parked to hand over later.
    [saved] = list(rig.results_dir.iterdir())
    assert saved.name == f"job-{final.id}.png" and saved.read_bytes() == rig.fake.image_bytes()
    assert saved.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("scheme_path", ["file://{secret}", "file://localhost{secret}", "FILE:{secret}"])
async def test_a_result_url_naming_a_local_file_is_never_read(
    rig: Rig, tmp_path: Path, scheme_path: str
) -> None:
    secret = tmp_path / "environ"
    secret.write_bytes(b"DISCORD_TOKEN=very-secret\x00GEN_API_KEY=also-secret")
    rig.fake.result_url = scheme_path.format(secret=secret)
    final = await rig.run(JobKind.VIDEO, "show me the environment")
    assert final.state is JobState.FAILED and final.error_code == "result_refused"
    assert rig.reporter.files == [] and rig.reporter.links == []
    assert "secret" not in (final.error_detail or "")


async def test_the_service_cannot_point_one_job_at_another_jobs_saved_result(rig: Rig) -> None:
    # Job 1's picture is on disk, waiting for its delivery; job 2's "result" names that file.
    rig.fake.image_shape = "data_b64"
    rig.reporter.hold = True
    first = await rig.add(JobKind.IMAGE, "a private picture")
    runner = rig.make_runner()
    held = asyncio.create_task(runner.run(first, release_service_slot=lambda: None))
    await rig.reporter.wait_until(lambda: rig.reporter.in_flight == 1)
    [saved] = list(rig.results_dir.iterdir())
    rig.fake.result_url = saved.as_uri()
    rig.fake.image_shape = "data_url"
    second = await rig.run(JobKind.IMAGE, "someone else's picture", runner)
    assert second.state is JobState.FAILED and second.error_code == "result_refused"
    await rig.reporter.allow()
    assert (await held).state is JobState.DELIVERED
    assert [job_id for job_id, *_ in rig.reporter.files] == [first.id]


# -- memory: results downloaded or held at once --------------------------------------------------


@pytest.mark.parametrize("at_once", [1, 2])
async def test_at_most_results_at_once_results_are_downloaded_or_held(rig: Rig, at_once: int) -> None:
    rig.reporter.hold = True
    runner = rig.make_runner(results_at_once=at_once)
    jobs = [await rig.add(JobKind.VIDEO, f"clip {i}") for i in range(4)]
    tasks = [asyncio.create_task(runner.run(job, release_service_slot=lambda: None)) for job in jobs]
    delivered = 0
    while delivered < len(jobs):
        expected = min(at_once, len(jobs) - delivered)
        await rig.reporter.wait_until(lambda: rig.reporter.in_flight == expected)  # noqa: B023
        # Every other job finished on the service and waits its turn, its state on disk; give them
        # time to (wrongly) start downloading.
        await asyncio.sleep(0.2)
        assert rig.reporter.in_flight == expected
        assert rig.file_requests() == delivered + expected
        states = {j.id: (await rig.store.get(j.id)).state for j in jobs}  # type: ignore[union-attr]
        assert sum(s is JobState.DELIVERING for s in states.values()) == len(jobs) - delivered
        await rig.reporter.allow()
        delivered += 1
        await rig.reporter.wait_until(lambda: len(rig.reporter.files) == delivered)  # noqa: B023
    assert [(await t).state for t in tasks] == [JobState.DELIVERED] * len(jobs)


# -- text from the service -----------------------------------------------------------------------


async def test_a_lone_surrogate_in_the_error_fails_the_job_with_a_clean_reason(rig: Rig) -> None:
    rig.fake.plans.append(("policy", TaskPlan(outcome="failed", error="policy \ud800 violation\x1b[31m")))
    final = await rig.run(JobKind.VIDEO, "policy test")
    assert final.state is JobState.FAILED and final.error_code == "task_failed"
    assert final.error_detail == "policy \ufffd violation[31m"
    assert await rig.store.active() == []  # no longer counts against the member


class DetailRefusingStore(Store):
    """A store whose disk refuses one particular text (stands in for any failure to record it)."""

    async def transition(self, job_id: int, to: JobState, **kwargs: Any) -> Job:
        if "violation" in (kwargs.get("error_detail") or ""):
            raise OSError("disk says no")
        return await super().transition(job_id, to, **kwargs)


async def test_a_failure_that_cannot_be_recorded_with_its_detail_is_recorded_without(
    fake_service: FakeService,
    rig: Rig,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = await DetailRefusingStore.open(tmp_path / "other.sqlite3")
    try:
        fake_service.plans.append(("policy", TaskPlan(outcome="failed", error="policy violation")))
        runner = JobRunner(
            store=store,
            accounts=SingleKey(rig.client),
            reporter=rig.reporter,
            clock=SystemClock(),
            settings=SETTINGS,
            results_dir=tmp_path / "results",
        )
        job = await store.add(
            NewJob(
                JobKind.VIDEO,
                1,
                2,
                3,
                "en",
                {
                    "model": "svc-video-v2.0",
                    "prompt": "policy",
                    "width": 64,
                    "height": 64,
                    "num_frames": 12,
                    "frame_rate": 12,
                },
            ),
            member_limit=None,
            guild_cap=None,
        )
        with caplog.at_level(logging.ERROR, logger="framecast.jobs.runner"):
            final = await runner.run(job, release_service_slot=lambda: None)
        assert (
            final.state is JobState.FAILED
            and final.error_code == "task_failed"
            and final.error_detail is None
        )
        assert "recording its failure failed" in caplog.text
        assert await store.active() == []
    finally:
        await store.close()


# -- result bytes are checked --------------------------------------------------------------------


async def test_an_html_error_page_served_as_the_video_is_never_uploaded_or_linked(rig: Rig) -> None:
    rig.fake.video_payload = HTML_502
    final = await rig.run(JobKind.VIDEO, "a bad gateway")
    assert final.state is JobState.FAILED and final.error_code == "not_media"
    assert rig.reporter.files == [] and rig.reporter.links == []


async def test_an_image_job_receiving_a_video_fails_as_not_an_image(rig: Rig) -> None:
    rig.fake.image_shape = "url"
    rig.fake.image_payload = rig.fake.video_bytes()
    final = await rig.run(JobKind.IMAGE, "a picture, please")
    assert final.state is JobState.FAILED and final.error_code == "not_media"
    assert rig.reporter.files == []


async def test_a_decompression_bomb_is_refused_before_decoding(rig: Rig) -> None:
    rig.fake.image_shape = "url"
    rig.fake.image_payload = make_png_bomb()
    rig.reporter.limit = 100_000  # would need a re-encode (a full decode) to fit
    started = time.monotonic()
    final = await rig.run(JobKind.IMAGE, "a very large black square")
    assert final.state is JobState.FAILED and final.error_code == "media_too_large"
    assert time.monotonic() - started < 3
    assert rig.reporter.files == [] and rig.reporter.links == []


async def test_a_video_over_the_pixel_limit_is_refused(rig: Rig) -> None:
    final = await rig.run(JobKind.VIDEO, "a clip", rig.make_runner(image_max_pixels=64 * 64 - 1))
    assert final.state is JobState.FAILED and final.error_code == "media_too_large"


async def test_a_reencode_past_its_time_limit_falls_back_to_the_link(rig: Rig) -> None:
    rig.fake.video_payload = make_large_mp4(600_000, seconds=1.0)
    rig.reporter.limit = 200_000
    final = await rig.run(JobKind.VIDEO, "a slow clip", rig.make_runner(reencode_timeout=0.0))
    assert final.state is JobState.DELIVERED
    assert rig.reporter.files == []
    [(_, url, reason)] = rig.reporter.links
    assert url.startswith(rig.fake.base_url + "/files/") and reason is Note.TOO_LARGE


async def test_a_saved_result_that_cannot_be_fitted_in_time_fails_without_a_link(rig: Rig) -> None:
    rig.fake.image_shape = "data_b64"
    rig.fake.image_payload = make_png(600, 600, noise=True)
    rig.reporter.limit = 200_000
    final = await rig.run(JobKind.IMAGE, "a noisy picture", rig.make_runner(reencode_timeout=0.0))
    assert final.state is JobState.FAILED and final.error_code == "download_failed"
    assert rig.reporter.files == [] and rig.reporter.links == []


async def test_healthy_results_still_arrive_untouched(rig: Rig) -> None:
    video = await rig.run(JobKind.VIDEO, "a healthy clip")
    rig.fake.image_shape = "url"
    image = await rig.run(JobKind.IMAGE, "a healthy picture")
    assert (video.state, image.state) == (JobState.DELIVERED, JobState.DELIVERED)
    assert [data for _, data, _ in rig.reporter.files] == [rig.fake.video_bytes(), rig.fake.image_bytes()]


# -- delivered exactly once: the runner looks, the reporter answers -------------------------------


async def test_an_interrupted_delivery_is_tried_again_after_a_look(rig: Rig) -> None:
    rig.reporter.interrupt = 2
    final = await rig.run(JobKind.VIDEO, "a flaky chat")
    assert final.state is JobState.DELIVERED
    assert [job_id for job_id, *_ in rig.reporter.files] == [final.id]
    assert rig.reporter.looks == 1 + 2  # before the first attempt, then before each retry


async def test_an_interrupted_delivery_that_landed_is_not_repeated(rig: Rig) -> None:
    rig.reporter.interrupt = 1
    rig.reporter.interrupted_lands = True
    final = await rig.run(JobKind.VIDEO, "a lost answer")
    assert final.state is JobState.DELIVERED
    assert len(rig.reporter.files) == 1 and rig.reporter.started == []  # the retry never happened


async def test_a_result_already_delivered_before_a_restart_is_not_fetched_again(rig: Rig) -> None:
    job = await rig.add(JobKind.VIDEO, "already there")
    job = await rig.store.transition(job.id, JobState.SUBMITTING)
    job = await rig.store.transition(job.id, JobState.RUNNING, task_id="t-1", started_at=time.time())
    job = await rig.store.transition(
        job.id, JobState.DELIVERING, result_url=rig.fake.base_url + "/files/x.mp4"
    )
    rig.reporter.files.append((job.id, b"", "framecast-0.mp4"))  # what the reporter finds on the message
    final = await rig.make_runner().run(job, release_service_slot=lambda: None)
    assert final.state is JobState.DELIVERED
    assert rig.file_requests() == 0 and len(rig.reporter.files) == 1


async def test_the_chat_side_hears_the_delivery_is_pending_only_after_a_look_found_nothing(rig: Rig) -> None:
    final = await rig.run(JobKind.VIDEO, "a first delivery")
    assert final.state is JobState.DELIVERED
    assert rig.reporter.pending == [final.id] and rig.reporter.looks == 1

    job = await rig.add(JobKind.VIDEO, "found after a restart")
    job = await rig.store.transition(job.id, JobState.SUBMITTING)
    job = await rig.store.transition(job.id, JobState.RUNNING, task_id="t-2", started_at=time.time())
    job = await rig.store.transition(
        job.id, JobState.DELIVERING, result_url=rig.fake.base_url + "/files/y.mp4"
    )
    rig.reporter.files.append((job.id, b"", "framecast-0.mp4"))
    assert (await rig.make_runner().run(job, release_service_slot=lambda: None)).state is JobState.DELIVERED
    assert job.id not in rig.reporter.pending  # found: nothing pending, the message is left alone


async def test_a_delivery_that_raised_but_landed_is_recorded_once(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    delivered = rig.reporter.deliver

    async def lost_answer(job: Job, result: ResultToDeliver) -> DeliveryOutcome:
        await delivered(job, result)
        raise ConnectionResetError("the answer was lost")

    monkeypatch.setattr(rig.reporter, "deliver", lost_answer)
    final = await rig.run(JobKind.VIDEO, "a lost answer that raised")
    assert final.state is JobState.DELIVERED
    assert len(rig.reporter.files) == 1  # looked, found, not sent again


async def test_a_413_asks_the_chat_side_for_the_next_size_and_notes_the_reencode(rig: Rig) -> None:
    rig.fake.image_shape = "url"
    rig.fake.image_payload = make_png(300, 300, noise=True)
    rig.reporter.refuse_over = 60_000  # the destination's real limit is below what it advertises
    final = await rig.run(JobKind.IMAGE, "a noisy picture")
    assert final.state is JobState.DELIVERED
    [(_, data, _)] = rig.reporter.files
    assert len(data) <= 60_000
    assert rig.reporter.limit_asks[0] is None and len(rig.reporter.limit_asks) >= 2
    assert all(a is not None for a in rig.reporter.limit_asks[1:])
    assert rig.reporter.notices == [Note.REENCODED]


# -- the create: tried again while the service is busy, until the poll timeout ------------------------


async def test_a_create_the_service_failed_is_sent_again_after_a_backoff_and_the_job_delivered(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.fake.fail_next = 3  # more 503s than the client's own retries of one attempt
    with caplog.at_level(logging.INFO, logger="framecast.jobs.runner"):
        job = await rig.run(JobKind.VIDEO, "weather the storm")
    assert job.state is JobState.DELIVERED
    assert "create deferred (unavailable)" in caplog.text  # the runner's next attempt, not the client's
    assert rig.fake.fail_next == 0


async def test_a_create_still_failing_past_the_poll_timeout_fails_the_job_with_the_service_s_error(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.fake.fail_next = 1_000
    runner = rig.make_runner(poll_timeout=0)  # given up at the first attempt that fails
    with caplog.at_level(logging.INFO, logger="framecast.jobs.runner"):
        job = await rig.run(JobKind.VIDEO, "no luck", runner)
    assert job.state is JobState.FAILED and job.error_code == "unavailable"
    assert "create deferred" not in caplog.text


# -- what a restarted bot needs to know -------------------------------------------------------------


async def test_every_pending_poll_is_recorded_on_the_job_even_without_progress(rig: Rig) -> None:
    # A restarted bot keeps its first poll a whole interval after the last one recorded: a poll
    # that reported no progress (or the same progress) must still be recorded.
    rig.fake.progress_shape = "missing"
    rig.fake.default_plan = TaskPlan(duration=0, polls=3)
    job = await rig.run(JobKind.VIDEO, "three pending polls")
    assert job.state is JobState.DELIVERED
    pending = [c for c in rig.reporter.changes if c.state is JobState.RUNNING and c.task_id]
    stamps = [c.updated_at for c in pending]
    assert len(stamps) >= 4  # the RUNNING transition, then one per pending poll
    assert len(set(stamps)) == len(stamps), stamps


def test_a_posted_link_never_carries_credentials() -> None:
    from framecast.jobs.service_params import without_credentials as _without_credentials

    assert _without_credentials("http://user:pw@cdn.example.com:8080/v.mp4?sig=1") == (
        "http://cdn.example.com:8080/v.mp4?sig=1"
    )
    assert _without_credentials("https://cdn.example.com/v.mp4") == "https://cdn.example.com/v.mp4"


def test_a_link_carrying_a_key_is_never_shareable(rig: Rig) -> None:
    from framecast.jobs.service_params import shareable_link

    key = rig.fake.api_key  # the key the rig's client carries
    reveals = SingleKey(rig.client).reveals_key
    assert shareable_link("https://user:pw@cdn.example.com/v.mp4?sig=1", reveals) == (
        "https://cdn.example.com/v.mp4?sig=1"
    )
    assert (
        shareable_link(f"https://user:{key}@cdn.example.com/v.mp4", reveals)
        == "https://cdn.example.com/v.mp4"
    )
    for carrying in (
        f"https://cdn.example.com/v.mp4?api_key={key}",
        f"https://cdn.example.com/{key}/v.mp4",
        "https://cdn.example.com/v.mp4?k=" + "".join(f"%{b:02x}" for b in key.encode()),
    ):
        assert shareable_link(carrying, reveals) is None, carrying
    assert shareable_link(None, reveals) is None and shareable_link("", reveals) is None


# -- metrics ------------------------------------------------------------------------------------------


def metered(rig: Rig, metrics: Metrics, **overrides: Any) -> JobRunner:
    return JobRunner(
        store=rig.store,
        accounts=SingleKey(rig.client),
        reporter=rig.reporter,
        clock=SystemClock(),
        settings=replace(SETTINGS, **overrides),
        results_dir=rig.results_dir,
        metrics=metrics,
    )


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_delivery_is_counted_with_its_delay_from_completion_to_file(rig: Rig) -> None:
    metrics = Metrics(process=False)
    rig.reporter.hold = True
    job = await rig.add(JobKind.VIDEO, "a timed clip")
    task = asyncio.create_task(metered(rig, metrics).run(job, release_service_slot=lambda: None))
    await rig.reporter.wait_until(lambda: rig.reporter.in_flight == 1)
    await asyncio.sleep(0.3)  # the upload takes a while: the delay counts from the completion
    await rig.reporter.allow()
    assert (await task).state is JobState.DELIVERED
    assert sample(metrics, "framecast_jobs_delivered_total", kind="video") == 1
    assert sample(metrics, "framecast_completion_to_file_seconds_count", kind="video") == 1
    delay = sample(metrics, "framecast_completion_to_file_seconds_sum", kind="video")
    assert 0.3 <= delay < 5
    assert sample(metrics, "framecast_jobs_failed_total", kind="video", code="task_failed") == 0


async def test_a_job_restored_mid_delivery_counts_as_delivered_without_a_delay(rig: Rig) -> None:
    metrics = Metrics(process=False)
    job = await rig.add(JobKind.VIDEO, "restored")
    await rig.store.transition(job.id, JobState.SUBMITTING)
    await rig.store.transition(job.id, JobState.RUNNING, task_id="t-1", started_at=time.time())
    job = await rig.store.transition(
        job.id, JobState.DELIVERING, result_url=rig.fake.base_url + "/files/x.mp4"
    )
    rig.reporter.files.append((job.id, b"", "framecast-0.mp4"))  # it landed before the restart
    final = await metered(rig, metrics).run(job, release_service_slot=lambda: None)
    assert final.state is JobState.DELIVERED
    assert sample(metrics, "framecast_jobs_delivered_total", kind="video") == 1
    # When the service reported it completed was in the previous process's life: not guessed.
    assert sample(metrics, "framecast_completion_to_file_seconds_count", kind="video") == 0


async def test_a_failure_is_counted_by_kind_and_code(rig: Rig) -> None:
    metrics = Metrics(process=False)
    rig.fake.plans.append(("policy", TaskPlan(outcome="failed", error="policy violation")))
    final = await rig.run(JobKind.VIDEO, "policy test", metered(rig, metrics))
    assert final.state is JobState.FAILED
    assert sample(metrics, "framecast_jobs_failed_total", kind="video", code="task_failed") == 1
    assert sample(metrics, "framecast_jobs_delivered_total", kind="video") == 0


async def test_reencodes_are_counted_with_their_outcome_and_time(rig: Rig) -> None:
    metrics = Metrics(process=False)
    rig.fake.image_shape = "url"
    rig.fake.image_payload = make_png(300, 300, noise=True)
    rig.reporter.refuse_over = 60_000  # the first upload is refused: a re-encode fits the next size
    image = await rig.run(JobKind.IMAGE, "a noisy picture", metered(rig, metrics))
    assert image.state is JobState.DELIVERED
    assert sample(metrics, "framecast_reencodes_total", kind="image", outcome="fitted") >= 1
    assert sample(metrics, "framecast_reencode_seconds_count", kind="image") == sample(
        metrics, "framecast_reencodes_total", kind="image", outcome="fitted"
    )

    rig.reporter.refuse_over = None
    rig.fake.video_payload = make_large_mp4(600_000, seconds=1.0)
    rig.reporter.limit = 200_000
    video = await rig.run(JobKind.VIDEO, "a slow clip", metered(rig, metrics, reencode_timeout=0.0))
    assert video.state is JobState.DELIVERED and rig.reporter.links  # the link instead
    assert sample(metrics, "framecast_reencodes_total", kind="video", outcome="timeout") == 1
    assert sample(metrics, "framecast_reencodes_total", kind="video", outcome="fitted") == 0
    assert sample(metrics, "framecast_reencode_seconds_count", kind="video") == 1


# -- leases: a job another process took over ------------------------------------------------------


@dataclass
class StandInLease:
    """A lease check whose answer the test decides: the lease is lost once `lost()` says so."""

    lost: Callable[[], bool]
    asked: int = 0

    async def holds(self, job_id: int) -> bool:
        self.asked += 1
        return not self.lost()


def fenced(rig: Rig, lost: Callable[[], bool]) -> JobRunner:
    return rig.make_runner(leases=StandInLease(lost))


def polls(rig: Rig) -> int:
    return sum(1 for r in rig.fake.requests if r.path == "/svcapi")


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_runner_without_the_lease_creates_no_task_and_leaves_the_job_alone(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    job = await rig.add(JobKind.VIDEO, "taken over while queued")
    with caplog.at_level(logging.INFO), pytest.raises(LeaseLost):
        await fenced(rig, lambda: True).run(job, release_service_slot=lambda: None)
    assert rig.fake.requests == []
    assert (await rig.store.get(job.id)).state is JobState.QUEUED  # type: ignore[union-attr]
    assert rig.reporter.changes == [] and errors(caplog) == []


async def test_a_runner_whose_lease_was_taken_over_stops_before_its_next_poll(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.fake.plans.append(("long", TaskPlan(polls=50)))
    job = await rig.add(JobKind.VIDEO, "a long clip")
    # Another process takes the job over right after this one's first poll.
    with caplog.at_level(logging.INFO), pytest.raises(LeaseLost):
        await fenced(rig, lambda: polls(rig) >= 1).run(job, release_service_slot=lambda: None)
    assert len(service_creates_of(rig)) == 1 and polls(rig) == 1
    current = await rig.store.get(job.id)
    assert current is not None and current.state is JobState.RUNNING  # the new owner's to move on
    assert errors(caplog) == []


def service_creates_of(rig: Rig) -> list[Any]:
    return [r for r in rig.fake.requests if r.method == "POST" and r.path == "/v1/videos"]


@pytest.mark.parametrize("lost_after", ["completed", "download"])
async def test_a_runner_whose_lease_was_taken_over_neither_downloads_nor_delivers(
    rig: Rig, caplog: pytest.LogCaptureFixture, lost_after: str
) -> None:
    def lost() -> bool:
        if lost_after == "completed":  # the task's last poll answered: lost before the download
            return any(t.state == "completed" for t in rig.fake.tasks.values())
        return rig.file_requests() >= 1  # downloaded: lost before the delivery

    job = await rig.add(JobKind.VIDEO, "a finished clip")
    with caplog.at_level(logging.INFO), pytest.raises(LeaseLost):
        await fenced(rig, lost).run(job, release_service_slot=lambda: None)
    assert rig.file_requests() == (0 if lost_after == "completed" else 1)
    assert rig.reporter.files == [] and rig.reporter.links == [] and rig.reporter.started == []
    current = await rig.store.get(job.id)
    assert current is not None and current.state is JobState.DELIVERING
    assert errors(caplog) == []


class PausingReporter(RecordingReporter):
    """After the first progress shown, "the process is paused" (`pause`) once."""

    pause: Callable[[], Awaitable[None]] | None = None

    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        await super().job_changed(job, urgent=urgent)
        if job.progress is not None and self.pause is not None:
            pause, self.pause = self.pause, None
            await pause()


async def test_a_paused_process_lets_a_taken_over_job_go_quietly_and_frees_its_slot(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Two "processes" on one store, each with its own leases; time of the leases is the test's.
    clock = ManualClock(wall_start=time.time())
    store = await Store.open(tmp_path / "shared.sqlite3", clock=clock)
    mine = Leases(store, owner="paused", lease_seconds=30, clock=clock)
    theirs = Leases(store, owner="other", lease_seconds=30, clock=clock)
    reporter = PausingReporter()
    runner = JobRunner(
        store=store,
        accounts=SingleKey(rig.client),
        reporter=reporter,
        clock=SystemClock(),
        settings=SETTINGS,
        results_dir=tmp_path / "results",
        leases=mine,
    )
    scheduler = Scheduler(store=store, runner=runner, admission=1, clock=clock, leases=mine)

    async def pause() -> None:
        await clock.advance(30)  # no renewal while paused: the lease lapses...
        assert [j.id for j in await theirs.take_over()] == [taken.id]  # ...and the other takes it

    reporter.pause = pause
    rig.fake.plans.append(("long", TaskPlan(polls=50)))
    taken = await store.add(
        NewJob(JobKind.VIDEO, 1, 2, 3, "en-US", video_params("a long clip")),
        member_limit=None,
        guild_cap=None,
    )
    try:
        with caplog.at_level(logging.INFO):
            assert [j.id for j in await scheduler.start()] == [taken.id]
            await wait_for(lambda: mine.held == frozenset() and not reporter.started)
            # The next poll was never sent: the new owner alone polls the task from here.
            assert polls(rig) == 1
            assert await theirs.holds(taken.id) is True
            current = await store.get(taken.id)
            assert current is not None and current.state is JobState.RUNNING
            # Its slot is free: the next job (admission 1) runs and is delivered here.
            after = await store.add(
                NewJob(JobKind.VIDEO, 1, 2, 3, "en-US", video_params("the next clip")),
                member_limit=None,
                guild_cap=None,
            )
            assert await scheduler.claim(after)
            scheduler.submit(after)
            await reporter.wait_until(lambda: len(reporter.files) == 1)
            assert [job_id for job_id, *_ in reporter.files] == [after.id]
        # Never polled again by this process (`theirs` only holds the lease here: it runs nothing).
        assert sum(1 for r in rig.fake.requests if r.query.get("video_id") == current.task_id) == 1
        assert f"job {taken.id}: left to the process that holds its lease now" in caplog.text
        assert errors(caplog) == []
    finally:
        await scheduler.close(1.0)
        await store.close()


def video_params(prompt: str) -> dict[str, Any]:
    return {
        "model": "svc-video-v2.0",
        "prompt": prompt,
        "width": 64,
        "height": 64,
        "num_frames": 12,
        "frame_rate": 12,
    }


async def wait_for(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, "waited 10 s in vain"
        await asyncio.sleep(0.01)


# -- a store that cannot answer: the job waits, and carries on ------------------------------------


def disk_full() -> Exception:
    """What SQLite raises through SQLAlchemy when the disk is full (as the store sees it on a full tmpfs)."""
    return sa_exc.OperationalError("UPDATE jobs", {}, sqlite3.OperationalError("database or disk is full"))


@dataclass
class Fault:
    """The next `times` calls of a method matching `when(args, kwargs)` fail; `committed`: after the write."""

    times: int
    when: Callable[[tuple[Any, ...], dict[str, Any]], bool] = lambda _args, _kwargs: True
    committed: bool = False
    hits: int = 0


class FaultyStore:
    """The real store, with the outages the test asks for (each ``faults[method]``), then itself again."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.faults: dict[str, Fault] = {}

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._store, name)
        fault = self.faults.get(name)
        if fault is None:
            return real

        async def call(*args: Any, **kwargs: Any) -> Any:
            if fault.hits >= fault.times or not fault.when(args, kwargs):
                return await real(*args, **kwargs)
            fault.hits += 1
            if fault.committed:
                await real(*args, **kwargs)  # written, and its answer lost on the way back
            raise disk_full()

        return call


class Skewed(SystemClock):
    """The system clock, whose monotonic time the test may move on (`skew`): a quiet moment, at once."""

    skew = 0.0

    def monotonic(self) -> float:
        return super().monotonic() + self.skew


def watched() -> tuple[StoreOutage, Skewed]:
    """A store outage view (the runner's settings' backoff) on a clock the test can move on."""
    clock = Skewed()
    return StoreOutage(
        clock=clock, backoff_base=SETTINGS.backoff_base, backoff_max=SETTINGS.backoff_max
    ), clock


def quiet_moment_later(outage: StoreOutage, clock: Skewed) -> None:
    """The next store call, a quiet moment after the last failure: it sees the outage's end."""
    clock.skew += SETTINGS.backoff_max
    outage.answered()


def outage_lines(caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    """The outage's WARNINGs and INFOs; every record also checked to carry no traceback."""
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    began = [r.getMessage() for r in caplog.records if "does not answer" in r.getMessage()]
    ended = [r.getMessage() for r in caplog.records if "answers again" in r.getMessage()]
    return began, ended


async def test_a_progress_write_the_store_refuses_pauses_the_job_which_is_delivered_after(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.fake.plans.append(("long", TaskPlan(polls=3)))
    faulty = FaultyStore(rig.store)
    faulty.faults["update"] = Fault(times=4)
    metrics = Metrics(process=False)
    job = await rig.add(JobKind.VIDEO, "a long clip on a full disk")
    with caplog.at_level(logging.INFO):
        final = await rig.make_runner(jobs=faulty, metrics=metrics).run(
            job, release_service_slot=lambda: None
        )
    assert final.state is JobState.DELIVERED and faulty.faults["update"].hits == 4
    assert len(service_creates_of(rig)) == 1 and len(rig.reporter.files) == 1
    began, ended = outage_lines(caplog)
    assert len(began) == 1 and "database or disk is full" in began[0] and len(ended) == 1
    assert sample(metrics, "framecast_store_outages_total") == 1
    assert (
        sample(metrics, "framecast_store_unavailable") == 0
        and sample(metrics, "framecast_store_waiting") == 0
    )


@pytest.mark.parametrize("committed", [False, True], ids=["refused", "answer_lost"])
async def test_a_task_id_the_store_could_not_save_is_saved_first_and_the_task_never_created_again(
    rig: Rig, caplog: pytest.LogCaptureFixture, committed: bool
) -> None:
    faulty = FaultyStore(rig.store)
    # The save of the service's task id (SUBMITTING -> RUNNING) fails three times.
    faulty.faults["transition"] = Fault(
        times=3, when=lambda args, _kw: args[1] is JobState.RUNNING, committed=committed
    )
    job = await rig.add(JobKind.VIDEO, "created once whatever the disk says")
    outage, clock = watched()
    with caplog.at_level(logging.INFO):
        final = await rig.make_runner(jobs=faulty, outage=outage).run(job, release_service_slot=lambda: None)
        quiet_moment_later(outage, clock)
    assert final.state is JobState.DELIVERED
    # A lost answer's write stands: the retry finds the job RUNNING with this task id, and goes on.
    assert faulty.faults["transition"].hits == (2 if committed else 3)
    [create] = service_creates_of(rig)
    assert final.task_id == next(iter(rig.fake.tasks))
    assert create.status == 200 and len(rig.reporter.files) == 1
    began, ended = outage_lines(caplog)
    assert len(began) == 1 and len(ended) == 1


async def test_an_inline_image_the_disk_cannot_take_is_saved_when_it_can_and_created_once(
    rig: Rig, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.fake.image_shape = "data_b64"
    refusals = [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EROFS, "Read-only file system"),
    ]
    real_save = LocalResults.save

    def save(results: LocalResults, job_id: int, data: bytes) -> Path:
        if refusals:
            raise refusals.pop(0)
        return real_save(results, job_id, data)

    monkeypatch.setattr(LocalResults, "save", save)
    outage, clock = watched()
    with caplog.at_level(logging.INFO):
        final = await rig.run(JobKind.IMAGE, "a picture for a full disk", rig.make_runner(outage=outage))
        quiet_moment_later(outage, clock)
    assert final.state is JobState.DELIVERED and refusals == []
    assert len([r for r in rig.fake.requests if r.path == "/v1/images/generations"]) == 1
    assert rig.reporter.files == [(final.id, rig.fake.image_bytes(), f"framecast-{final.id}.png")]
    began, ended = outage_lines(caplog)
    assert len(began) == 1 and "ENOSPC" in began[0] and len(ended) == 1


async def test_a_lease_check_the_store_cannot_answer_waits_for_it_and_the_job_carries_on(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    # The lease check must ask the store before a poll, and the store is gone for a moment.
    asked = 0

    class GoneLease:
        async def holds(self, job_id: int) -> bool:
            nonlocal asked
            asked += 1
            if asked in (2, 3):
                raise disk_full()
            return True

    rig.fake.plans.append(("long", TaskPlan(polls=3)))
    job = await rig.add(JobKind.VIDEO, "a long clip whose lease check meets an outage")
    with caplog.at_level(logging.INFO):
        final = await rig.make_runner(leases=GoneLease()).run(job, release_service_slot=lambda: None)
    assert final.state is JobState.DELIVERED and asked > 3
    assert len(service_creates_of(rig)) == 1 and len(rig.reporter.files) == 1
    assert outage_lines(caplog)[0] != []


async def test_a_poll_checks_the_lease_after_its_budget_grant_not_before_the_wait(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    # A key whose one slot the test holds: the runner's poll waits for it, its lease taken meanwhile.
    clock = SystemClock()
    budget = RequestBudget(1, 0.05, clock=clock, backoff_base=0.01, backoff_max=0.1)
    async with aiohttp.ClientSession() as session:
        client = GenerationClient(
            session,
            base_url=rig.fake.base_url,
            api_key=Secret(rig.fake.api_key),
            budget=budget,
            clock=clock,
            request_timeout=5,
            retry_max=2,
            backoff_base=0.01,
            backoff_max=0.1,
            rng=random.Random(1),
        )
        rig.fake.plans.append(("long", TaskPlan(polls=50)))
        lost = False
        job = await rig.add(JobKind.VIDEO, "a long clip whose poll waits for the budget")
        runner = rig.make_runner(leases=StandInLease(lambda: lost), key=client)
        with caplog.at_level(logging.INFO):
            task = asyncio.create_task(runner.run(job, release_service_slot=lambda: None))
            await wait_for(lambda: polls(rig) >= 1)
            async with budget.slot(Priority.FIRST):  # ahead of the polls, whatever their priority
                await wait_for(lambda: budget.waiting >= 1)  # the next poll waits, its lease still held
                lost = True  # another process takes the job over while the poll waits
                sent = polls(rig)
            with pytest.raises(LeaseLost):
                await task
        await client.close()
    assert polls(rig) == sent  # granted its slot, the poll asked again and was never sent
    assert errors(caplog) == []


async def test_a_request_whose_lease_check_meets_an_outage_gives_its_budget_slot_back_and_waits(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    # A key with one slot: a poll whose lease check cannot reach the store must not sit on it (with
    # Redis, other processes share that budget) while it waits for the store.
    clock = SystemClock()
    budget = RequestBudget(1, 0.05, clock=clock, backoff_base=0.01, backoff_max=0.1)
    out, asked_in_outage = False, 0

    class OutageLease:
        async def holds(self, job_id: int) -> bool:
            nonlocal asked_in_outage
            if out:
                asked_in_outage += 1
                raise disk_full()
            return True

    async with aiohttp.ClientSession() as session:
        client = GenerationClient(
            session,
            base_url=rig.fake.base_url,
            api_key=Secret(rig.fake.api_key),
            budget=budget,
            clock=clock,
            request_timeout=5,
            retry_max=2,
            backoff_base=0.01,
            backoff_max=0.1,
            rng=random.Random(1),
        )
        rig.fake.plans.append(("long", TaskPlan(polls=5)))
        job = await rig.add(JobKind.VIDEO, "a long clip whose lease check meets an outage")
        runner = rig.make_runner(leases=OutageLease(), key=client)
        with caplog.at_level(logging.INFO):
            task = asyncio.create_task(runner.run(job, release_service_slot=lambda: None))
            await wait_for(lambda: polls(rig) >= 1)
            out = True
            await wait_for(lambda: asked_in_outage >= 3)  # the gate's one try, then the wait's
            async with asyncio.timeout(5), budget.slot(Priority.FIRST):
                sent = polls(rig)  # the slot is free while the job waits for the store
            out = False
            final = await task
        await client.close()
    assert final.state is JobState.DELIVERED and polls(rig) > sent
    assert len(service_creates_of(rig)) == 1 and len(rig.reporter.files) == 1
    assert outage_lines(caplog)[0] != []


@pytest.mark.parametrize("error", ["driver", "bare_timeout_in_outage"])
async def test_a_delivery_whose_bookkeeping_meets_an_outage_resumes_and_delivers_once(
    rig: Rig, caplog: pytest.LogCaptureFixture, error: str
) -> None:
    # The chat side's own record of the delivery could not be saved: nothing landed, and the store
    # is out. The job goes on from its stored state (DELIVERING) once the store answers.
    faulty = FaultyStore(rig.store)
    outage, clock = watched()
    failures = [disk_full() if error == "driver" else TimeoutError()]
    if error != "driver":  # the store is out as the bare timeout comes: the runner's look fails too
        faulty.faults["get"] = Fault(times=2)

    class Unsaved(RecordingReporter):
        async def deliver(self, job: Job, result: ResultToDeliver) -> DeliveryOutcome:
            if failures:
                raise failures.pop()
            return await super().deliver(job, result)

    reporter = Unsaved()
    job = await rig.add(JobKind.VIDEO, "a clip whose delivery meets an outage")
    runner = JobRunner(
        store=faulty,  # type: ignore[arg-type]
        accounts=SingleKey(rig.client),
        reporter=reporter,
        clock=SystemClock(),
        settings=SETTINGS,
        results_dir=rig.results_dir,
        outage=outage,
    )
    with caplog.at_level(logging.INFO):
        final = await runner.run(job, release_service_slot=lambda: None)
        quiet_moment_later(outage, clock)
    assert final.state is JobState.DELIVERED and failures == []
    assert [job_id for job_id, *_ in reporter.files] == [job.id]
    assert len(service_creates_of(rig)) == 1
    began, ended = outage_lines(caplog)
    assert len(began) == 1 and len(ended) == 1


async def test_a_bare_timeout_of_the_chat_side_still_fails_the_job_while_the_store_answers(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    class TimesOut(RecordingReporter):
        async def deliver(self, job: Job, result: ResultToDeliver) -> DeliveryOutcome:
            raise TimeoutError  # Discord's, not the store's: nothing says the store is out

    job = await rig.add(JobKind.VIDEO, "a clip whose delivery times out")
    runner = JobRunner(
        store=rig.store,
        accounts=SingleKey(rig.client),
        reporter=TimesOut(),
        clock=SystemClock(),
        settings=SETTINGS,
        results_dir=rig.results_dir,
    )
    with caplog.at_level(logging.INFO):
        final = await runner.run(job, release_service_slot=lambda: None)
    assert final.state is JobState.FAILED and final.error_code == "internal"
    assert not any("does not answer" in r.getMessage() for r in caplog.records)
