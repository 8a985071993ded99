"""Re-encrypt every stored server key with the first key of ``KEY_ENCRYPTION_SECRET``.

Usage (same environment and ``.env`` as the bot; SQLite or PostgreSQL alike)::

    python -m framecast.keys.rotate

Rotating the secret:

1. Make a new Fernet key and put it first, keeping the old one after it:
   ``KEY_ENCRYPTION_SECRET=<new>,<old>``. Restart the bot: it reads keys stored under either, and
   stores new ones under the new key.
2. Run ``python -m framecast.keys.rotate``. It prints ``rotated N, already current N, unreadable N``
   and, for unreadable ones, only the guild ids. Running it again finds everything current.
3. When it reports ``unreadable 0``, drop the old key (``KEY_ENCRYPTION_SECRET=<new>``) and restart.

Exit codes: 0 every stored key now opens with the first key; 1 some key opens with none of them
(those servers' jobs are refused until an admin sets the key again); 2 the configuration or the
database could not be used. Keys, tokens and the secret are never printed. A key an admin sets
while this runs is kept: each row is swapped only if it still holds the token that was read.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass, field

from framecast.clock import SystemClock
from framecast.config import ConfigError, Settings, load_settings
from framecast.keys.vault import KeyVault, KeyVaultState, Rotation
from framecast.logsetup import setup_logging
from framecast.storage import Store, StoreError, open_store

__all__ = ["RotationReport", "main", "rotate_keys"]

log = logging.getLogger(__name__)


@dataclass
class RotationReport:
    """What one run did: counts, and the guilds whose key no key of the secret opens."""

    rotated: int = 0
    current: int = 0
    unreadable: list[int] = field(default_factory=list)

    def summary(self) -> str:
        """One line of counts (never a key)."""
        return f"rotated {self.rotated}, already current {self.current}, unreadable {len(self.unreadable)}"


async def rotate_keys(store: Store, vault: KeyVault) -> RotationReport:
    """Re-encrypt each stored server key with the vault's first key; see the module docstring."""
    report = RotationReport()
    for row in await store.all_guild_keys():
        outcome, token = vault.rotate(row.token)
        if outcome is Rotation.CURRENT:
            report.current += 1
        elif outcome is Rotation.UNREADABLE:
            report.unreadable.append(row.guild_id)
        else:
            assert token is not None
            if await store.replace_guild_key_token(row.guild_id, row.token, token):
                report.rotated += 1
            else:
                # An admin set (or removed) the key meanwhile: that one is encrypted with the first
                # key of the running bot's secret already, which is not ours to judge again here.
                report.current += 1
    return report


async def _run(settings: Settings) -> int:
    vault = KeyVault(enabled=True, secret=settings.key_encryption_secret)
    if vault.state is not KeyVaultState.READY:
        print("framecast: KEY_ENCRYPTION_SECRET is not set: nothing to rotate with", file=sys.stderr)
        return 2
    try:
        store = await open_store(settings, clock=SystemClock())
    except StoreError as exc:
        print(f"framecast: the database cannot be used: {exc}", file=sys.stderr)
        return 2
    try:
        report = await rotate_keys(store, vault)
    finally:
        await store.close()
    print(report.summary())
    if report.unreadable:
        shown = ", ".join(str(guild) for guild in sorted(report.unreadable))
        print(f"unreadable with every key of KEY_ENCRYPTION_SECRET: guild {shown}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (takes no arguments; reads the bot's configuration)."""
    if argv:
        print("usage: python -m framecast.keys.rotate", file=sys.stderr)
        return 2
    try:
        settings = load_settings()
    except ConfigError as exc:
        for line in exc.lines():
            print(f"framecast: configuration error: {line}", file=sys.stderr)
        return 2
    # Warnings only: the counts are the output, and no record may carry a secret.
    setup_logging("WARNING", secrets=settings.secrets())
    return asyncio.run(_run(settings))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
