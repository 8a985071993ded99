"""framecast.service.outage: the service out of reach is one WARNING and one INFO, never a line per retry.

Real HTTP to the fake service, through a relay the test cuts and restores (the service gone: no
connection) or with the fake's own knobs (a gateway's 503s, per-request errors).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest

from framecast.clock import SystemClock
from framecast.ops.metrics import Metrics
from framecast.service import GenerationClient
from framecast.service.errors import AuthError
from framecast.service.outage import ServiceOutage
from tests.e2e.servers import Relay
from tests.fakes.clock import ManualClock
from tests.fakes.gen_service import FakeService
from tests.service.clients import VIDEO, new_client


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def relay(fake_service: FakeService) -> AsyncIterator[Relay]:
    relay = Relay(("127.0.0.1", fake_service.port))
    await relay.start()
    try:
        yield relay
    finally:
        await relay.cut()


def client_of(
    fake: FakeService,
    session: aiohttp.ClientSession,
    metrics: Metrics,
    *,
    key: str,
    base_url: str,
    outage: ServiceOutage | None = None,
) -> GenerationClient:
    # Many attempts with short waits: the requests are still retrying when the service returns.
    return new_client(
        fake,
        session,
        key=key,
        base_url=base_url,
        retry_max=50,
        backoff_base=0.01,
        backoff_max=0.1,
        metrics=metrics,
        outage=outage,
    )


def service_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("framecast.service") and r.levelno == level
    ]


def retry_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == "framecast.service.transport" and "; retry " in r.getMessage()
    ]


def sample(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)


async def test_a_cut_met_by_concurrent_requests_of_two_keys_is_one_warning_then_one_info_when_back(
    fake_service: FakeService,
    relay: Relay,
    session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="framecast.service")
    fake_service.api_keys = {"key-of-a-server"}
    metrics = Metrics(process=False)
    url = f"http://127.0.0.1:{relay.port}"
    # The accounts give every key's client the process's one view of the service.
    outage = ServiceOutage(url, clock=SystemClock(), metrics=metrics)
    operator = client_of(
        fake_service, session, metrics, key=fake_service.api_key, base_url=url, outage=outage
    )
    server = client_of(fake_service, session, metrics, key="key-of-a-server", base_url=url, outage=outage)
    attempts = 0
    enough = asyncio.Event()

    async def gate() -> None:  # before each attempt is sent: the service is restored after 12 of them
        nonlocal attempts
        attempts += 1
        if attempts >= 12:
            enough.set()

    await relay.cut()
    creates = [
        asyncio.create_task(client.create_video(VIDEO, gate=gate)) for client in (operator, operator, server)
    ]
    await asyncio.wait_for(enough.wait(), 10)
    assert operator.service_down and server.service_down  # one service, whichever key asks
    assert sample(metrics, "framecast_service_unreachable") == 1
    await relay.restore()
    task_ids = await asyncio.wait_for(asyncio.gather(*creates), 10)

    assert len(set(task_ids)) == 3 and fake_service.count(path="/v1/videos") == 3
    assert len(retry_lines(caplog)) >= 9  # each failed attempt but the last before the answers
    [warning] = service_lines(caplog, logging.WARNING)
    assert "does not answer" in warning and "connection problem" in warning
    [info] = service_lines(caplog, logging.INFO)
    assert "answers again, after" in info
    assert all(r.levelno == logging.DEBUG for r in retry_lines(caplog))
    assert not (operator.service_down or server.service_down)
    assert sample(metrics, "framecast_service_outages_total") == 1
    assert sample(metrics, "framecast_service_unreachable") == 0
    for client in (operator, server):
        await client.close()


async def test_a_gateways_503s_are_an_outage_said_once(
    fake_service: FakeService, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="framecast.service")
    metrics = Metrics(process=False)
    client = client_of(
        fake_service, session, metrics, key=fake_service.api_key, base_url=fake_service.base_url
    )
    fake_service.fail_status, fake_service.fail_next = 503, 15

    await asyncio.gather(*(client.create_video(VIDEO) for _ in range(3)), client.list_models())

    assert fake_service.count(503) == 15 and len(retry_lines(caplog)) == 15
    [warning] = service_lines(caplog, logging.WARNING)
    assert "does not answer (HTTP 503)" in warning
    [info] = service_lines(caplog, logging.INFO)
    assert "answers again" in info
    assert sample(metrics, "framecast_service_outages_total") == 1
    await client.close()


@pytest.mark.parametrize("status", [429, 500, 401])
async def test_a_per_request_error_is_no_outage(
    fake_service: FakeService, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    caplog.set_level(logging.DEBUG, logger="framecast.service")
    metrics = Metrics(process=False)
    client = client_of(
        fake_service, session, metrics, key=fake_service.api_key, base_url=fake_service.base_url
    )
    if status == 401:  # the key refused: an answer, not retried
        fake_service.revoke(fake_service.api_key)
        with pytest.raises(AuthError):
            await client.create_video(VIDEO)
    else:  # a rate refusal or an error of the service's own: retried, and answered at last
        fake_service.path_scripted["/v1/videos"] = [(status, {"error": {"message": "no"}}, None)] * 3
        assert await client.create_video(VIDEO)
        assert [r.levelno for r in retry_lines(caplog)] == [logging.DEBUG] * 3

    assert service_lines(caplog, logging.WARNING) == []
    assert not any("answers again" in line for line in service_lines(caplog, logging.INFO))
    assert not client.service_down and sample(metrics, "framecast_service_outages_total") == 0
    await client.close()


async def test_a_poll_that_fails_while_the_service_is_out_adds_no_warning(
    fake_service: FakeService,
    relay: Relay,
    session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="framecast.service")
    url = f"http://127.0.0.1:{relay.port}"
    client = client_of(fake_service, session, Metrics(process=False), key=fake_service.api_key, base_url=url)
    task_id = await client.create_video(VIDEO)
    polls = 0
    enough = asyncio.Event()

    async def before_poll() -> None:
        nonlocal polls
        polls += 1
        if polls >= 4:
            enough.set()

    await relay.cut()
    waiting = asyncio.create_task(
        client.wait_video(task_id, interval=0.01, timeout=30, before_poll=before_poll)
    )
    await asyncio.wait_for(enough.wait(), 10)
    await relay.restore()
    status = await asyncio.wait_for(waiting, 10)

    assert status.state == "completed"
    [warning] = service_lines(caplog, logging.WARNING)
    assert "does not answer" in warning
    assert any("poll failed" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)
    assert len([line for line in service_lines(caplog, logging.INFO) if "answers again" in line]) == 1
    await client.close()


def test_a_failure_of_a_request_sent_before_the_last_answer_opens_no_outage() -> None:
    clock = ManualClock(100.0)
    outage = ServiceOutage("http://svc.invalid/v1", clock=clock)
    outage.answered(sent=90.0)  # a request sent at 90 was answered: a slow one sent at 80 timing out
    outage.failed(sent=80.0, problem="no answer within 60 s")  # says nothing of the service now
    assert not outage.down
    outage.failed(sent=95.0, problem="connection problem")
    assert outage.down


async def test_an_answer_to_a_request_sent_before_the_outage_does_not_end_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="framecast.service.outage")
    clock = ManualClock(100.0)
    outage = ServiceOutage("http://user:pw@svc.invalid:8443/v1?x=1", clock=clock)
    outage.failed(sent=100.0, problem="connection problem")
    outage.answered(sent=99.0)  # on its way before the service went: no proof it is back
    assert outage.down
    await clock.advance(12.5)
    outage.answered(sent=110.0)
    assert not outage.down
    assert [r.getMessage() for r in caplog.records] == [
        "the generation service at http://svc.invalid:8443 does not answer (connection problem); its "
        "requests are retried and jobs wait until it answers again",
        "the generation service at http://svc.invalid:8443 answers again, after 12.5s",
    ]
