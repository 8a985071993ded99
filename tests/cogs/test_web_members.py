"""The web pages' view of Discord (:class:`cogs.web_members.DiscordDirectory`) when Discord is slow,
and when a person asks about servers the bot is not in."""

from __future__ import annotations

import asyncio
import types
from typing import Any, cast

import discord
import pytest

from cogs.web_members import LOOKUPS_PER_PERSON, DiscordDirectory
from framecast.app import DirectoryBusy, DirectoryUnavailable

SERVER, ELSEWHERE, PERSON = 100, 200, 7


def not_found() -> discord.NotFound:
    """Discord's 404, as discord.py raises it."""
    return discord.NotFound(
        cast(Any, types.SimpleNamespace(status=404, reason="Not Found")), "Unknown Member"
    )


class Guild:
    """A server the bot is in: each member look-up answers "not a member", or never (`stalled`)."""

    def __init__(self, *, stalled: bool = False) -> None:
        self.stalled = stalled
        self.asked = 0

    async def fetch_member(self, user_id: int) -> Any:
        self.asked += 1
        if self.stalled:
            await asyncio.Event().wait()
        raise not_found()


class Channel:
    async def fetch_message(self, message_id: int) -> Any:
        await asyncio.Event().wait()


class Bot:
    """Only what the directory asks of the bot: its servers, and a channel to fetch a message from."""

    def __init__(self, guild: Guild) -> None:
        self.guild = guild

    def get_guild(self, guild_id: int) -> Guild | None:
        return self.guild if guild_id == SERVER else None

    def get_partial_messageable(self, channel_id: int) -> Channel:
        return Channel()


def directory(guild: Guild, **options: Any) -> DiscordDirectory:
    return DiscordDirectory(cast(Any, Bot(guild)), **options)


async def test_a_look_up_discord_holds_answers_unavailable_within_the_bound() -> None:
    guild = Guild(stalled=True)
    pages = directory(guild, timeout=0.05)
    with pytest.raises(DirectoryUnavailable):
        await asyncio.wait_for(pages.member(SERVER, PERSON), 5)
    job = cast(Any, types.SimpleNamespace(id=1, channel_id=3, discord={"message_id": 4}))
    with pytest.raises(DirectoryUnavailable):
        await asyncio.wait_for(pages.media_url(job, PERSON), 5)


async def test_a_server_without_the_bot_answers_as_one_the_person_is_not_in_at_the_limit_too() -> None:
    # The look-up limit is counted before the server is looked for: past it, a real server and a
    # missing one answer alike (the limit told which servers have the bot).
    pages = directory(Guild())
    assert await pages.member(SERVER, PERSON) is None
    assert await pages.member(ELSEWHERE, PERSON) is None
    for _ in range(LOOKUPS_PER_PERSON - 2):
        assert await pages.member(ELSEWHERE, PERSON, fresh=True) is None
    for server in (SERVER, ELSEWHERE):
        with pytest.raises(DirectoryBusy):
            await pages.member(server, PERSON, fresh=True)
