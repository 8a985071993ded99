"""The servers' own API keys as stored: read and decrypted, encrypted and written, marked rejected.

A server's admin may set the server's own key (``/settings key``). The store keeps it encrypted
(:class:`~framecast.keys.vault.KeyVault`), with its last four characters and the service's verdict.
:class:`ServerKeys` is the one place that turns those rows into keys and back, and that remembers
which stored keys no secret opens. It holds keys only: the budget, client and planner each key is
used with are put together above it (:class:`framecast.accounts.Accounts`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from framecast.config import Secret
from framecast.guilds.settings import KeyStatus
from framecast.keys.vault import KeyUnreadable, KeyVault, KeyVaultState, last4
from framecast.storage import Store, StoredKey

__all__ = ["OpenedKey", "ServerKeys"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenedKey:
    """A server's own key, decrypted: what its account is opened on."""

    guild_id: int
    key: Secret = field(repr=False)
    last4: str  # the only part of the key ever shown (to the server's admins)
    rejected: bool  # the service refused the key (401) before


class ServerKeys:
    """The servers' keys in the store, through the vault (see the module docstring)."""

    def __init__(self, *, store: Store, vault: KeyVault) -> None:
        self._store = store
        self._vault = vault
        self._unreadable: set[int] = set()  # stored keys the vault cannot decrypt (secret changed)

    def __repr__(self) -> str:
        return f"<ServerKeys unreadable={len(self._unreadable)} vault={self._vault.state}>"

    @property
    def vault_state(self) -> KeyVaultState:
        """Whether servers may set their own keys (see :class:`~framecast.keys.vault.KeyVaultState`)."""
        return self._vault.state

    async def open_all(self) -> list[OpenedKey] | None:
        """Every stored key this process can read (at start-up).

        None when there is nothing to open: no key stored, or server keys turned off. A key no
        secret opens is left out, remembered (:meth:`unreadable`) and logged; it never stops the start.
        """
        stored = await self._store.all_guild_keys()
        if not stored:
            return None
        if self._vault.state is KeyVaultState.DISABLED:
            # The operator turned server keys off (GUILD_KEYS=off): every server uses the operator's
            # key; the stored ciphertext is kept for when they are back on.
            log.warning(
                "%d server key(s) are stored but server keys are %s: those servers use the operator's key",
                len(stored),
                self._vault.state.value,
            )
            return None
        # Without KEY_ENCRYPTION_SECRET (NO_SECRET) every stored key is unreadable: each server is
        # refused, not moved onto the operator's key (_open).
        return [key for row in stored if (key := self._open(row)) is not None]

    async def open_one(self, guild_id: int) -> OpenedKey | None:
        """The guild's stored key, if it has one this process can read (and server keys are on)."""
        if guild_id in self._unreadable or self._vault.state is KeyVaultState.DISABLED:
            return None
        row = await self._store.guild_key(guild_id)
        return self._open(row) if row is not None else None

    def _open(self, row: StoredKey) -> OpenedKey | None:
        try:
            key = self._vault.decrypt(row.token)
        except KeyUnreadable:
            # Not silently the operator's key either: the intake refuses until an admin sets it again.
            log.warning(
                "guild %s: its stored API key cannot be decrypted (KEY_ENCRYPTION_SECRET changed or unset?)",
                row.guild_id,
            )
            self._unreadable.add(row.guild_id)
            return None
        return OpenedKey(row.guild_id, key, row.last4, rejected=row.status is KeyStatus.REJECTED)

    def unreadable(self, guild_id: int) -> bool:
        """The guild stored a key that no key of ``KEY_ENCRYPTION_SECRET`` opens (or the secret is unset)."""
        return guild_id in self._unreadable

    def forget_unreadable(self, guild_id: int) -> bool:
        """An admin set or removed the guild's key: its old one no longer matters. Whether it was unreadable."""
        was = guild_id in self._unreadable
        self._unreadable.discard(guild_id)
        return was

    async def save(self, guild_id: int, key: str, *, by: int) -> OpenedKey:
        """Encrypt and store the guild's key (status OK, the change logged in the store)."""
        key = key.strip()
        shown = last4(key)
        await self._store.set_guild_key(guild_id, self._vault.encrypt(key), shown, by=by)
        return OpenedKey(guild_id, Secret(key), shown, rejected=False)

    async def remove(self, guild_id: int, *, by: int) -> bool:
        """Forget the guild's stored key (the change logged in the store); False if it had none."""
        return await self._store.delete_guild_key(guild_id, by=by)

    async def mark_rejected(self, guild_id: int, last4: str) -> bool:
        """The service refused the guild's key ending in `last4` (401): remember it across restarts
        and processes. Whether this process is the first to (another may have, or replaced the key)."""
        return await self._store.mark_guild_key(guild_id, KeyStatus.REJECTED, last4=last4)
