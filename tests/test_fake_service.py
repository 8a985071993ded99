"""The fake service itself: the knobs other tests rely on behave as documented."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.fakes.gen_service import POLL_PATH, FakeService, RecordedRequest, TaskPlan


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def auth(fake: FakeService) -> dict[str, str]:
    return {"Authorization": f"Bearer {fake.api_key}"}


async def test_auth_and_record(fake_service: FakeService, http: aiohttp.ClientSession) -> None:
    url = fake_service.base_url + "/v1/models"
    async with http.get(url) as r:
        assert r.status == 401
    async with http.get(url, headers={"Authorization": "Bearer nope"}) as r:
        assert r.status == 401
    async with http.get(url, headers=auth(fake_service)) as r:
        assert r.status == 200
    assert [(q.auth, q.status) for q in fake_service.requests] == [
        ("missing", 401),
        ("wrong", 401),
        ("ok", 200),
    ]
    # Result files are public (like signed CDN links) but a wrong key is still refused.
    async with http.get(fake_service.base_url + "/files/a.png") as r:
        assert r.status == 200 and (await r.read()).startswith(b"\x89PNG")
    async with http.get(fake_service.base_url + "/files/a.mp4", headers={"Authorization": "Bearer x"}) as r:
        assert r.status == 401


async def test_sliding_window_429(fake_service: FakeService, http: aiohttp.ClientSession) -> None:
    fake_service.rate_limit = (2, 0.3)
    fake_service.retry_after = 7
    url = fake_service.base_url + "/v1/models"
    statuses, retry_after = [], []
    for _ in range(3):
        async with http.get(url, headers=auth(fake_service)) as r:
            statuses.append(r.status)
            retry_after.append(r.headers.get("Retry-After"))
    assert statuses == [200, 200, 429] and retry_after[2] == "7"
    await asyncio.sleep(0.35)
    fake_service.retry_after = None
    fake_service.count_rejected = True
    async with http.get(url, headers=auth(fake_service)) as r:
        assert r.status == 200  # the two successes and the 429 have left the window
    async with http.get(url, headers=auth(fake_service)) as r:
        assert r.status == 200
    async with http.get(url, headers=auth(fake_service)) as r:
        assert r.status == 429 and "Retry-After" not in r.headers
    assert fake_service.count(status=429) == 2


def test_max_in_window() -> None:
    fake = FakeService()
    for t in (0.0, 0.1, 0.2, 1.0, 1.05, 1.1, 1.15, 2.2):
        fake.requests.append(RecordedRequest("GET", "/", {}, b"", None, "ok", t))
    fake.requests.append(RecordedRequest("GET", "/", {}, b"", None, "wrong", 1.12))
    assert fake.max_in_window(1.0) == 5  # 0.2 .. 1.15 (0.1 is exactly one window before 1.1)
    assert fake.max_in_window(0.2) == 4
    assert fake.max_in_window(1.0, only_authorised=False) == 6


async def test_wait_for_wakes_on_requests(fake_service: FakeService, http: aiohttp.ClientSession) -> None:
    async def later() -> None:
        await asyncio.sleep(0.05)
        async with http.get(fake_service.base_url + "/v1/models", headers=auth(fake_service)):
            pass

    task = asyncio.create_task(later())
    await fake_service.wait_for(lambda: fake_service.count(status=200) == 1, timeout=5)
    await task
    with pytest.raises(TimeoutError):
        await fake_service.wait_for(lambda: False, timeout=0.05)


async def test_task_plans_by_prompt_and_duration(
    fake_service: FakeService, http: aiohttp.ClientSession
) -> None:
    fake_service.plans.append(("slow", TaskPlan(duration=0.2, polls=0)))
    body = {
        "model": "m",
        "prompt": "a slow cat",
        "width": 64,
        "height": 64,
        "num_frames": 12,
        "frame_rate": 12,
    }
    async with http.post(fake_service.base_url + "/v1/videos", json=body, headers=auth(fake_service)) as r:
        task_id = (await r.json())["video_id"]
    poll = fake_service.base_url + POLL_PATH
    async with http.get(poll, params={"video_id": task_id}, headers=auth(fake_service)) as r:
        first = await r.json()
    assert first["status"] == "pending" and 0 <= first["progress"] < 100
    start = fake_service.tasks[task_id].created
    await asyncio.sleep(max(0.0, 0.21 - (time.monotonic() - start)))
    async with http.get(poll, params={"video_id": task_id}, headers=auth(fake_service)) as r:
        done = await r.json()
    assert done["status"] == "completed" and done["video_url"].endswith(f"/files/{task_id}.mp4")
    body["width"] = "wide"
    async with http.post(fake_service.base_url + "/v1/videos", json=body, headers=auth(fake_service)) as r:
        assert r.status == 400 and "width" in (await r.json())["error"]["message"]


async def test_hostile_knobs(fake_service: FakeService, http: aiohttp.ClientSession) -> None:
    """The knobs the hostile-service tests rely on: verbatim URLs, redirects, raw and gzip bodies."""
    import gzip

    fake_service.result_url = "file:///proc/self/environ"
    fake_service.default_plan = TaskPlan(polls=0)
    async with http.post(
        fake_service.base_url + "/v1/videos",
        headers=auth(fake_service),
        json={"model": "m", "prompt": "p", "width": 8, "height": 8, "num_frames": 1, "frame_rate": 1},
    ) as r:
        task_id = (await r.json())["video_id"]
    async with http.get(
        fake_service.base_url + POLL_PATH, params={"video_id": task_id}, headers=auth(fake_service)
    ) as r:
        assert (await r.json())["video_url"] == "file:///proc/self/environ"

    fake_service.file_redirects = ["/files/one.png", "/files/two.png"]
    fake_service.file_redirect = "http://169.254.169.254/"
    locations = []
    for _ in range(3):
        async with http.get(fake_service.base_url + "/files/a.png", allow_redirects=False) as r:
            assert r.status == 302
            locations.append(r.headers["Location"])
    assert locations == ["/files/one.png", "/files/two.png", "http://169.254.169.254/"]
    fake_service.file_redirect = None

    fake_service.file_gzip = True
    async with http.get(fake_service.base_url + "/files/a.png", auto_decompress=False) as r:
        assert r.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(await r.read()) == fake_service.image_bytes()

    bomb = gzip.compress(b'{"status": "pending"' + b" " * 1_000_000 + b"}")
    fake_service.path_scripted[POLL_PATH] = [
        (200, bomb, {"Content-Encoding": "gzip"}),
        (200, b"[" * 1000, None),
    ]
    async with http.get(
        fake_service.base_url + POLL_PATH,
        params={"video_id": task_id},
        headers=auth(fake_service),
        auto_decompress=False,
    ) as r:
        assert await r.read() == bomb
    async with http.get(
        fake_service.base_url + POLL_PATH, params={"video_id": task_id}, headers=auth(fake_service)
    ) as r:
        assert await r.read() == b"[" * 1000
    async with http.get(fake_service.base_url + "/v1/models", headers=auth(fake_service)) as r:
        assert r.status == 200  # other paths are untouched by path_scripted


async def test_several_keys_each_with_its_own_window_tasks_and_revocation(
    fake_service: FakeService, http: aiohttp.ClientSession
) -> None:
    other = "server-key-0123456789"
    fake_service.api_keys.add(other)
    fake_service.rate_limit = (2, 5.0)
    url = fake_service.base_url + "/v1/models"
    theirs = {"Authorization": f"Bearer {other}"}
    statuses = []
    for headers in (auth(fake_service), auth(fake_service), theirs, theirs, theirs):
        async with http.get(url, headers=headers) as r:
            statuses.append(r.status)
    # Two each go through: the windows are per key; the third of the second key is over its own.
    assert statuses == [200, 200, 200, 200, 429]
    assert fake_service.count(key=other) == 3 and fake_service.count(key=fake_service.api_key) == 2
    assert fake_service.max_in_window(5.0, key=other) == 3  # the 429'd one was authorised too
    assert other not in repr(fake_service.requests[-1])  # a failing assertion never prints a key

    fake_service.rate_limit = None
    body = {"model": "m", "prompt": "p", "width": 8, "height": 8, "num_frames": 1, "frame_rate": 1}
    async with http.post(fake_service.base_url + "/v1/videos", json=body, headers=theirs) as r:
        task_id = (await r.json())["video_id"]
    poll = fake_service.base_url + f"/svcapi?video_id={task_id}"
    async with http.get(poll, headers=auth(fake_service)) as r:
        assert r.status == 404  # another tenant's task does not exist for this key
    async with http.get(poll, headers=theirs) as r:
        assert r.status == 200

    fake_service.revoke(other)
    async with http.get(url, headers=theirs) as r:
        assert r.status == 401
    async with http.get(url, headers=auth(fake_service)) as r:
        assert r.status == 200
    assert fake_service.requests[-2].auth == "wrong" and fake_service.requests[-2].key == other
