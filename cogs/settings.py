"""/settings: a server's admins shape Framecast for their server (limits, defaults, where, content).

Every subcommand is hidden from members without Manage Server (``default_permissions``), and who may
use it is the application's rule, asked on every use (Server Settings -> Integrations can show a
command to anyone): :func:`cogs.interactions.admin` reads the :class:`~framecast.app.Actor` and asks
``Admins.authorize`` before anything is acknowledged, and every use case of
:class:`framecast.app.Admins` asks again. Changes are validated against the operator's ceilings,
persisted and logged with who changed what; a refusal (``AdminRefused``, ``SettingsError``) becomes
a private, localised reply in the command tree's error handler.

What it holds is split by what it is: this module is the commands; how a view and a change read is
:mod:`cogs.settings_text`; the server's own key (``/settings key``, and its form's submit) is
:mod:`cogs.server_key`, attached here; ``/settings styles`` is :mod:`cogs.styles`, attached by its own
extension. A key the service later refuses is told to the server's admins by the delivery code
(:mod:`cogs.delivery.key_notice`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.app_commands import Choice, locale_str
from discord.ext import commands

from cogs.generate import FPS_CHOICES, IMAGE_SIZE_CHOICES, LENGTH_CHOICES, VIDEO_SIZE_CHOICES, model_choices
from cogs.interactions import actor, admin, admins
from cogs.server_key import KeyGroup, submit_key
from cogs.settings_text import RESET_CHOICES, changed_text, settings_embed
from cogs.tree import acknowledge_privately, answer_error, answer_privately
from cogs.views.key_form import KeySubmit
from framecast.app import (
    ImageDefaults,
    JobKind,
    LimitsChange,
    SettingsChanged,
    VideoDefaults,
)

if TYPE_CHECKING:
    from bot import Framecast


@app_commands.guild_only()
@app_commands.default_permissions(manage_guild=True)
class ServerSettings(
    commands.GroupCog,
    group_name=locale_str("settings"),
    group_description=locale_str("Framecast's settings for this server (Manage Server)"),
):
    """The /settings group."""

    channels = app_commands.Group(
        name=locale_str("channels"), description=locale_str("Channels where generation is allowed")
    )
    blocklist = app_commands.Group(
        name=locale_str("blocklist"), description=locale_str("Words and phrases refused in prompts")
    )

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot
        super().__init__()

    async def interaction_check(self, interaction: discord.Interaction[Any], /) -> bool:  # type: ignore[override]
        """The application says who may (on every use: Integrations overrides can show it to anyone),
        before anything is acknowledged; then acknowledge, before a write that may outwait Discord."""
        admin(interaction)
        await acknowledge_privately(interaction)
        return True

    @staticmethod
    async def _changed(interaction: discord.Interaction[Any], outcome: SettingsChanged) -> None:
        """Tell the admin privately what the settings they named are now."""
        await answer_privately(interaction, changed_text(outcome, interaction.locale))

    # -- show ------------------------------------------------------------------------------------
    @app_commands.command(name=locale_str("show"), description=locale_str("Show this server's settings"))
    async def show(self, interaction: discord.Interaction[Framecast]) -> None:
        """Every setting with its effective value and its source, privately."""
        view = await admins(interaction).show(actor(interaction))
        await interaction.followup.send(
            embed=settings_embed(view, interaction.locale),
            ephemeral=True,
            allowed_mentions=discord.AllowedMentions.none(),
        )

    # -- limits and defaults ---------------------------------------------------------------------
    @app_commands.command(
        name=locale_str("limits"),
        description=locale_str("Limits for members and the queue (up to the operator's)"),
    )
    @app_commands.rename(
        member_jobs=locale_str("member_jobs"),
        daily_videos=locale_str("daily_videos"),
        daily_images=locale_str("daily_images"),
        queue_cap=locale_str("queue_cap"),
    )
    @app_commands.describe(
        member_jobs=locale_str("Jobs a member may have queued or running"),
        daily_videos=locale_str("Videos a member may make per day (0: none)"),
        daily_images=locale_str("Images a member may make per day (0: none)"),
        queue_cap=locale_str("Jobs this server may have waiting"),
    )
    async def limits(
        self,
        interaction: discord.Interaction[Framecast],
        member_jobs: app_commands.Range[int, 1, 1000] | None = None,
        daily_videos: app_commands.Range[int, 0, 100000] | None = None,
        daily_images: app_commands.Range[int, 0, 100000] | None = None,
        queue_cap: app_commands.Range[int, 1, 100000] | None = None,
    ) -> None:
        """Change the member and queue limits (each capped by the operator's ceiling)."""
        change = LimitsChange(
            member_jobs=member_jobs, daily_videos=daily_videos, daily_images=daily_images, queue_cap=queue_cap
        )
        await self._changed(interaction, await admins(interaction).change_limits(actor(interaction), change))

    @app_commands.command(name=locale_str("video"), description=locale_str("Defaults for /video"))
    @app_commands.rename(
        size=locale_str("size"), length=locale_str("length"), fps=locale_str("fps"), model=locale_str("model")
    )
    @app_commands.describe(
        size=locale_str("Frame size"),
        length=locale_str("Clip length in seconds"),
        fps=locale_str("Frames per second"),
        model=locale_str("Model to use (from the service's list)"),
    )
    @app_commands.choices(size=VIDEO_SIZE_CHOICES, length=LENGTH_CHOICES, fps=FPS_CHOICES)  # type: ignore[misc]  # str and int choices in one call
    async def video(
        self,
        interaction: discord.Interaction[Framecast],
        size: str | None = None,
        length: int | None = None,
        fps: int | None = None,
        model: str | None = None,
    ) -> None:
        """Change the defaults /video uses when a member picks none."""
        change = VideoDefaults(size=size, seconds=length, fps=fps, model=model)
        outcome = await admins(interaction).change_video_defaults(actor(interaction), change)
        await self._changed(interaction, outcome)

    @app_commands.command(name=locale_str("image"), description=locale_str("Defaults for /image"))
    @app_commands.rename(size=locale_str("size"), model=locale_str("model"))
    @app_commands.describe(
        size=locale_str("Frame size"), model=locale_str("Model to use (from the service's list)")
    )
    @app_commands.choices(size=IMAGE_SIZE_CHOICES)
    async def image(
        self,
        interaction: discord.Interaction[Framecast],
        size: str | None = None,
        model: str | None = None,
    ) -> None:
        """Change the defaults /image uses when a member picks none."""
        change = ImageDefaults(size=size, model=model)
        outcome = await admins(interaction).change_image_defaults(actor(interaction), change)
        await self._changed(interaction, outcome)

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

    # -- where -----------------------------------------------------------------------------------
    @channels.command(name=locale_str("add"), description=locale_str("Allow generation in a channel"))
    @app_commands.rename(channel=locale_str("channel"))
    @app_commands.describe(channel=locale_str("The channel"))
    async def channels_add(
        self, interaction: discord.Interaction[Framecast], channel: discord.TextChannel | discord.Thread
    ) -> None:
        """Add a channel to the allowed ones (the first one limits generation to the list)."""
        await self._changed(
            interaction, await admins(interaction).add_channel(actor(interaction), channel.id)
        )

    @channels.command(
        name=locale_str("remove"), description=locale_str("Stop allowing generation in a channel")
    )
    @app_commands.rename(channel=locale_str("channel"))
    @app_commands.describe(channel=locale_str("The channel"))
    async def channels_remove(
        self, interaction: discord.Interaction[Framecast], channel: discord.TextChannel | discord.Thread
    ) -> None:
        """Remove a channel from the allowed ones (an empty list allows every channel)."""
        outcome = await admins(interaction).remove_channel(actor(interaction), channel.id)
        await self._changed(interaction, outcome)

    @channels.command(name=locale_str("clear"), description=locale_str("Allow generation in every channel"))
    async def channels_clear(self, interaction: discord.Interaction[Framecast]) -> None:
        """Allow every channel again."""
        await self._changed(interaction, await admins(interaction).clear_channels(actor(interaction)))

    # -- content ---------------------------------------------------------------------------------
    @app_commands.command(
        name=locale_str("nsfw"), description=locale_str("Generate only in age-restricted channels")
    )
    @app_commands.rename(only=locale_str("only"))
    @app_commands.describe(only=locale_str("On: only in age-restricted channels"))
    async def nsfw(self, interaction: discord.Interaction[Framecast], only: bool) -> None:
        """Switch NSFW-only on or off."""
        await self._changed(interaction, await admins(interaction).set_nsfw_only(actor(interaction), only))

    @blocklist.command(name=locale_str("add"), description=locale_str("Block words or phrases in prompts"))
    @app_commands.rename(terms=locale_str("terms"))
    @app_commands.describe(terms=locale_str("Comma-separated words or phrases; cat* blocks cats, catnip too"))
    async def blocklist_add(self, interaction: discord.Interaction[Framecast], terms: str) -> None:
        """Add terms (comma-separated) to the blocklist."""
        await self._changed(interaction, await admins(interaction).block_terms(actor(interaction), terms))

    @blocklist.command(name=locale_str("remove"), description=locale_str("Unblock words or phrases"))
    @app_commands.rename(terms=locale_str("terms"))
    @app_commands.describe(terms=locale_str("Words or phrases, separated by commas"))
    async def blocklist_remove(self, interaction: discord.Interaction[Framecast], terms: str) -> None:
        """Remove terms (comma-separated, any case) from the blocklist."""
        await self._changed(interaction, await admins(interaction).unblock_terms(actor(interaction), terms))

    @blocklist.command(name=locale_str("clear"), description=locale_str("Empty the blocklist"))
    async def blocklist_clear(self, interaction: discord.Interaction[Framecast]) -> None:
        """Remove every term."""
        await self._changed(interaction, await admins(interaction).clear_blocklist(actor(interaction)))

    # -- reset -----------------------------------------------------------------------------------
    @app_commands.command(
        name=locale_str("reset"), description=locale_str("Go back to the operator's default")
    )
    @app_commands.rename(setting=locale_str("setting"))
    @app_commands.describe(setting=locale_str("The setting to reset"))
    @app_commands.choices(setting=RESET_CHOICES)
    async def reset(self, interaction: discord.Interaction[Framecast], setting: str) -> None:
        """Drop the server's value of one setting: the operator's default applies again."""
        # The key is not offered (it has /settings key remove); the use case refuses it anyway.
        outcome = await admins(interaction).reset(actor(interaction), setting)
        await self._changed(interaction, outcome)

    # -- the server's own key: its form's submit ------------------------------------------------
    @commands.Cog.listener()
    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        """Hand a key form's submit to :func:`cogs.server_key.submit_key` (nothing else is ours here)."""
        submit = KeySubmit.of(interaction)
        if submit is not None:
            try:
                await submit_key(interaction, submit.key)
            except Exception as error:  # the same replies as the commands, never the key
                await answer_error(interaction, error, what="command settings key set")


async def setup(bot: Framecast) -> None:
    """Extension entry point: /settings, with its key subgroup attached (:mod:`cogs.server_key`)."""
    settings = ServerSettings(bot)
    await bot.add_cog(settings)
    group = settings.app_command
    assert isinstance(group, app_commands.Group)  # a GroupCog's group
    group.add_command(KeyGroup())
