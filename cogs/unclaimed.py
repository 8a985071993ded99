"""Clicks and form submits that no handler claims: answered, never left to "This interaction failed".

Every button and form of Framecast's has a handler (:mod:`cogs.views`, and the form routes of
:mod:`cogs.jobs` and :mod:`cogs.settings`); discord.py drops a custom id none of them claims without
a word, and Discord then shows the member "This interaction failed". Such a custom id comes from a
tampered client or from a message of an older version: it gets a short private answer in the
member's language, and nothing is done.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import discord
from discord.ext import commands

from cogs import tree
from cogs.discord_internals import dispatched_by_discord_py
from cogs.i18n import t
from cogs.views.key_form import KeySubmit
from cogs.views.remix import RemixSubmit

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)

#: The interactions that carry a custom id a handler must claim.
_WITH_CUSTOM_ID = (discord.InteractionType.component, discord.InteractionType.modal_submit)


def claimed(bot: discord.Client, interaction: discord.Interaction[Framecast]) -> bool:
    """Whether a handler of Framecast's takes `interaction` (always true of commands)."""
    if interaction.type not in _WITH_CUSTOM_ID:
        return True
    if RemixSubmit.of(interaction) is not None or KeySubmit.of(interaction) is not None:
        return True
    return dispatched_by_discord_py(bot, interaction)


class Unclaimed(commands.Cog):
    """Answers the clicks and form submits nothing else takes (see the module docstring)."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    @commands.Cog.listener()
    async def on_interaction(self, interaction: discord.Interaction[Framecast]) -> None:
        """Answer an unclaimed click or submit privately: nothing was done."""
        if claimed(self.bot, interaction):
            return
        tree.handling(interaction)
        data: Mapping[str, Any] = interaction.data or {}  # type: ignore[assignment]  # a TypedDict union
        custom_id = data.get("custom_id")
        log.info("an interaction with a custom id no handler claims: %.100r", custom_id)
        try:
            await interaction.response.send_message(
                t("error_unknown_control", interaction.locale), ephemeral=True
            )
        except discord.HTTPException as error:  # expired or answered meanwhile: nothing more to do
            log.info("could not answer an unclaimed interaction: %s", error)


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(Unclaimed(bot))
