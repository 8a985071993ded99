"""The command tree with Framecast's one error handler.

Expected errors (bad input, limits, permissions) become short, private, localised replies.
Anything else is logged with its traceback and the member gets a generic apology, never
"This interaction failed".

One handler for every way in: :func:`answer_error` is called by the tree's ``on_error`` (slash
commands) and by the job buttons' and the Remix form's ``on_error`` (see
:mod:`cogs.views.buttons` and :mod:`cogs.views.remix`), so the private error reply exists once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

import discord
from discord import app_commands

from cogs.discord_internals import count_as_deferred
from cogs.i18n import t
from cogs.i18n.personal import place_key
from cogs.literal import as_text
from cogs.places import where
from framecast.app import (
    STYLE_PLACEHOLDER,
    AdminRefusal,
    AdminRefused,
    ErrorCode,
    IntakeError,
    IntakeProblem,
    JobKind,
    JobRefused,
    Refusal,
    ServiceError,
    Setting,
    SettingsError,
    SettingsProblem,
    StoreUnavailable,
    StyleError,
    StyleProblem,
)

log = logging.getLogger(__name__)

#: The one mapping from the core's typed intake problems to the message a member reads.
INTAKE_KEYS: dict[IntakeProblem, str] = {
    IntakeProblem.PROMPT_EMPTY: "error_prompt_empty",
    IntakeProblem.PROMPT_TOO_LONG: "error_prompt_too_long",
    IntakeProblem.BAD_OPTION: "error_bad_option",
    IntakeProblem.MEMBER_LIMIT: "error_member_limit",
    IntakeProblem.GUILD_QUEUE_FULL: "error_guild_queue_full",
    IntakeProblem.ALREADY_RETRIED: "error_already_retried",
    IntakeProblem.UNKNOWN_MODEL: "error_unknown_model",
    IntakeProblem.UNLISTED_MODEL: "error_unknown_model_list",
    IntakeProblem.CHANNEL_NOT_ALLOWED: "settings_refuse_channel",
    IntakeProblem.NSFW_ONLY: "settings_refuse_nsfw",
    # Never echoes the blocked term: the member rephrases without learning the list.
    IntakeProblem.PROMPT_BLOCKED: "settings_refuse_blocked",
    IntakeProblem.DAILY_QUOTA: "settings_refuse_quota_video",  # by kind: DAILY_QUOTA_KEYS
    IntakeProblem.GUILD_KEY_REJECTED: "settings_refuse_key_rejected",
    IntakeProblem.GUILD_KEY_UNREADABLE: "settings_refuse_key_unreadable",
    IntakeProblem.UNKNOWN_STYLE: "style_error_unknown",
    IntakeProblem.STYLE_WRONG_KIND: "style_error_not_for_video",  # by kind: STYLE_KIND_KEYS
    IntakeProblem.STYLED_PROMPT_TOO_LONG: "style_error_prompt_too_long",
}
#: A style of the other kind names what was asked for.
STYLE_KIND_KEYS: dict[JobKind, str] = {
    JobKind.VIDEO: "style_error_not_for_video",
    JobKind.IMAGE: "style_error_not_for_image",
}
#: The one mapping from a refused /settings styles change to the admin's words.
STYLE_KEYS: dict[StyleProblem, str] = {
    StyleProblem.BAD_NAME: "style_error_bad_name",
    StyleProblem.NAME_TAKEN: "style_error_name_taken",
    StyleProblem.NO_PLACEHOLDER: "style_error_no_placeholder",
    StyleProblem.TEMPLATE_TOO_LONG: "style_error_template_too_long",
    StyleProblem.TOO_MANY: "style_error_too_many",
    StyleProblem.NOT_FOUND: "style_error_not_found",
}
#: The one mapping from a refused action on a job to the member's words (all take the job's id).
REFUSAL_KEYS: dict[Refusal, str] = {
    Refusal.NOT_FOUND: "error_job_not_found",
    Refusal.NOT_ALLOWED: "error_not_allowed",
    Refusal.TOO_LATE_TO_CANCEL: "error_too_late_cancel",
}
#: The one mapping from the admins' refusal (/settings, its styles and key) to the member's words.
ADMIN_REFUSAL_KEYS: dict[AdminRefusal, str] = {
    AdminRefusal.NOT_MANAGER: "settings_error_not_manager",
    # A person's own queue has no settings: the command is for servers that installed the app.
    AdminRefusal.NO_SERVER: "userinstall_server_only",
}
#: The daily quota's refusal names what was counted.
DAILY_QUOTA_KEYS: dict[JobKind, str] = {
    JobKind.VIDEO: "settings_refuse_quota_video",
    JobKind.IMAGE: "settings_refuse_quota_image",
}

#: The one mapping from a refused /settings change to the admin's words.
SETTINGS_KEYS: dict[SettingsProblem, str] = {
    SettingsProblem.ABOVE_CEILING: "settings_error_above_ceiling",
    SettingsProblem.BAD_VALUE: "settings_error_bad_value",
    SettingsProblem.TOO_MANY_TERMS: "settings_error_too_many_terms",
    SettingsProblem.TERM_TOO_LONG: "settings_error_term_too_long",
    SettingsProblem.TOO_MANY_CHANNELS: "settings_error_too_many_channels",
}

#: The message naming each server setting (in /settings replies and its refusals).
SETTING_NAME_KEYS: dict[Setting, str] = {
    Setting.MEMBER_JOBS: "settings_name_member_jobs",
    Setting.DAILY_VIDEOS: "settings_name_daily_videos",
    Setting.DAILY_IMAGES: "settings_name_daily_images",
    Setting.QUEUE_CAP: "settings_name_queue_cap",
    Setting.VIDEO_SIZE: "settings_name_video_size",
    Setting.VIDEO_SECONDS: "settings_name_video_seconds",
    Setting.VIDEO_FPS: "settings_name_video_fps",
    Setting.VIDEO_MODEL: "settings_name_video_model",
    Setting.IMAGE_SIZE: "settings_name_image_size",
    Setting.IMAGE_MODEL: "settings_name_image_model",
    Setting.CHANNELS: "settings_name_channels",
    Setting.NSFW_ONLY: "settings_name_nsfw_only",
    Setting.BLOCKLIST: "settings_name_blocklist",
    Setting.API_KEY: "settings_name_api_key",
}

#: Service failures a command can meet before any job exists (listing models, say) that the member
#: should hear about; any other service error is unexpected here and gets the generic reply.
SERVICE_ERROR_KEYS: dict[ErrorCode, str] = {
    ErrorCode.AUTH: "error_misconfigured",
}


class ServerOnly(app_commands.NoPrivateMessage):
    """A server command used where a person's own install brought the app (a DM, a group DM, a
    server that did not add the bot): it is for servers that installed the app."""


class RefusedInCheck(app_commands.CheckFailure):
    """A use case's refusal met in an ``interaction_check``, before the command runs (its cause).

    discord.py hands the tree's error handler only its own errors from a check (anything else is
    logged and the member hears nothing), so the refusal travels as this error's ``__cause__``, and
    is worded like the same refusal met inside the command.
    """


class ServerRulesApply(app_commands.CheckFailure):
    """A person's own install used in a server that has the bot, where the server's install did not
    allow the command: the server's rules apply there, so it is refused (never a personal job)."""


def relative_time(epoch: float) -> str:
    """A Discord timestamp shown relative to now ("in 3 hours"), in each reader's language and zone."""
    return f"<t:{int(epoch)}:R>"


#: The longest message content Discord accepts (longer is refused with 50035: no answer at all).
MESSAGE_CHARS = 2000


def echoing(key: str, locale: str | discord.Locale | None, params: dict[str, Any]) -> str:
    """Message `key` with `params`, each text among them shown literally (:func:`as_text`).

    The texts echo what a member typed (up to Discord's 6,000 characters an option) or what the
    service listed, and escaping can double their length: when the message would not fit in one
    Discord message, each text is cut to an equal share of the room left (ending with "…").
    """
    texts = [name for name, value in params.items() if isinstance(value, str)]
    shown = {name: as_text(value) if name in texts else value for name, value in params.items()}
    message = t(key, locale, **shown)
    if len(message) <= MESSAGE_CHARS or not texts:
        return message
    bare = len(t(key, locale, **{**shown, **dict.fromkeys(texts, "")}))
    room = max(2, (MESSAGE_CHARS - bare) // len(texts))
    return t(key, locale, **{**shown, **{name: as_text(params[name], limit=room) for name in texts}})


def _intake_message(error: IntakeError, locale: str | discord.Locale | None, personal: bool) -> str:
    params: dict[str, Any] = dict(error.params)
    key = place_key(INTAKE_KEYS[error.problem], personal=personal)
    if error.problem is IntakeProblem.DAILY_QUOTA:
        key = place_key(DAILY_QUOTA_KEYS[JobKind(params.pop("kind"))], personal=personal)
        params["resets"] = relative_time(float(params.pop("resets_at")))
        return t(key, locale, **params)
    if error.problem is IntakeProblem.STYLE_WRONG_KIND:
        key = STYLE_KIND_KEYS[JobKind(params.pop("kind"))]
    if error.problem is IntakeProblem.CHANNEL_NOT_ALLOWED:
        # Channel mentions show the channel's name and never ping anyone.
        params["channels"] = ", ".join(f"<#{int(c)}>" for c in params.get("channels", ()))
        return t(key, locale, **params)
    # Parameters may echo what a member typed or what the service listed: shown literally.
    return echoing(key, locale, params)


def _settings_message(error: SettingsError, locale: str | discord.Locale | None) -> str:
    params: dict[str, Any] = dict(error.params)
    setting = params.get("setting")
    if setting is not None:
        try:
            params["setting"] = t(SETTING_NAME_KEYS[Setting(setting)], locale)
        except ValueError:
            params["setting"] = as_text(str(setting))
    return t(SETTINGS_KEYS[error.problem], locale, **params)


class MissingChannelPermissions(app_commands.CheckFailure):
    """The bot lacks permissions it needs in the channel (`perms` are Discord's permission names)."""

    def __init__(self, perms: list[str]) -> None:
        super().__init__(", ".join(perms))
        self.perms = perms


def error_message(
    error: BaseException, locale: str | discord.Locale | None, *, personal: bool = False
) -> str | None:
    """The localised reply for an expected error, or None when the error is a bug.

    `personal`: the request came to a person's own queue (a user install outside a server that has
    the bot): the words speak of their jobs, not of a server (:func:`place_key`).
    """
    if (
        isinstance(error, (app_commands.CommandInvokeError, app_commands.TransformerError, RefusedInCheck))
        and error.__cause__
    ):
        error = error.__cause__
    if isinstance(error, IntakeError):
        return _intake_message(error, locale, personal)
    if isinstance(error, SettingsError):
        return _settings_message(error, locale)
    if isinstance(error, StyleError):
        # A name or template as the admin typed it: shown literally.
        return echoing(STYLE_KEYS[error.problem], locale, {"placeholder": STYLE_PLACEHOLDER, **error.params})
    if isinstance(error, JobRefused):
        return t(place_key(REFUSAL_KEYS[error.refusal], personal=personal), locale, id=error.job_id)
    if isinstance(error, AdminRefused):
        return t(ADMIN_REFUSAL_KEYS[error.refusal], locale)
    if isinstance(error, MissingChannelPermissions):
        names = ", ".join(p.replace("_", " ").title() for p in error.perms)
        return t("error_missing_permissions", locale, perms=names)
    if isinstance(error, ServerOnly):
        return t("userinstall_server_only", locale)
    if isinstance(error, ServerRulesApply):
        return t("userinstall_server_rules", locale)
    if isinstance(error, app_commands.NoPrivateMessage):
        return t("error_guild_only", locale)
    if isinstance(error, app_commands.MissingPermissions):
        return t("error_not_allowed", locale)
    if isinstance(error, StoreUnavailable):
        # The database is gone, silent or locked: refused rather than held, since an accepted job
        # must be persisted before it is acknowledged. The store logged the outage once.
        return t("error_store_unavailable", locale)
    if isinstance(error, app_commands.CommandOnCooldown):
        return t("error_cooldown", locale, seconds=max(1, round(error.retry_after)))
    if isinstance(error, ServiceError) and error.code in SERVICE_ERROR_KEYS:
        return t(place_key(SERVICE_ERROR_KEYS[error.code], personal=personal), locale)
    return None


T = TypeVar("T")


async def before_acknowledging(lookup: Awaitable[T], seconds: float) -> T:
    """A store read made before the acknowledgement, bounded by `seconds`: a store slower than
    Discord allows counts as down (:class:`StoreUnavailable`: "try again in a moment")."""
    try:
        return await asyncio.wait_for(lookup, seconds)
    except TimeoutError:
        raise StoreUnavailable(f"no answer within {seconds:g} s, before the acknowledgement") from None


#: Discord's answer to an interaction acknowledged twice: a retry of one whose answer was lost.
_ALREADY_ACKNOWLEDGED = 40060


async def defer(
    interaction: discord.Interaction[Any], *, ephemeral: bool = False, thinking: bool = False
) -> None:
    """``interaction.response.defer``, also when Discord took it and its answer was lost.

    discord.py then sends it again and Discord refuses with 40060 (already acknowledged): the
    interaction is acknowledged and the command goes on (it stayed "thinking…" for ever, its job
    never queued, with a traceback in the log).
    """
    try:
        await interaction.response.defer(ephemeral=ephemeral, thinking=thinking)
    except discord.HTTPException as exc:
        if exc.code != _ALREADY_ACKNOWLEDGED:
            raise
        log.info("interaction %s: the acknowledgement's answer was lost; Discord has it", interaction.id)
        count_as_deferred(interaction, thinking=thinking)


async def acknowledge_privately(interaction: discord.Interaction[Any]) -> None:
    """Acknowledge now ("thinking…", seen only by the member) if nothing answered yet.

    For commands that write: the store may wait out another process's lock or an outage for longer
    than Discord's 3 s, and the answer then comes as the follow-up (:func:`answer_privately`).
    """
    if not interaction.response.is_done():
        await defer(interaction, ephemeral=True, thinking=True)


async def answer_privately(
    interaction: discord.Interaction[Any], content: str | None = None, **kwargs: Any
) -> None:
    """The member's private answer: the first response, or the follow-up after an acknowledgement."""
    if content is not None:
        kwargs["content"] = content
    kwargs.update(ephemeral=True, allowed_mentions=discord.AllowedMentions.none())
    if interaction.response.is_done():
        await interaction.followup.send(**kwargs)
    else:
        await interaction.response.send_message(**kwargs)


def answers_in_place(interaction: discord.Interaction[Any]) -> bool:
    """Whether a click may answer by editing the message it is on: only a private one (a /history
    page, the delete question). Those are always private, so a click on any other message carries
    a forged custom id (on any member's job message, say), and editing would overwrite that
    message for everyone."""
    message = interaction.message
    return message is not None and message.flags.ephemeral


async def acknowledge_in_place(interaction: discord.Interaction[Any]) -> None:
    """Acknowledge a click whose answer replaces the message it is on (then
    ``edit_original_response``): in place where :func:`answers_in_place`, else in a new private
    message."""
    if answers_in_place(interaction):
        await defer(interaction)
    else:
        await defer(interaction, ephemeral=True, thinking=True)


async def reply_privately(interaction: discord.Interaction[Any], text: str) -> None:
    """Answer the member privately, whatever state the interaction is in."""
    try:
        if not interaction.response.is_done():
            await interaction.response.send_message(
                text, ephemeral=True, allowed_mentions=discord.AllowedMentions.none()
            )
            return
        if interaction.is_expired():
            return
        if interaction.response.type is discord.InteractionResponseType.deferred_channel_message:
            # The "thinking…" message may be public (a job command, Retry): it goes, and the answer
            # comes as a private follow-up instead.
            with contextlib.suppress(discord.NotFound):
                await interaction.delete_original_response()
        await interaction.followup.send(text, ephemeral=True, allowed_mentions=discord.AllowedMentions.none())
    except discord.HTTPException as exc:
        log.warning("could not send an error reply: HTTP %s (code %s)", exc.status, exc.code)


def _personal(interaction: discord.Interaction[Any]) -> bool:
    """Whether `interaction` came to a person's own queue (see :func:`cogs.places.where`)."""
    try:
        return where(interaction).personal
    except Exception:  # an error reply must never fail on reading where it goes
        return False


async def answer_error(interaction: discord.Interaction[Any], error: BaseException, *, what: str) -> None:
    """The one error handler: an expected error gets its private reply; anything else is logged
    with its traceback (naming `what` failed) and gets the generic apology."""
    text = error_message(error, interaction.locale, personal=_personal(interaction))
    if text is None:
        cause = error.__cause__ or error
        log.error("%s failed", what, exc_info=(type(cause), cause, cause.__traceback__))
        text = t("error_generic", interaction.locale)
    await reply_privately(interaction, text)


#: The commands a person may use where they added the app to their own account (``USER_INSTALL``):
#: asking, and finding what they asked for. Everything else (``/settings``, keys, ``/queue``…) stays
#: with server installs.
PERSONAL_COMMANDS = frozenset({"video", "image", "job", "history"})


def set_install_scope(tree: app_commands.CommandTree[Any], *, user_install: bool) -> None:
    """Declare where each command may be installed and used (what a sync sends to Discord).

    Off: nothing changes (server installs, server channels). On: :data:`PERSONAL_COMMANDS` may also
    be installed to a person's account and used in DMs and group DMs (``integration_types`` [0, 1],
    ``contexts`` [0, 1, 2]); every other command says explicitly that it is for server installs only.
    """
    if not user_install:
        return
    for command in tree.get_commands():
        if command.name in PERSONAL_COMMANDS:
            command.guild_only = False
            command.allowed_installs = app_commands.AppInstallationType(guild=True, user=True)
            command.allowed_contexts = app_commands.AppCommandContext(
                guild=True, dm_channel=True, private_channel=True
            )
        else:
            command.allowed_installs = app_commands.AppInstallationType(guild=True, user=False)


class FramecastTree(app_commands.CommandTree[Any]):
    """Command tree whose ``on_error`` turns expected errors into short localised replies."""

    async def on_error(
        self, interaction: discord.Interaction[Any], error: app_commands.AppCommandError
    ) -> None:
        """Every command's error: through :func:`answer_error`."""
        command = interaction.command.qualified_name if interaction.command else "?"
        await answer_error(interaction, error, what=f"command {command}")
