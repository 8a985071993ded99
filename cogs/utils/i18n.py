"""Localised text for everything a member reads.

Messages are looked up by key in the member's Discord locale (``interaction.locale`` or the locale
stored with the job), falling back to the base language (``pt-BR`` -> ``pt``) and then to English.
Translations live in :mod:`cogs.utils.translations`; a missing translation never breaks a reply.
"""

from __future__ import annotations

import logging
from typing import Any

import discord

log = logging.getLogger(__name__)

ENGLISH: dict[str, str] = {
    # errors shown privately (ephemeral)
    "error_prompt_empty": "Your prompt is empty. Describe what you want to see.",
    "error_prompt_too_long": "Your prompt is too long ({length} characters; the limit is {max}).",
    "error_member_limit": "You already have {limit} jobs queued or running. Wait for one to finish, or cancel one.",
    "error_guild_queue_full": "This server's queue is full ({cap} jobs waiting). Please try again later.",
    "error_bad_option": "That value for “{option}” is not one of the offered choices.",
    "error_unknown_model": "“{model}” is not a model the generation service offers. Pick one from the list.",
    "error_unknown_model_list": "“{model}” is not a model the generation service offers. Available: {models}",
    "error_already_retried": "Job #{job} was already retried as job #{id}.",
    "error_missing_permissions": "I can't deliver results in this channel: I'm missing the {perms} permission(s). Ask an admin to grant them, or use another channel.",
    "error_guild_only": "Framecast works in servers, not in direct messages.",
    "error_not_allowed": "Only the member who asked for this job, or someone with Manage Server, can do that.",
    "error_job_not_found": "There is no job #{id} in this server.",
    "error_too_late_cancel": "Too late to cancel: job #{id} is already being delivered or has finished.",
    "error_generic": "Something went wrong on Framecast's side. Please try again in a moment.",
    "error_misconfigured": "The bot is misconfigured (the generation service refused its key). Please tell a server admin.",
    "error_owner_only": "Only the bot's owner can do that.",
    "error_cooldown": "Slow down a little: try again in {seconds} seconds.",
    "info_synced": "Synced {count} command(s).",
    # the job message
    "kind_video": "Video",
    "kind_image": "Image",
    "title": "{kind} · job #{id}",
    "field_requested_by": "Requested by",
    "field_settings": "Settings",
    "field_status": "Status",
    "status_queued": "⏳ Queued: #{position} in this server's queue",
    "status_queued_waiting": "⏳ Queued",
    "status_submitting": "🚀 Sending to the generation service…",
    "status_generating_progress": "🎬 Generating… {bar} {percent}%",
    "status_generating_elapsed": "🎬 Generating… {elapsed} elapsed",
    "status_delivering": "📤 Uploading the result…",
    "status_delivered": "✅ Done",
    "status_failed": "❌ Failed: {reason}",
    "status_cancelled": "🚫 Cancelled",
    "note_resumed": "Framecast restarted; your job continues where it was.",
    "note_reencoded": "The file was re-encoded to fit this server's upload limit.",
    "note_too_large": "The file is too large for this server's upload limit, so here is the service's link instead: {url}",
    "note_moved": "This job continues in a new message: {link}",
    "note_ready": "{mention}, your {kind} is ready!",
    "note_finished": "{mention}, your job #{id} has finished.",
    "settings_video": "{width}×{height} · {seconds} s · {fps} fps · {model}",
    "settings_image": "{size} · {model}",
    "button_cancel": "Cancel",
    "button_retry": "Retry",
    # failure reasons, in plain words
    "reason_auth": "the bot is misconfigured (the generation service refused its key). Please tell a server admin.",
    "reason_rate_limited": "the generation service is too busy right now. Please retry in a few minutes.",
    "reason_rejected": "the generation service refused this request: {detail}",
    "reason_rejected_unknown": "the generation service refused this request.",
    "reason_unavailable": "the generation service is having trouble right now. Please retry later.",
    "reason_bad_response": "the generation service sent an answer Framecast does not understand.",
    "reason_task_failed": "the generation service could not make it: {detail}",
    "reason_task_failed_unknown": "the generation service could not make it (it gave no reason).",
    "reason_timeout": "the generation service did not finish within {minutes} minutes.",
    "reason_download_failed": "the finished file could not be downloaded (the link may have expired).",
    "reason_download_too_large": "the finished file is larger than Framecast accepts.",
    "reason_result_refused": "the service's result link pointed somewhere Framecast does not fetch from.",
    "reason_not_media_video": "the generation service returned something that is not a video.",
    "reason_not_media_image": "the generation service returned something that is not an image.",
    "reason_media_too_large": "the finished image is too large to process (too many pixels).",
    "reason_internal": "something went wrong inside Framecast.",
    # /job (the job itself is shown with the same embed as its message)
    "job_message_link": "Job message: {link}",
    "job_file_link": "File: {link}",
}


def _catalogues() -> dict[str, dict[str, str]]:
    from cogs.utils.translations import TRANSLATIONS  # kept apart: the English text is the source

    return TRANSLATIONS


# Discord locales that read another catalogue well (Latin American Spanish reads Spain's).
_ALIASES = {"es-419": "es-ES"}


def _chain(locale: str | discord.Locale | None) -> list[str]:
    code = str(locale.value if isinstance(locale, discord.Locale) else locale or "en-US")
    chain = [code]
    if code in _ALIASES:
        chain.append(_ALIASES[code])
    if "-" in code:
        chain.append(code.split("-", 1)[0])
    return chain


def t(key: str, locale: str | discord.Locale | None = None, /, **params: Any) -> str:
    """The message `key` in `locale`, with `params` filled in."""
    try:
        catalogues = _catalogues()
    except ImportError:  # pragma: no cover - translations are optional
        catalogues = {}
    template = None
    for code in _chain(locale):
        template = catalogues.get(code, {}).get(key)
        if template:
            break
    if template is None:
        template = ENGLISH.get(key, key)
    try:
        return template.format(**params)
    except (KeyError, IndexError, ValueError):
        # A broken translation must not break the reply: fall back to English.
        log.warning("translation of %r for %s is malformed", key, locale)
        return ENGLISH.get(key, key).format(**params)
