"""Persistent buttons that carry the job id (and requester) in their custom id.

They are :class:`discord.ui.DynamicItem` subclasses, so a click works on any message, after any
restart. The Remix form (a modal) works the same way: its custom id carries the job, and the
Jobs cog's ``on_interaction`` listener handles every submit (discord.py keeps no modal across a
restart, so none is kept at all: one path before and after). The requester's id rides along so the permission check needs no database read before the
3-second acknowledgement. A click reaches its handler through the bot's :class:`JobButtons`
registry, which the cog that owns the handlers fills when it loads.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import discord

from framecast.jobs import JobKind

__all__ = [
    "AgainButton",
    "ButtonAction",
    "ButtonHandler",
    "ButtonHost",
    "CancelButton",
    "JobButtons",
    "RemixButton",
    "RemixField",
    "RetryButton",
    "form_values",
    "remix_form",
    "remix_form_target",
]


class ButtonAction(enum.StrEnum):
    """What a job button does (also the middle part of its custom id)."""

    CANCEL = "cancel"
    RETRY = "retry"
    AGAIN = "again"
    REMIX = "remix"


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


class AgainButton(_JobButton, template=r"framecast:again:(?P<job_id>[0-9]{1,20}):(?P<owner_id>[0-9]{1,20})"):
    """Queues a new job with a delivered job's prompt and settings (any member, as their own job)."""

    action = ButtonAction.AGAIN
    style = discord.ButtonStyle.primary


class RemixButton(_JobButton, template=r"framecast:remix:(?P<job_id>[0-9]{1,20}):(?P<owner_id>[0-9]{1,20})"):
    """Opens a form with a delivered job's prompt and settings to edit and queue (any member)."""

    action = ButtonAction.REMIX
    style = discord.ButtonStyle.secondary


class RemixField(enum.StrEnum):
    """A text input of the Remix form (also its custom id)."""

    PROMPT = "prompt"
    SIZE = "size"
    LENGTH = "length"
    FPS = "fps"
    MODEL = "model"


#: The fields of each kind's Remix form, in order (a modal holds at most five).
REMIX_FIELDS: dict[JobKind, tuple[RemixField, ...]] = {
    JobKind.VIDEO: (RemixField.PROMPT, RemixField.SIZE, RemixField.LENGTH, RemixField.FPS, RemixField.MODEL),
    JobKind.IMAGE: (RemixField.PROMPT, RemixField.SIZE, RemixField.MODEL),
}
# The kind rides in the form's id so a submit is validated before the 3-second acknowledgement,
# without a database read.
_REMIX_FORM = re.compile(r"framecast:remix-form:(?P<kind>video|image):(?P<job_id>[0-9]{1,20})")
#: Discord's limits: a modal title and a label hold 45 characters, a placeholder 100, a value 4000.
_TITLE_MAX, _LABEL_MAX, _PLACEHOLDER_MAX, _VALUE_MAX = 45, 45, 100, 4000
_SHORT_MAX = 100  # a size key, a number, a model id (model ids are at most 100 characters)


def remix_form(
    job_id: int,
    kind: JobKind,
    *,
    title: str,
    values: Mapping[RemixField, str | None],
    labels: Mapping[RemixField, str],
    placeholders: Mapping[RemixField, str] | None = None,
    prompt_max: int,
) -> discord.ui.Modal:
    """The Remix form of job `job_id`: its prompt (a paragraph) and options, prefilled with `values`.

    Only the prompt is required; an option left empty takes the server's default. The modal is
    stopped before it is sent, so discord.py never keeps it: the submit reaches the
    ``on_interaction`` listener through its custom id (see :func:`remix_form_target`).
    """
    modal = discord.ui.Modal(
        title=title[:_TITLE_MAX], custom_id=f"framecast:remix-form:{kind}:{job_id}", timeout=None
    )
    for name in REMIX_FIELDS[kind]:
        prompt = name is RemixField.PROMPT
        limit = max(1, min(prompt_max, _VALUE_MAX)) if prompt else _SHORT_MAX
        value = values.get(name) or None
        placeholder = (placeholders or {}).get(name)
        text_input: discord.ui.TextInput[Any] = discord.ui.TextInput(
            custom_id=name.value,
            style=discord.TextStyle.paragraph if prompt else discord.TextStyle.short,
            default=value[:limit] if value else None,
            placeholder=placeholder[:_PLACEHOLDER_MAX] if placeholder else None,
            required=prompt,
            max_length=limit,
        )
        modal.add_item(discord.ui.Label(text=labels[name][:_LABEL_MAX], component=text_input))
    modal.stop()
    return modal


def remix_form_target(custom_id: str) -> tuple[JobKind, int] | None:
    """``(kind, job id)`` of a Remix form's custom id; None for any other custom id."""
    match = _REMIX_FORM.fullmatch(custom_id)
    if match is None:
        return None
    return JobKind(match["kind"]), int(match["job_id"])


def form_values(data: Mapping[str, Any] | None) -> dict[str, str]:
    """``custom_id -> value`` of every text input in a modal submit's ``data`` (rows and labels alike)."""
    found: dict[str, str] = {}

    def walk(components: Any) -> None:
        for component in components if isinstance(components, list) else ():
            if not isinstance(component, Mapping):
                continue
            if isinstance(component.get("custom_id"), str) and isinstance(component.get("value"), str):
                found[component["custom_id"]] = component["value"]
            walk(component.get("components"))
            if isinstance(component.get("component"), Mapping):
                walk([component["component"]])

    walk((data or {}).get("components"))
    return found
