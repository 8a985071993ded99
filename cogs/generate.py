"""/video and /image: the options as typed, to the members' request use case, in two phases.

Everything before the acknowledgement is synchronous (Discord must hear from us within 3 s):
:meth:`framecast.app.Members.prepare` checks where, whether and what with no I/O; after the defer,
:meth:`framecast.app.Members.submit` persists, queues and shows the job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import discord
from discord import app_commands
from discord.app_commands import Choice, locale_str
from discord.ext import commands

from cogs import interactions
from cogs.tree import defer
from framecast.app import JobKind, JobOptions, Style, presets

if TYPE_CHECKING:
    from bot import Framecast

# The prompt option has no min/max length on Discord's side: our (configurable) limit is checked in
# the core so the member gets a clear, localised message instead of a silently refused command.

VIDEO_SIZE_CHOICES: list[Choice[str]] = [
    Choice(name=locale_str(p.label), value=p.key) for p in presets.VIDEO_SIZES.values()
]
IMAGE_SIZE_CHOICES: list[Choice[str]] = [
    Choice(name=locale_str(p.label), value=p.key) for p in presets.IMAGE_SIZES.values()
]
LENGTH_CHOICES: list[Choice[int]] = [
    Choice(
        name=locale_str(f"{s} seconds (default)" if s == presets.DEFAULT_VIDEO_SECONDS else f"{s} seconds"),
        value=s,
    )
    for s in presets.VIDEO_SECONDS
]
FPS_CHOICES: list[Choice[int]] = [
    Choice(name=locale_str(f"{f} fps (default)" if f == presets.DEFAULT_FRAME_RATE else f"{f} fps"), value=f)
    for f in presets.FRAME_RATES
]

#: Discord's longest autocomplete choice name.
CHOICE_NAME_CHARS = 100


def model_choices(bot: Framecast, kind: JobKind, current: str) -> list[Choice[str]]:
    """Autocomplete choices for a model of `kind` matching what the member typed so far."""
    return [Choice(name=m, value=m) for m in bot.core.members.suggest_models(kind, current)]


def style_choices(styles: list[Style]) -> list[Choice[str]]:
    """Autocomplete choices for a style: its name, then its template on one line as far as it fits."""
    choices = []
    for style in styles[:25]:
        room = CHOICE_NAME_CHARS - len(style.name) - 3
        template = " ".join(style.template.split())
        if len(template) > room:
            template = template[: room - 1] + "…"
        label = f"{style.name} · {template}" if room > 8 else style.name
        choices.append(Choice(name=label[:CHOICE_NAME_CHARS], value=style.name))
    return choices


class Generate(commands.Cog):
    """The generation commands."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    @app_commands.command(
        name=locale_str("video"), description=locale_str("Generate a short video from a text prompt")
    )
    @app_commands.guild_only()
    @app_commands.rename(
        prompt=locale_str("prompt"),
        size=locale_str("size"),
        length=locale_str("length"),
        fps=locale_str("fps"),
        model=locale_str("model"),
        style=locale_str("style"),
    )
    @app_commands.describe(
        prompt=locale_str("What the video should show (any language)"),
        size=locale_str("Frame size"),
        length=locale_str("Clip length in seconds"),
        fps=locale_str("Frames per second"),
        model=locale_str("Model to use (from the service's list)"),
        style=locale_str("One of this server's styles"),
    )
    @app_commands.choices(size=VIDEO_SIZE_CHOICES, length=LENGTH_CHOICES, fps=FPS_CHOICES)  # type: ignore[misc]  # str and int choices in one call
    async def video(
        self,
        interaction: discord.Interaction[Framecast],
        prompt: str,
        size: str | None = None,
        length: int | None = None,
        fps: int | None = None,
        model: str | None = None,
        style: str | None = None,
    ) -> None:
        """Queue a video."""
        options = JobOptions(prompt=prompt, size=size, seconds=length, fps=fps, model=model, style=style)
        await self._request(interaction, JobKind.VIDEO, options)

    @app_commands.command(
        name=locale_str("image"), description=locale_str("Generate an image from a text prompt")
    )
    @app_commands.guild_only()
    @app_commands.rename(
        prompt=locale_str("prompt"),
        size=locale_str("size"),
        model=locale_str("model"),
        style=locale_str("style"),
    )
    @app_commands.describe(
        prompt=locale_str("What the image should show (any language)"),
        size=locale_str("Frame size"),
        model=locale_str("Model to use (from the service's list)"),
        style=locale_str("One of this server's styles"),
    )
    @app_commands.choices(size=IMAGE_SIZE_CHOICES)
    async def image(
        self,
        interaction: discord.Interaction[Framecast],
        prompt: str,
        size: str | None = None,
        model: str | None = None,
        style: str | None = None,
    ) -> None:
        """Queue an image."""
        options = JobOptions(prompt=prompt, size=size, model=model, style=style)
        await self._request(interaction, JobKind.IMAGE, options)

    async def _request(
        self, interaction: discord.Interaction[Framecast], kind: JobKind, options: JobOptions
    ) -> None:
        """Check (no I/O), acknowledge, then queue and show; refusals reach the tree's error handler."""
        who = interactions.requester(interaction)
        interactions.check_channel(interaction)
        members = self.bot.core.members
        request = members.prepare(who, kind, options)
        await defer(interaction, thinking=True)
        await members.submit(request, interactions.job_bookkeeping(interaction))

    @video.autocomplete("model")
    async def _video_models(
        self, interaction: discord.Interaction[Framecast], current: str
    ) -> list[Choice[str]]:
        return model_choices(self.bot, JobKind.VIDEO, current)

    @image.autocomplete("model")
    async def _image_models(
        self, interaction: discord.Interaction[Framecast], current: str
    ) -> list[Choice[str]]:
        return model_choices(self.bot, JobKind.IMAGE, current)

    # From memory (the core keeps each server's styles): an autocomplete answers at once.
    @video.autocomplete("style")
    async def _video_styles(
        self, interaction: discord.Interaction[Framecast], current: str
    ) -> list[Choice[str]]:
        return style_choices(
            self.bot.core.members.suggest_styles(interaction.guild_id, JobKind.VIDEO, current)
        )

    @image.autocomplete("style")
    async def _image_styles(
        self, interaction: discord.Interaction[Framecast], current: str
    ) -> list[Choice[str]]:
        return style_choices(
            self.bot.core.members.suggest_styles(interaction.guild_id, JobKind.IMAGE, current)
        )


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(Generate(bot))
