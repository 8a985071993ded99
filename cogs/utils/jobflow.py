"""Steps shared by every command that starts a job (/video, /image, the Retry button)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import discord

from cogs.utils.tree import MissingChannelPermissions
from framecast.intake import Requester
from framecast.jobs import Job, JobKind

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
    """Who is asking, from the interaction (no I/O)."""
    if interaction.guild_id is None or interaction.channel_id is None:
        raise discord.app_commands.NoPrivateMessage()
    return Requester(
        guild_id=interaction.guild_id,
        channel_id=interaction.channel_id,
        user_id=user_id or interaction.user.id,
        locale=str(interaction.locale.value),
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
