"""Shared fixtures. Keep this small: each fixture here is used by several test modules."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fake_service import FakeService


@pytest.fixture
async def fake_service() -> AsyncIterator[FakeService]:
    """A running fake generation service on 127.0.0.1 (ephemeral port), stopped afterwards."""
    service = FakeService()
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
