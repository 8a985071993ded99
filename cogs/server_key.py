"""/settings key: a server's admins set (or remove) the server's own API key.

``set`` opens a form (:mod:`cogs.views.key_form`: never prefilled, never echoed, never kept); its
submit comes back through the settings cog's ``on_interaction`` listener to :func:`submit_key`, and
the core checks the key with one model-list call before storing it (encrypted). Who may is the
application's rule (``Admins.authorize`` through :func:`cogs.interactions.admin`, asked before the
form opens and before anything is acknowledged; each use case asks again). ``remove`` goes back
to the operator's key. The subgroup is attached to /settings by the settings cog's ``setup``.

A key the service later refuses is reported by the delivery code (:mod:`cogs.delivery.key_notice`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.app_commands import locale_str

from cogs.error_text import relative_time
from cogs.i18n import t
from cogs.interactions import actor, admin, admins
from cogs.literal import as_text
from cogs.tree import acknowledge_privately, answer_privately, defer
from cogs.views.key_form import key_form
from framecast.app import KeyAvailability, KeyRemoved, KeySetResult

if TYPE_CHECKING:
    from bot import Framecast

__all__ = ["KeyGroup", "submit_key"]

#: The reply when the operator made server keys unavailable.
_KEY_UNAVAILABLE = {
    KeyAvailability.DISABLED: "settings_key_disabled",
    KeyAvailability.NO_SECRET: "settings_key_no_secret",
}
_KEY_SET_REPLIES = {
    KeySetResult.SAVED: "settings_key_saved",
    KeySetResult.REFUSED: "settings_key_refused",
    KeySetResult.MALFORMED: "settings_key_malformed",
    KeySetResult.UNREACHABLE: "settings_key_unreachable",
    KeySetResult.DISABLED: "settings_key_disabled",
    KeySetResult.NO_SECRET: "settings_key_no_secret",
    KeySetResult.THROTTLED: "settings_key_checks_throttled",
}


class KeyGroup(app_commands.Group):
    """The /settings key subgroup (attached to /settings by ``cogs.settings``'s ``setup``)."""

    def __init__(self) -> None:
        super().__init__(name=locale_str("key"), description=locale_str("This server's own API key"))

    async def interaction_check(self, interaction: discord.Interaction[Any], /) -> bool:
        """The application says who may; then acknowledge, except where a form must be the answer."""
        admin(interaction)
        if getattr(interaction.command, "callback", None) is not KeyGroup.set_.callback:
            await acknowledge_privately(interaction)  # before a write, which may outwait Discord
        return True

    @app_commands.command(name=locale_str("set"), description=locale_str("Use this server's own API key"))
    async def set_(self, interaction: discord.Interaction[Framecast]) -> None:
        """Open the key form, unless the operator made server keys unavailable."""
        availability = admins(interaction).key_availability(actor(interaction))
        if availability is not KeyAvailability.READY:
            await answer_privately(interaction, t(_KEY_UNAVAILABLE[availability], interaction.locale))
            return
        # Its own custom id per opening, never kept: the submit comes back through on_interaction.
        await interaction.response.send_modal(key_form(interaction.locale))

    @app_commands.command(
        name=locale_str("remove"), description=locale_str("Go back to the operator's API key")
    )
    async def remove(self, interaction: discord.Interaction[Framecast]) -> None:
        """Forget the server's key: its jobs use the operator's key again."""
        removed = await admins(interaction).remove_key(actor(interaction))
        key = "settings_key_removed" if removed is KeyRemoved.REMOVED else "settings_key_none_to_remove"
        await answer_privately(interaction, t(key, interaction.locale))


async def submit_key(interaction: discord.Interaction[Any], key: str) -> None:
    """The form's submit: the core checks the key with one model-list call, then stores it encrypted."""
    who = admin(interaction)  # refused before the acknowledgement, as the commands are
    await defer(interaction, ephemeral=True, thinking=True)
    outcome = await admins(interaction).set_key(who, key)
    when = relative_time(outcome.retry_at or 0.0)
    shown, limit = as_text(outcome.last4), outcome.checks_per_hour
    reply = _KEY_SET_REPLIES[outcome.result]
    await answer_privately(interaction, t(reply, interaction.locale, last4=shown, max=limit, when=when))
