"""End-to-end harness: the real ``bot.py`` in a subprocess against the two fakes.

A :class:`World` holds a fake Discord (guilds, channels, members), a fake generation service, a
temporary database, and the bot process. Timings are scaled down through the bot's own
configuration (a 16-per-60-seconds budget becomes 16 per second), never by patching code.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fake_discord import FakeDiscord, FakeMessage
from tests.fake_service import FakeService

REPO = Path(__file__).resolve().parent.parent
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
    """``python bot.py`` with the given environment; output goes to a log file."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self._log_file: Any = None

    async def start(self, *args: str) -> None:
        """Start the bot (appending to the same log across restarts)."""
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(REPO / "bot.py"), *args,
            cwd=str(REPO), env=self.env, stdin=asyncio.subprocess.DEVNULL,
            stdout=self._log_file, stderr=asyncio.subprocess.STDOUT,
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
    bot: BotProcess | None = None

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
        try:
            await self.discord.wait_ready(timeout=30, after=mark)
        except Exception:
            print(self.bot.log_text()[-5000:])
            raise

    async def restart_bot(self) -> None:
        """Start the bot again on the same database (after a kill or a stop)."""
        await self.start_bot()

    async def video(self, prompt: str, *, member: Any = None, guild: int = 0, **options: Any) -> Any:
        """/video in guild `guild` by `member` (default: alice); returns the FakeInteraction."""
        member = member or self.members[guild][0]
        it = await self.discord.slash(self.guilds[guild], self.channels[guild], member, "video",
                                      {"prompt": prompt, **options.pop("opts", {})}, **options)
        await it.wait_response(timeout=5)
        return it

    async def image(self, prompt: str, *, member: Any = None, guild: int = 0, **options: Any) -> Any:
        """/image, like :meth:`video`."""
        member = member or self.members[guild][0]
        it = await self.discord.slash(self.guilds[guild], self.channels[guild], member, "image",
                                      {"prompt": prompt, **options.pop("opts", {})}, **options)
        await it.wait_response(timeout=5)
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

        await self.discord.wait_for(lambda: find() is not None, timeout=timeout, what=f"job {job_id} delivered")
        found = find()
        assert found is not None
        return found

    async def job_id(self, it: Any, timeout: float = 10) -> int:
        """The job number shown in the interaction's message title."""
        msg = await it.wait_original(lambda m: bool(m.embeds) and "#" in (m.embeds[0].get("title") or ""),
                                     timeout=timeout)
        return int(msg.embeds[0]["title"].rsplit("#", 1)[1])

    async def wait_message(self, predicate: Callable[[FakeMessage], bool], timeout: float = 30,
                           what: str = "a message") -> FakeMessage:
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


def status_of(message: FakeMessage) -> str:
    """The Status field of a job message."""
    embed = message.embeds[0] if message.embeds else {}
    for f in embed.get("fields", []):
        if f.get("name") == "Status":
            return str(f.get("value"))
    return ""


def footer_of(message: FakeMessage) -> str:
    """The footer (notes) of a job message."""
    embed = message.embeds[0] if message.embeds else {}
    return str((embed.get("footer") or {}).get("text", ""))


def button_ids(message: FakeMessage) -> list[str]:
    """custom_ids of the message's buttons."""
    return list(message.custom_ids())


async def make_world(tmp: Path, *, guilds: int = 1, members: int = 3, extra_env: dict[str, str] | None = None,
                     **discord_kwargs: Any) -> World:
    """Build and start both fakes (not the bot)."""
    discord_kwargs.setdefault("bot_token", f"bot-token-{secrets.token_hex(16)}")
    discord = FakeDiscord(**discord_kwargs)
    service = FakeService()
    world = World(discord=discord, service=service, tmp=tmp, env={})
    for g in range(guilds):
        guild = discord.add_guild(f"Guild {g}")
        world.guilds.append(guild)
        world.channels.append(discord.add_channel(guild, "general"))
        world.members[g] = [discord.add_member(guild, f"member{g}-{i}", permissions=MEMBER_PERMS)
                            for i in range(members)]
        world.admins.append(discord.add_member(guild, f"admin{g}", permissions=MEMBER_PERMS | MANAGE_GUILD))
    await discord.start()
    await service.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEN_", "DISCORD_"))}
    env.update(discord.env())
    env.update(SCALED_ENV)
    env.update({
        "GEN_API_BASE_URL": service.base_url,
        "GEN_API_KEY": service.api_key,
        "DATABASE_PATH": str(tmp / "data" / "framecast.sqlite3"),
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra_env or {})
    world.env = env
    return world


async def close_world(world: World) -> None:
    """Stop the bot (SIGTERM), then the fakes; check that no secret reached the log."""
    try:
        if world.bot is not None and world.bot.running:
            await world.bot.terminate()
    finally:
        await world.service.stop()
        await world.discord.stop()
    if world.bot is not None:
        log = world.bot.log_text()
        for secret in (world.env["DISCORD_TOKEN"], world.env["GEN_API_KEY"]):
            assert secret not in log, "a secret reached the bot's log"
        for it in world.discord.interactions:
            token = getattr(it, "token", "")
            assert not token or token not in log, "an interaction token reached the bot's log"
