"""Framecast: a Discord bot that turns text prompts into short videos and images.

Run ``python bot.py`` (``--sync`` once to publish the slash commands). Configuration comes from the
environment (a ``.env`` file in development); see ``.env.example`` and the README.
"""

from __future__ import annotations

import gc

# Importing discord.py, SQLAlchemy, aiohttp and the rest allocates about a million objects that live
# as long as the process: the cyclic collector, run every few hundred allocations, would walk them
# again and again for nothing. It is off during the imports, and what they made is then frozen out of
# its way (framecast.ops.heap says why; its first sweep, once the shards are ready, reclaims any
# dead cycle frozen here): together a third less CPU for a start.
gc.disable()

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

import discord
from discord.ext import commands

from cogs.delivery.reporter import DiscordReporter
from cogs.delivery.timings import DeliveryTimings
from cogs.discord_internals import point_discord_at, quiet_voice_warnings
from cogs.i18n import FramecastTranslator
from cogs.startup import ReconnectLogFilter, connect_patiently
from cogs.tree import FramecastTree, set_install_scope
from cogs.web_members import DiscordDirectory
from framecast.app.core import Core
from framecast.app.process import (
    EXIT_GAVE_UP,
    Backoff,
    CheckOutcome,
    Clock,
    ConfigError,
    Estimates,
    HeapFreezer,
    LoopWatchdog,
    Metrics,
    OpsServer,
    QueuePositions,
    Settings,
    Store,
    StoreError,
    SystemClock,
    load_settings,
    raise_fd_limit,
    setup_logging,
    track_heap,
)
from framecast.app.setup_checks import CheckedSetup, SetupProblem, check_setup
from framecast.app.web import web_cases

if TYPE_CHECKING:
    from web.server import WebServer

gc.freeze()
gc.enable()

# Named, not __name__: run as a script this module is "__main__", and operators read "framecast".
log = logging.getLogger("framecast")

EXTENSIONS = (
    "cogs.generate",
    "cogs.jobs",
    "cogs.admin",
    "cogs.settings",
    "cogs.styles",  # attaches /settings styles: after cogs.settings
    "cogs.queue",
    "cogs.info",
    "cogs.history",
    "cogs.gone",
    "cogs.unclaimed",
)
# Never let a stalled Discord rate limit block a worker for long: raise instead and retry later.
MAX_RATELIMIT_TIMEOUT = 30.0
#: The exit code of a start refused over the operator's setup (configuration, store, Redis, port).
EXIT_SETUP = 2


class Framecast(commands.Bot):
    """The bot: wires Discord to the core, opened in ``setup_hook`` and closed in ``close()``."""

    core: Core[DiscordReporter]

    def __init__(self, settings: Settings, *, sync_commands: bool = False) -> None:
        quiet_voice_warnings()  # no voice here: PyNaCl and davey are not needed, nor warned about
        intents = discord.Intents.none()
        intents.guilds = True  # guild and channel cache: upload limits and permissions
        super().__init__(
            command_prefix=commands.when_mentioned,
            intents=intents,
            tree_cls=FramecastTree,
            help_command=None,
            # Prompts are user text: nothing pings unless a send names the requester explicitly.
            allowed_mentions=discord.AllowedMentions.none(),
            max_ratelimit_timeout=MAX_RATELIMIT_TIMEOUT,
            **self._gateway_options(settings),
        )
        self.settings = settings
        self._sync_commands = sync_commands
        self._opened = False
        #: What /metrics shows; the core records into it.
        self.metrics = Metrics()
        #: Freezes the guild cache out of the garbage collector's way once the shards are ready.
        self.heap = HeapFreezer()
        track_heap(self.metrics.registry, self.heap)
        self._ops: OpsServer | None = None
        #: The store and problems found by :meth:`prepare`, before the login (the store goes to the core).
        self._setup: CheckedSetup | None = None
        #: Whether Discord accepted the token (``setup_hook`` runs at the end of the login).
        self._logged_in = False
        self._web: WebServer | None = None
        #: Whether the (unsharded) gateway connection is up, kept from discord.py's connection events.
        self._gateway_up = False

    def __repr__(self) -> str:
        return f"<Framecast user={self.user!s}>"

    async def prepare(self) -> list[SetupProblem]:
        """Before the login: serve the operator port, open (and migrate) the store, reach Redis.

        Every problem is returned at once, each one line naming its variable. The port answers
        from here on: alive, and not ready (``login``) until Discord accepts the token.
        """
        problems: list[SetupProblem] = []
        port = await self._serve_ops()
        if port is not None:
            problems.append(port)
        self._setup = await check_setup(self.settings, clock=SystemClock())
        problems.extend(self._setup.problems)
        return problems

    async def setup_hook(self) -> None:
        """Open the core (it resumes saved jobs) on the store :meth:`prepare` opened, then load the cogs.

        discord.py runs this at the end of ``login()``; a log-in retried after a failure in here (a
        command sync meeting a Discord 5xx) runs it again, so everything is opened only once.
        """
        self._logged_in = True
        if not self._opened:
            await self.tree.set_translator(FramecastTranslator())
            store, self._setup = (self._setup.store if self._setup else None), None
            self.core = await Core.open(
                self.settings, reporter=self._reporter, metrics=self.metrics, store=store
            )
            self._opened = True
            await self._serve_web()
            for extension in EXTENSIONS:
                await self.load_extension(extension)
            set_install_scope(self.tree, user_install=self.settings.user_install)
        if self._sync_commands:
            synced = await self.tree.sync()
            log.info("synced %d global command(s)", len(synced))
            self._sync_commands = False

    def _reporter(
        self, *, store: Store, positions: QueuePositions, estimates: Estimates, clock: Clock, metrics: Metrics
    ) -> DiscordReporter:
        # Called once by Core.open, when the store and the queues exist.
        s = self.settings
        return DiscordReporter(
            self,
            bookkeeping=store,
            timings=DeliveryTimings(
                token_margin=s.token_margin,
                status_message_max_age=s.status_message_max_age,
                edit_interval=s.edit_interval,
                poll_timeout=s.gen_poll_timeout,
            ),
            clock=clock,
            position=positions.position,
            estimates=estimates,
            metrics=metrics,
        )

    async def _serve_ops(self) -> SetupProblem | None:
        """Serve /healthz, /readyz and /metrics on HTTP_PORT (when set); the problem if it cannot.

        ``login`` is the first check: until Discord accepts the token, the checks that need the
        login (the gateway, the model list) are ``pending`` and /readyz says why it is not ready.
        """
        if self.settings.http_port is None or self._ops is not None:
            return None
        ops = OpsServer(self.metrics, port=self.settings.http_port, host=self.settings.http_host)
        ops.add_check("login", lambda: self._logged_in)
        ops.add_check(
            "gateway", lambda: self.gateway_connected() if self._logged_in else CheckOutcome.PENDING
        )
        if self.settings.redis_url is not None:
            # Without Redis no key grants a request: the operator must see why work stopped.
            ops.add_check("redis", self._redis_answers)
        ops.add_check("database", self._database_answers)
        ops.add_check("models", lambda: self.core.models_loaded() if self._opened else CheckOutcome.PENDING)
        try:
            await ops.start()
        except OSError as exc:
            where = f"{self.settings.http_host}:{self.settings.http_port}"
            return SetupProblem("HTTP_PORT", f"cannot listen on {where} ({_listen_error(exc)})")
        self._ops = ops
        log.info("operator endpoints on port %d", ops.port)
        return None

    async def _serve_web(self) -> None:
        """Serve the web pages on WEB_PORT (when set), over the core's use cases and this bot's view."""
        s = self.settings
        if s.web_port is None or self._web is not None:
            return
        assert s.web_base_url and s.web_client_secret and s.web_session_secret
        # Imported here: the pages' templates and aiohttp's server cost every process's start-up,
        # and most deployments set no WEB_PORT.
        from web.pages import add_routes
        from web.server import WebConfig, WebServer

        config = WebConfig(
            host=s.http_host,
            port=s.web_port,
            base_url=s.web_base_url.rstrip("/"),
            client_id=str(self.application_id),  # the OAuth2 client is the bot's own application
            client_secret=s.web_client_secret.reveal(),
            session_secret=s.web_session_secret.reveal(),
            discord_api=s.discord_api_base_url,
        )
        web = WebServer(web_cases(self.core, DiscordDirectory(self)), config, add_routes)
        try:
            await web.start()
        except OSError as exc:
            where = f"{s.http_host}:{s.web_port}"  # known only after the login: the pages need the core
            raise ConfigError("WEB_PORT", f"cannot listen on {where} ({_listen_error(exc)})") from None
        self._web = web

    async def _database_answers(self) -> bool | CheckOutcome:
        if self._opened:
            return await self.core.database_answers()
        if self._setup is None:
            return CheckOutcome.PENDING  # being opened (before the login, or by the core after it)
        store = self._setup.store
        return store is not None and await store.ping()

    async def _redis_answers(self) -> bool | CheckOutcome:
        if not self._opened:
            return CheckOutcome.PENDING  # the core (and its Redis client) opens after the login
        return await self.core.redis_answers()

    def gateway_connected(self) -> bool:
        """Whether the gateway connection is up now (``is_ready()`` stays true through an outage)."""
        return self.is_ready() and self.discord_in_reach()

    def discord_in_reach(self) -> bool:
        """Whether a gateway session is open now (its guilds may still be arriving: not yet ready)."""
        if self.is_closed():
            return False
        if isinstance(self, commands.AutoShardedBot):
            return bool(self.shards) and not any(shard.is_closed() for shard in self.shards.values())
        return self._gateway_up

    async def on_connect(self) -> None:
        """The gateway session started (READY): the connection is up."""
        self._gateway_up = True

    async def on_resumed(self) -> None:
        """A dropped gateway session was resumed: the connection is up again."""
        self._gateway_up = True

    async def on_disconnect(self) -> None:
        """The gateway connection dropped, or an attempt to open it failed (discord.py retries)."""
        self._gateway_up = False

    async def close(self) -> None:
        """Stop taking work, checkpoint running jobs, let the interactions being handled send their
        answers, then close Discord and the core (all of it within ``SHUTDOWN_TIMEOUT``)."""
        started = asyncio.get_running_loop().time()
        opened, self._opened = self._opened, False
        if self._web is not None:
            web, self._web = self._web, None
            await web.close()
        if opened:
            await self.core.stop()
        await self._finish_interactions(started)
        await super().close()  # closes the HTTP session every answer goes through
        if opened:
            await self.core.close()
        if self._setup is not None:
            setup, self._setup = self._setup, None
            await setup.discard()  # checked before the login, never handed to a core
        if self._ops is not None:
            ops, self._ops = self._ops, None
            await ops.close()

    async def _finish_interactions(self, started: float) -> None:
        """Let the commands, clicks and form submits being handled end before Discord's session
        closes: their replies and refusals are sent, and a job they hand the stopped core is saved
        (its message is drawn by the next start), never lost with the member on "thinking…".

        They get what is left of ``SHUTDOWN_TIMEOUT`` since the stop began at `started` (they ran
        on during the core's stop); the rest are cut off. ``SHUTDOWN_TIMEOUT`` is what the whole
        stop is sized to, inside Docker's grace (the Dockerfile, at STOPSIGNAL)."""
        tree = self.tree
        if not isinstance(tree, FramecastTree) or not len(tree.handlers):
            return
        left = max(0.0, self.settings.shutdown_timeout - (asyncio.get_running_loop().time() - started))
        log.debug(
            "shutdown: waiting up to %.1f s for %d interaction(s) being handled", left, len(tree.handlers)
        )
        waited, cut = await tree.handlers.finish(left)
        log.info("shutdown: waited for %d interaction(s) being handled", waited)
        if cut:
            log.warning(
                "shutdown: %d interaction(s) cut off unanswered: SHUTDOWN_TIMEOUT (%g s) was reached",
                cut,
                self.settings.shutdown_timeout,
            )

    async def on_ready(self) -> None:
        """Log who we are, then freeze the filled cache (no command sync here: on_ready fires on
        every full reconnect, after which the cache was rebuilt and is swept again)."""
        log.info(
            "connected as %s (%s) in %d guild(s)", self.user, getattr(self.user, "id", "?"), len(self.guilds)
        )
        self.heap.ready(len(self.guilds))

    async def on_guild_join(self, guild: discord.Guild) -> None:
        """A guild added the bot: one more guild the heap policy counts as churn."""
        self.heap.guilds_changed(1, len(self.guilds))

    async def on_guild_remove(self, guild: discord.Guild) -> None:
        """The bot left a guild (or it was deleted): its cached objects are now garbage."""
        self.heap.guilds_changed(1, len(self.guilds))

    async def on_shard_ready(self, shard_id: int) -> None:
        """A shard identified again on its own: discord.py replaced its guilds' cached objects."""
        if self.is_ready():
            self.heap.guilds_changed(sum(1 for g in self.guilds if g.shard_id == shard_id), len(self.guilds))

    @staticmethod
    def _gateway_options(settings: Settings) -> dict[str, Any]:
        """Extra client options for the gateway connection (none: one unsharded connection)."""
        return {}


class ShardedFramecast(Framecast, commands.AutoShardedBot):
    """The same bot on some of the gateway's shards (``SHARD_COUNT``, ``SHARD_IDS``).

    Each process receives only its shards' servers; the core runs those servers' jobs and takes
    over other processes' jobs when their leases lapse (framecast/jobs/leases.py).
    """

    @staticmethod
    def _gateway_options(settings: Settings) -> dict[str, Any]:
        ids = list(settings.shard_ids) if settings.shard_ids is not None else None
        return {"shard_count": settings.shard_count, "shard_ids": ids}


def make_bot(settings: Settings, *, sync_commands: bool = False) -> Framecast:
    """The bot for this configuration: sharded when ``SHARD_COUNT`` is set."""
    cls = ShardedFramecast if settings.shard_count is not None else Framecast
    return cls(settings, sync_commands=sync_commands)


async def run(settings: Settings, *, sync_commands: bool = False) -> int:
    """Run the bot until SIGTERM/SIGINT, then shut down within ``SHUTDOWN_TIMEOUT``.

    Before the login, :meth:`Framecast.prepare` checks the setup (port, store, Redis) and every
    problem stops the start at once. Exit codes: 0 after a stop; 2 for a setup problem or a token
    Discord rejects; 3 when the bot gives up on what it cannot recover from by itself (Discord out
    of reach for ``DISCORD_OUTAGE_EXIT``, the loop blocked for ``LOOP_STALL_EXIT``: a restart policy
    brings it back); 1 on any other failure.
    """
    point_discord_at(api_base_url=settings.discord_api_base_url, gateway_url=settings.discord_gateway_url)
    bot = make_bot(settings, sync_commands=sync_commands)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watchdog = LoopWatchdog(settings.loop_stall_exit)
    watchdog.start(loop)
    exit_code = 0
    try:
        async with bot:
            problems = await bot.prepare()
            if problems:
                for problem in problems:
                    log.error("start-up error: %s", problem)
                return EXIT_SETUP
            exit_code = await _serve(bot, settings, stop)
    finally:
        watchdog.stop()
    log.info("stopped")
    return exit_code


async def _serve(bot: Framecast, settings: Settings, stop: asyncio.Event) -> int:
    """Log in and run until a stop, a failure, or Discord out of reach for too long; the exit code."""
    exit_code = 0
    runner = asyncio.create_task(
        connect_patiently(bot, settings.discord_token.reveal(), backoff=_discord_backoff(settings)),
        name="framecast-bot",
    )
    stopper = asyncio.create_task(stop.wait(), name="framecast-stop")
    watcher = asyncio.create_task(
        _discord_out_of_reach(bot, settings.discord_outage_exit), name="framecast-outage"
    )
    try:
        done, _ = await asyncio.wait({runner, stopper, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if runner not in done:
            if watcher in done:
                log.error(
                    "Discord has been out of reach for %g s (DISCORD_OUTAGE_EXIT): shutting down, exit code %d "
                    "for a restart",
                    settings.discord_outage_exit,
                    EXIT_GAVE_UP,
                )
                exit_code = EXIT_GAVE_UP
            else:
                log.info("stop requested: shutting down")
            try:
                await asyncio.wait_for(bot.close(), settings.shutdown_timeout + 10)
            except TimeoutError:
                log.error("shutdown took too long; exiting anyway")
                exit_code = exit_code or 1
        else:
            exc = runner.exception()
            if exc is not None:
                exit_code = _failure_exit_code(exc)
    finally:
        # Whatever the start-up was doing when the stop came (waiting for Discord, say) ends here.
        for task in (runner, stopper, watcher):
            task.cancel()
        await asyncio.gather(runner, stopper, watcher, return_exceptions=True)
    return exit_code


async def _discord_out_of_reach(bot: Framecast, limit: float) -> None:
    """Return once the bot has had no gateway connection for `limit` seconds (from the start, or
    since it last had one): discord.py retries forever, and only a fresh process starts over."""
    loop = asyncio.get_running_loop()
    since = loop.time()
    tick = min(1.0, limit / 4)
    while True:
        before = loop.time()
        await asyncio.sleep(tick)
        if bot.discord_in_reach() or loop.time() - before > tick + 5.0:
            # Connected; or this process was paused (SIGSTOP) or its loop stalled: discord.py gets
            # its time to reconnect from now on, as after any outage.
            since = loop.time()
        elif loop.time() - since >= limit:
            return


def _discord_backoff(settings: Settings) -> Backoff:
    """Waits between attempts to reach Discord at start-up: 1, 2, 4, ... s up to the configured cap
    (which may be below 1 s, for tests). No jitter: one bot waiting for its own network has nobody
    to spread out from."""
    return Backoff(base=1.0, cap=settings.discord_retry_max_delay, jitter=0.0)


def _failure_exit_code(exc: BaseException) -> int:
    """Log why the bot stopped on its own (one line when the cause is known) and pick the exit code."""
    if isinstance(exc, discord.LoginFailure) or (
        isinstance(exc, discord.ConnectionClosed) and exc.code == 4004
    ):
        log.error("Discord refused the bot token (check DISCORD_TOKEN)")
        return 2
    if isinstance(exc, (StoreError, ConfigError)):
        # Known start-up problems of the operator's setup: one line naming it, no traceback.
        log.error("%s", exc)
    elif isinstance(exc, discord.HTTPException):
        log.error("Discord refused the bot's start-up: HTTP %s (code %s)", exc.status, exc.code)
    else:
        log.error("the bot stopped with an error: %s", type(exc).__name__, exc_info=exc)
    return 1


def _listen_error(exc: OSError) -> str:
    """Why a port could not be listened on, in the system's words: a host that does not resolve says
    so (its negative code has no errno text), a bind error without asyncio's sentence repeating the
    address."""
    if isinstance(exc, socket.gaierror):
        return str(exc.strerror)
    return os.strerror(exc.errno) if exc.errno else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="Run the Framecast Discord bot.")
    parser.add_argument("--sync", action="store_true", help="publish the slash commands to Discord, then run")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except ConfigError as exc:
        # Every variable to fix, one line each, from one start.
        for line in exc.lines():
            print(f"framecast: configuration error: {line}", file=sys.stderr)
        return EXIT_SETUP
    # The operator's secrets are masked in every record (Settings.secrets). Servers' own API keys
    # are masked too, once the service accepted them and while they are in use (framecast.accounts
    # publishes them: framecast.logsetup.mask_secrets); discord.py's DEBUG dump of the key modal is
    # scrubbed whatever was typed.
    setup_logging(settings.log_level, secrets=settings.secrets())
    logging.getLogger("discord.client").addFilter(ReconnectLogFilter())
    raise_fd_limit()  # every socket is a descriptor: lift the soft limit (often 1,024) to the hard one
    return asyncio.run(run(settings, sync_commands=args.sync))


if __name__ == "__main__":
    sys.exit(main())
