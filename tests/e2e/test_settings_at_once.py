"""Several admins changing one server's settings at the same moment, end to end against the fakes:
each change is kept, whatever the others change meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.e2e.commands import answer, text_of
from tests.e2e.harness import MANAGE_GUILD, MEMBER_PERMS, StartWorld, World

ADMINS = 4


def more_admins_and_channels(world: World) -> None:
    """Four more members with Manage Server, and a channel for each to add (before the bot starts)."""
    for n in range(ADMINS):
        world.discord.add_member(world.guild, f"boss{n}", permissions=MEMBER_PERMS | MANAGE_GUILD)
        world.discord.add_channel(world.guild, f"art{n}")


async def at_once(world: World, commands: list[tuple[Any, str, dict[str, Any]]]) -> list[str]:
    """Each ``(admin, subcommand, options)`` as ``/settings`` at the same moment; their answers."""
    its = await asyncio.gather(
        *(
            world.discord.slash(world.guild, world.channel, admin, "settings", options, subcommand=sub)
            for admin, sub, options in commands
        )
    )
    return [(await answer(it)).content for it in its]


async def test_admins_changing_settings_at_once_each_keep_their_change(start_synced: StartWorld) -> None:
    """Four admins add a channel each at once, then two of them change a limit and the NSFW switch
    at once, then two add blocklist terms at once: every channel, both changes and every term are
    kept (each saved the settings it had read, and only the last write stayed)."""
    world = await start_synced(setup=more_admins_and_channels)
    bosses = [m for m in world.guild.members.values() if m.name.startswith("boss")]
    arts = [c for c in world.guild.channels if c.name.startswith("art")]
    answers = await at_once(
        world, [(boss, "channels add", {"channel": art}) for boss, art in zip(bosses, arts, strict=True)]
    )
    assert all(text.startswith("✅ Saved.") for text in answers), answers
    await at_once(
        world,
        [
            (bosses[0], "limits", {"member_jobs": 1}),
            (bosses[1], "nsfw", {"only": True}),
            (bosses[2], "blocklist add", {"terms": "kraken"}),
            (bosses[3], "blocklist add", {"terms": "hydra, basilisk"}),
        ],
    )
    show = await world.discord.slash(
        world.guild, world.channel, world.admins[0], "settings", subcommand="show"
    )
    shown = text_of(await answer(show))
    assert "**Allowed channels**: " + ", ".join(art.mention for art in arts) in shown
    assert "**Jobs per member**: 1 (set by this server" in shown
    assert "**NSFW only**: on (set by this server)" in shown
    assert "**Blocklist**: 3 terms (set by this server)" in shown
