"""Shared fixtures. Keep this small: each fixture here is used by several test modules."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.gen_service import FakeService

# The end-to-end fixtures (`world`, `start`) live with the rest of the harness.
pytest_plugins = ("tests.e2e.harness",)


@pytest.fixture
async def fake_service() -> AsyncIterator[FakeService]:
    """A running fake generation service on 127.0.0.1 (ephemeral port), stopped afterwards."""
    service = FakeService()
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
