"""Shared fixtures. Keep this small: each fixture here is used by several test modules."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from tests.fakes.gen_service import FakeService

# Every fixture shared across test modules is registered here, so no test module imports another:
# the end-to-end world (`world`, `start`, `start_synced`: tests/e2e/harness.py), the servers it may
# use (`cluster`, `pg_relay`, `redis_relay`: tests/e2e/servers.py) and a fresh PostgreSQL database
# (`pg_dsn`: tests/pg.py), a store on each database (`backend`: tests/stores.py), the web pages' world
# (`site`: tests/e2e/webpages.py) and a key id of its own on Redis (`plan_key_id`: tests/redis_server.py).
pytest_plugins = (
    "tests.pg",
    "tests.stores",
    "tests.e2e.harness",
    "tests.e2e.servers",
    "tests.e2e.webpages",
    "tests.redis_server",
)
# Helpers the end-to-end tests import (not plugins): their asserts explain failures like a test's.
pytest.register_assert_rewrite("tests.e2e.commands", "tests.e2e.endpoints", "tests.e2e.chrome")


def pytest_configure(config: pytest.Config) -> None:
    """Markers the shared fixtures and the ordering below read."""
    config.addinivalue_line("markers", "lease_seconds(n): job leases of the `cluster` fixture last n seconds")
    config.addinivalue_line(
        "markers", "cluster_env(mapping): more environment for the `cluster` fixture's processes"
    )
    config.addinivalue_line("markers", "minutes: takes minutes on one worker, started first under xdist")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist, tests marked ``minutes`` (the container test's image build) go first.

    One worker takes them at once while the others share the rest: started late, a test of
    several minutes alone would be the run's tail. In one process (``-n 0``) the order is left alone,
    the quick tests first. Every worker sorts the same way, as pytest-xdist requires.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    items.sort(key=lambda item: item.get_closest_marker("minutes") is None)  # stable: otherwise as collected


@pytest.fixture
async def fake_service() -> AsyncIterator[FakeService]:
    """A running fake generation service on 127.0.0.1 (ephemeral port), stopped afterwards."""
    service = FakeService()
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
