"""Fixtures for the end-to-end tests: both fakes and the real bot.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness import World, close_world, make_world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """One guild, three members and an admin; the bot running and connected."""
    w = await make_world(tmp_path)
    try:
        await w.start_bot()
        yield w
    finally:
        await close_world(w)


StartWorld = Callable[..., Awaitable[World]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[StartWorld]:
    """`await start(setup=..., extra_env=...)`: `setup(world)` runs before the bot starts."""
    worlds: list[World] = []

    async def factory(setup: Callable[[World], None] | None = None, **kwargs: Any) -> World:
        world = await make_world(tmp_path, **kwargs)
        worlds.append(world)
        if setup is not None:
            setup(world)
        await world.start_bot()
        return world

    try:
        yield factory
    finally:
        for world in worlds:
            await close_world(world)
