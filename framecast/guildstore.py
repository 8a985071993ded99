"""The job store's guild tables: server settings, servers' own API keys, and the settings audit log.

:class:`GuildTables` is a mixin of :class:`framecast.store.JobStore` (same connection, same single
worker thread, same ``BEGIN IMMEDIATE`` transactions); it lives here to keep ``store.py`` about jobs.
The tables are created by the store's schema v4 migration.

Only ciphertext of an API key is stored (a Fernet token, see :mod:`framecast.keys.vault`), plus its
last four characters; the audit log records who changed which setting and when, never a value.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from framecast.guilds.settings import GuildSettings, KeyStatus, Setting

__all__ = ["GuildTables", "SettingsChange", "StoredKey"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True)
class SettingsChange:
    """One audit-log row: ``user_id`` changed ``setting`` of ``guild_id`` at ``at`` (epoch seconds)."""

    guild_id: int
    user_id: int
    setting: Setting
    at: float


@dataclass(frozen=True)
class StoredKey:
    """A server's own API key as stored: its Fernet token (never the key), last four characters, status."""

    guild_id: int
    token: bytes = field(repr=False)
    last4: str
    status: KeyStatus
    set_by: int
    set_at: float


class GuildTables:
    """Guild settings, guild keys and the settings log (mixed into :class:`~framecast.store.JobStore`)."""

    # Provided by JobStore.
    _conn: sqlite3.Connection

    async def _call(self, fn: Callable[..., _T], /, *args: Any) -> _T:
        raise NotImplementedError

    def _timestamp(self) -> float:
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    # ------------------------------------------------------------------ settings

    async def guild_settings(self, guild_id: int) -> GuildSettings:
        """The server's own settings (``GuildSettings()`` if it never changed any)."""
        return await self._call(self._guild_settings_sync, _id(guild_id))

    async def all_guild_settings(self) -> dict[int, GuildSettings]:
        """Every server's own settings, by guild id (servers without any are left out)."""
        return await self._call(self._all_guild_settings_sync)

    async def save_guild_settings(
        self, guild_id: int, settings: GuildSettings, *, by: int, changed: Sequence[Setting]
    ) -> None:
        """Store ``settings`` and one audit row per ``changed`` setting, in one transaction."""
        data = json.dumps(settings.to_json(), ensure_ascii=False, separators=(",", ":"))
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            data = json.dumps(settings.to_json(), separators=(",", ":"))  # lone surrogates escaped
        changes = [Setting(s) for s in changed]
        await self._call(self._save_settings_sync, _id(guild_id), data, _id(by), changes, self._timestamp())

    async def settings_log(self, guild_id: int, limit: int = 20) -> list[SettingsChange]:
        """The server's latest ``limit`` settings changes, newest first."""
        return await self._call(self._settings_log_sync, _id(guild_id), max(0, int(limit)))

    # ------------------------------------------------------------------ keys

    async def guild_key(self, guild_id: int) -> StoredKey | None:
        """The server's stored key, or None."""
        keys = await self._call(self._keys_sync, _id(guild_id))
        return keys[0] if keys else None

    async def all_guild_keys(self) -> list[StoredKey]:
        """Every stored server key, by guild id."""
        return await self._call(self._keys_sync, None)

    async def set_guild_key(self, guild_id: int, token: bytes, last4: str, *, by: int) -> None:
        """Store (or replace) the server's key token, status OK, and log an API_KEY change."""
        if not isinstance(token, bytes) or not token:
            raise TypeError("a guild key token must be non-empty bytes (the Fernet ciphertext)")
        if not isinstance(last4, str) or len(last4) > 4:
            raise ValueError("last4 must be at most four characters")
        await self._call(self._set_key_sync, _id(guild_id), token, last4, _id(by), self._timestamp())

    async def delete_guild_key(self, guild_id: int, *, by: int) -> bool:
        """Forget the server's key (logged as an API_KEY change); False if it had none."""
        return await self._call(self._delete_key_sync, _id(guild_id), _id(by), self._timestamp())

    async def mark_guild_key(self, guild_id: int, status: KeyStatus) -> None:
        """Record the service's verdict on the server's key (e.g. REJECTED after a 401)."""
        await self._call(self._mark_key_sync, _id(guild_id), KeyStatus(status).value)

    # ------------------------------------------------------------------ worker-thread side

    def _guild_settings_sync(self, guild_id: int) -> GuildSettings:
        row = self._conn.execute("SELECT data FROM guild_settings WHERE guild_id = ?", (guild_id,)).fetchone()
        return _settings_from(row[0], guild_id) if row is not None else GuildSettings()

    def _all_guild_settings_sync(self) -> dict[int, GuildSettings]:
        rows = self._conn.execute("SELECT guild_id, data FROM guild_settings ORDER BY guild_id")
        return {int(row[0]): _settings_from(row[1], int(row[0])) for row in rows}

    def _save_settings_sync(
        self, guild_id: int, data: str, by: int, changed: list[Setting], now: float
    ) -> None:
        with self._transaction():
            self._conn.execute(
                "INSERT INTO guild_settings (guild_id, data, updated_at, updated_by) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (guild_id) DO UPDATE SET data = excluded.data,"
                " updated_at = excluded.updated_at, updated_by = excluded.updated_by",
                (guild_id, data, now, by),
            )
            self._log_sync(guild_id, by, changed, now)

    def _log_sync(self, guild_id: int, by: int, changed: Sequence[Setting], now: float) -> None:
        self._conn.executemany(
            "INSERT INTO settings_log (guild_id, user_id, setting, at) VALUES (?, ?, ?, ?)",
            [(guild_id, by, setting.value, now) for setting in changed],
        )

    def _settings_log_sync(self, guild_id: int, limit: int) -> list[SettingsChange]:
        rows = self._conn.execute(
            "SELECT guild_id, user_id, setting, at FROM settings_log WHERE guild_id = ? ORDER BY id DESC LIMIT ?",
            (guild_id, limit),
        )
        out = []
        for row in rows:
            try:
                setting = Setting(row[2])
            except ValueError:
                continue  # written by a newer Framecast: not ours to show
            out.append(SettingsChange(int(row[0]), int(row[1]), setting, float(row[3])))
        return out

    def _keys_sync(self, guild_id: int | None) -> list[StoredKey]:
        sql = "SELECT guild_id, token, last4, status, set_by, set_at FROM guild_keys"
        rows = (
            self._conn.execute(f"{sql} WHERE guild_id = ?", (guild_id,))
            if guild_id is not None
            else self._conn.execute(f"{sql} ORDER BY guild_id")
        )
        return [
            StoredKey(
                guild_id=int(row[0]),
                token=bytes(row[1]),
                last4=str(row[2]),
                status=KeyStatus(row[3]),
                set_by=int(row[4]),
                set_at=float(row[5]),
            )
            for row in rows
        ]

    def _set_key_sync(self, guild_id: int, token: bytes, last4: str, by: int, now: float) -> None:
        with self._transaction():
            self._conn.execute(
                "INSERT OR REPLACE INTO guild_keys (guild_id, token, last4, status, set_by, set_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (guild_id, token, last4, KeyStatus.OK.value, by, now),
            )
            self._log_sync(guild_id, by, [Setting.API_KEY], now)

    def _delete_key_sync(self, guild_id: int, by: int, now: float) -> bool:
        with self._transaction():
            cur = self._conn.execute("DELETE FROM guild_keys WHERE guild_id = ?", (guild_id,))
            if cur.rowcount == 0:
                return False
            self._log_sync(guild_id, by, [Setting.API_KEY], now)
        return True

    def _mark_key_sync(self, guild_id: int, status: str) -> None:
        with self._transaction():
            self._conn.execute("UPDATE guild_keys SET status = ? WHERE guild_id = ?", (status, guild_id))


def _id(value: int) -> int:
    """A Discord id as a plain int (bool and other types refused: SQLite would store them as given)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a Discord id must be int, not {type(value).__name__}")
    return int(value)


def _settings_from(data: str, guild_id: int) -> GuildSettings:
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        log.warning("guild %d: stored settings are not readable; using the operator's defaults", guild_id)
        return GuildSettings()
    return GuildSettings.from_json(parsed)
