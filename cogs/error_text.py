"""The words of every refusal and expected error a member or an admin reads.

One mapping per kind of refusal, from the core's typed problem to its message, and
:func:`error_message`, which words an expected error (None for a bug). The tree's one error
handler (:func:`cogs.tree.answer_error`) sends what this says; the checks raise the classes here.
"""

from __future__ import annotations

from typing import Any

import discord
from discord import app_commands

from cogs.i18n import t
from cogs.i18n.personal import place_key
from cogs.literal import as_text
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
#: A member's own limit met by someone acting for them (a server manager's Retry of their job):
#: the refusal names the member (``{member}``), not "you".
MEMBERS_LIMIT_KEYS: dict[str, str] = {
    "error_member_limit": "error_member_limit_member",
    "settings_refuse_quota_video": "settings_refuse_quota_video_member",
    "settings_refuse_quota_image": "settings_refuse_quota_image_member",
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
    if "member" in params:
        # Another member's limit: a mention shows their name (replies never ping: allowed_mentions).
        params["member"] = f"<@{int(params['member'])}>"
    if error.problem is IntakeProblem.DAILY_QUOTA:
        key = place_key(DAILY_QUOTA_KEYS[JobKind(params.pop("kind"))], personal=personal)
        params["resets"] = relative_time(float(params.pop("resets_at")))
        return t(_whose(key, params), locale, **params)
    if error.problem is IntakeProblem.MEMBER_LIMIT:
        return t(_whose(key, params), locale, **params)
    if error.problem is IntakeProblem.STYLE_WRONG_KIND:
        key = STYLE_KIND_KEYS[JobKind(params.pop("kind"))]
    if error.problem is IntakeProblem.CHANNEL_NOT_ALLOWED:
        # Channel mentions show the channel's name and never ping anyone.
        params["channels"] = ", ".join(f"<#{int(c)}>" for c in params.get("channels", ()))
        return t(key, locale, **params)
    # Parameters may echo what a member typed or what the service listed: shown literally.
    return echoing(key, locale, params)


def _whose(key: str, params: dict[str, Any]) -> str:
    """`key`, or its twin naming the member when the limit is another member's (``member``)."""
    return MEMBERS_LIMIT_KEYS.get(key, key) if "member" in params else key


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
        # As Discord's settings name them ("Send Messages in Threads": its small words stay small).
        names = ", ".join(p.replace("_", " ").title().replace(" In ", " in ") for p in error.perms)
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
