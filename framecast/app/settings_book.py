"""The servers' settings as the running core knows them: read from memory, written by one writer.

Every server's own settings are read from the store once at start-up and kept here; the intake, the
members' use cases and /settings read them (capped by the operator's ceilings: :meth:`policy`);
:meth:`SettingsBook.update` is the only place that changes them (validated, persisted, then cached).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from framecast.guilds.settings import Ceilings, GuildSettings, Policy, Setting, check_change, resolve
from framecast.storage import Store

__all__ = ["SettingsBook"]

log = logging.getLogger(__name__)


class SettingsBook:
    """Every server's own settings (servers without any are absent), kept in step with the store."""

    def __init__(self, store: Store, ceilings: Ceilings, known: Mapping[int, GuildSettings]) -> None:
        self._store = store
        #: The operator's ceilings (and defaults) every server's settings are capped by.
        self.ceilings = ceilings
        self._settings: dict[int, GuildSettings] = dict(known)
        self._writing = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<SettingsBook servers={len(self._settings)}>"

    def settings(self, guild_id: int) -> GuildSettings:
        """The server's own settings (defaults if it set none), from memory."""
        return self._settings.get(guild_id) or GuildSettings()

    def policy(self, guild_id: int) -> Policy:
        """The server's effective policy: its settings capped by the operator's ceilings."""
        return resolve(self.settings(guild_id), self.ceilings)

    async def update(
        self, guild_id: int, *, by: int, **changes: Any
    ) -> tuple[GuildSettings, tuple[Setting, ...]]:
        """Validate and persist `changes` (user `by` made them); the new settings and what really changed.

        Raises :class:`~framecast.guilds.settings.SettingsError` for a value the server may not have.
        Only settings whose value really changes are saved and logged (by name, never by value: a
        blocklist can hold words nobody wants in a log).
        """
        return await self.amend(guild_id, by=by, edit=lambda _current: changes)

    async def amend(
        self, guild_id: int, *, by: int, edit: Callable[[GuildSettings], Mapping[str, Any]]
    ) -> tuple[GuildSettings, tuple[Setting, ...]]:
        """:meth:`update` with the changes `edit` makes of the server's settings as they are then.

        Changes are made one at a time, each from what the one before left (a channel added to the
        list, a term to the blocklist): two admins changing settings at once each saved the whole
        settings read before the other's write, so the first change was lost (four channels added
        at once left one).
        """
        if guild_id == by:
            # A person's own queue (its id is theirs): it has the operator's settings and no others.
            raise ValueError("a personal queue has no server settings")
        # One lock for every server: changes are rare, and each is one write.
        async with self._writing:
            current = self.settings(guild_id)
            changes = edit(current)
            new = check_change(current, self.ceilings, **changes)
            changed = tuple(Setting(name) for name in changes if getattr(new, name) != getattr(current, name))
            if not changed:
                return current, ()
            await self._store.save_guild_settings(guild_id, new, by=by, changed=list(changed))
            self._settings[guild_id] = new
        log.info("guild %s: user %s changed %s", guild_id, by, ", ".join(c.value for c in changed))
        return new, changed
