"""Owner-only maintenance: syncing the slash commands on demand (never on every start)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import discord
from discord import app_commands
from discord.app_commands import locale_str
from discord.ext import commands

from cogs.i18n import t
from cogs.tree import defer

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)


class Admin(commands.Cog):
    """Commands for the bot's owner."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    @app_commands.command(
        name=locale_str("sync"), description=locale_str("Sync the slash commands (bot owner only)")
    )
    @app_commands.default_permissions(administrator=True)
    async def sync(self, interaction: discord.Interaction[Framecast]) -> None:
        """Push the command definitions to Discord (a bulk overwrite; Discord caps creates per day)."""
        await defer(interaction, ephemeral=True, thinking=True)
        if not await self.bot.is_owner(interaction.user):
            await interaction.edit_original_response(content=t("error_owner_only", interaction.locale))
            return
        synced = await self.bot.tree.sync()
        log.info("commands synced by the owner: %d", len(synced))
        await interaction.edit_original_response(
            content=t("info_synced", interaction.locale, count=len(synced))
        )


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(Admin(bot))
