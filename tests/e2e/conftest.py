"""Fixtures for the end-to-end tests: both fakes and the real bot.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

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
