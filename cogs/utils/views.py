"""Persistent buttons that carry the job id (and requester) in their custom id.

They are :class:`discord.ui.DynamicItem` subclasses, so a click works on any message, after any
restart. The requester's id rides along so the permission check needs no database read before the
3-second acknowledgement. A click reaches its handler through the bot's :class:`JobButtons`
registry, which the cog that owns the handlers fills when it loads.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import discord

__all__ = ["ButtonAction", "ButtonHandler", "ButtonHost", "CancelButton", "JobButtons", "RetryButton"]


class ButtonAction(enum.StrEnum):
    """What a job button does (also the middle part of its custom id)."""

    CANCEL = "cancel"
    RETRY = "retry"


#: ``handler(interaction, job_id, owner_id)``: what a click on a job button runs.
ButtonHandler = Callable[[discord.Interaction[Any], int, int], Awaitable[None]]


class JobButtons:
    """Which handler each job button reaches (one registry per bot)."""

    def __init__(self) -> None:
        self._handlers: dict[ButtonAction, ButtonHandler] = {}

    def __repr__(self) -> str:
        return f"<JobButtons {sorted(self._handlers)}>"

    def register(self, handlers: Mapping[ButtonAction, ButtonHandler]) -> None:
        """Route clicks on these buttons to these handlers (a cog, when it loads)."""
        self._handlers.update(handlers)

    def unregister(self, actions: Iterable[ButtonAction]) -> None:
        """Stop routing these buttons (the cog unloads): their clicks then fail visibly."""
        for action in actions:
            self._handlers.pop(action, None)

    async def dispatch(
        self, action: ButtonAction, interaction: discord.Interaction[Any], job_id: int, owner_id: int
    ) -> None:
        """Run the handler registered for `action`; raises :class:`LookupError` when there is none."""
        handler = self._handlers.get(action)
        if handler is None:
            raise LookupError(f"no handler registered for the {action} button")
        await handler(interaction, job_id, owner_id)


@runtime_checkable
class ButtonHost(Protocol):
    """A client that routes job buttons (the bot)."""

    @property
    def job_buttons(self) -> JobButtons:
        """The registry the button callbacks dispatch through."""
        ...


class _JobButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=r"framecast:(?P<action>[a-z]+):(?P<job_id>[0-9]{1,20}):(?P<owner_id>[0-9]{1,20})",
):
    """Base of the job buttons (never registered itself)."""

    action: ButtonAction
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
        cls,
        interaction: discord.Interaction[Any],
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> _JobButton:
        return cls(int(match["job_id"]), int(match["owner_id"]))

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        client = interaction.client
        if not isinstance(client, ButtonHost):
            raise LookupError(f"{type(client).__name__} routes no job buttons")
        await client.job_buttons.dispatch(self.action, interaction, self.job_id, self.owner_id)


class CancelButton(
    _JobButton, template=r"framecast:cancel:(?P<job_id>[0-9]{1,20}):(?P<owner_id>[0-9]{1,20})"
):
    """Cancels a queued or running job (requester or Manage Server)."""

    action = ButtonAction.CANCEL
    style = discord.ButtonStyle.danger


class RetryButton(_JobButton, template=r"framecast:retry:(?P<job_id>[0-9]{1,20}):(?P<owner_id>[0-9]{1,20})"):
    """Queues a failed job again with the same settings (requester or Manage Server)."""

    action = ButtonAction.RETRY
    style = discord.ButtonStyle.primary
