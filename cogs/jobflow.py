"""Steps shared by every command that starts a job (/video, /image, the Retry, Again and Remix buttons)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import discord

from cogs.tree import MissingChannelPermissions
from cogs.views.buttons import RemixField
from framecast.app.intake import IntakeError, IntakeProblem, Requester
from framecast.jobs import Job, JobKind, presets

if TYPE_CHECKING:
    from bot import Framecast

# What the bot needs in the channel to show progress and deliver the file there, also after the
# interaction token expires (then it posts with the bot token).
REQUIRED_PERMISSIONS = (
    "view_channel",
    "send_messages",
    "embed_links",
    "attach_files",
    "read_message_history",
)


def requester(interaction: discord.Interaction[Any], user_id: int | None = None) -> Requester:
    """Who is asking, where, from the interaction (no I/O).

    In a thread, ``parent_id`` is the thread's channel (a server's allowed channels name channels,
    and a thread belongs to its parent's). ``nsfw``: the channel, or a thread's parent, is
    age-restricted; unknown counts as not (a server's NSFW-only rule then refuses).
    """
    if interaction.guild_id is None or interaction.channel_id is None:
        raise discord.app_commands.NoPrivateMessage()
    channel = interaction.channel
    parent_id = channel.parent_id if isinstance(channel, discord.Thread) else None
    # Thread.is_nsfw() asks the parent (from the guild cache); a text channel answers itself.
    is_nsfw = getattr(channel, "is_nsfw", None)
    return Requester(
        guild_id=interaction.guild_id,
        channel_id=interaction.channel_id,
        user_id=user_id or interaction.user.id,
        locale=str(interaction.locale.value),
        parent_id=parent_id,
        nsfw=bool(is_nsfw()) if callable(is_nsfw) else False,
    )


@dataclass(frozen=True)
class Options:
    """A request as a member types it: a prompt and options (None: the server's default)."""

    prompt: str
    size: str | None = None  # a preset key
    seconds: int | None = None  # video only
    fps: int | None = None  # video only
    model: str | None = None


def job_params(bot: Framecast, guild_id: int, kind: JobKind, options: Options) -> dict[str, Any]:
    """Validate `options` under the server's rules and defaults; the job's parameters (no I/O).

    Raises :class:`IntakeError` for a bad option, an unknown model, an empty, too long or
    blocked prompt.
    """
    core = bot.core
    if kind is JobKind.VIDEO:
        return core.intake.video_params(
            guild_id=guild_id,
            prompt=options.prompt,
            model=options.model or None,
            size=options.size,
            seconds=options.seconds,
            frame_rate=options.fps,
            known_models=core.models.ids(kind),
            default_model=core.models.default(kind),
        )
    return core.intake.image_params(
        guild_id=guild_id,
        prompt=options.prompt,
        model=options.model or None,
        size=options.size,
        known_models=core.models.ids(kind),
        default_model=core.models.default(kind),
    )


def _sizes(kind: JobKind) -> dict[str, presets.SizePreset]:
    return presets.VIDEO_SIZES if kind is JobKind.VIDEO else presets.IMAGE_SIZES


def options_of(job: Job) -> Options:
    """The options `job` was made with, as a member would type them again.

    A job that got a default model (the operator's or the server's) gets the default again
    (None): the default of now, which may have changed (the server's, or the service's list).
    """
    p = job.params
    size = p.get("size_key")
    if size is None:  # a job from before size keys were kept: find its preset by its frame size
        shape = p.get("size") or f"{p.get('width')}x{p.get('height')}"
        size = next((key for key, preset in _sizes(job.kind).items() if preset.size == shape), None)
    model = None if p.get("model_default") or p.get("model_server_default") else p.get("model")
    if job.kind is JobKind.IMAGE:
        return Options(prompt=p.get("prompt", ""), size=size, model=model)
    return Options(
        prompt=p.get("prompt", ""),
        size=size,
        seconds=p.get("seconds"),
        fps=p.get("frame_rate"),
        model=model,
    )


def form_prefill(options: Options) -> dict[RemixField, str | None]:
    """The Remix form's prefilled values for `options` (an empty field means the default)."""
    return {
        RemixField.PROMPT: options.prompt,
        RemixField.SIZE: options.size,
        RemixField.LENGTH: None if options.seconds is None else str(options.seconds),
        RemixField.FPS: None if options.fps is None else str(options.fps),
        RemixField.MODEL: options.model,
    }


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


def options_from_form(kind: JobKind, values: Mapping[str, str]) -> Options:
    """The submitted Remix form as options; raises :class:`IntakeError` for a length or fps that is no number."""
    model = (values.get(RemixField.MODEL) or "").strip() or None
    size = _size_key(kind, values.get(RemixField.SIZE))
    prompt = values.get(RemixField.PROMPT, "")
    if kind is JobKind.IMAGE:
        return Options(prompt=prompt, size=size, model=model)
    return Options(
        prompt=prompt,
        size=size,
        seconds=_number(values.get(RemixField.LENGTH), "length"),
        fps=_number(values.get(RemixField.FPS), "fps"),
        model=model,
    )


def check_channel(interaction: discord.Interaction[Any]) -> None:
    """Refuse now, not at delivery time, when the bot cannot post or attach files here."""
    perms = interaction.app_permissions
    missing = [name for name in REQUIRED_PERMISSIONS if not getattr(perms, name)]
    if missing:
        raise MissingChannelPermissions(missing)


def may_manage(interaction: discord.Interaction[Any], owner_id: int) -> bool:
    """The job's requester, or a member with Manage Server."""
    if interaction.user.id == owner_id:
        return True
    perms = getattr(interaction, "permissions", None)
    return bool(perms and (perms.manage_guild or perms.administrator))


async def start_job(
    bot: Framecast,
    interaction: discord.Interaction[Any],
    who: Requester,
    kind: JobKind,
    params: dict[str, Any],
    *,
    retry_of: int | None = None,
) -> Job:
    """After the defer: persist and queue the job, then let the reporter show it.

    The interaction's application id and token are stored with the job, so the reporter (and a
    restarted bot) can edit the message until the token expires, then move to a channel message.
    """
    meta = {
        "application_id": interaction.application_id,
        "token": interaction.token,
        "token_expires_at": interaction.expires_at.timestamp(),
        "attachment_limit": interaction.filesize_limit,
        "message_id": "@original",
    }
    job, _position = await bot.core.intake.accept(who, kind, params, discord=meta, retry_of=retry_of)
    await bot.core.reporter.job_changed(job, urgent=True)
    return job


def default_model(bot: Framecast, guild_id: int, kind: JobKind) -> str:
    """The model a job of `kind` gets in this server when the member picks none (no I/O).

    The server's default while the service lists it (or while the list is unknown), else the
    operator's default (or its stand-in from the service's list).
    """
    core = bot.core
    settings = core.guild_settings(guild_id)
    chosen = settings.video_model if kind is JobKind.VIDEO else settings.image_model
    listed = core.models.ids(kind)
    if chosen and (not listed or chosen in listed):
        return chosen
    return core.models.default(kind)
