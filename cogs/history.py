"""/history: a member's jobs here, newest first, ten a page with Previous and Next, privately.

Each row: the job's number, state, kind, when it was asked for (a Discord timestamp, in each
reader's zone and language) and a link to its message, then its prompt as literal text. A deleted
result shows as deleted, with no link. ``member:`` looks at someone else's jobs: the core allows it
with Manage Server only (:func:`framecast.app.may_view`), and hides their prompts from channels the
viewer cannot read, as /queue does.

Previous and Next are a :class:`discord.ui.DynamicItem` whose custom id carries whose jobs and a
cursor (a job id): they work on any /history answer after any restart. Who clicks is checked again
on every click; the custom id decides nothing.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, cast

import discord
from discord import app_commands
from discord.app_commands import locale_str
from discord.ext import commands

from cogs import interactions
from cogs.delivery.record import DiscordRecord
from cogs.i18n import t
from cogs.i18n.personal import place_key
from cogs.literal import as_text
from cogs.places import where
from cogs.queue import HIDDEN_KEYS
from cogs.tree import acknowledge_in_place, answer_error, defer, reply_privately
from framecast.app import (
    Actor,
    HistoryPage,
    HistoryRefused,
    HistoryRow,
    JobKind,
    JobState,
    MemberHistory,
    QueueViewer,
    is_personal_queue,
)

if TYPE_CHECKING:
    from bot import Framecast

__all__ = ["History", "HistoryPageButton", "history_view", "jump_url", "render_history"]

log = logging.getLogger(__name__)

#: A prompt is cut to this many characters (escapes included) in a row; shorter when ten rows would
#: not fit Discord's 4096-character embed description (see :func:`render_history`).
PROMPT_CHARS = (200, 120, 60, 20)
_DESCRIPTION_MAX = 4096
#: The words for each state (running covers everything between the queue and the result).
STATE_KEYS: dict[JobState, str] = {
    JobState.QUEUED: "history_state_queued",
    JobState.SUBMITTING: "history_state_running",
    JobState.RUNNING: "history_state_running",
    JobState.DELIVERING: "history_state_running",
    JobState.DELIVERED: "history_state_delivered",
    JobState.FAILED: "history_state_failed",
    JobState.CANCELLED: "history_state_cancelled",
}


def jump_url(row: HistoryRow) -> str | None:
    """The link to the job's current message (None: deleted, hidden, or not known)."""
    job = row.job
    if row.deleted is not None or row.hidden is not None:
        return None
    record = DiscordRecord.from_dict(job.discord)
    message_id = record.channel_message_id or record.message_id
    if message_id is None:
        return None
    # A personal queue's jobs (user installs) carry the person's own id: their messages are in DMs.
    place = "@me" if is_personal_queue(job.guild_id, job.user_id) else str(job.guild_id)
    return f"https://discord.com/channels/{place}/{job.channel_id}/{message_id}"


def _row_text(row: HistoryRow, locale: str, prompt_chars: int) -> str:
    job = row.job
    state = t("history_state_deleted" if row.deleted is not None else STATE_KEYS[job.state], locale)
    kind = t("kind_video" if job.kind is JobKind.VIDEO else "kind_image", locale)
    parts = [f"**#{job.id}**", state, kind, f"<t:{int(job.created_at)}:R>"]
    link = jump_url(row)
    if link is not None:
        parts.append(f"[{t('history_link', locale)}]({link})")
    if row.hidden is not None:
        prompt = t(HIDDEN_KEYS[row.hidden], locale)
    else:
        # The member's words, literally: no mention pings, no markdown or masked link renders.
        prompt = as_text(" ".join((row.prompt or "").split()), limit=prompt_chars)
    return " · ".join(parts) + "\n" + prompt


def render_history(page: HistoryPage, *, locale: str) -> discord.Embed:
    """The /history answer: whose jobs, a row per job, and the page among all of them."""
    embed = discord.Embed(title=t("history_title", locale), colour=discord.Colour.blurple())
    header = t("history_member", locale, user=f"<@{page.member_id}>")
    if not page.rows:
        embed.description = f"{header}\n\n{t('history_empty', locale)}"
        return embed
    for chars in PROMPT_CHARS:
        text = header + "\n\n" + "\n".join(_row_text(row, locale, chars) for row in page.rows)
        if len(text) <= _DESCRIPTION_MAX:
            break
    embed.description = text[:_DESCRIPTION_MAX]
    embed.set_footer(text=t("history_page", locale, page=page.page, pages=page.pages, count=page.total))
    return embed


class HistoryPageButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=r"framecast:history:(?P<member>[0-9]{1,20}):(?P<way>older|newer):(?P<cursor>[0-9]{1,20})",
):
    """Previous (newer jobs) or Next (older jobs) on a /history answer."""

    def __init__(self, member_id: int, way: str, cursor: int, *, label: str, disabled: bool = False) -> None:
        super().__init__(
            discord.ui.Button(
                label=label,
                style=discord.ButtonStyle.secondary,
                custom_id=f"framecast:history:{member_id}:{way}:{cursor}",
                disabled=disabled,
            )
        )
        self.member_id = member_id
        self.way = way
        self.cursor = cursor

    @classmethod
    async def from_custom_id(
        cls,
        interaction: discord.Interaction[Any],
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> HistoryPageButton:
        """The button a click was on, from its custom id."""
        return cls(int(match["member"]), match["way"], int(match["cursor"]), label=match["way"])

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        """Show the page the button leads to, in place (a click on any other message than a
        private page: privately, :func:`cogs.tree.acknowledge_in_place`); who may see it is checked again."""
        try:
            await acknowledge_in_place(interaction)
            older, newer = (self.cursor, None) if self.way == "older" else (None, self.cursor)
            await _answer(interaction, self.member_id, before=older, after=newer)
        except Exception as error:
            await answer_error(interaction, error, what=f"the history {self.way} button")


def history_view(page: HistoryPage, locale: str) -> discord.ui.View:
    """Previous and Next (disabled at either end)."""
    view = discord.ui.View(timeout=None)
    view.add_item(
        HistoryPageButton(
            page.member_id,
            "newer",
            page.newer or 0,
            label=t("history_previous", locale),
            disabled=page.newer is None,
        )
    )
    view.add_item(
        HistoryPageButton(
            page.member_id,
            "older",
            page.older or 0,
            label=t("history_next", locale),
            disabled=page.older is None,
        )
    )
    return view


def _history(interaction: discord.Interaction[Any]) -> MemberHistory:
    return cast("Framecast", interaction.client).core.history


def _who(interaction: discord.Interaction[Any]) -> tuple[Actor, QueueViewer]:
    """The viewer as an actor in the scope, and what they can read: a server, or (in DMs) their own
    personal queue, where they are alone and manage nothing."""
    if interaction.guild_id is None:
        me = interaction.user.id
        return Actor(user_id=me, guild_id=me), QueueViewer(me)
    return interactions.actor(interaction), interactions.queue_viewer(interaction)


async def _answer(
    interaction: discord.Interaction[Any], member_id: int, *, before: int | None, after: int | None
) -> None:
    """Edit the (private, acknowledged) answer into the page; a refusal is said privately."""
    actor, viewer = _who(interaction)
    locale = interaction.locale.value
    try:
        page = await _history(interaction).show(actor, viewer, member_id, before=before, after=after)
    except HistoryRefused:
        key = place_key("history_not_allowed", personal=where(interaction).personal)
        await reply_privately(interaction, t(key, locale))
        return
    await interaction.edit_original_response(
        content=None,
        embed=render_history(page, locale=locale),
        view=history_view(page, locale),
        allowed_mentions=discord.AllowedMentions.none(),
    )


class History(commands.Cog):
    """The /history command and its page buttons."""

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot

    async def cog_load(self) -> None:
        """Let Previous and Next answer clicks (on any /history answer, after any restart)."""
        self.bot.add_dynamic_items(HistoryPageButton)

    async def cog_unload(self) -> None:
        """Stop answering Previous and Next."""
        self.bot.remove_dynamic_items(HistoryPageButton)

    @app_commands.command(name=locale_str("history"), description=locale_str("Your jobs here, newest first"))
    @app_commands.guild_only()
    @app_commands.rename(member=locale_str("member"))
    @app_commands.describe(member=locale_str("Whose jobs to show (someone else's needs Manage Server)"))
    async def history(
        self, interaction: discord.Interaction[Framecast], member: discord.User | None = None
    ) -> None:
        """Show a member's jobs here (yours by default), privately, newest first."""
        await defer(interaction, ephemeral=True, thinking=True)
        member_id = member.id if member is not None else interaction.user.id
        await _answer(interaction, member_id, before=None, after=None)


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(History(bot))
