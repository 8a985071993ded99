"""/job and the job buttons (Cancel, Retry, Again, Remix): thin handlers over the scheduler and intake.

The buttons are registered here, with the bot's :class:`~cogs.views.buttons.JobButtons`, when the cog
loads (and removed when it unloads): a click reaches :meth:`Jobs.on_cancel_click`,
:meth:`Jobs.on_retry_click`, :meth:`Jobs.on_again_click` or :meth:`Jobs.on_remix_click` through
that registry. The Remix form's submit reaches :meth:`Jobs.on_remix_submit` through this cog's
``on_interaction`` listener (by the form's custom id), so it works after a restart too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.app_commands import locale_str
from discord.ext import commands

from cogs import jobflow
from cogs.delivery import result_attachments
from cogs.i18n import t
from cogs.tree import error_message, reply_privately
from cogs.views.buttons import (
    AgainButton,
    ButtonAction,
    CancelButton,
    RemixButton,
    RemixField,
    RetryButton,
    form_values,
    remix_form,
    remix_form_target,
)
from cogs.views.render import link_text, render_job
from framecast.app.intake import IntakeError, Requester
from framecast.jobs import Job, JobKind, JobState, presets
from framecast.jobs.scheduler import CancelOutcome

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)

#: Remix must answer with its form, so it reads the job before the 3-second acknowledgement: a
#: store that takes longer than this gets a "try again" instead of "This interaction failed".
REMIX_LOOKUP_TIMEOUT = 1.5
#: Discord's longest text input value.
FORM_VALUE_MAX = 4000
_BUTTONS = (CancelButton, RetryButton, AgainButton, RemixButton)
_REMIX_LABELS = {
    RemixField.PROMPT: "remix_label_prompt",
    RemixField.SIZE: "remix_label_size",
    RemixField.LENGTH: "remix_label_length",
    RemixField.FPS: "remix_label_fps",
    RemixField.MODEL: "remix_label_model",
}


class Jobs(commands.Cog):
    """Looking at jobs and acting on them."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    async def cog_load(self) -> None:
        """Route the job buttons' clicks here (the buttons work on any message, after any restart)."""
        self.bot.job_buttons.register(
            {
                ButtonAction.CANCEL: self.on_cancel_click,
                ButtonAction.RETRY: self.on_retry_click,
                ButtonAction.AGAIN: self.on_again_click,
                ButtonAction.REMIX: self.on_remix_click,
            }
        )
        self.bot.add_dynamic_items(*_BUTTONS)

    async def cog_unload(self) -> None:
        """Stop routing the job buttons."""
        self.bot.remove_dynamic_items(*_BUTTONS)
        self.bot.job_buttons.unregister(
            (ButtonAction.CANCEL, ButtonAction.RETRY, ButtonAction.AGAIN, ButtonAction.REMIX)
        )

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

    # -- Again and Remix: any member iterates on a delivered result, as a job of their own ----------
    def _clicker(self, interaction: discord.Interaction[Framecast], kind: JobKind | None = None) -> Requester:
        """The member who clicked, as the new job's requester, after the checks that need no I/O."""
        who = jobflow.requester(interaction)
        jobflow.check_channel(interaction)
        self.bot.core.intake.precheck(who, kind)
        return who

    async def _delivered(self, job_id: int, guild_id: int | None) -> Job | None:
        """The delivered job `job_id` of this server, or None."""
        job = await self.bot.core.store.get(job_id)
        if job is None or job.guild_id != guild_id or job.state is not JobState.DELIVERED:
            return None
        return job

    async def on_again_click(
        self, interaction: discord.Interaction[Framecast], job_id: int, owner_id: int
    ) -> None:
        """Again button: the same prompt and settings as a new job of the clicker's, in a new message.

        The settings are validated again under today's rules (blocklist, models, the server's
        default model when the job had the default), and the clicker's limits and quota apply.
        """
        loc = interaction.locale
        try:
            who = self._clicker(interaction)
        except (IntakeError, app_commands.AppCommandError) as exc:
            await reply_privately(interaction, error_message(exc, loc) or t("error_generic", loc))
            return
        await interaction.response.defer(thinking=True)
        old = await self._delivered(job_id, interaction.guild_id)
        if old is None:
            await reply_privately(interaction, t("error_job_not_found", loc, id=job_id))
            return
        try:
            self.bot.core.intake.precheck(who, old.kind)
            params = jobflow.job_params(self.bot, who.guild_id, old.kind, jobflow.options_of(old))
            new = await jobflow.start_job(self.bot, interaction, who, old.kind, params)
        except IntakeError as exc:
            await reply_privately(interaction, error_message(exc, loc) or t("error_generic", loc))
            return
        log.info("job %s: again of job %s, by user %s", new.id, old.id, who.user_id)

    async def on_remix_click(
        self, interaction: discord.Interaction[Framecast], job_id: int, owner_id: int
    ) -> None:
        """Remix button: a form with the job's prompt and options to edit; its submit queues the job."""
        loc = interaction.locale
        core = self.bot.core
        try:
            who = self._clicker(interaction)
            # The form is the acknowledgement itself, so the job is read before it (bounded).
            old = await asyncio.wait_for(self._delivered(job_id, interaction.guild_id), REMIX_LOOKUP_TIMEOUT)
            if old is None:
                await reply_privately(interaction, t("error_job_not_found", loc, id=job_id))
                return
            core.intake.precheck(who, old.kind)  # the kind's daily quota, now that it is known
        except (IntakeError, app_commands.AppCommandError) as exc:
            await reply_privately(interaction, error_message(exc, loc) or t("error_generic", loc))
            return
        except TimeoutError:
            await reply_privately(interaction, t("error_generic", loc))
            return
        default = jobflow.default_model(self.bot, old.guild_id, old.kind)
        sizes = presets.VIDEO_SIZES if old.kind is JobKind.VIDEO else presets.IMAGE_SIZES
        form = remix_form(
            old.id,
            old.kind,
            title=t("remix_title", loc, id=old.id),
            values=jobflow.form_prefill(jobflow.options_of(old)),
            labels={name: t(key, loc) for name, key in _REMIX_LABELS.items()},
            placeholders={
                RemixField.SIZE: t("remix_hint_choices", loc, choices=", ".join(sizes)),
                RemixField.LENGTH: t(
                    "remix_hint_choices", loc, choices=", ".join(map(str, presets.VIDEO_SECONDS))
                ),
                RemixField.FPS: t(
                    "remix_hint_choices", loc, choices=", ".join(map(str, presets.FRAME_RATES))
                ),
                RemixField.MODEL: t("remix_hint_model", loc, model=default),
            },
            prompt_max=min(core.settings.prompt_max_chars, FORM_VALUE_MAX),
        )
        await interaction.response.send_modal(form)

    @commands.Cog.listener()
    async def on_interaction(self, interaction: discord.Interaction[Framecast]) -> None:
        """Route a Remix form's submit (by its custom id) to :meth:`on_remix_submit`."""
        if interaction.type is not discord.InteractionType.modal_submit:
            return
        data: Mapping[str, Any] = interaction.data or {}  # type: ignore[assignment]  # a TypedDict union
        target = remix_form_target(str(data.get("custom_id", "")))
        if target is None:
            return
        kind, job_id = target
        try:
            await self.on_remix_submit(interaction, kind, job_id, form_values(data))
        except Exception:
            # A listener's error reaches no tree handler: log it and answer, never "interaction failed".
            log.exception("remix of job %s failed", job_id)
            await reply_privately(interaction, t("error_generic", interaction.locale))

    async def on_remix_submit(
        self,
        interaction: discord.Interaction[Framecast],
        kind: JobKind,
        job_id: int,
        values: Mapping[str, str],
    ) -> None:
        """The Remix form was sent: validate it like /video or /image, then queue the clicker's job."""
        loc = interaction.locale
        try:
            who = self._clicker(interaction, kind)
            options = jobflow.options_from_form(kind, values)
            params = jobflow.job_params(self.bot, who.guild_id, kind, options)
        except (IntakeError, app_commands.AppCommandError) as exc:
            await reply_privately(interaction, error_message(exc, loc) or t("error_generic", loc))
            return
        await interaction.response.defer(thinking=True)
        try:
            new = await jobflow.start_job(self.bot, interaction, who, kind, params)
        except IntakeError as exc:
            await reply_privately(interaction, error_message(exc, loc) or t("error_generic", loc))
            return
        log.info("job %s: remix of job %s, by user %s", new.id, job_id, who.user_id)


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(Jobs(bot))
