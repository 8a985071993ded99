"""End-to-end harness: the real ``bot.py`` in a subprocess against the two fakes.

The end-to-end tests' world: the :class:`World`, its helpers, and the ``world`` / ``start`` /
``start_synced`` fixtures (registered for the whole suite by ``tests/conftest.py``). Beside it:
``commands.py`` (slash commands, buttons and forms as members and admins use them),
``endpoints.py`` (the operating endpoints over HTTP) and ``servers.py`` (PostgreSQL and Redis: the
two-process ``cluster``, relays a test can cut).

A :class:`World` holds a fake Discord (guilds, channels, members), a fake generation service, a
temporary database, and the bot process. Timings are scaled down through the bot's own
configuration (a 16-per-60-seconds budget becomes 16 per second), never by patching code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.forks import ForkedProcess, fork_bot
from tests.fakes.discord_api import FakeDiscord, FakeInteraction, FakeMessage
from tests.fakes.gen_service import POLL_PATH, FakeService

REPO = Path(__file__).resolve().parents[2]
# Manage Server, for members who may cancel or retry other people's jobs.
MANAGE_GUILD = 1 << 5
# A normal member: view channel, send messages, use application commands.
MEMBER_PERMS = (1 << 10) | (1 << 11) | (1 << 31)

SCALED_ENV = {
    "GEN_RATE_LIMIT": "16/1",
    "GEN_POLL_INTERVAL": "0.05",
    "GEN_POLL_TIMEOUT": "20",
    "GEN_REQUEST_TIMEOUT": "5",
    "GEN_RETRY_MAX": "6",
    "GEN_BACKOFF_BASE": "0.05",
    "GEN_BACKOFF_MAX": "0.5",
    "GEN_DOWNLOAD_TIMEOUT": "10",
    "GEN_MAX_RUNNING": "4",
    "EDIT_INTERVAL": "0.05",
    "TOKEN_MARGIN": "2",
    "SHUTDOWN_TIMEOUT": "3",
    "LOG_LEVEL": "DEBUG",
}


class BotProcess:
    """``python bot.py`` with the given environment; output goes to a log file.

    Started as a fork of this worker's zygote where it can be (``tests/e2e/forks.py``: the same
    bot.py, a second less of imports), else as a plain subprocess.
    """

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | ForkedProcess | None = None
        self._log_file: Any = None

    async def start(self, *args: str) -> None:
        """Start the bot (appending to the same log across restarts)."""
        _STARTED.add(self)
        self.proc = await asyncio.to_thread(fork_bot, REPO / "bot.py", args, REPO, self.env, self.log_path)
        if self.proc is not None:
            return
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115, ASYNC230 - tiny, closed in wait()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(REPO / "bot.py"),
            *args,
            cwd=str(REPO),
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=asyncio.subprocess.STDOUT,
        )

    async def kill(self) -> None:
        """SIGKILL: no chance to clean up (a crash)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.wait(10)

    async def terminate(self, timeout: float = 15) -> int:
        """SIGTERM (a container stop); returns the exit code."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await self.wait(timeout)

    async def wait(self, timeout: float) -> int:
        """Wait for the process to exit (killing it if it overstays)."""
        assert self.proc is not None
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            code = await self.proc.wait()
            raise
        finally:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
        return code

    @property
    def running(self) -> bool:
        """True while the process lives."""
        return self.proc is not None and self.proc.returncode is None

    def log_text(self) -> str:
        """Everything the bot printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


#: Every bot.py a test started (emptied after each test by :func:`no_bot_left_running`).
_STARTED: set[BotProcess] = set()


@pytest.fixture(autouse=True)
def no_bot_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, kill any bot.py it left running, and name the test in a warning.

    An orphaned bot keeps its ports, database and CPU until the suite ends, and slows every test
    after it; the warning says which test to fix.
    """
    yield
    left = [bot for bot in _STARTED if bot.running and bot.proc is not None]
    _STARTED.clear()
    for bot in left:
        assert bot.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(bot.proc.pid, signal.SIGKILL)
    if left:
        warnings.warn(f"{request.node.nodeid} left {len(left)} bot.py running; killed", stacklevel=1)


@dataclass
class World:
    """Two fakes, three guilds' worth of members, and the bot."""

    discord: FakeDiscord
    service: FakeService
    tmp: Path
    env: dict[str, str]
    guilds: list[Any] = field(default_factory=list)
    channels: list[Any] = field(default_factory=list)
    members: dict[int, list[Any]] = field(default_factory=dict)  # guild index -> members
    admins: list[Any] = field(default_factory=list)  # one member with Manage Server per guild
    process: BotProcess | None = None  # the bot, once started (see :attr:`bot`)

    @property
    def bot(self) -> BotProcess:
        """The bot's process; only once :meth:`start_bot` (or a test) has started one."""
        assert self.process is not None, "the bot was never started"
        return self.process

    @bot.setter
    def bot(self, process: BotProcess) -> None:
        self.process = process

    @property
    def guild(self) -> Any:
        return self.guilds[0]

    @property
    def channel(self) -> Any:
        return self.channels[0]

    @property
    def alice(self) -> Any:
        return self.members[0][0]

    @property
    def bob(self) -> Any:
        return self.members[0][1]

    async def start_bot(self, *args: str) -> None:
        """Start bot.py and wait until it is connected to the fake gateway."""
        mark = self.discord.identify_count
        self.bot = BotProcess(self.env, self.tmp / "bot.log")
        await self.bot.start(*args)
        assert self.bot.proc is not None
        ready = asyncio.ensure_future(self.discord.wait_ready(timeout=30, after=mark))
        exited = asyncio.ensure_future(self.bot.proc.wait())
        try:
            await asyncio.wait({ready, exited}, return_when=asyncio.FIRST_COMPLETED)
            if not ready.done():
                raise AssertionError(
                    f"bot.py exited with {self.bot.proc.returncode} before connecting:\n"
                    + self.bot.log_text()[-3000:]
                )
            ready.result()
        except Exception:
            print(self.bot.log_text()[-5000:])
            raise
        finally:
            for fut in (ready, exited):
                if not fut.done():
                    fut.cancel()

    async def restart_bot(self) -> None:
        """Start the bot again on the same database (stopping it first, SIGTERM, if it still runs)."""
        if self.bot is not None and self.bot.running:
            await self.bot.terminate()
        await self.start_bot()

    async def video(self, prompt: str, *, member: Any = None, guild: int = 0, **options: Any) -> Any:
        """/video in guild `guild` by `member` (default: alice); returns the FakeInteraction."""
        member = member or self.members[guild][0]
        it = await self.discord.slash(
            self.guilds[guild],
            self.channels[guild],
            member,
            "video",
            {"prompt": prompt, **options.pop("opts", {})},
            **options,
        )
        await it.wait_response(timeout=5)
        await self.job_id(it)  # accepted and shown: the next command sees this job
        return it

    async def image(self, prompt: str, *, member: Any = None, guild: int = 0, **options: Any) -> Any:
        """/image, like :meth:`video`."""
        member = member or self.members[guild][0]
        it = await self.discord.slash(
            self.guilds[guild],
            self.channels[guild],
            member,
            "image",
            {"prompt": prompt, **options.pop("opts", {})},
            **options,
        )
        await it.wait_response(timeout=5)
        await self.job_id(it)  # accepted and shown: the next command sees this job
        return it

    async def delivered(self, it: Any, timeout: float = 30) -> FakeMessage:
        """Wait until the job of interaction `it` has its file on some message; return that message."""
        job_id = await self.job_id(it)
        prefix = f"framecast-{job_id}."

        def find() -> FakeMessage | None:
            for m in self.discord.messages.values():
                if not m.deleted and any(a.filename.startswith(prefix) for a in m.attachments):
                    return m
            return None

        await self.discord.wait_for(
            lambda: find() is not None, timeout=timeout, what=f"job {job_id} delivered"
        )
        found = find()
        assert found is not None
        return found

    async def job_id(self, it: Any, timeout: float = 10) -> int:
        """The job number shown in the interaction's message title."""
        msg = await it.wait_original(
            lambda m: bool(m.embeds) and "#" in (m.embeds[0].get("title") or ""), timeout=timeout
        )
        return int(msg.embeds[0]["title"].rsplit("#", 1)[1])

    async def wait_message(
        self, predicate: Callable[[FakeMessage], bool], timeout: float = 30, what: str = "a message"
    ) -> FakeMessage:
        """Wait for any message matching `predicate`."""

        def find() -> FakeMessage | None:
            return next((m for m in self.discord.messages.values() if predicate(m)), None)

        await self.discord.wait_for(lambda: find() is not None, timeout=timeout, what=what)
        found = find()
        assert found is not None
        return found

    def files_for(self, job_id: int) -> list[Any]:
        """Every upload ever made of job `job_id`'s result."""
        return [a for a in self.discord.files_delivered() if a.filename.startswith(f"framecast-{job_id}.")]


def ack_latency(it: FakeInteraction) -> float:
    """Seconds from dispatch to the interaction's accepted initial response (it must have one)."""
    assert it.ack_latency is not None, f"interaction {it.id} was never acknowledged"
    return it.ack_latency


def status_of(message: FakeMessage) -> str:
    """The Status field of a job message."""
    embed = message.embeds[0] if message.embeds else {}
    for f in embed.get("fields", []):
        if f.get("name") == "Status":
            return str(f.get("value"))
    return ""


def statuses_seen(message: FakeMessage) -> list[str]:
    """Every distinct Status value the message showed over its life, in order."""
    seen: list[str] = []
    for entry in message.history:
        payload = entry.get("payload") or {}
        for embed in payload.get("embeds") or []:
            for f in embed.get("fields", []):
                if f.get("name") == "Status" and (not seen or seen[-1] != f.get("value")):
                    seen.append(str(f.get("value")))
    return seen


def footer_of(message: FakeMessage) -> str:
    """The footer (notes) of a job message."""
    embed = message.embeds[0] if message.embeds else {}
    return str((embed.get("footer") or {}).get("text", ""))


def button_ids(message: FakeMessage) -> list[str]:
    """custom_ids of the message's buttons."""
    return list(message.custom_ids())


async def answer_to(world: World, click: FakeInteraction) -> tuple[str, bool]:
    """What a click was answered, and whether privately: a message, or an acknowledgement and then
    a follow-up."""
    kind, data = await click.wait_response()
    if kind == 4:
        assert data is not None
        return data["content"], bool(data["flags"] & 64)
    await world.discord.wait_for(lambda: bool(click.followups), timeout=10, what="the answer")
    return click.followups[-1].content, click.followups[-1].ephemeral


async def make_world(
    tmp: Path,
    *,
    guilds: int = 1,
    members: int = 3,
    extra_env: dict[str, str] | None = None,
    **discord_kwargs: Any,
) -> World:
    """Build and start both fakes (not the bot)."""
    discord_kwargs.setdefault("bot_token", f"bot-token-{secrets.token_hex(16)}")
    discord = FakeDiscord(**discord_kwargs)
    service = FakeService()
    world = World(discord=discord, service=service, tmp=tmp, env={})
    for g in range(guilds):
        guild = discord.add_guild(f"Guild {g}")
        world.guilds.append(guild)
        world.channels.append(discord.add_channel(guild, "general"))
        world.members[g] = [
            discord.add_member(guild, f"member{g}-{i}", permissions=MEMBER_PERMS) for i in range(members)
        ]
        world.admins.append(discord.add_member(guild, f"admin{g}", permissions=MEMBER_PERMS | MANAGE_GUILD))
    await discord.start()
    await service.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEN_", "DISCORD_"))}
    env.update(discord.env())
    env.update(SCALED_ENV)
    env.update(
        {
            "GEN_API_BASE_URL": service.base_url,
            "GEN_API_KEY": service.api_key,
            "DATABASE_PATH": str(tmp / "data" / "framecast.sqlite3"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    # Every bot.py writes and reuses the product's bytecode (in __pycache__, ignored by git), so a
    # start compiles its sources once per suite and not each time (a tenth of its start-up CPU),
    # also where PYTHONDONTWRITEBYTECODE is set, as many container images do. (A separate
    # PYTHONPYCACHEPREFIX would make the first bot compile every installed library too.)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra_env or {})
    world.env = env
    return world


async def close_world(world: World) -> None:
    """Stop the bot (SIGTERM), then the fakes; check that no secret reached the log."""
    try:
        if world.process is not None and world.process.running:
            await world.process.terminate()
    finally:
        await world.service.stop()
        await world.discord.stop()
    if world.process is not None:
        log = world.process.log_text()
        # The record of spent requests (beside the database) names keys by an HMAC only.
        spent = b"".join(
            p.read_bytes() for p in Path(world.env["DATABASE_PATH"]).parent.glob("*.spent-requests")
        )
        for secret in (world.env["DISCORD_TOKEN"], world.env["GEN_API_KEY"]):
            assert secret not in log, "a secret reached the bot's log"
            assert secret.encode() not in spent, "a secret reached the record of spent requests"
        for it in world.discord.interactions:
            token = getattr(it, "token", "")
            assert not token or token not in log, "an interaction token reached the bot's log"
    # Everything the bot sent must be what real Discord accepts (its published OpenAPI spec).
    assert not world.discord.spec_violations, [str(v) for v in world.discord.spec_violations]


def hold_route(
    discord: FakeDiscord,
    method: str,
    template: str,
    when: Callable[[Any], bool] | None = None,
) -> tuple[asyncio.Event, list[Any]]:
    """Let the fake Discord fully process `method template` requests (store the message, the
    attachments...) but hold each answer until the returned event is set.

    `when(call)` picks the requests to hold (default: all); e.g. ``lambda call: bool(call.uploads)``
    holds only requests that carry files.

    Returns ``(release, held)``: ``held`` collects the :class:`FakeRequest` of every request whose
    answer is being held. Models an answer lost in flight, e.g. the bot dying after Discord stored
    an upload and before the bot heard about it. ``template`` is the route as the fake spells it,
    e.g. ``"/webhooks/{app_id}/{token}/messages/{message_id}"``.
    """
    release = asyncio.Event()
    held: list[Any] = []
    routes = discord._routes  # noqa: SLF001 - a test-side wrapper around one route of the fake
    for index, (m, pattern, handler, auth, tmpl) in enumerate(routes):
        if m == method and tmpl == template:

            async def holding(call: Any, _handler: Callable[[Any], Any] = handler) -> Any:
                answer = await _handler(call)
                if when is not None and not when(call):
                    return answer
                held.append(call.record)
                await discord._notify()  # noqa: SLF001 - wake wait_for on the held request
                await release.wait()
                return answer

            routes[index] = (m, pattern, holding, auth, tmpl)
            return release, held
    raise ValueError(f"the fake Discord has no route {method} {template}")


def job_rows(world: World) -> dict[int, dict[str, Any]]:
    """The bot's job table as it is on disk now: id -> {state, task_id, result_url, discord, ...}."""
    import json
    import sqlite3

    path = Path(world.env["DATABASE_PATH"])
    if not path.exists():
        return {}
    conn = sqlite3.connect(path, timeout=10)
    try:
        conn.row_factory = sqlite3.Row
        rows = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    finally:
        conn.close()
    out: dict[int, dict[str, Any]] = {}
    for row in rows:
        record = dict(row)
        record["discord"] = json.loads(record.get("discord") or "{}")
        out[int(record["id"])] = record
    return out


async def wait_log(world: World, text: str, timeout: float = 10.0, *, start: int = 0) -> int:
    """Wait until the bot's log contains `text` at or after character `start`; returns its index."""
    assert world.bot is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        index = world.bot.log_text().find(text, start)
        if index >= 0:
            return index
        if loop.time() > deadline:
            raise TimeoutError(f"the bot's log did not show {text!r} within {timeout:g} s")
        await asyncio.sleep(0.02)


async def wait_spent(world: World, kind: str, count: int, timeout: float = 10.0) -> None:
    """Wait until the bot's record of spent requests holds `count` lines of `kind` ("g" a grant, "e"
    an end, "p" a pause): written, so a kill from then on leaves them to the next process."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    path = Path(world.env["DATABASE_PATH"]).parent / "framecast.spent-requests"
    while True:
        with contextlib.suppress(FileNotFoundError):
            if sum(line.startswith(kind + " ") for line in path.read_text().splitlines()) >= count:
                return
        if loop.time() > deadline:
            raise TimeoutError(
                f"the record of spent requests did not show {count} {kind!r} within {timeout:g} s"
            )
        await asyncio.sleep(0.02)


def service_creates(world: World, prompt: str | None = None) -> list[Any]:
    """Create requests (video and image) the fake service received, optionally for one prompt."""
    return [
        r
        for r in world.service.requests
        if r.method == "POST"
        and r.path in ("/v1/videos", "/v1/images/generations")
        and (prompt is None or (isinstance(r.json, dict) and r.json.get("prompt") == prompt))
    ]


def service_polls(world: World, task_id: str) -> list[Any]:
    """Polls of one task the fake service received."""
    return [r for r in world.service.requests if r.path == POLL_PATH and r.query.get("video_id") == task_id]


def task_for(world: World, prompt: str) -> Any:
    """The fake service's task created for `prompt` (exactly one must exist)."""
    tasks = [t for t in world.service.tasks.values() if t.prompt == prompt]
    assert len(tasks) == 1, f"expected one task for {prompt!r}, found {len(tasks)}"
    return tasks[0]


def bot_posts(world: World, channel: Any = None) -> list[FakeMessage]:
    """Messages the bot posted in a channel with its bot token (not interaction responses)."""
    channel = channel or world.channel
    return [
        m
        for m in world.discord.messages_in(channel, include_deleted=True)
        if m.interaction is None and m.author.id == world.discord.bot_user.id
    ]


def notes_seen(message: FakeMessage) -> list[str]:
    """Every footer text (notes) the message showed over its life, in order."""
    seen: list[str] = []
    for entry in message.history:
        payload = entry.get("payload") or {}
        for embed in payload.get("embeds") or []:
            text = str((embed.get("footer") or {}).get("text", ""))
            if text and (not seen or seen[-1] != text):
                seen.append(text)
    return seen


async def wait_state(world: World, job_id: int, state: str, timeout: float = 10.0) -> dict[str, Any]:
    """Wait until job `job_id` has `state` in the bot's database (read from disk); returns its row."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        row = job_rows(world).get(job_id)
        if row is not None and row["state"] == state:
            return row
        if loop.time() > deadline:
            raise TimeoutError(
                f"job {job_id} is {row and row['state']!r}, not {state!r}, after {timeout:g} s"
            )
        await asyncio.sleep(0.02)


async def wait_recorded(world: World, job_id: int, state: str, timeout: float = 10.0) -> dict[str, Any]:
    """:func:`wait_state`, and the bot has taken the change in too (its log line of the move).

    The row is on disk a moment before the bot's own view of its members' jobs follows (the store
    logs the move, then tells its listeners, with nothing in between): a request sent only after
    the row is read may still meet the job as unfinished, and a limit of one refuse it.
    """
    row = await wait_state(world, job_id, state, timeout)
    await wait_log(world, f"job {job_id}: -> {state}\n", timeout)
    return row


# -- fixtures (registered for every test by tests/conftest.py) ------------------------------------
@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """One guild, three members and an admin; the bot running and connected."""
    w = await make_world(tmp_path)
    try:
        await w.start_bot()
        yield w
    finally:
        await close_world(w)


StartWorld = Callable[..., Awaitable[World]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[StartWorld]:
    """`await start(setup=..., extra_env=...)`: `setup(world)` runs before the bot starts.

    The first world lives in ``tmp_path``; each later one in a folder of its own (``w1``, ...): two
    bots running at once on one database file would take each other's jobs."""
    worlds: list[World] = []

    async def factory(setup: Callable[[World], None] | None = None, **kwargs: Any) -> World:
        folder = tmp_path / f"w{len(worlds)}" if worlds else tmp_path
        folder.mkdir(exist_ok=True)
        world = await make_world(folder, **kwargs)
        worlds.append(world)
        if setup is not None:
            setup(world)
        await world.start_bot()
        return world

    try:
        yield factory
    finally:
        for world in worlds:
            await close_world(world)


@pytest.fixture
async def start_synced(tmp_path: Path) -> AsyncIterator[StartWorld]:
    """Like ``start``, with the bot started as ``bot.py --sync``: the slash commands published, so
    replies that name a command (``/settings show``, refusals) can name it as Discord knows it."""
    worlds: list[World] = []

    async def factory(setup: Callable[[World], None] | None = None, **kwargs: Any) -> World:
        tmp = tmp_path / f"w{len(worlds)}"
        tmp.mkdir()
        world = await make_world(tmp, **kwargs)
        worlds.append(world)
        if setup is not None:
            setup(world)
        await world.start_bot("--sync")
        return world

    try:
        yield factory
    finally:
        for world in worlds:
            await close_world(world)
