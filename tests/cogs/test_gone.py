"""What the bot takes as gone on connecting (cogs/gone.py): only what Discord confirms."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp
import discord
import pytest

from cogs.gone import PlacesGone


def refused(status: int, body: Any) -> discord.HTTPException:
    """What discord.py raises for an answer of `status` with `body` (a JSON error, or plain text)."""
    response: Any = SimpleNamespace(status=status, reason="refused")
    kind = {403: discord.Forbidden, 404: discord.NotFound}.get(status, discord.HTTPException)
    return kind(response, body)


class Asked:
    """The bot's REST side, answering each look-up with `answer` (raised, or returned)."""

    def __init__(self, answer: BaseException | None) -> None:
        self.answer = answer

    async def fetch_guild(self, guild_id: int) -> object:
        if self.answer is not None:
            raise self.answer
        return object()

    async def fetch_channel(self, channel_id: int) -> object:
        return await self.fetch_guild(channel_id)


def gone_cog(answer: BaseException | None) -> PlacesGone:
    bot: Any = Asked(answer)
    return PlacesGone(bot)


@pytest.mark.parametrize(
    ("answer", "left"),
    [
        (refused(404, {"code": 10004, "message": "Unknown Guild"}), True),
        (refused(403, {"code": 50001, "message": "Missing Access"}), True),
        (None, False),  # the bot is there: only the cache had not caught up
        (refused(404, "404: Not Found"), False),  # a route that does not answer is no verdict
        (refused(503, "upstream"), False),
        (refused(429, {"code": 0, "message": "You are being rate limited.", "retry_after": 1}), False),
        (aiohttp.ClientConnectionError("reset"), False),
        (TimeoutError(), False),
    ],
)
async def test_a_server_ends_only_when_discord_says_the_bot_left_it(
    answer: BaseException | None, left: bool
) -> None:
    assert await gone_cog(answer)._left(1) is left


@pytest.mark.parametrize(
    ("answer", "deleted"),
    [
        (refused(404, {"code": 10003, "message": "Unknown Channel"}), True),
        (refused(403, {"code": 50001, "message": "Missing Access"}), False),  # a thread it cannot see
        (refused(404, "404: Not Found"), False),
        (refused(502, "bad gateway"), False),
        (None, False),
    ],
)
async def test_a_channel_ends_only_when_discord_says_it_is_unknown(
    answer: BaseException | None, deleted: bool
) -> None:
    assert await gone_cog(answer)._deleted(1) is deleted
