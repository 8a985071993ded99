"""Persistent buttons that carry the job id (and requester) in their custom id.

They are :class:`discord.ui.DynamicItem` subclasses registered with ``bot.add_dynamic_items`` in
``setup_hook``, so a click works on any message, after any restart. The requester's id rides along
so the permission check needs no database read before the 3-second acknowledgement.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import discord

if TYPE_CHECKING:
    from bot import Framecast


class _JobButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=r"framecast:(?P<action>[a-z]+):(?P<job_id>[0-9]{1,20}):(?P<owner_id>[0-9]{1,20})",
):
    """Base of the job buttons (never registered itself)."""

    action: str = ""
    style = discord.ButtonStyle.secondary

    def __init__(self, job_id: int, owner_id: int, *, label: str | None = None) -> None:
        super().__init__(
            discord.ui.Button(
                label=label or self.action.title(),
                style=self.style,
                custom_id=f"framecast:{self.action}:{job_id}:{owner_id}",
            )
        )
        self.job_id = job_id
        self.owner_id = owner_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction[Any], item: discord.ui.Item[Any], match: re.Match[str], /,
    ) -> _JobButton:
        return cls(int(match["job_id"]), int(match["owner_id"]))

    async def callback(self, interaction: discord.Interaction[Framecast]) -> None:  # type: ignore[override]
        cog = interaction.client.get_cog("Jobs")
        handler = getattr(cog, f"on_{self.action}_click")
        await handler(interaction, self.job_id, self.owner_id)


class CancelButton(_JobButton, template=r"framecast:cancel:(?P<job_id>[0-9]{1,20}):(?P<owner_id>[0-9]{1,20})"):
    """Cancels a queued or running job (requester or Manage Server)."""

    action = "cancel"
    style = discord.ButtonStyle.danger


class RetryButton(_JobButton, template=r"framecast:retry:(?P<job_id>[0-9]{1,20}):(?P<owner_id>[0-9]{1,20})"):
    """Queues a failed job again with the same settings (requester or Manage Server)."""

    action = "retry"
    style = discord.ButtonStyle.primary
