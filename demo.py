"""See Framecast work without a Discord application or a service key: ``python demo.py``.

Runs the real ``bot.py`` (as a subprocess, exactly as in production) against the project's own fake
Discord and fake generation service (``tests/fakes/``, the ones the test suite uses), publishes the
slash commands, then sends a ``/video`` and an ``/image`` as a member of a server would, and prints
what that member sees: every edit of the job's message (its title, status and notes), its buttons,
and the delivered file's name and size. Each delivered file is saved to a folder whose path is
printed at the end, with the bot's own log. Timings are scaled down the way the tests scale them (a
rate window of a second instead of a minute), so the whole run takes seconds.

Needs the development requirements (``pip install -r requirements-dev.lock``): the fakes check every
request against Discord's OpenAPI spec and make real MP4 and PNG files with PyAV.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.fakes.discord_api import (
    FakeChannel,
    FakeDiscord,
    FakeGuild,
    FakeInteraction,
    FakeMember,
    FakeMessage,
)
from tests.fakes.gen_service import FakeService, TaskPlan

REPO = Path(__file__).resolve().parent
#: A member's permissions: view the channel, send messages, use application commands.
MEMBER = (1 << 10) | (1 << 11) | (1 << 31)
#: The bot's timings scaled down (as tests/e2e/harness.py does): a budget of 16 requests a second.
SCALED = {
    "GEN_RATE_LIMIT": "16/1",
    "GEN_POLL_INTERVAL": "0.3",
    "GEN_BACKOFF_BASE": "0.05",
    "GEN_BACKOFF_MAX": "0.5",
    "EDIT_INTERVAL": "0.2",
    "SHUTDOWN_TIMEOUT": "3",
    "LOG_LEVEL": "INFO",
}
#: Longest a job may take here before the demo gives up on it (it takes a few seconds).
JOB_TIMEOUT = 40.0
REQUESTS = (("video", "a lighthouse at dusk, waves breaking"), ("image", "a red fox asleep in the snow"))


def describe(payload: dict[str, Any], names: dict[str, str]) -> list[str]:
    """What a member reads in one version of the job's message: title, fields, notes, buttons.

    `names`: mentions as Discord shows them (``<@id>`` reads ``@name``).
    """
    lines: list[str] = []
    if payload.get("content"):
        lines.append(str(payload["content"]))
    for embed in payload.get("embeds") or []:
        if embed.get("title"):
            lines.append(str(embed["title"]))
        lines.extend(f"{f.get('name')}: {f.get('value')}" for f in embed.get("fields") or [])
        footer = (embed.get("footer") or {}).get("text")
        if footer:
            lines.append(f"({footer})")
    labels = [
        c.get("label") or c.get("emoji", {}).get("name") for c in _buttons(payload.get("components") or [])
    ]
    if labels:
        lines.append("buttons: " + " | ".join(str(label) for label in labels))
    for mention, name in names.items():
        lines = [line.replace(mention, name) for line in lines]
    return lines


def _buttons(components: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for component in components:
        if component.get("type") == 2:
            found.append(component)
        found.extend(_buttons(component.get("components") or []))
    return found


async def follow(discord: FakeDiscord, it: FakeInteraction, out: Path, names: dict[str, str]) -> FakeMessage:
    """Print each edit of the job's message until its file is delivered; save the file under `out`."""
    message = await it.wait_original(timeout=10)
    print("  the bot acknowledged at once (Discord shows 'thinking...')")
    shown = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + JOB_TIMEOUT
    while True:

        def changed(seen: int = shown) -> bool:
            return len(message.history) > seen

        await discord.wait_for(
            changed,
            timeout=max(0.1, deadline - loop.time()),
            what="the job's file",
        )
        for entry in message.history[shown:]:
            shown += 1
            if entry.get("action") == "create" and not (entry.get("payload") or {}).get("embeds"):
                continue  # the acknowledgement itself, printed above
            print(f"  -- edit {shown - 1} --")
            for line in describe(entry.get("payload") or {}, names):
                print(f"     {line}")
            for upload in entry.get("files") or []:
                print(f"     file: {upload['filename']} ({upload['size']:,} bytes)")
        if message.attachments:
            for attachment in message.attachments:
                saved = out / attachment.filename
                saved.write_bytes(attachment.data)
                print(f"  delivered: {attachment.filename}, {attachment.size:,} bytes, saved to {saved}")
            return message


async def demo(out: Path) -> int:
    """The whole demo; the exit code."""
    discord = FakeDiscord(bot_token=f"demo-bot-token-{secrets.token_hex(8)}")
    service = FakeService()
    service.default_plan = TaskPlan(duration=2.0, polls=2)  # a few progress updates before the file
    guild: FakeGuild = discord.add_guild("Demo server")
    channel: FakeChannel = discord.add_channel(guild, "general")
    member: FakeMember = discord.add_member(guild, "newcomer", permissions=MEMBER)
    await discord.start()
    await service.start()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GEN_", "DISCORD_", "REDIS_", "DATABASE_"))
    }
    env.update(discord.env())
    env.update(SCALED)
    env.update(
        {
            "GEN_API_BASE_URL": service.base_url,
            "GEN_API_KEY": service.api_key,
            "DATABASE_PATH": str(out / "framecast.sqlite3"),
            "HTTP_PORT": "",
            "PYTHONUNBUFFERED": "1",
        }
    )
    log_path = out / "bot.log"
    print(f"starting the real bot.py against a fake Discord ({discord.base_url}) and a fake service")
    with open(log_path, "wb") as log:  # noqa: ASYNC230 -- opened once, before the bot starts
        bot = await asyncio.create_subprocess_exec(
            sys.executable,
            str(REPO / "bot.py"),
            "--sync",
            cwd=str(out),  # so no .env of the repository's is read: the demo's settings only
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        ready = asyncio.ensure_future(discord.wait_ready(timeout=45))
        exited = asyncio.ensure_future(bot.wait())
        await asyncio.wait({ready, exited}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            print(f"bot.py exited with {bot.returncode} before connecting; its log: {log_path}")
            return 1
        exited.cancel()
        ready.result()
        print(
            f"the bot is online in '{guild.name}' as {discord.bot_user.name}; the member '{member.user.name}' types:"
        )
        for kind, prompt in REQUESTS:
            print(f"\n/{kind} prompt:{prompt}")
            it = await discord.slash(guild, channel, member, kind, {"prompt": prompt})
            await follow(discord, it, out, {f"<@{member.user.id}>": f"@{member.user.name}"})
    finally:
        if bot.returncode is None:
            bot.send_signal(signal.SIGTERM)
            await asyncio.wait_for(bot.wait(), 30)
        await service.stop()
        await discord.stop()
    print(f"\nthe bot stopped (exit code {bot.returncode}); its log and the files: {out}")
    return 0 if bot.returncode == 0 else 1


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="Run Framecast against its fake Discord and service.")
    parser.add_argument("--out", type=Path, help="folder for the delivered files and the bot's log")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="framecast-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    return asyncio.run(demo(out.resolve()))


if __name__ == "__main__":
    sys.exit(main())
