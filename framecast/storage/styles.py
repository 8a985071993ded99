"""The servers' named prompt styles in the store's database (:attr:`framecast.storage.Store.styles`).

What a style may be is :mod:`framecast.guilds.styles`'s rule; checked here is what only the database can
check for every process at once: the server's count and a name taken in another case."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import bindparam, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from framecast.guilds.styles import Style, StyleError, StyleKind, StyleProblem, style_key
from framecast.storage import values
from framecast.storage.dialects import Postgres, Sqlite
from framecast.storage.schema import guild_styles, settings_log

__all__ = ["STYLES_LOG_NAME", "GuildStyles", "log_changes"]

#: The audit log's name for a change of a server's styles (who and when; never the template).
STYLES_LOG_NAME = "styles"

_ALL = select(guild_styles).order_by(guild_styles.c.guild_id, guild_styles.c.created_at, guild_styles.c.name)
_OF_GUILD = _ALL.where(guild_styles.c.guild_id == bindparam("guild_id"))


class GuildStyles:
    """Every server's styles on one database (build through :attr:`Store.styles`)."""

    def __init__(self, db: Sqlite | Postgres, now: Callable[[], float]) -> None:
        self._db = db
        self._now = now

    async def all(self) -> dict[int, list[Style]]:
        """Every server's styles, oldest first, by guild id (servers without any are left out)."""
        found: dict[int, list[Style]] = {}
        for row in await self._db.rows(_ALL):
            found.setdefault(int(row[0]), []).append(_style(row))
        return found

    async def add(self, guild_id: int, style: Style, *, by: int, limit: int) -> Style:
        """Store `style` for the server (stamped with `by` and now) and return it as stored. Under the
        server's lock, for every process: :class:`StyleError` NAME_TAKEN (in any case), TOO_MANY."""
        gid, who, now = values.discord_id(guild_id), values.discord_id(by), self._now()
        row = {
            "guild_id": gid,
            "name": values.check("style name", style.name, str),
            "template": values.check("style template", style.template, str),
            "kind": StyleKind(style.kind).value,
            "created_by": who,
            "created_at": now,
        }
        async with self._db.locked(gid) as conn:
            rows = (await conn.execute(_OF_GUILD, {"guild_id": gid})).all()
            taken = next((r[1] for r in rows if style_key(r[1]) == style.key), None)
            if taken is not None:
                raise StyleError(StyleProblem.NAME_TAKEN, name=taken)
            if len(rows) >= limit:
                raise StyleError(StyleProblem.TOO_MANY, max=limit)
            await conn.execute(insert(guild_styles).values(row))
            await log_changes(conn, gid, who, [STYLES_LOG_NAME], now)
        return _style(tuple(row.values()))

    async def remove(self, guild_id: int, name: str, *, by: int) -> Style | None:
        """Forget the server's style named `name` (in any case); the style removed, or None."""
        gid, who, now = values.discord_id(guild_id), values.discord_id(by), self._now()
        async with self._db.locked(gid) as conn:
            rows = (await conn.execute(_OF_GUILD, {"guild_id": gid})).all()
            found = next((_style(r) for r in rows if style_key(r[1]) == style_key(name)), None)
            if found is None:
                return None
            await conn.execute(
                delete(guild_styles).where(guild_styles.c.guild_id == gid, guild_styles.c.name == found.name)
            )
            await log_changes(conn, gid, who, [STYLES_LOG_NAME], now)
        return found


async def log_changes(conn: AsyncConnection, guild_id: int, by: int, names: list[str], now: float) -> None:
    """Log that `by` changed `names` of the server (who, what and when: never the values, an API key
    above all). Styles are logged as :data:`STYLES_LOG_NAME`: /settings' own reader skips that name."""
    if rows := [{"guild_id": guild_id, "user_id": by, "setting": name, "at": now} for name in names]:
        await conn.execute(insert(settings_log), rows)


def _style(row: Any) -> Style:
    _, name, template, kind, created_by, created_at = row
    return Style(str(name), str(template), StyleKind(kind), int(created_by), float(created_at))
