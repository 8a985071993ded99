"""/models and /help: what the service offers now, and what the bot does here, privately.

Both answer from memory (the model list the core keeps fresh, the server's cached policy): no
request to the service, nothing that could fail before the answer.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord
from discord import app_commands
from discord.app_commands import locale_str
from discord.ext import commands

from cogs.i18n import command_name, t
from cogs.literal import as_text
from framecast.app import JobKind, MemberLimits

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)

#: Models listed per kind at most (an embed field holds 1024 characters).
MAX_MODELS = 20
#: The commands /help names, in order, with the message key of each one's line.
HELP_COMMANDS = (
    ("video", "help_cmd_video"),
    ("image", "help_cmd_image"),
    ("job", "help_cmd_job"),
    ("queue", "help_cmd_queue"),
    ("models", "help_cmd_models"),
    ("help", "help_cmd_help"),
)
_KIND_KEYS = {JobKind.VIDEO: "kind_video", JobKind.IMAGE: "kind_image"}


def model_lines(models: tuple[str, ...], default: str, locale: str) -> str:
    """One model a line, the server's default marked; ``models_none`` when the service lists none."""
    if not models:
        return t("models_none", locale)
    lines = []
    for model in models[:MAX_MODELS]:
        # Ids come from the service: shown literally.
        line = as_text(model)
        lines.append(t("models_default_marker", locale, model=line) if model == default else line)
    if len(models) > MAX_MODELS:
        lines.append(t("queue_more", locale, count=len(models) - MAX_MODELS))
    return "\n".join(lines)[:1024]


def help_lines(limits: MemberLimits, *, locale: str) -> list[str]:
    """The limits that apply to a member in this server, one line each."""
    policy = limits.policy
    lines = [t("help_limit_jobs", locale, limit=policy.member_jobs)]
    quotas = ((JobKind.VIDEO, "help_limit_videos"), (JobKind.IMAGE, "help_limit_images"))
    daily = [(key, policy.daily_quota(kind)) for kind, key in quotas]
    lines.extend(t(key, locale, count=limit) for key, limit in daily if limit is not None)
    if limits.quotas_reset_at is not None:
        lines.append(t("help_limit_reset", locale, time=f"<t:{int(limits.quotas_reset_at)}:R>"))
    if policy.settings.channels:
        channels = ", ".join(f"<#{channel}>" for channel in policy.settings.channels)
        lines.append(t("help_limit_channels", locale, channels=channels))
    if policy.settings.nsfw_only:
        lines.append(t("help_limit_nsfw", locale))
    return lines


class Info(commands.Cog):
    """The /models and /help commands."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    @app_commands.command(
        name=locale_str("models"), description=locale_str("List the models the generation service offers")
    )
    @app_commands.guild_only()
    async def show_models(self, interaction: discord.Interaction[Framecast]) -> None:
        """The service's models by kind, with this server's defaults marked."""
        if interaction.guild_id is None:
            raise app_commands.NoPrivateMessage()
        loc = interaction.locale.value
        models = self.bot.core.members.list_models(interaction.guild_id)
        if models is None:
            await interaction.response.send_message(t("models_unavailable", loc), ephemeral=True)
            return
        embed = discord.Embed(title=t("models_title", loc), colour=discord.Colour.blurple())
        for listed in models.kinds:
            embed.add_field(
                name=t(_KIND_KEYS[listed.kind], loc),
                value=model_lines(listed.ids, listed.default, loc),
                inline=True,
            )
        embed.set_footer(text=t("models_footer", loc))
        await interaction.response.send_message(
            embed=embed, ephemeral=True, allowed_mentions=discord.AllowedMentions.none()
        )

    @app_commands.command(
        name=locale_str("help"), description=locale_str("What Framecast does and how to use it")
    )
    @app_commands.guild_only()
    async def show_help(self, interaction: discord.Interaction[Framecast]) -> None:
        """A few lines: what the bot does, its commands, the limits here."""
        if interaction.guild_id is None:
            raise app_commands.NoPrivateMessage()
        loc = interaction.locale.value
        embed = discord.Embed(
            title=t("help_title", loc), description=t("help_about", loc), colour=discord.Colour.blurple()
        )
        commands_text = "\n".join(t(key, loc, command=command_name(name, loc)) for name, key in HELP_COMMANDS)
        buttons = t("help_buttons", loc, again=t("button_again", loc), remix=t("button_remix", loc))
        embed.add_field(name=t("help_commands", loc), value=f"{commands_text}\n{buttons}", inline=False)
        limits = help_lines(self.bot.core.members.limits(interaction.guild_id), locale=loc)
        embed.add_field(name=t("help_limits", loc), value="\n".join(limits), inline=False)
        await interaction.response.send_message(
            embed=embed, ephemeral=True, allowed_mentions=discord.AllowedMentions.none()
        )


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(Info(bot))
