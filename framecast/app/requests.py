"""A member's request as typed: its options, how a stored job's options read again, the Remix form.

These are rules about what a member typed, so they live here, not in the Discord layer: the Remix
form is parsed the same way whatever shows it, and Again and Remix read a stored job's options back
the same way (a default model is the default of the moment, see
:mod:`framecast.app.model_choice`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from framecast.app.model_choice import ModelChoice, ModelSource
from framecast.app.problems import IntakeError, IntakeProblem
from framecast.app.styles import job_style
from framecast.values import Job, JobKind, presets

__all__ = ["FormInput", "JobOptions", "options_from_form", "options_of"]


@dataclass(frozen=True)
class JobOptions:
    """A request as a member types it: a prompt and options (None: the server's default)."""

    prompt: str
    size: str | None = None  # a preset key
    seconds: int | None = None  # video only
    fps: int | None = None  # video only
    model: str | None = None
    #: One of the server's styles, by name (any case).
    style: str | None = None
    #: A style kept by a job made again: its template, used as kept (named `style`) even if the
    #: server has since removed or changed the style.
    style_template: str | None = None


@dataclass(frozen=True)
class FormInput:
    """The Remix form as submitted: every field as typed (None or empty: the server's default)."""

    prompt: str
    size: str | None = None
    length: str | None = None  # video only
    fps: str | None = None  # video only
    model: str | None = None


def _sizes(kind: JobKind) -> dict[str, presets.SizePreset]:
    return presets.VIDEO_SIZES if kind is JobKind.VIDEO else presets.IMAGE_SIZES


def options_of(job: Job) -> JobOptions:
    """The options `job` was made with, as a member would type them again.

    A job that got a default model (the operator's or the server's) gets the default again
    (None): the default of now, which may have changed (the server's, or the service's list).
    """
    p = job.params
    size = p.get("size_key")
    if size is None:  # a job from before size keys were kept: find its preset by its frame size
        shape = p.get("size") or f"{p.get('width')}x{p.get('height')}"
        size = next((key for key, preset in _sizes(job.kind).items() if preset.size == shape), None)
    picked = ModelChoice.of_params(p) is ModelSource.PICKED
    model = p.get("model") if picked else None
    kept = job_style(p)  # the style as the job kept it, whatever the server did with it since
    style = kept.name if kept is not None else None
    template = kept.template if kept is not None else None
    if job.kind is JobKind.IMAGE:
        return JobOptions(
            prompt=p.get("prompt", ""), size=size, model=model, style=style, style_template=template
        )
    return JobOptions(
        prompt=p.get("prompt", ""),
        size=size,
        seconds=p.get("seconds"),
        fps=p.get("frame_rate"),
        model=model,
        style=style,
        style_template=template,
    )


# What a member may type as a number in the Remix form: "5", "5s", "5 s", "24 fps".
_NUMBER = re.compile(r"\s*(\d{1,4})\s*(?:s|sec|secs|seconds|fps)?\s*", re.IGNORECASE)


def _number(text: str | None, option: str) -> int | None:
    if text is None or not text.strip():
        return None
    match = _NUMBER.fullmatch(text)
    if match is None:
        raise IntakeError(IntakeProblem.BAD_OPTION, option=option)
    return int(match[1])


def _size_key(kind: JobKind, text: str | None) -> str | None:
    """A size as typed: a preset key in any case, or its frame size (``1280x720``, ``1280×720``)."""
    if text is None or not text.strip():
        return None
    typed = text.strip().lower().replace("×", "x").replace(" ", "")
    sizes = _sizes(kind)
    if typed in sizes:
        return typed
    by_shape = next((key for key, preset in sizes.items() if preset.size == typed), None)
    # Anything else goes to the intake as typed: it refuses it with the usual "bad option" reply.
    return by_shape or text.strip()


def options_from_form(kind: JobKind, form: FormInput) -> JobOptions:
    """The submitted Remix form as options; raises :class:`IntakeError` for a length or fps that is no number."""
    model = (form.model or "").strip() or None
    size = _size_key(kind, form.size)
    if kind is JobKind.IMAGE:
        return JobOptions(prompt=form.prompt, size=size, model=model)
    return JobOptions(
        prompt=form.prompt,
        size=size,
        seconds=_number(form.length, "length"),
        fps=_number(form.fps, "fps"),
        model=model,
    )
