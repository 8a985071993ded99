"""Encryption at rest of the servers' own API keys (Fernet, with a secret from the environment).

The database holds only the Fernet token of a server's key (and its last four characters, to show
"a key ending in ...abcd is set"). The secret, ``KEY_ENCRYPTION_SECRET``, stays in the environment,
so a copied database file alone does not give the keys away. Nothing here ever puts a key, a
token or the secret into an exception message or a ``repr()``.

The secret may be a comma-separated list of Fernet keys (``MultiFernet``): the first encrypts, every
one decrypts. Rotating is: put a new key first and keep the old ones after it, restart, run
``python -m framecast.keys.rotate`` (:mod:`framecast.keys.rotate`, which uses :meth:`KeyVault.rotate`),
then drop the old keys.
"""

from __future__ import annotations

import logging
from enum import StrEnum

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from framecast.config import Secret, fernet_keys

__all__ = ["KeyUnreadable", "KeyVault", "KeyVaultState", "Rotation", "last4"]

log = logging.getLogger(__name__)

# Below this length, showing four characters would give most of a key away.
_SHORTEST_SHOWN = 8


class KeyVaultState(StrEnum):
    """Whether servers may store their own keys."""

    READY = "ready"
    DISABLED = "disabled"  # the operator set GUILD_KEYS=off
    NO_SECRET = "no_secret"  # KEY_ENCRYPTION_SECRET is not set: nothing can be stored encrypted


class KeyUnreadable(Exception):
    """A stored key cannot be decrypted (the secret changed, or guild keys are off now)."""


class Rotation(StrEnum):
    """What :meth:`KeyVault.rotate` found a stored token to be."""

    CURRENT = "current"  # already encrypted with the first key: nothing to write
    ROTATED = "rotated"  # readable with a later key: re-encrypted with the first
    UNREADABLE = "unreadable"  # no key of the secret opens it


class KeyVault:
    """Encrypts and decrypts servers' API keys with the operator's Fernet secret."""

    def __init__(self, *, enabled: bool, secret: Secret | None) -> None:
        """`secret`: ``KEY_ENCRYPTION_SECRET``, one Fernet key or a comma-separated list of them."""
        self._fernet: MultiFernet | None = None
        self._first: Fernet | None = None
        if not enabled:
            self._state = KeyVaultState.DISABLED
        elif secret is None or not secret.reveal():
            self._state = KeyVaultState.NO_SECRET
        else:
            try:
                fernets = [Fernet(key.reveal().encode("ascii")) for key in fernet_keys(secret)]
            except (ValueError, UnicodeEncodeError):
                # `from None`: the underlying error could quote what it was given.
                raise ValueError("KEY_ENCRYPTION_SECRET is not a valid Fernet key") from None
            self._first = fernets[0]
            self._fernet = MultiFernet(fernets)
            self._state = KeyVaultState.READY

    @property
    def state(self) -> KeyVaultState:
        """READY, or why servers cannot store keys."""
        return self._state

    def encrypt(self, key: str) -> bytes:
        """The Fernet token of ``key``. Raises ``RuntimeError`` unless :attr:`state` is READY."""
        if self._fernet is None:
            raise RuntimeError(f"guild keys cannot be stored ({self._state.value})")
        if not isinstance(key, str) or not key:
            raise ValueError("an API key must be a non-empty string")
        return self._fernet.encrypt(key.encode("utf-8"))

    def decrypt(self, token: bytes) -> Secret:
        """The key inside ``token``. Raises :class:`KeyUnreadable` if it cannot be read."""
        if self._fernet is None:
            raise KeyUnreadable(f"stored API key cannot be read: guild keys are {self._state.value}")
        try:
            return Secret(self._fernet.decrypt(bytes(token)).decode("utf-8"))
        except (InvalidToken, TypeError, ValueError):
            raise KeyUnreadable(
                "stored API key cannot be decrypted (KEY_ENCRYPTION_SECRET changed?)"
            ) from None

    def rotate(self, token: bytes) -> tuple[Rotation, bytes | None]:
        """`token` re-encrypted with the first key: ``(ROTATED, new)``; ``(CURRENT, None)`` when the
        first key already opens it (so rotating twice writes nothing), ``(UNREADABLE, None)`` when no
        key does. Raises ``RuntimeError`` unless :attr:`state` is READY."""
        if self._fernet is None or self._first is None:
            raise RuntimeError(f"guild keys cannot be rotated ({self._state.value})")
        try:
            self._first.decrypt(bytes(token))
            return Rotation.CURRENT, None
        except (InvalidToken, TypeError, ValueError):
            pass
        try:
            return Rotation.ROTATED, self._fernet.rotate(bytes(token))
        except (InvalidToken, TypeError, ValueError):
            return Rotation.UNREADABLE, None

    def __repr__(self) -> str:
        return f"KeyVault(state={self._state.value})"


def last4(key: str) -> str:
    """The last four characters of ``key`` (the only part ever shown); "" for keys under 8 characters."""
    key = key.strip()
    return key[-4:] if len(key) >= _SHORTEST_SHOWN else ""
