"""Reaching Discord at start-up, however long it takes.

A container may start before its network is up, DNS may fail, Discord may answer 5xx: the bot
then logs one line per attempt and tries again with a capped exponential backoff, instead of
dying with a traceback. A token Discord rejects is final (:class:`discord.LoginFailure`).

Two things in discord.py 2.7 shape this module. ``Client.login`` opens a new HTTP session on every
call (and runs ``setup_hook`` only once it succeeded), so a failed attempt's session is closed
here before the next. And ``Client.connect`` can retry a gateway connection only after a first one
has opened (it reads the old websocket's state), so the gateway is probed until it answers first.
The two lines of each that need discord.py's internals live in :mod:`cogs.discord_internals`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

import aiohttp
import discord

from cogs.discord_internals import discard_http_session, gateway_url, never_connected

log = logging.getLogger(__name__)


class Delays(Protocol):
    """Successive waits between attempts (``bot.py`` passes the core's one backoff rule)."""

    def next(self) -> float:
        """The wait before the next attempt."""
        ...

    def reset(self) -> None:
        """Start again from the shortest wait (after a success)."""
        ...


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` means "Discord cannot be reached right now" (worth another attempt)."""
    if isinstance(exc, discord.LoginFailure):
        return False
    if isinstance(exc, discord.HTTPException):
        return exc.status >= 500 or exc.status == 429
    return isinstance(exc, (aiohttp.ClientError, TimeoutError, discord.GatewayNotFound))


def describe(exc: BaseException) -> str:
    """One short line saying what went wrong (no traceback; never a token: only hosts and codes)."""
    if isinstance(exc, discord.HTTPException):
        return f"HTTP {exc.status}"
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def connect_patiently(client: discord.Client, token: str, *, backoff: Delays) -> None:
    """``client.start(token)``, waiting for Discord to be reachable first.

    Logs in (``GET /users/@me``, the application, then ``setup_hook``) until that works, then
    waits for the gateway and connects; from then on discord.py reconnects by itself. Returns
    when the client is closed. Raises :class:`discord.LoginFailure` for a rejected token and any
    error that is not about reaching Discord. `backoff` gives the waits between attempts (started
    again from the shortest once logged in).
    """
    while not client.is_closed():
        try:
            await client.login(token)
            break
        except Exception as exc:
            if not is_transient(exc) or client.is_closed():
                raise
            delay = backoff.next()
            log.warning("cannot reach Discord (%s); retrying in %.1f s", describe(exc), delay)
            await discard_http_session(client)
            await asyncio.sleep(delay)
    backoff.reset()
    while not client.is_closed():
        await _wait_for_gateway(client, backoff)
        try:
            await client.connect()
            return
        except Exception:
            # The gateway went away between the probe and the connection: discord.py logged why
            # and cannot retry a connection that never opened, so probe again.
            if not never_connected(client) or client.is_closed():
                raise


async def _wait_for_gateway(client: discord.Client, backoff: Delays) -> None:
    """Open and close a websocket to the gateway until that works (``connect`` can then proceed)."""
    url = gateway_url()
    # A session of our own: the probe only needs the websocket handshake to succeed.
    async with aiohttp.ClientSession() as session:
        while not client.is_closed():
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
                # that arrives as the connection attempt ends, and this loop would then never stop.
                async with asyncio.timeout(60.0):
                    socket = await session.ws_connect(url)
            except (aiohttp.ClientError, TimeoutError) as exc:
                delay = backoff.next()
                log.warning("cannot reach Discord's gateway (%s); retrying in %.1f s", describe(exc), delay)
                await asyncio.sleep(delay)
                continue
            await socket.close()
            return


class ReconnectLogFilter(logging.Filter):
    """Turns discord.py's "Attempting a reconnect" traceback into one line saying why.

    Attach it to the ``discord.client`` logger: a dropped gateway connection is routine (discord.py
    reconnects by itself) and must not fill the log with tracebacks.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and str(record.msg).startswith("Attempting a reconnect"):
            args: tuple[Any, ...] = record.args if isinstance(record.args, tuple) else ()
            record.msg = "lost the connection to Discord's gateway (%s); reconnecting in %.1f s"
            record.args = (describe(exc), *(args[:1] or (0.0,)))
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"  # routine, not a failure
        return True
