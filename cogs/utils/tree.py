"""The command tree with Framecast's one error handler.

Expected errors (bad input, limits, permissions) become short, private, localised replies.
Anything else is logged with its traceback and the member gets a generic apology, never
"This interaction failed".
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import discord
from discord import app_commands

from cogs.i18n import t
from cogs.utils.render import as_text
from framecast.errors import ServiceError
from framecast.intake import IntakeError, IntakeProblem
from framecast.reasons import ErrorCode

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
}

#: Service failures a command can meet before any job exists (listing models, say) that the member
#: should hear about; any other service error is unexpected here and gets the generic reply.
SERVICE_ERROR_KEYS: dict[ErrorCode, str] = {
    ErrorCode.AUTH: "error_misconfigured",
}


class MissingChannelPermissions(app_commands.CheckFailure):
    """The bot lacks permissions it needs in the channel (`perms` are Discord's permission names)."""

    def __init__(self, perms: list[str]) -> None:
        super().__init__(", ".join(perms))
        self.perms = perms


def error_message(error: BaseException, locale: str | discord.Locale | None) -> str | None:
    """The localised reply for an expected error, or None when the error is a bug."""
    if (
        isinstance(error, (app_commands.CommandInvokeError, app_commands.TransformerError))
        and error.__cause__
    ):
        error = error.__cause__
    if isinstance(error, IntakeError):
        # Parameters may echo what a member typed or what the service listed: shown literally.
        params = {k: as_text(v) if isinstance(v, str) else v for k, v in error.params.items()}
        return t(INTAKE_KEYS[error.problem], locale, **params)
    if isinstance(error, MissingChannelPermissions):
        names = ", ".join(p.replace("_", " ").title() for p in error.perms)
        return t("error_missing_permissions", locale, perms=names)
    if isinstance(error, app_commands.NoPrivateMessage):
        return t("error_guild_only", locale)
    if isinstance(error, app_commands.MissingPermissions):
        return t("error_not_allowed", locale)
    if isinstance(error, app_commands.CommandOnCooldown):
        return t("error_cooldown", locale, seconds=max(1, round(error.retry_after)))
    if isinstance(error, ServiceError) and error.code in SERVICE_ERROR_KEYS:
        return t(SERVICE_ERROR_KEYS[error.code], locale)
    return None


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


class FramecastTree(app_commands.CommandTree[Any]):
    """Command tree whose ``on_error`` turns expected errors into short localised replies."""

    async def on_error(
        self, interaction: discord.Interaction[Any], error: app_commands.AppCommandError
    ) -> None:
        text = error_message(error, interaction.locale)
        if text is None:
            cause = error.__cause__ or error
            command = interaction.command.qualified_name if interaction.command else "?"
            log.error("command %s failed", command, exc_info=(type(cause), cause, cause.__traceback__))
            text = t("error_generic", interaction.locale)
        await reply_privately(interaction, text)
