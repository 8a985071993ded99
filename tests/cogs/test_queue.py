"""/queue's Discord side: who reads which channel (cogs.interactions.queue_viewer) and the rows.

The guild, its roles, channels, threads and the member are real discord.py objects, built from the
payloads the fake Discord sends in GUILD_CREATE and in an interaction (no connection), so the
permissions are discord.py's own resolution of roles and channel overwrites.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import discord
import pytest
from discord.state import ConnectionState

from cogs.interactions import queue_viewer
from cogs.queue import render_queue
from framecast.app import Job, JobKind, JobState, QueueView, QueueViewer, order_rows
from tests.fakes.discord_api import (
    MANAGE_THREADS,
    READ_MESSAGE_HISTORY,
    VIEW_CHANNEL,
    FakeChannel,
    FakeDiscord,
    FakeGuild,
    FakeMember,
    FakeOverwrite,
)


class Server:
    """A server as the fake describes it: a staff channel, an age-restricted one, threads."""

    def __init__(self) -> None:
        fake = FakeDiscord()
        self.fake = fake
        self.guild: FakeGuild = fake.add_guild("Guild")
        staff = fake.add_role(self.guild, "staff")
        self.general = fake.add_channel(self.guild, "general")
        self.staff = fake.add_channel(
            self.guild,
            "staff",
            overwrites=[
                FakeOverwrite.of(self.guild.everyone, deny=VIEW_CHANNEL),
                FakeOverwrite.of(staff, allow=VIEW_CHANNEL),
            ],
        )
        # Seen, but nothing posted before one arrives can be read: a prompt there is not readable.
        self.announcements = fake.add_channel(
            self.guild,
            "announcements",
            overwrites=[FakeOverwrite.of(self.guild.everyone, deny=READ_MESSAGE_HISTORY)],
        )
        self.adult = fake.add_channel(self.guild, "adult", nsfw=True)
        self.member = fake.add_member(self.guild, "carol")
        self.staffer = fake.add_member(self.guild, "dave", roles=[staff])
        mods = fake.add_role(self.guild, "mods", permissions=MANAGE_THREADS)
        self.mod = fake.add_member(self.guild, "mod", roles=[mods])
        self.staff_thread = fake.add_thread(self.staff, "plans")
        self.adult_thread = fake.add_thread(self.adult, "more")
        self.carols_thread = fake.add_thread(self.general, "carol's", private=True, owner=self.member)
        self.daves_thread = fake.add_thread(self.general, "dave's", private=True, owner=self.staffer)

    def viewer(self, who: FakeMember, where: FakeChannel) -> QueueViewer:
        """What /queue by `who` in `where` knows of them, through discord.py's objects."""
        state = ConnectionState(dispatch=lambda *_, **__: None, handlers={}, hooks={}, http=None)  # type: ignore[arg-type]
        guild = discord.Guild(data=self.guild.to_payload(full=True), state=state)  # type: ignore[arg-type]
        member = discord.Member(data=who.to_payload(), guild=guild, state=state)  # type: ignore[arg-type]
        interaction: Any = SimpleNamespace(
            guild=guild,
            guild_id=guild.id,
            channel=guild.get_channel_or_thread(where.id),
            channel_id=where.id,
            user=member,
            locale=discord.Locale.american_english,
            is_guild_integration=lambda: True,  # the server installed the app
        )
        return queue_viewer(interaction)


@pytest.fixture(scope="module")
def server() -> Server:
    return Server()


def test_a_member_reads_the_channels_and_public_threads_discord_shows_them(server: Server) -> None:
    seen = server.viewer(server.member, server.general)
    assert seen.user_id == server.member.id and not seen.in_age_restricted
    expected = {server.general.id, server.adult.id, server.adult_thread.id, server.carols_thread.id}
    assert seen.readable_channels == expected
    assert seen.age_restricted_channels == {server.adult.id, server.adult_thread.id}


def test_a_staff_role_opens_the_staff_channel_and_its_threads(server: Server) -> None:
    seen = server.viewer(server.staffer, server.general)
    assert {server.staff.id, server.staff_thread.id, server.daves_thread.id} <= seen.readable_channels
    assert server.carols_thread.id not in seen.readable_channels  # another's private thread


def test_manage_threads_opens_every_private_thread_of_a_readable_channel(server: Server) -> None:
    seen = server.viewer(server.mod, server.general)
    assert {server.carols_thread.id, server.daves_thread.id} <= seen.readable_channels
    assert server.staff.id not in seen.readable_channels


def test_where_the_member_acts_is_readable_though_the_cache_cannot_tell(server: Server) -> None:
    # Dave was added to carol's private thread: the cache knows only its owner and Manage Threads,
    # but he acts in it (a click on a result there), so what was asked there shows to him.
    seen = server.viewer(server.staffer, server.carols_thread)
    assert server.carols_thread.id in seen.readable_channels
    assert server.carols_thread.id not in server.viewer(server.staffer, server.general).readable_channels


def test_a_channel_without_read_message_history_is_not_readable(server: Server) -> None:
    assert server.announcements.id not in server.viewer(server.member, server.general).readable_channels


@pytest.mark.parametrize("where", ["adult", "adult_thread"])
def test_queue_in_an_age_restricted_channel_or_its_thread_counts_as_age_restricted(
    server: Server, where: str
) -> None:
    assert server.viewer(server.member, getattr(server, where)).in_age_restricted


def job(job_id: int, channel_id: int, user_id: int) -> Job:
    return Job(
        id=job_id,
        kind=JobKind.VIDEO,
        state=JobState.QUEUED,
        guild_id=1,
        channel_id=channel_id,
        user_id=user_id,
        locale="en-US",
        params={"prompt": f"prompt {job_id}"},
        created_at=0.0,
        updated_at=0.0,
    )


def test_rows_show_a_localised_placeholder_where_the_prompt_is_hidden(server: Server) -> None:
    viewer = server.viewer(server.member, server.general)
    jobs = [job(1, server.staff.id, 5), job(2, server.adult.id, 5), job(3, server.general.id, 5)]
    rows = order_rows(jobs, 1, position=lambda job_id: job_id, estimate=lambda _: None, viewer=viewer)
    embed = render_queue(QueueView(tuple(rows), viewer.user_id, 0.0), locale="de")
    lines = (embed.description or "").splitlines()
    assert lines[0].endswith("(ein Prompt aus einem Kanal, den du nicht sehen kannst)")
    assert lines[1].endswith("(ein altersbeschränkter Prompt: nur in altersbeschränkten Kanälen sichtbar)")
    assert lines[2].endswith("prompt 3")
    assert embed.footer.text is not None and "3" in embed.footer.text
