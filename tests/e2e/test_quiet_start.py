"""A start logs no warning about voice: the bot has none, so discord.py's PyNaCl and davey notices are off."""

from __future__ import annotations

import importlib.util

from tests.e2e.harness import World, wait_log


async def test_a_start_logs_neither_the_pynacl_nor_the_davey_warning(world: World) -> None:
    await wait_log(world, "connected as", timeout=30)
    # Neither library is installed (nothing needs them), which is what discord.py would warn about.
    assert importlib.util.find_spec("nacl") is None and importlib.util.find_spec("davey") is None
    log = world.bot.log_text()
    assert "PyNaCl is not installed" not in log
    assert "davey is not installed" not in log
    assert "voice will NOT be supported" not in log
