"""Shared fixtures. Keep this small: each fixture here is used by several test modules."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.gen_service import FakeService

# Every fixture shared across test modules is registered here, so no test module imports another:
# the end-to-end world (`world`, `start`, `start_synced`: tests/e2e/harness.py), the servers it may
# use (`cluster`, `pg_relay`, `redis_relay`: tests/e2e/servers.py) and a fresh PostgreSQL database
# (`pg_dsn`: tests/pg.py), and the web pages' world (`site`: tests/e2e/webpages.py).
pytest_plugins = ("tests.pg", "tests.e2e.harness", "tests.e2e.servers", "tests.e2e.webpages")
# Helpers the end-to-end tests import (not plugins): their asserts explain failures like a test's.
pytest.register_assert_rewrite("tests.e2e.commands", "tests.e2e.endpoints", "tests.e2e.chrome")


def pytest_configure(config: pytest.Config) -> None:
    """Markers the shared fixtures read."""
    config.addinivalue_line("markers", "lease_seconds(n): job leases of the `cluster` fixture last n seconds")


@pytest.fixture
async def fake_service() -> AsyncIterator[FakeService]:
    """A running fake generation service on 127.0.0.1 (ephemeral port), stopped afterwards."""
    service = FakeService()
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
