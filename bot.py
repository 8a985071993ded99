"""Framecast: a Discord bot that turns text prompts into short videos and images.

Run ``python bot.py`` (``--sync`` once to publish the slash commands). Configuration comes from the
environment (a ``.env`` file in development); see ``.env.example`` and the README.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

import aiohttp
import discord
import yarl
from discord.ext import commands

from cogs.utils.reporter import DiscordReporter
from cogs.utils.startup import ReconnectLogFilter, connect_patiently
from cogs.utils.tree import FramecastTree
from cogs.utils.views import CancelButton, RetryButton
from framecast.budget import RequestBudget
from framecast.catalog import ModelCache
from framecast.clock import Clock, SystemClock
from framecast.config import ConfigError, Settings, load_settings
from framecast.intake import Intake, Limits
from framecast.jobs import Job
from framecast.logsetup import setup_logging
from framecast.runner import JobRunner, RunnerSettings
from framecast.scheduler import Scheduler
from framecast.service import GenerationClient
from framecast.store import JobStore

log = logging.getLogger("framecast")

EXTENSIONS = ("cogs.generate", "cogs.jobs", "cogs.admin")
MODEL_REFRESH_SECONDS = 600.0
# Never let a stalled Discord rate limit block a worker for long: raise instead and retry later.
MAX_RATELIMIT_TIMEOUT = 30.0


class Framecast(commands.Bot):
    """The bot: owns the shared resources, opened in ``setup_hook`` and closed in ``close()``."""

    http_session: aiohttp.ClientSession
    store: JobStore
    budget: RequestBudget
    gen: GenerationClient
    models: ModelCache
    reporter: DiscordReporter
    runner: JobRunner
    scheduler: Scheduler
    intake: Intake

    def __init__(self, settings: Settings, *, sync_commands: bool = False, clock: Clock | None = None) -> None:
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
        )
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self._sync_commands = sync_commands
        self._opened = False

    def __repr__(self) -> str:
        return f"<Framecast user={self.user!s}>"

    async def setup_hook(self) -> None:
        """Open the store, the service client and the scheduler; load cogs; resume saved jobs.

        discord.py runs this at the end of ``login()``; a log-in retried after a failure in here (a
        command sync meeting a Discord 5xx) runs it again, so everything is opened only once.
        """
        if not self._opened:
            await self._open()
        if self._sync_commands:
            synced = await self.tree.sync()
            log.info("synced %d global command(s)", len(synced))
            self._sync_commands = False

    async def _open(self) -> None:
        s = self.settings
        from cogs.utils.command_i18n import FramecastTranslator

        await self.tree.set_translator(FramecastTranslator())
        self.http_session = aiohttp.ClientSession()
        self.store = await JobStore.open(s.database_path, clock=self.clock)
        self.budget = RequestBudget(
            s.gen_rate_limit.requests, s.gen_rate_limit.window, clock=self.clock,
            backoff_base=s.gen_backoff_base, backoff_max=s.gen_backoff_max,
        )
        self.gen = GenerationClient.from_settings(self.http_session, s, self.budget, self.clock)
        self.models = ModelCache(self.gen, clock=self.clock, refresh_every=MODEL_REFRESH_SECONDS,
                                 default_video=s.gen_video_model, default_image=s.gen_image_model)
        self.reporter = DiscordReporter(self, store=self.store, settings=s, clock=self.clock,
                                        position=lambda job_id: self.scheduler.position(job_id))
        self.runner = JobRunner(
            store=self.store, client=self.gen, reporter=self.reporter, clock=self.clock,
            settings=RunnerSettings(
                poll_interval=s.gen_poll_interval, poll_timeout=s.gen_poll_timeout,
                download_max_bytes=s.gen_download_max_bytes, download_timeout=s.gen_download_timeout,
                backoff_base=s.gen_backoff_base, backoff_max=s.gen_backoff_max,
                results_at_once=s.results_at_once, image_max_pixels=s.image_max_pixels,
                reencode_timeout=s.reencode_timeout,
            ),
            results_dir=s.database_path.parent / "results",
        )
        self.scheduler = Scheduler(store=self.store, runner=self.runner, max_running=s.gen_max_running,
                                   on_positions_changed=self.reporter.positions_changed)
        self.intake = Intake(store=self.store, scheduler=self.scheduler, limits=Limits(
            member_jobs=s.member_job_limit, guild_queue=s.guild_queue_cap, prompt_chars=s.prompt_max_chars))
        self.store.subscribe(lambda job: self.intake.track([job]))
        self._opened = True

        for extension in EXTENSIONS:
            await self.load_extension(extension)
        self.add_dynamic_items(CancelButton, RetryButton)
        self.models.start()
        restored = await self.scheduler.start()
        self.intake.track(restored)
        await self._announce_resumed(restored)

    async def _announce_resumed(self, jobs: list[Job]) -> None:
        # One edit of each surviving job's own message, never a new post: no channel spam.
        for job in jobs:
            self.reporter.add_note(job, "note_resumed")
            await self.reporter.job_changed(job, urgent=True)

    async def close(self) -> None:
        """Stop taking work, checkpoint running jobs, then close Discord, the store and the session."""
        if self._opened:
            self._opened = False
            await self.scheduler.close(self.settings.shutdown_timeout)
            await self.models.close()
            await self.reporter.close()
        await super().close()
        if hasattr(self, "store"):
            await self.store.close()
        if hasattr(self, "gen"):
            await self.gen.close()
        if hasattr(self, "http_session"):
            await self.http_session.close()

    async def on_ready(self) -> None:
        """Log who we are (no command sync here: on_ready fires on every reconnect)."""
        log.info("connected as %s (%s) in %d guild(s)", self.user, getattr(self.user, "id", "?"), len(self.guilds))


def point_discord_at(settings: Settings) -> None:
    """Send discord.py's REST and gateway traffic elsewhere (a proxy, or the tests' fake)."""
    if settings.discord_api_base_url:
        discord.http.Route.BASE = settings.discord_api_base_url.rstrip("/")
    if settings.discord_gateway_url:
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.discord_gateway_url)


async def run(settings: Settings, *, sync_commands: bool = False) -> int:
    """Run the bot until SIGTERM/SIGINT, then shut down within ``SHUTDOWN_TIMEOUT``.

    Exit codes: 0 after a stop, 2 when Discord rejects the token, 1 on any other failure.
    """
    point_discord_at(settings)
    bot = Framecast(settings, sync_commands=sync_commands)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    exit_code = 0
    async with bot:
        runner = asyncio.create_task(
            connect_patiently(bot, settings.discord_token.reveal(), max_delay=settings.discord_retry_max_delay),
            name="framecast-bot",
        )
        stopper = asyncio.create_task(stop.wait(), name="framecast-stop")
        done, _ = await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper in done:
            log.info("stop requested: shutting down")
            try:
                await asyncio.wait_for(bot.close(), settings.shutdown_timeout + 10)
            except TimeoutError:
                log.error("shutdown took too long; exiting anyway")
                exit_code = 1
            # Whatever the start-up was doing when the stop came (waiting for Discord, say) ends here.
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        else:
            stopper.cancel()
            exc = runner.exception()
            if exc is not None:
                exit_code = _failure_exit_code(exc)
    log.info("stopped")
    return exit_code


def _failure_exit_code(exc: BaseException) -> int:
    """Log why the bot stopped on its own (one line when the cause is known) and pick the exit code."""
    if isinstance(exc, discord.LoginFailure) or (isinstance(exc, discord.ConnectionClosed) and exc.code == 4004):
        log.error("Discord refused the bot token (check DISCORD_TOKEN)")
        return 2
    if isinstance(exc, discord.HTTPException):
        log.error("Discord refused the bot's start-up: HTTP %s (code %s)", exc.status, exc.code)
    else:
        log.error("the bot stopped with an error: %s", type(exc).__name__, exc_info=exc)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="Run the Framecast Discord bot.")
    parser.add_argument("--sync", action="store_true", help="publish the slash commands to Discord, then run")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"framecast: configuration error: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level, secrets=[settings.discord_token.reveal(), settings.gen_api_key.reveal()])
    logging.getLogger("discord.client").addFilter(ReconnectLogFilter())
    return asyncio.run(run(settings, sync_commands=args.sync))


if __name__ == "__main__":
    sys.exit(main())
