"""A model renamed while the bot runs: the job's create is refused, the list is read again at once.

A job that used a default is created once more (once, never in a loop) on the model the one model
rule picks from the fresh list, the newest of the family; a job whose member picked the model fails
with :attr:`ErrorCode.MODEL_GONE`, naming the models offered now (what /models would show). The
real runner, store, client and model cache run against the fake service over HTTP.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from framecast.app.model_choice import LISTING_CHARS, ModelChoice, ModelSource, models_listing
from framecast.app.model_renames import ModelRenames
from framecast.clock import SystemClock
from framecast.config import Secret
from framecast.guilds.settings import Ceilings, GuildSettings, Policy, resolve
from framecast.jobs.runner import JobRunner
from framecast.keys.budget import RequestBudget
from framecast.service import GenerationClient
from framecast.service.model_list import ModelCache
from framecast.storage import Store
from framecast.values import Job, JobKind, JobState, NewJob
from framecast.values.reasons import ErrorCode
from tests.fakes.chat_side import RUNNER_SETTINGS, RecordingReporter
from tests.fakes.clock import ManualClock
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL, FakeService
from tests.fakes.keys import SingleKey

OLD, NEW = VIDEO_MODEL, "svc-video-v2.1"
CEILINGS = Ceilings(member_jobs=5, queue_cap=10, daily_videos=None, daily_images=None)
REFUSED = (400, {"error": {"message": f"The model `{OLD}` does not exist"}}, None)


@dataclass
class Rig:
    fake: FakeService
    store: Store
    client: GenerationClient
    models: ModelCache
    minute: ManualClock  # the model cache's clock: the minute between refreshes passes only when told
    reporter: RecordingReporter
    results_dir: Path
    servers: dict[int, GuildSettings] = field(default_factory=dict)

    def policy(self, guild_id: int) -> Policy:
        return resolve(self.servers.get(guild_id, GuildSettings()), CEILINGS)

    def runner(self, *, with_renames: bool = True) -> JobRunner:
        return JobRunner(
            store=self.store,
            accounts=SingleKey(self.client),
            reporter=self.reporter,
            clock=SystemClock(),
            settings=RUNNER_SETTINGS,
            results_dir=self.results_dir,
            models=ModelRenames(self.models, self.policy) if with_renames else None,
        )

    async def add(self, source: ModelSource, model: str = OLD, kind: JobKind = JobKind.VIDEO) -> Job:
        choice = ModelChoice(model, source).params()
        if kind is JobKind.VIDEO:
            params: dict[str, Any] = {
                **choice,
                "prompt": "a slow river",
                "width": 64,
                "height": 64,
                "num_frames": 12,
                "frame_rate": 12,
            }
        else:
            params = {**choice, "prompt": "a cat", "size": "64x64"}
        return await self.store.add(NewJob(kind, 1, 2, 3, "en-US", params), member_limit=None, guild_cap=None)

    async def run(self, job: Job, runner: JobRunner | None = None) -> Job:
        return await (runner or self.runner()).run(job, release_service_slot=lambda: None)

    def creates(self, path: str = "/v1/videos") -> list[str]:
        return [r.json["model"] for r in self.fake.requests if r.path == path]

    def list_calls(self) -> int:
        return sum(1 for r in self.fake.requests if r.path == "/v1/models")


@pytest.fixture
async def rig(fake_service: FakeService, tmp_path: Path) -> AsyncIterator[Rig]:
    clock = SystemClock()
    store = await Store.open(tmp_path / "data" / "framecast.sqlite3", clock=clock)
    session = aiohttp.ClientSession()
    client = GenerationClient(
        session,
        base_url=fake_service.base_url,
        api_key=Secret(fake_service.api_key),
        budget=RequestBudget(1000, 1.0, clock=clock, backoff_base=0.01, backoff_max=0.1),
        clock=clock,
        request_timeout=5,
        retry_max=2,
        backoff_base=0.01,
        backoff_max=0.1,
        rng=random.Random(1),
    )
    minute = ManualClock()
    models = ModelCache(client, clock=minute, refresh_every=600, default_video=OLD, default_image=IMAGE_MODEL)
    fake_service.models += [("svc-video-v1.9", "video"), ("other-video-v9", "video")]
    models.update(await client.list_models())  # the list as the bot read it at start
    fake_service.requests.clear()
    try:
        yield Rig(fake_service, store, client, models, minute, RecordingReporter(), tmp_path / "results")
    finally:
        await client.close()
        await session.close()
        await store.close()


async def test_a_default_job_is_created_once_more_on_the_newest_of_its_family(rig: Rig) -> None:
    rig.fake.rename_model(OLD, NEW)
    job = await rig.add(ModelSource.OPERATOR_DEFAULT)
    done = await rig.run(job)
    assert done.state is JobState.DELIVERED, (done.error_code, done.error_detail)
    assert rig.creates() == [OLD, NEW]  # not svc-video-v1.9, not other-video-v9
    assert rig.list_calls() == 1  # one refresh, at once
    assert done.params["model"] == NEW and done.params["model_default"] is True  # stored, still a default
    assert rig.models.default("video") == NEW  # the next job gets it without a refusal


async def test_a_job_on_the_servers_default_gets_what_a_job_with_no_pick_gets_now(rig: Rig) -> None:
    # The server's default was renamed: the one model rule falls back to the operator's default
    # (here the newest of its family), exactly as a new /video with no model would now.
    rig.fake.models += [("svc-video-fast-1", "video")]
    rig.models.update(await rig.client.list_models())
    rig.servers[1] = GuildSettings(video_model="svc-video-fast-1")
    rig.fake.rename_model("svc-video-fast-1", "svc-video-fast-2")
    rig.fake.rename_model(OLD, NEW)
    done = await rig.run(await rig.add(ModelSource.SERVER_DEFAULT, "svc-video-fast-1"))
    assert done.state is JobState.DELIVERED
    assert rig.creates() == ["svc-video-fast-1", NEW]


async def test_a_picked_model_fails_naming_the_models_offered_now(rig: Rig) -> None:
    rig.fake.rename_model(OLD, NEW)
    done = await rig.run(await rig.add(ModelSource.PICKED))
    assert done.state is JobState.FAILED
    assert done.error_code == ErrorCode.MODEL_GONE
    # The video models, in /models' order (never the image or text ones).
    assert done.error_detail == ", ".join(rig.models.ids("video")) == f"{NEW}, svc-video-v1.9, other-video-v9"
    assert rig.creates() == [OLD]  # a pick is never swapped behind the member's back
    assert rig.list_calls() == 1


async def test_a_picked_image_model_fails_naming_the_image_models(rig: Rig) -> None:
    rig.fake.rename_model(IMAGE_MODEL, "svc-image-2.2-flash")
    job = await rig.add(ModelSource.PICKED, IMAGE_MODEL, JobKind.IMAGE)
    done = await rig.run(job)
    assert (done.state, done.error_code, done.error_detail) == (
        JobState.FAILED,
        ErrorCode.MODEL_GONE,
        "svc-image-2.2-flash",
    )


async def test_the_create_is_tried_once_more_never_again(rig: Rig) -> None:
    rig.fake.rename_model(OLD, NEW)
    rig.fake.path_scripted["/v1/videos"] = [REFUSED, REFUSED, REFUSED]  # whatever model it names
    done = await rig.run(await rig.add(ModelSource.OPERATOR_DEFAULT))
    assert (done.state, done.error_code) == (JobState.FAILED, ErrorCode.REJECTED)
    assert len(rig.creates()) == 2 and rig.list_calls() == 1


async def test_a_refusal_the_fresh_list_does_not_bear_out_stays_a_plain_failure(rig: Rig) -> None:
    rig.fake.path_scripted["/v1/videos"] = [REFUSED]  # but the service still lists the model
    done = await rig.run(await rig.add(ModelSource.PICKED))
    assert (done.state, done.error_code) == (JobState.FAILED, ErrorCode.REJECTED)
    assert done.error_detail == f"The model `{OLD}` does not exist"
    assert rig.creates() == [OLD] and rig.list_calls() == 1


async def test_jobs_refused_within_the_minute_share_one_refresh(rig: Rig) -> None:
    rig.fake.rename_model(OLD, NEW)
    first, second = await rig.add(ModelSource.OPERATOR_DEFAULT), await rig.add(ModelSource.PICKED)
    third = await rig.add(ModelSource.OPERATOR_DEFAULT)
    assert (await rig.run(first)).state is JobState.DELIVERED
    assert (await rig.run(second)).error_code == ErrorCode.MODEL_GONE
    assert (await rig.run(third)).state is JobState.DELIVERED
    assert rig.list_calls() == 1
    # A minute later, a refusal reads the list again.
    await rig.minute.advance(60)
    rig.fake.rename_model(NEW, "svc-video-v2.2")
    assert (await rig.run(await rig.add(ModelSource.OPERATOR_DEFAULT, NEW))).state is JobState.DELIVERED
    assert rig.list_calls() == 2 and rig.creates()[-2:] == [NEW, "svc-video-v2.2"]


async def test_without_the_rule_a_refused_model_fails_the_job_as_before(rig: Rig) -> None:
    rig.fake.rename_model(OLD, NEW)
    done = await rig.run(await rig.add(ModelSource.OPERATOR_DEFAULT), rig.runner(with_renames=False))
    assert (done.state, done.error_code) == (JobState.FAILED, ErrorCode.REJECTED)
    assert rig.list_calls() == 0


def test_the_listing_keeps_whole_ids_within_its_cap() -> None:
    many = [f"svc-video-v{n}.0-{'x' * 30}" for n in range(40)]
    shown = models_listing(many)
    assert 0 < len(shown) < len(many) and all(model in many for model in shown)
    assert len(", ".join(shown)) <= LISTING_CHARS
    assert models_listing(["a", "b"]) == ("a", "b") and models_listing([]) == ()
