"""/queue: this server's running and queued jobs, shown privately to the member who asks.

Running jobs first (with their progress), then the queue in order with each job's estimated start
as a Discord relative timestamp. Requesters appear as mentions inside the embed (they never ping
there, and the reply carries ``AllowedMentions.none()`` as well); prompts are literal text.
Another member's prompt is shown only where the core allows it (a channel the member can read;
an age-restricted channel's prompt only from an age-restricted channel): else a placeholder.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import discord
from discord import app_commands
from discord.app_commands import locale_str
from discord.ext import commands

from cogs.delivery.slot import percent_floor
from cogs.i18n import t
from cogs.interactions import queue_viewer
from cogs.literal import as_text
from cogs.tree import defer
from cogs.views.render import shown_percent
from framecast.app import Job, JobKind, JobState, PromptHidden, QueueRow, QueueView, job_style

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)

#: Rows listed at most; the rest is counted ("and 5 more").
MAX_ROWS = 20
#: A prompt is cut to this many characters in a row (escapes included), so 20 rows fit one embed.
PROMPT_CHARS = 80
#: Discord caps an embed description at 4096 characters.
_DESCRIPTION_MAX = 4096
#: What a row shows instead of a prompt the viewer may not see, by why.
HIDDEN_KEYS: dict[PromptHidden, str] = {
    PromptHidden.CHANNEL_NOT_READABLE: "queue_prompt_hidden_channel",
    PromptHidden.AGE_RESTRICTED: "queue_prompt_hidden_age",
}


def _kind(job: Job, locale: str) -> str:
    return t("kind_video" if job.kind is JobKind.VIDEO else "kind_image", locale)


def _progress(row: QueueRow, locale: str) -> str:
    shown = shown_percent(row.job, row.estimate, percent_floor(row.job))
    if row.job.state is JobState.RUNNING and shown is not None:
        percent, measured = shown
        return f"{percent}%" if measured else f"≈ {percent}%"
    return t("queue_running", locale)


def _start(row: QueueRow, locale: str, now: float) -> str:
    starts_in = row.estimate.starts_in if row.estimate is not None else None
    if starts_in is None or not math.isfinite(starts_in):
        return t("queue_start_unknown", locale)
    if starts_in <= 0:
        return t("starts_soon", locale)
    return t("queue_starts", locale, time=f"<t:{int(now + starts_in)}:R>")


def _prompt(row: QueueRow, locale: str) -> str:
    if row.hidden is not None:
        return t(HIDDEN_KEYS[row.hidden], locale)
    # The member's text: literal, never a link, a mention or formatting.
    prompt = as_text(" ".join((row.prompt or "").split()), limit=PROMPT_CHARS)
    style = job_style(row.job.params)
    if style is None or not style.name:
        return prompt
    # The member's own words, with the style's name beside them (not the expanded prompt).
    return t("style_queue_prompt", locale, prompt=prompt, style=as_text(style.name))


def row_text(row: QueueRow, *, locale: str, now: float) -> str:
    """One line: place or progress, kind and job number, requester, start, prompt (or why it is
    not shown to this viewer), and "← you"."""
    job = row.job
    common = {
        "kind": _kind(job, locale),
        "id": job.id,
        "user": f"<@{job.user_id}>",
        "prompt": _prompt(row, locale),
    }
    if row.position is None:
        text = t("queue_row_running", locale, progress=_progress(row, locale), **common)
    else:
        text = t("queue_row_queued", locale, position=row.position, start=_start(row, locale, now), **common)
    if row.mine:
        text = f"{text} {t('queue_you', locale)}"
    return text


def render_queue(view: QueueView, *, locale: str) -> discord.Embed:
    """The /queue answer: at most :data:`MAX_ROWS` rows, then how many more."""
    rows: Sequence[QueueRow] = view.rows
    embed = discord.Embed(title=t("queue_title", locale), colour=discord.Colour.blurple())
    if not rows:
        embed.description = t("queue_empty", locale)
        return embed
    lines = [row_text(row, locale=locale, now=view.now) for row in rows[:MAX_ROWS]]
    hidden = len(rows) - len(lines)
    # Never over Discord's limit, whatever the translations make of a row: drop rows, count them.
    while lines:
        more = [t("queue_more", locale, count=hidden)] if hidden else []
        text = "\n".join(lines + more)
        if len(text) <= _DESCRIPTION_MAX:
            break
        lines.pop()
        hidden += 1
    embed.description = text
    embed.set_footer(text=t("queue_summary", locale, running=view.running, queued=view.queued))
    return embed


class Queue(commands.Cog):
    """The /queue command."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    @app_commands.command(name=locale_str("queue"), description=locale_str("Show this server's queue"))
    @app_commands.guild_only()
    async def queue(self, interaction: discord.Interaction[Framecast]) -> None:
        """Show this server's running and queued jobs, privately; others' prompts where the member
        can read them (see :func:`cogs.interactions.queue_viewer`)."""
        if interaction.guild_id is None:
            raise app_commands.NoPrivateMessage()
        await defer(interaction, ephemeral=True, thinking=True)
        viewer = queue_viewer(interaction)
        view = await self.bot.core.members.show_queue(interaction.guild_id, viewer)
        embed = render_queue(view, locale=interaction.locale.value)
        await interaction.edit_original_response(embed=embed, allowed_mentions=discord.AllowedMentions.none())


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(Queue(bot))
