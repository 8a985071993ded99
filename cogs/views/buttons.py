"""The job buttons (Cancel, Retry, Again, Remix, Delete and its Confirm/Keep) as typed handlers.

Each is a :class:`discord.ui.DynamicItem`, so a click works on any message, after any restart: its
custom id carries the job's id, its callback translates the click into the use case
(:class:`framecast.app.Members`) and the outcome into a reply. Who may act on the job is the use
case's call, from the stored job; the requester's id that custom ids also carry (messages already
out there have it) decides nothing. Errors go to the one error handler,
:func:`cogs.tree.answer_error`.

Cancel, Retry and Remix read the job before Discord's 3-second acknowledgement (the first two to
refuse a member who may not, privately; Remix because the form is the acknowledgement): a store
slower than :data:`ACK_LOOKUP_TIMEOUT` gets "try again in a moment" (the store's own refusal, as for
a store that is down) instead of "This interaction failed".

Delete asks first, privately: its click answers with a question carrying Confirm and Keep (job
buttons too, so a question still works after a restart); Confirm deletes (the use case checks who
again), Keep only says so.
"""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Any, cast

import discord

from cogs import interactions, tree
from cogs.i18n import t
from cogs.places import where
from cogs.tree import answer_error, defer, reply_privately
from cogs.views import remix
from framecast.app import Deletions, JobAction, RemovalFailed, RemovalProblem

if TYPE_CHECKING:
    from bot import Framecast

__all__ = [
    "ACK_LOOKUP_TIMEOUT",
    "AgainButton",
    "ButtonAction",
    "CancelButton",
    "DeleteButton",
    "DeleteConfirmButton",
    "DeleteKeepButton",
    "JOB_BUTTONS",
    "RemixButton",
    "RetryButton",
]

#: How long a click may wait for the job's record before it must be acknowledged.
ACK_LOOKUP_TIMEOUT = 1.5


class ButtonAction(enum.StrEnum):
    """What a job button does (also the middle part of its custom id)."""

    CANCEL = "cancel"
    RETRY = "retry"
    AGAIN = "again"
    REMIX = "remix"
    DELETE = "delete"
    DELETE_CONFIRM = "delete-confirm"
    DELETE_KEEP = "delete-keep"


def _template(action: ButtonAction) -> str:
    # The trailing requester id is optional: older messages carry it, it decides nothing.
    return rf"framecast:{action}:(?P<job_id>[0-9]{{1,20}})(?::[0-9]{{1,20}})?"


class _JobButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=r"framecast:job-button-base"):
    """Base of the job buttons (never registered itself): the click, then the one error handler."""

    action: ButtonAction
    style = discord.ButtonStyle.secondary

    def __init__(self, job_id: int, owner_id: int | None = None, *, label: str | None = None) -> None:
        owner = "" if owner_id is None else f":{owner_id}"
        super().__init__(
            discord.ui.Button(
                label=label or self.action.title(),
                style=self.style,
                custom_id=f"framecast:{self.action}:{job_id}{owner}",
            )
        )
        self.job_id = job_id

    @classmethod
    async def from_custom_id(
        cls,
        interaction: discord.Interaction[Any],
        item: discord.ui.Item[Any],
        match: re.Match[str],
        /,
    ) -> _JobButton:
        """The button a click was on, from its custom id."""
        return cls(int(match["job_id"]))

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        """Run the click; any error goes to :meth:`on_error` (discord.py would only log it). The
        click is a handler a stop lets finish (:func:`cogs.tree.handling`)."""
        tree.handling(interaction)
        try:
            await self.clicked(interaction)
        except Exception as error:
            await self.on_error(interaction, error)

    async def clicked(self, interaction: discord.Interaction[Any]) -> None:
        """What the button does (each button's typed handler)."""
        raise NotImplementedError

    async def on_error(self, interaction: discord.Interaction[Any], error: Exception) -> None:
        """The one error handler, as for commands."""
        await answer_error(interaction, error, what=f"the {self.action} button of job {self.job_id}")


class CancelButton(_JobButton, template=_template(ButtonAction.CANCEL)):
    """Cancels a queued or running job (its requester or a member with Manage Server)."""

    action = ButtonAction.CANCEL
    style = discord.ButtonStyle.danger

    async def clicked(self, interaction: discord.Interaction[Any]) -> None:
        """Refuse privately who may not; otherwise a silent acknowledgement, and the message shows it
        (a message deleted meanwhile: the job's fresh one shows it, and the member reads it privately,
        see :func:`cogs.tree.defer`)."""
        actor = interactions.actor(interaction)
        members = interactions.members(interaction)
        await tree.before_acknowledging(
            members.authorize(actor, self.job_id, JobAction.CANCEL), ACK_LOOKUP_TIMEOUT
        )
        await defer(interaction)
        await members.cancel(actor, self.job_id)
        await tree.answer_click(interaction, t("cancel_done", interaction.locale, id=self.job_id))


class RetryButton(_JobButton, template=_template(ButtonAction.RETRY)):
    """Queues a failed job again, as its requester's new job in a new message (requester or Manage Server)."""

    action = ButtonAction.RETRY
    style = discord.ButtonStyle.primary

    async def clicked(self, interaction: discord.Interaction[Any]) -> None:
        """Check who and where before the acknowledgement, then queue the retry."""
        members = interactions.members(interaction)
        who = interactions.requester(interaction)
        interactions.check_channel(interaction)
        job = await tree.before_acknowledging(
            members.authorize(
                interactions.actor(interaction),
                self.job_id,
                JobAction.RETRY,
                interactions.queue_viewer(interaction),
            ),
            ACK_LOOKUP_TIMEOUT,
        )
        request = members.prepare_retry(who, job)
        await defer(interaction, thinking=True)
        await members.retry(request, interactions.job_bookkeeping(interaction))


class AgainButton(_JobButton, template=_template(ButtonAction.AGAIN)):
    """Queues a delivered job's prompt and settings again, as the clicker's own job (any member)."""

    action = ButtonAction.AGAIN
    style = discord.ButtonStyle.primary

    async def clicked(self, interaction: discord.Interaction[Any]) -> None:
        """Where and whether before the acknowledgement, then the new job in its own message."""
        members = interactions.members(interaction)
        who = interactions.requester(interaction)
        interactions.check_channel(interaction)
        members.check(who)
        await defer(interaction, thinking=True)
        viewer = interactions.queue_viewer(interaction)
        await members.again(who, viewer, self.job_id, interactions.job_bookkeeping(interaction))


class RemixButton(_JobButton, template=_template(ButtonAction.REMIX)):
    """Opens a form with a delivered job's prompt and settings to edit and queue (any member)."""

    action = ButtonAction.REMIX
    style = discord.ButtonStyle.secondary

    async def clicked(self, interaction: discord.Interaction[Any]) -> None:
        """The form is the acknowledgement: the job is read before it (bounded)."""
        members = interactions.members(interaction)
        who = interactions.requester(interaction)
        interactions.check_channel(interaction)
        viewer = interactions.queue_viewer(interaction)
        prefill = await tree.before_acknowledging(
            members.remix_prefill(who, viewer, self.job_id), ACK_LOOKUP_TIMEOUT
        )
        await interaction.response.send_modal(remix.remix_form(prefill, interaction.locale))


def _deletions(interaction: discord.Interaction[Any]) -> Deletions:
    return cast("Framecast", interaction.client).core.deletions


class DeleteButton(_JobButton, template=_template(ButtonAction.DELETE)):
    """Asks, privately, whether to delete a delivered result (its requester or Manage Server)."""

    action = ButtonAction.DELETE
    style = discord.ButtonStyle.secondary

    async def clicked(self, interaction: discord.Interaction[Any]) -> None:
        """Refuse privately who may not; else the question, with Confirm and Keep (only they see it)."""
        actor = interactions.actor(interaction)
        checked = await tree.before_acknowledging(
            _deletions(interaction).check(actor, self.job_id), ACK_LOOKUP_TIMEOUT
        )
        loc = interaction.locale
        if checked.already:
            await reply_privately(interaction, t("delete_already", loc, id=self.job_id))
            return
        question = discord.ui.View(timeout=None)
        question.add_item(DeleteConfirmButton(self.job_id, label=t("delete_confirm", loc)))
        question.add_item(DeleteKeepButton(self.job_id, label=t("delete_keep", loc)))
        text, none = t("delete_question", loc, id=self.job_id), discord.AllowedMentions.none()
        if where(interaction).personal and interaction.message is not None:
            # A personal result may be where the bot is not (a group DM, a server without it), and
            # its job's token lasts 15 minutes. This click's own token can delete the message it
            # is on (its @original, once answered with a deferred update), for 15 minutes more.
            await defer(interaction)
            if interaction.response.type is not discord.InteractionResponseType.deferred_message_update:
                # The message is gone (:func:`cogs.tree.defer` answered privately, or could not):
                # this click's @original is not the result, so its token is not kept.
                if interaction.response.is_done():
                    await interaction.edit_original_response(
                        content=text, view=question, allowed_mentions=none
                    )
                return
            reporter = cast("Framecast", interaction.client).core.reporter
            await reporter.delete_clicked(self.job_id, interaction, interaction.message.id)
            await interaction.followup.send(text, view=question, ephemeral=True, allowed_mentions=none)
            return
        await interaction.response.send_message(text, view=question, ephemeral=True, allowed_mentions=none)


class DeleteConfirmButton(_JobButton, template=_template(ButtonAction.DELETE_CONFIRM)):
    """Deletes the result the question is about (who may is checked again, from the stored job)."""

    action = ButtonAction.DELETE_CONFIRM
    style = discord.ButtonStyle.danger

    async def clicked(self, interaction: discord.Interaction[Any]) -> None:
        """Acknowledge (removing a message may take longer than Discord waits), delete, then say so
        in place of the question (on any other message, privately: :func:`cogs.tree.acknowledge_in_place`)."""
        actor = interactions.actor(interaction)
        await tree.acknowledge_in_place(interaction)
        loc = interaction.locale
        try:
            deleted = await _deletions(interaction).delete(actor, self.job_id)
        except RemovalFailed as failed:
            # The result still shows: say what could not be removed and why (the job is not marked).
            text = t(_REMOVAL_KEYS[failed.problem], loc, id=self.job_id)
        else:
            key = "delete_already" if deleted.already else "delete_done"
            text = t(key, loc, id=self.job_id)
            if deleted.pointer_left is not None:
                text = f"{text}\n{t('delete_pointer_left', loc)}"
        await interaction.edit_original_response(
            content=text, view=None, allowed_mentions=discord.AllowedMentions.none()
        )


class DeleteKeepButton(_JobButton, template=_template(ButtonAction.DELETE_KEEP)):
    """Answers the question with no: nothing changes, the question says so."""

    action = ButtonAction.DELETE_KEEP
    style = discord.ButtonStyle.secondary

    async def clicked(self, interaction: discord.Interaction[Any]) -> None:
        """The question becomes "kept", without buttons (a Keep on any other message is forged:
        answered privately, see :func:`cogs.tree.answers_in_place`)."""
        text = t("delete_kept", interaction.locale, id=self.job_id)
        if not tree.answers_in_place(interaction):
            await reply_privately(interaction, text)
            return
        await interaction.response.edit_message(
            content=text, view=None, allowed_mentions=discord.AllowedMentions.none()
        )


#: What the member reads when the result could not be removed, by why.
_REMOVAL_KEYS = {
    RemovalProblem.UNREACHABLE: "delete_failed_unreachable",
    RemovalProblem.REFUSED: "delete_failed",
}

#: The job buttons, registered with the bot when the Jobs cog loads.
JOB_BUTTONS = (
    CancelButton,
    RetryButton,
    AgainButton,
    RemixButton,
    DeleteButton,
    DeleteConfirmButton,
    DeleteKeepButton,
)
