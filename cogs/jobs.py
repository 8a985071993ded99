"""/job and the job buttons (Cancel, Retry): thin handlers over the scheduler and intake.

The buttons are registered here, with the bot's :class:`~cogs.utils.views.JobButtons`, when the cog
loads (and removed when it unloads): a click reaches :meth:`Jobs.on_cancel_click` or
:meth:`Jobs.on_retry_click` through that registry.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord
from discord import app_commands
from discord.app_commands import locale_str
from discord.ext import commands

from cogs.delivery import result_attachments
from cogs.i18n import t
from cogs.utils import jobflow
from cogs.utils.render import link_text, render_job
from cogs.utils.tree import error_message, reply_privately
from cogs.utils.views import ButtonAction, CancelButton, RetryButton
from framecast.intake import IntakeError
from framecast.jobs import JobState
from framecast.scheduler import CancelOutcome

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)


class Jobs(commands.Cog):
    """Looking at jobs and acting on them."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    async def cog_load(self) -> None:
        """Route the job buttons' clicks here (the buttons work on any message, after any restart)."""
        self.bot.job_buttons.register(
            {ButtonAction.CANCEL: self.on_cancel_click, ButtonAction.RETRY: self.on_retry_click}
        )
        self.bot.add_dynamic_items(CancelButton, RetryButton)

    async def cog_unload(self) -> None:
        """Stop routing the job buttons."""
        self.bot.remove_dynamic_items(CancelButton, RetryButton)
        self.bot.job_buttons.unregister((ButtonAction.CANCEL, ButtonAction.RETRY))

    @app_commands.command(
        name=locale_str("job"), description=locale_str("Show a job's current state and result")
    )
    @app_commands.guild_only()
    @app_commands.rename(job_id=locale_str("id"))
    @app_commands.describe(job_id=locale_str("The job number"))
    async def job(
        self, interaction: discord.Interaction[Framecast], job_id: app_commands.Range[int, 1]
    ) -> None:
        """Show a job privately: its state, settings, and where its result is."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        core = self.bot.core
        job = await core.store.get(job_id)
        loc = interaction.locale
        if job is None or job.guild_id != interaction.guild_id:
            await interaction.edit_original_response(content=t("error_job_not_found", loc, id=job_id))
            return
        if not jobflow.may_manage(interaction, job.user_id):
            await interaction.edit_original_response(content=t("error_not_allowed", loc))
            return
        rendered = render_job(
            job,
            position=core.scheduler.position(job.id),
            now=core.clock.time(),
            poll_timeout=core.settings.gen_poll_timeout,
        )
        lines = []
        message = await core.reporter.job_message(job)
        if message is not None:
            lines.append(t("job_message_link", loc, link=message.jump_url))
            lines.extend(t("job_file_link", loc, link=a.url) for a in result_attachments(message, job.id))
        if job.state is JobState.DELIVERED and job.result_url and not lines:
            lines.append(t("job_file_link", loc, link=link_text(job.result_url)))
        await interaction.edit_original_response(
            content="\n".join(lines) or None,
            embed=rendered.embed,
            allowed_mentions=discord.AllowedMentions.none(),
        )

    async def on_cancel_click(
        self, interaction: discord.Interaction[Framecast], job_id: int, owner_id: int
    ) -> None:
        """Cancel button: the requester or a member with Manage Server."""
        if not jobflow.may_manage(interaction, owner_id):
            await reply_privately(interaction, t("error_not_allowed", interaction.locale))
            return
        await interaction.response.defer()  # a silent acknowledgement; the job message shows the result
        job = await self.bot.core.store.get(job_id)
        if job is None or job.guild_id != interaction.guild_id:
            await interaction.followup.send(
                t("error_job_not_found", interaction.locale, id=job_id), ephemeral=True
            )
            return
        outcome, job = await self.bot.core.scheduler.cancel(job_id)
        if outcome is CancelOutcome.CANCELLED and job is not None:
            log.info("job %s cancelled by user %s", job_id, interaction.user.id)
            await self.bot.core.reporter.job_changed(job, urgent=True)
        elif job is not None and job.state is JobState.CANCELLED:
            # A double click, or a restart between the cancel and the redraw: show it (again).
            await self.bot.core.reporter.job_changed(job, urgent=True)
        else:
            await interaction.followup.send(
                t("error_too_late_cancel", interaction.locale, id=job_id), ephemeral=True
            )

    async def on_retry_click(
        self, interaction: discord.Interaction[Framecast], job_id: int, owner_id: int
    ) -> None:
        """Retry button: queue the failed job again, as a new job in a new message."""
        loc = interaction.locale
        if not jobflow.may_manage(interaction, owner_id):
            await reply_privately(interaction, t("error_not_allowed", loc))
            return
        try:
            who = jobflow.requester(interaction, user_id=owner_id)
            jobflow.check_channel(interaction)
            self.bot.core.intake.precheck(who)
        except (IntakeError, app_commands.AppCommandError) as exc:
            await reply_privately(interaction, error_message(exc, loc) or t("error_generic", loc))
            return
        await interaction.response.defer(thinking=True)
        old = await self.bot.core.store.get(job_id)
        if old is None or old.guild_id != interaction.guild_id or old.state is not JobState.FAILED:
            await reply_privately(interaction, t("error_job_not_found", loc, id=job_id))
            return
        if old.discord.get("retried_as"):  # a fast path: the store refuses a second retry anyway
            await reply_privately(
                interaction, t("error_already_retried", loc, job=old.id, id=old.discord["retried_as"])
            )
            return
        params = dict(old.params)
        if params.get("model_default"):
            # The job got the default model: follow the service's list if that default left it since.
            params["model"] = self.bot.core.models.default(old.kind)
        try:
            # The store allows one retry per job (in its transaction): a double click, or two
            # members clicking at once, gets "already retried" for all but the first.
            new = await jobflow.start_job(self.bot, interaction, who, old.kind, params, retry_of=old.id)
        except IntakeError as exc:
            await reply_privately(interaction, error_message(exc, loc) or t("error_generic", loc))
            return
        await self.bot.core.store.patch_discord(old.id, {"retried_as": new.id})


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(Jobs(bot))
