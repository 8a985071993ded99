"""/job, the job buttons and the Remix form: where they are wired to the bot.

The buttons (:mod:`cogs.views.buttons`) are registered with the bot while this cog is loaded, and
every Remix form's submit reaches :func:`cogs.views.remix.remix_submitted` through this cog's
``on_interaction`` listener (discord.py keeps no modal across a restart; see
:mod:`cogs.views.remix`).
"""

from __future__ import annotations

import dataclasses
import io
from typing import TYPE_CHECKING

import discord
from discord import app_commands
from discord.app_commands import locale_str
from discord.ext import commands

from cogs import interactions
from cogs.delivery.lookup import result_attachments
from cogs.error_text import error_message
from cogs.i18n import t
from cogs.literal import link_text
from cogs.places import where
from cogs.queue import HIDDEN_KEYS
from cogs.styles import show_sent_prompt
from cogs.tree import defer
from cogs.views.buttons import JOB_BUTTONS
from cogs.views.remix import RemixSubmit, remix_submitted
from cogs.views.render import render_job
from framecast.app import Actor, Job, JobRefused, JobState, ParkedFile, ParkedProblem

if TYPE_CHECKING:
    from bot import Framecast


class Jobs(commands.Cog):
    """Looking at jobs and acting on them."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    async def cog_load(self) -> None:
        """Let the job buttons answer clicks (on any message, after any restart)."""
        self.bot.add_dynamic_items(*JOB_BUTTONS)

    async def cog_unload(self) -> None:
        """Stop answering the job buttons."""
        self.bot.remove_dynamic_items(*JOB_BUTTONS)

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
        actor = interactions.actor(interaction)
        await defer(interaction, ephemeral=True, thinking=True)
        loc = interaction.locale
        try:
            details = await self.bot.core.members.show_job(
                actor, interactions.queue_viewer(interaction), job_id
            )
        except JobRefused as refused:
            # The private "thinking…" message becomes the answer.
            personal = where(interaction).personal
            await interaction.edit_original_response(content=error_message(refused, loc, personal=personal))
            return
        job = details.job
        # In the asker's language, not the requester's (the job's message speaks theirs).
        rendered = render_job(
            dataclasses.replace(job, locale=str(loc)),
            position=details.position,
            now=details.now,
            poll_timeout=details.poll_timeout,
        )
        if details.hidden is not None:
            # Another member's job from a channel this viewer cannot read: what /queue shows of it.
            rendered.embed.description = t(HIDDEN_KEYS[details.hidden], loc)
            await interaction.edit_original_response(
                content=t("history_state_deleted", loc) if details.deleted is not None else None,
                embed=rendered.embed,
                allowed_mentions=discord.AllowedMentions.none(),
            )
            return
        show_sent_prompt(rendered.embed, job, loc)
        # A result that Discord let the bot post nowhere (a personal job's token spent and DMs
        # refused, its channel gone as it came, or its file refused there): its requester gets the
        # file, on this answer (an interaction's own: no channel permission needed).
        lines, parked = await self._parked(interaction, actor, job) if job.parked else ([], None)
        files = []
        message = await self.bot.core.reporter.job_message(job)
        if message is not None:
            lines.append(t("job_message_link", loc, link=message.jump_url))
            files = [t("job_file_link", loc, link=a.url) for a in result_attachments(message, job.id)]
        if job.state is JobState.DELIVERED and details.link and not files and not parked:
            if job.parked or message is None:
                files.append(t("job_file_link", loc, link=link_text(details.link)))
        if job.deleted is not None:
            # Deleted from the channel (by its requester or a moderator): /job does not bring it back.
            lines, files = [t("history_state_deleted", loc)], []
        attachments = [discord.File(io.BytesIO(parked.data), filename=parked.filename)] if parked else []
        await interaction.edit_original_response(
            content="\n".join(lines + files) or None,
            embed=rendered.embed,
            attachments=attachments,
            allowed_mentions=discord.AllowedMentions.none(),
        )
        if parked is not None:
            # Shown: the requester has the file, and the bot's copy may go.
            await self.bot.core.parked.handed_over(actor, job.id)

    async def _parked(
        self, interaction: discord.Interaction[Framecast], actor: Actor, job: Job
    ) -> tuple[list[str], ParkedFile | None]:
        """The lines about a parked result, and its file when `actor` is its requester and it loads."""
        loc = interaction.locale
        outcome = await self.bot.core.parked.fetch(actor, job.id, interaction.filesize_limit)
        if isinstance(outcome, ParkedFile):
            extra = [t("parked_reencoded", loc)] if outcome.reencoded else []
            return [t("parked_here", loc), *extra], outcome
        key = _PARKED_KEYS.get(outcome.problem)
        return ([t(key, loc, id=job.id)] if key else []), None

    @commands.Cog.listener()
    async def on_interaction(self, interaction: discord.Interaction[Framecast]) -> None:
        """Hand a Remix form's submit to its one route (other interactions are not ours here)."""
        submit = RemixSubmit.of(interaction)
        if submit is not None:
            await remix_submitted(interaction, submit)


#: Why a parked result is not attached (not the asker's, or not parked any more: no line).
_PARKED_KEYS = {
    ParkedProblem.GONE: "parked_gone",
    ParkedProblem.DOWNLOAD_FAILED: "parked_download_failed",
    ParkedProblem.TOO_LARGE: "parked_too_large",
}


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(Jobs(bot))
