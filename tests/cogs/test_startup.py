"""Reaching Discord at start-up (cogs/startup.py) and the discord.py internals it needs
(cogs/discord_internals.py), without Discord: a stand-in client and a local websocket server.

End to end (the real bot.py against an unreachable, then reachable, fake Discord; exit code 2 for a
rejected token) this is proved by tests/e2e/test_hostile_misc.py and tests/e2e/test_resilience.py.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import discord
import discord.gateway
import discord.http
import pytest
import yarl
from aiohttp import web

from cogs import discord_internals
from cogs.startup import ReconnectLogFilter, connect_patiently, describe, is_transient
from tests.workers import free_port


class Delays:
    """Short, counted waits (the production rule is framecast.backoff, tested on its own)."""

    def __init__(self) -> None:
        self.waits = 0
        self.resets = 0

    def next(self) -> float:
        self.waits += 1
        return 0.01

    def reset(self) -> None:
        self.resets += 1


class StandInHttp:
    def __init__(self) -> None:
        self.connector: object = object()
        self.closed = 0

    async def close(self) -> None:
        self.closed += 1


class StandInClient:
    """What connect_patiently uses of a discord.Client: login, connect, is_closed, http, ws."""

    def __init__(
        self, *, login_errors: list[BaseException], connect_errors: list[tuple[BaseException, object]]
    ) -> None:
        self.login_errors = login_errors
        self.connect_errors = connect_errors  # (error, ws left behind by the failed connect)
        self.http = StandInHttp()
        self.ws: object = None
        self.logins = 0
        self.connects = 0

    def is_closed(self) -> bool:
        return False

    async def login(self, token: str) -> None:
        self.logins += 1
        if self.login_errors:
            raise self.login_errors.pop(0)

    async def connect(self) -> None:
        self.connects += 1
        if self.connect_errors:
            error, self.ws = self.connect_errors.pop(0)
            raise error


@pytest.fixture
async def gateway(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[str]]:
    """A websocket server standing in for Discord's gateway; yields the query strings it was opened with."""
    opened: list[str] = []

    async def handle(request: web.Request) -> web.WebSocketResponse:
        opened.append(request.query_string)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    monkeypatch.setattr(
        discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(f"ws://127.0.0.1:{port}/")
    )
    try:
        yield opened
    finally:
        await runner.cleanup()


def _client(client: StandInClient) -> discord.Client:
    return cast(discord.Client, client)


async def test_a_transient_login_failure_is_retried_with_a_fresh_http_session(gateway: list[str]) -> None:
    client = StandInClient(
        login_errors=[aiohttp.ClientConnectionError("refused"), TimeoutError()], connect_errors=[]
    )
    delays = Delays()
    await connect_patiently(_client(client), "token", backoff=delays)
    assert client.logins == 3 and client.connects == 1
    # Each failed attempt's session was closed and its connector forgotten (login makes new ones).
    assert client.http.closed == 2 and client.http.connector is discord.utils.MISSING
    assert delays.waits == 2 and delays.resets == 1
    assert gateway == ["v=10&encoding=json"]  # probed once, as discord.py will connect


async def test_a_rejected_token_is_not_retried(gateway: list[str]) -> None:
    client = StandInClient(login_errors=[discord.LoginFailure("Improper token")], connect_errors=[])
    with pytest.raises(discord.LoginFailure):
        await connect_patiently(_client(client), "token", backoff=Delays())
    assert client.logins == 1 and client.connects == 0 and not gateway


async def test_a_first_gateway_connection_that_fails_is_probed_and_tried_again(gateway: list[str]) -> None:
    # discord.py 2.7.1 crashes on None when its very first connection fails (ws never set).
    client = StandInClient(login_errors=[], connect_errors=[(AttributeError("sequence"), None)])
    await connect_patiently(_client(client), "token", backoff=Delays())
    assert client.connects == 2 and len(gateway) == 2


async def test_an_error_after_the_gateway_connection_opened_is_raised(gateway: list[str]) -> None:
    refused = RuntimeError("closed with 4004")
    client = StandInClient(login_errors=[], connect_errors=[(refused, object())])
    with pytest.raises(RuntimeError):
        await connect_patiently(_client(client), "token", backoff=Delays())
    assert client.connects == 1


async def test_an_unreachable_gateway_is_probed_until_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()  # nothing listens there
    monkeypatch.setattr(
        discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(f"ws://127.0.0.1:{port}/")
    )
    delays = Delays()
    client = StandInClient(login_errors=[], connect_errors=[])
    task = asyncio.create_task(connect_patiently(_client(client), "token", backoff=delays))
    for _ in range(500):  # until it has probed twice (a loaded machine may take longer than 0.2 s)
        if delays.waits >= 2 or task.done():
            break
        await asyncio.sleep(0.01)
    assert client.connects == 0 and delays.waits >= 2 and not task.done()  # still waiting for the gateway

    async def handle(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.wait_for(task, timeout=5)
    finally:
        await runner.cleanup()
    assert client.connects == 1


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (aiohttp.ClientConnectionError("refused"), True),
        (TimeoutError(), True),
        (discord.GatewayNotFound(), True),
        (discord.LoginFailure("bad"), False),
        (ValueError("a bug"), False),
    ],
)
def test_only_failures_to_reach_discord_are_transient(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


def test_describe_is_one_short_line() -> None:
    text = describe(aiohttp.ClientConnectionError("Cannot connect\n  to host  discord.com:443\n" + "x" * 500))
    assert "\n" not in text and text.startswith("ClientConnectionError: Cannot connect to host")
    assert len(text) < 240


def test_a_reconnect_traceback_becomes_one_warning_line() -> None:
    try:
        raise aiohttp.ClientConnectionError("reset by peer")
    except aiohttp.ClientConnectionError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "discord.client", logging.ERROR, __file__, 1, "Attempting a reconnect in %.2fs", (2.5,), exc_info
    )
    assert ReconnectLogFilter().filter(record)
    assert record.exc_info is None and record.levelno == logging.WARNING
    assert record.getMessage() == (
        "lost the connection to Discord's gateway (ClientConnectionError: reset by peer); reconnecting in 2.5 s"
    )


def test_point_discord_at_moves_rest_and_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    monkeypatch.setattr(
        discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    )
    discord_internals.point_discord_at(
        api_base_url="http://127.0.0.1:9/api/", gateway_url="ws://127.0.0.1:9/gw"
    )
    assert discord.http.Route.BASE == "http://127.0.0.1:9/api"
    route: Callable[..., Any] = discord.http.Route
    assert route("GET", "/users/@me").url == "http://127.0.0.1:9/api/users/@me"
    assert discord_internals.gateway_url() == "ws://127.0.0.1:9/gw?v=10&encoding=json"


def test_point_discord_at_nothing_leaves_discord_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    before = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    discord_internals.point_discord_at(api_base_url=None, gateway_url=None)
    assert (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == before


def test_system_channel_id_is_read_also_for_an_uncached_guild() -> None:
    fetched = cast(discord.Guild, SimpleNamespace(_system_channel_id=1234, system_channel=None))
    assert discord_internals.system_channel_id(fetched) == 1234
    assert discord_internals.system_channel_id(cast(discord.Guild, SimpleNamespace())) is None
