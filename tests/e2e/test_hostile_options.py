"""Option values the command's choices do not offer, end to end.

Discord offers only the choices the bot last synced; a command synced by an older or newer bot
(before ``python bot.py --sync``) still sends what it offered. Such a value is refused privately in
words, like an unknown /video size, never with the generic apology and a traceback in the log.
"""

from __future__ import annotations

from tests.e2e.commands import refused, settings, text_of
from tests.e2e.harness import World


async def test_a_reset_of_a_setting_not_offered_is_refused_in_words(world: World) -> None:
    before = text_of(await settings(world, "show"))
    for value in ("no_such_setting", "api_key"):  # unknown; known but not resettable (the key)
        it = await world.discord.slash(
            world.guild, world.channel, world.admins[0], "settings", {"setting": value}, subcommand="reset"
        )
        assert await refused(it) == "That value for “setting” is not one of the offered choices."
    assert text_of(await settings(world, "show")) == before
    assert world.bot is not None
    log = world.bot.log_text()
    assert "Traceback" not in log and "failed" not in log
