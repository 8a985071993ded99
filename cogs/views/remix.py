"""The Remix form: shown for a delivered job, its submit queued like /video or /image.

discord.py 2.7 keeps a sent modal only in memory, by its exact custom id (its ``ViewStore`` has
dynamic items for buttons, none for modals), so a form opened before a restart would reach nothing
after it. So the form is never kept at all, and every submit takes one typed route, before a
restart and after: the Jobs cog's ``on_interaction`` listener hands it to :func:`remix_submitted`,
which reads it with :meth:`RemixSubmit.of` (None: not a Remix form) and calls the use case. The
form's custom id carries the job's kind and id, so the submit is checked before the 3-second
acknowledgement without a database read, and a nonce, so two forms open at once (two members, or
one member twice) never share an id. Errors go to the one error handler.
"""

from __future__ import annotations

import enum
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import discord

from cogs import interactions
from cogs.i18n import t
from cogs.tree import answer_error, defer
from framecast.app import FormInput, JobKind, RemixPrefill, presets

__all__ = ["REMIX_FIELDS", "RemixField", "RemixSubmit", "remix_form", "remix_submitted"]


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
_LABEL_KEYS = {
    RemixField.PROMPT: "remix_label_prompt",
    RemixField.SIZE: "remix_label_size",
    RemixField.LENGTH: "remix_label_length",
    RemixField.FPS: "remix_label_fps",
    RemixField.MODEL: "remix_label_model",
}
#: Each opening's own id: the job's kind and id, and a nonce (none: a form opened before nonces).
_FORM_ID = re.compile(r"framecast:remix-form:(?P<kind>video|image):(?P<job_id>[0-9]{1,20})(?::[0-9a-f]{16})?")
#: Discord's limits: a modal title and a label hold 45 characters, a placeholder 100, a value 4000.
_TITLE_MAX, _LABEL_MAX, _PLACEHOLDER_MAX, _VALUE_MAX = 45, 45, 100, 4000
_SHORT_MAX = 100  # a size key, a number, a model id (model ids are at most 100 characters)


def _prefilled(prefill: RemixPrefill) -> dict[RemixField, str | None]:
    """The form's values for the job's options (an empty field means the default)."""
    o = prefill.options
    return {
        RemixField.PROMPT: o.prompt,
        RemixField.SIZE: o.size,
        RemixField.LENGTH: None if o.seconds is None else str(o.seconds),
        RemixField.FPS: None if o.fps is None else str(o.fps),
        RemixField.MODEL: o.model,
    }


def _placeholders(prefill: RemixPrefill, loc: str | discord.Locale) -> dict[RemixField, str]:
    sizes = presets.VIDEO_SIZES if prefill.kind is JobKind.VIDEO else presets.IMAGE_SIZES
    return {
        RemixField.SIZE: t("remix_hint_choices", loc, choices=", ".join(sizes)),
        RemixField.LENGTH: t("remix_hint_choices", loc, choices=", ".join(map(str, presets.VIDEO_SECONDS))),
        RemixField.FPS: t("remix_hint_choices", loc, choices=", ".join(map(str, presets.FRAME_RATES))),
        RemixField.MODEL: t("remix_hint_model", loc, model=prefill.default_model),
    }


def remix_form(prefill: RemixPrefill, loc: str | discord.Locale) -> discord.ui.Modal:
    """The Remix form of a delivered job: its prompt (a paragraph) and options, prefilled.

    Only the prompt is required; an option left empty takes the server's default. The modal is
    stopped before it is sent, so discord.py never keeps it (see the module's docstring).
    """
    modal = discord.ui.Modal(
        title=t("remix_title", loc, id=prefill.job_id)[:_TITLE_MAX],
        custom_id=f"framecast:remix-form:{prefill.kind}:{prefill.job_id}:{secrets.token_hex(8)}",
        timeout=None,
    )
    values = _prefilled(prefill)
    placeholders = _placeholders(prefill, loc)
    for name in REMIX_FIELDS[prefill.kind]:
        prompt = name is RemixField.PROMPT
        limit = max(1, min(prefill.prompt_max, _VALUE_MAX)) if prompt else _SHORT_MAX
        value = values.get(name) or None
        placeholder = placeholders.get(name)
        text_input: discord.ui.TextInput[Any] = discord.ui.TextInput(
            custom_id=name.value,
            style=discord.TextStyle.paragraph if prompt else discord.TextStyle.short,
            default=value[:limit] if value else None,
            placeholder=placeholder[:_PLACEHOLDER_MAX] if placeholder else None,
            required=prompt,
            max_length=limit,
        )
        label = t(_LABEL_KEYS[name], loc)[:_LABEL_MAX]
        modal.add_item(discord.ui.Label(text=label, component=text_input))
    modal.stop()
    return modal


@dataclass(frozen=True)
class RemixSubmit:
    """A submitted Remix form: which job it remixes, its kind, and the fields as typed."""

    kind: JobKind
    job_id: int
    form: FormInput

    @classmethod
    def of(cls, interaction: discord.Interaction[Any]) -> RemixSubmit | None:
        """The Remix form `interaction` submits; None for any other interaction."""
        if interaction.type is not discord.InteractionType.modal_submit:
            return None
        data: Mapping[str, Any] = interaction.data or {}  # type: ignore[assignment]  # a TypedDict union
        match = _FORM_ID.fullmatch(str(data.get("custom_id", "")))
        if match is None:
            return None
        values = _text_inputs(data.get("components"))
        return cls(
            kind=JobKind(match["kind"]),
            job_id=int(match["job_id"]),
            form=FormInput(
                prompt=values.get(RemixField.PROMPT, ""),
                size=values.get(RemixField.SIZE),
                length=values.get(RemixField.LENGTH),
                fps=values.get(RemixField.FPS),
                model=values.get(RemixField.MODEL),
            ),
        )


def _text_inputs(components: Any) -> dict[str, str]:
    """``custom_id -> value`` of every text input of a submit (in labels and in action rows alike)."""
    found: dict[str, str] = {}
    for component in components if isinstance(components, list) else ():
        if not isinstance(component, Mapping):
            continue
        if isinstance(component.get("custom_id"), str) and isinstance(component.get("value"), str):
            found[component["custom_id"]] = component["value"]
        inner = component.get("component")
        found.update(_text_inputs([inner] if isinstance(inner, Mapping) else component.get("components")))
    return found


async def remix_submitted(interaction: discord.Interaction[Any], submit: RemixSubmit) -> None:
    """The one route of a Remix form's submit: checked like /video or /image, then the clicker's job."""
    try:
        members = interactions.members(interaction)
        who = interactions.requester(interaction)
        interactions.check_channel(interaction)
        request = members.prepare_remix(who, submit.kind, submit.job_id, submit.form)
        await defer(interaction, thinking=True)
        await members.submit(request, interactions.job_bookkeeping(interaction))
    except Exception as error:
        await answer_error(interaction, error, what=f"the remix of job {submit.job_id}")
