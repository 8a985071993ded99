"""The command tree with Framecast's one error handler, and the ways every command and click is
acknowledged and answered.

Expected errors (bad input, limits, permissions) become short, private, localised replies (their
words: :mod:`cogs.error_text`).
Anything else is logged with its traceback and the member gets a generic apology, never
"This interaction failed".

One handler for every way in: :func:`answer_error` is called by the tree's ``on_error`` (slash
commands) and by the job buttons' and the Remix form's ``on_error`` (see
:mod:`cogs.views.buttons` and :mod:`cogs.views.remix`), so the private error reply exists once.

The interactions being handled are known (:class:`Handlers`, kept by the tree), so that a stop lets
them send their answers before Discord's session closes: see ``Framecast.close`` in ``bot.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

import discord
from discord import app_commands

from cogs.delivery.codes import DiscordCode
from cogs.discord_internals import count_as_deferred
from cogs.error_text import error_message
from cogs.i18n import t
from cogs.places import where
from framecast.app import StoreUnavailable

log = logging.getLogger(__name__)

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


class Handlers:
    """The interactions being handled now (slash commands, clicks, form submits): each handler's task,
    from its entry point until it ends.

    discord.py runs every handler in a task of its own and keeps no public account of them; a stop
    that closed its HTTP session under them left members on "thinking…" for ever. A handler joins at
    its entry point where we have one (:meth:`FramecastTree.interaction_check` for every command, a
    job button's callback) and, whatever it is (a /history page, a form's submit), when it
    acknowledges or answers through this module (:func:`defer`, :func:`reply_privately`): from then
    on an answer is owed. It leaves when its task ends, so nothing is kept for a finished one.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return sum(1 for task in self._tasks if not task.done())

    def track(self) -> None:
        """Count the running task as a handler until it ends (once, however often it is called)."""
        task = asyncio.current_task()
        if task is None or task.done() or task in self._tasks:
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def finish(self, timeout: float) -> tuple[int, int]:
        """Let every handler end (those starting meanwhile too) within `timeout` seconds, then stop
        the rest; returns how many were waited for and how many were cut off.

        A handler cut off is cancelled and its end is read (and logged), so none is left to fail on
        a closed session, nor as "Task exception was never retrieved".
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        waited: set[asyncio.Task[Any]] = set()
        while (running := self._running()) and (left := deadline - loop.time()) > 0:
            waited |= running
            await asyncio.wait(running, timeout=left)
        for task in waited:
            if task.done():
                _read_end(task, cut_off=False)
        cut = self._running()
        for task in cut:
            task.add_done_callback(functools.partial(_read_end, cut_off=True))
            task.cancel()
        if cut:
            # A cancelled handler unwinds at its next await; one that ignores the cancel is read
            # whenever it ends (its callback above), never waited for past the bound.
            await asyncio.wait(cut, timeout=_UNWIND)
        return len(waited | cut), len(cut)

    def _running(self) -> set[asyncio.Task[Any]]:
        me = asyncio.current_task()
        return {task for task in self._tasks if not task.done() and task is not me}


#: Seconds a cut-off handler gets to unwind after its cancel (it only runs its ``finally`` blocks).
_UNWIND = 0.5


def _read_end(task: asyncio.Task[Any], *, cut_off: bool) -> None:
    """Read how a handler ended during a stop, so asyncio has no unread exception to report."""
    if task.cancelled():
        return
    error = task.exception()
    if error is None:
        return
    if cut_off:
        log.info("an interaction handler cut off by the stop ended with %s", type(error).__name__)
    else:
        log.error("an interaction handler failed during the stop", exc_info=error)


def handling(interaction: discord.Interaction[Any]) -> None:
    """Count the running task as the handler of `interaction` (see :class:`Handlers`)."""
    tree = getattr(getattr(interaction, "client", None), "tree", None)
    if isinstance(tree, FramecastTree):
        tree.handlers.track()


async def defer(
    interaction: discord.Interaction[Any], *, ephemeral: bool = False, thinking: bool = False
) -> None:
    """``interaction.response.defer``, also when Discord took it and its answer was lost, and also
    when the message a click was on is gone. From here on the running task is a handler whose
    answer is owed (:func:`handling`).

    discord.py sends a lost one again and Discord refuses with 40060 (already acknowledged): the
    interaction is acknowledged and the command goes on (it stayed "thinking…" for ever, its job
    never queued, with a traceback in the log).

    A click's deferred update (the answer is the clicked message changing: Cancel) is refused with
    10008 Unknown Message when that message was deleted, or its channel, after the click. A refused
    callback acknowledges nothing, so the click is acknowledged privately instead ("thinking…",
    seen only by the member, completed by :func:`answer_click`) and goes on: the member's cancel is
    carried out. When Discord refuses that too (the place is gone), the click goes on
    unacknowledged.
    """
    handling(interaction)
    try:
        await interaction.response.defer(ephemeral=ephemeral, thinking=thinking)
    except discord.HTTPException as exc:
        if exc.code == DiscordCode.UNKNOWN_MESSAGE and _updates_the_message(interaction, thinking=thinking):
            await _acknowledge_without_the_message(interaction)
            return
        if exc.code != _ALREADY_ACKNOWLEDGED:
            raise
        log.info("interaction %s: the acknowledgement's answer was lost; Discord has it", interaction.id)
        count_as_deferred(interaction, thinking=thinking)


def _updates_the_message(interaction: discord.Interaction[Any], *, thinking: bool) -> bool:
    """Whether a deferral is a click's deferred update (callback type 6: the clicked message)."""
    return interaction.type is discord.InteractionType.component and not thinking


async def _acknowledge_without_the_message(interaction: discord.Interaction[Any]) -> None:
    """A click whose message is gone: acknowledged privately, or (refused too) not at all."""
    try:
        await interaction.response.defer(ephemeral=True, thinking=True)
    except discord.HTTPException as exc:
        log.warning(
            "interaction %s: its message is gone and Discord refused a private answer too "
            "(HTTP %s, code %s); the click goes on unanswered",
            interaction.id,
            exc.status,
            exc.code,
        )
        return
    log.info("interaction %s: the message clicked is gone; the click is answered privately", interaction.id)


async def answer_click(interaction: discord.Interaction[Any], text: str) -> None:
    """A click answered with a deferred update needs no words (its message shows the outcome);
    one whose message was gone (:func:`defer` acknowledged it privately instead) reads `text`."""
    if interaction.response.type is not discord.InteractionResponseType.deferred_channel_message:
        return
    try:
        await interaction.edit_original_response(
            content=text, allowed_mentions=discord.AllowedMentions.none()
        )
    except discord.HTTPException as exc:
        log.warning(
            "interaction %s: could not answer the click: HTTP %s (code %s)",
            interaction.id,
            exc.status,
            exc.code,
        )


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
    handling(interaction)
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
    cause = error.__cause__ or error
    if isinstance(cause, discord.HTTPException) and cause.code == DiscordCode.THREAD_ARCHIVED:
        # A moderator closed the thread while this was being answered: Discord refuses every reply
        # there, an apology too. Nothing failed on our side (what was asked is done, or not begun).
        log.info("%s: not answered, its thread was closed meanwhile", what)
        return
    text = error_message(error, interaction.locale, personal=_personal(interaction))
    if text is None:
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
    """Command tree whose ``on_error`` turns expected errors into short localised replies, and which
    keeps the interactions being handled (:attr:`handlers`)."""

    def __init__(self, client: discord.Client, **options: Any) -> None:
        super().__init__(client, **options)
        #: Every command, click and form submit being handled now: a stop lets them answer.
        self.handlers = Handlers()

    async def interaction_check(self, interaction: discord.Interaction[Any], /) -> bool:
        """Every command (and autocomplete) starts here, in the task that runs it to its answer,
        error reply included: that task is a handler until it ends."""
        handling(interaction)
        return True

    async def on_error(
        self, interaction: discord.Interaction[Any], error: app_commands.AppCommandError
    ) -> None:
        """Every command's error: through :func:`answer_error`."""
        command = interaction.command.qualified_name if interaction.command else "?"
        await answer_error(interaction, error, what=f"command {command}")
