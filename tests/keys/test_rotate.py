"""``python -m framecast.keys.rotate``: the real command, run as a subprocess on SQLite and PostgreSQL.

Keys stored under an old secret are re-encrypted with the first key of ``KEY_ENCRYPTION_SECRET``;
a second run finds nothing to do; a key no secret opens is reported by guild id (exit 1); nothing the
command prints ever holds a key, a token or a secret.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from framecast.config import Secret
from framecast.keys.vault import KeyVault
from framecast.storage import Store
from tests.pg import fresh_database

ROOT = Path(__file__).resolve().parents[2]
SERVER_KEY = "sk-server-0123456789abcdefWXYZ"
OLD_GUILDS = (101, 102)  # stored under the old secret
CURRENT_GUILD = 103  # stored under the new one already
LOST_GUILD = 104  # stored under a secret nobody has any more
ADMIN = 77


@dataclass
class Database:
    """Where the command's store lives, as the environment names it."""

    env: dict[str, str]
    where: Path | Secret

    async def open(self) -> Store:
        return await Store.open(self.where)


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        path = tmp_path / "data" / "framecast.sqlite3"
        yield Database({"DATABASE_PATH": str(path)}, path)
    else:
        async with fresh_database() as dsn:  # skips without a PostgreSQL server
            yield Database({"DATABASE_URL": dsn}, Secret(dsn))


def fernet_key() -> str:
    return Fernet.generate_key().decode("ascii")


async def rotate(database: Database, tmp_path: Path, secret: str | None) -> tuple[int, str, str]:
    """Run the real command in a clean environment (and a folder without a .env)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "DISCORD_TOKEN": "discord-token-not-used",
        "GEN_API_BASE_URL": "http://127.0.0.1:9",
        "GEN_API_KEY": "operator-key-not-used",
        **database.env,
    }
    if secret is not None:
        env["KEY_ENCRYPTION_SECRET"] = secret
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "framecast.keys.rotate",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_rotation_re_encrypts_old_keys_once_and_reports_unreadable_ones(
    database: Database, tmp_path: Path
) -> None:
    old, new, lost = fernet_key(), fernet_key(), fernet_key()
    store = await database.open()
    try:
        for guild, secret in [(g, old) for g in OLD_GUILDS] + [(CURRENT_GUILD, new), (LOST_GUILD, lost)]:
            token = KeyVault(enabled=True, secret=Secret(secret)).encrypt(SERVER_KEY)
            await store.set_guild_key(guild, token, "WXYZ", by=ADMIN)
        before = {row.guild_id: row for row in await store.all_guild_keys()}
        logged = len(await store.settings_log(OLD_GUILDS[0]))
    finally:
        await store.close()

    code, out, err = await rotate(database, tmp_path, f" {new} ,\n{old} ")
    assert code == 1, (out, err)  # one key opens with none of the secrets
    assert "rotated 2, already current 1, unreadable 1" in out
    assert f"guild {LOST_GUILD}" in out
    for secret_text in (SERVER_KEY, old, new, lost, *(row.token.decode() for row in before.values())):
        assert secret_text not in out and secret_text not in err

    only_new = KeyVault(enabled=True, secret=Secret(new))
    store = await database.open()
    try:
        after = {row.guild_id: row for row in await store.all_guild_keys()}
        for guild in (*OLD_GUILDS, CURRENT_GUILD):
            assert only_new.decrypt(after[guild].token).reveal() == SERVER_KEY  # the old key not needed
            # Only the ciphertext changed: who set it, when, and its status are as they were.
            was, now = before[guild], after[guild]
            assert (now.last4, now.status, now.set_by, now.set_at) == (
                was.last4, was.status, was.set_by, was.set_at,
            )  # fmt: skip
        assert after[CURRENT_GUILD].token == before[CURRENT_GUILD].token  # current: not rewritten
        assert after[LOST_GUILD].token == before[LOST_GUILD].token  # unreadable: left as it was
        assert len(await store.settings_log(OLD_GUILDS[0])) == logged  # not an admin's change
    finally:
        await store.close()

    # Idempotent: a second run finds every readable key current.
    code, out, err = await rotate(database, tmp_path, f"{new},{old}")
    assert code == 1 and "rotated 0, already current 3, unreadable 1" in out, (out, err)

    # The server with the lost key removes it: everything is current, the old key can go.
    store = await database.open()
    try:
        assert await store.delete_guild_key(LOST_GUILD, by=ADMIN)
    finally:
        await store.close()
    code, out, err = await rotate(database, tmp_path, new)
    assert code == 0 and "rotated 0, already current 3, unreadable 0" in out, (out, err)


async def test_without_a_secret_or_with_a_bad_one_nothing_is_touched(tmp_path: Path) -> None:
    # Refused before the database is used: SQLite alone shows it.
    path = tmp_path / "data" / "framecast.sqlite3"
    database = Database({"DATABASE_PATH": str(path)}, path)
    old = fernet_key()
    store = await database.open()
    try:
        token = KeyVault(enabled=True, secret=Secret(old)).encrypt(SERVER_KEY)
        await store.set_guild_key(OLD_GUILDS[0], token, "WXYZ", by=ADMIN)
    finally:
        await store.close()

    code, out, err = await rotate(database, tmp_path, None)
    assert code == 2 and "KEY_ENCRYPTION_SECRET is not set" in err, (out, err)
    code, out, err = await rotate(database, tmp_path, f"{old},not-a-key-hidden4242")
    assert code == 2 and "KEY_ENCRYPTION_SECRET: key 2 of 2 must be a Fernet key" in err, (out, err)
    assert "hidden4242" not in out + err and old not in out + err

    store = await database.open()
    try:
        row = await store.guild_key(OLD_GUILDS[0])
        assert row is not None and row.token == token
    finally:
        await store.close()


async def test_a_key_an_admin_set_meanwhile_is_never_overwritten(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "data" / "framecast.sqlite3")
    try:
        read = KeyVault(enabled=True, secret=Secret(fernet_key())).encrypt(SERVER_KEY)
        await store.set_guild_key(OLD_GUILDS[0], read, "WXYZ", by=ADMIN)
        newer = KeyVault(enabled=True, secret=Secret(fernet_key())).encrypt("sk-another-key-0000")
        await store.set_guild_key(OLD_GUILDS[0], newer, "0000", by=ADMIN)  # between read and write
        assert not await store.replace_guild_key_token(OLD_GUILDS[0], read, b"rotated-token")
        row = await store.guild_key(OLD_GUILDS[0])
        assert row is not None and row.token == newer
        assert await store.replace_guild_key_token(OLD_GUILDS[0], newer, b"rotated-token")
        assert not await store.replace_guild_key_token(LOST_GUILD, newer, b"rotated-token")  # no key
    finally:
        await store.close()
