"""The bot's operating endpoints (``/healthz``, ``/readyz``, ``/metrics``), asked over HTTP.

Shared by the end-to-end tests that run the bot with ``HTTP_PORT`` set: :class:`Ops` asks the
endpoints as an operator's health check would, :func:`parse` and :func:`value` read ``/metrics``
with ``prometheus_client``'s own parser, as Prometheus would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import World
from tests.workers import free_port

__all__ = ["Ops", "Samples", "free_port", "ops_of", "parse", "ready_body", "value"]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Ops:
    """The bot's operating endpoints, asked over HTTP."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self.session = session
        self.base = f"http://127.0.0.1:{port}"
        self.bodies: list[str] = []  # every body served, for the secrets check

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(self.base + path, timeout=aiohttp.ClientTimeout(total=5)) as resp:
            text = await resp.text()
        self.bodies.append(text)
        return resp.status, text

    async def until(
        self, path: str, accept: Callable[[int, str], bool], *, timeout: float = 20, what: str = ""
    ) -> tuple[int, str]:
        """Ask `path` until `accept(status, body)` (connection refused: not yet listening)."""
        last: tuple[int, str] | None = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            try:
                last = await self.get(path)
            except aiohttp.ClientConnectionError:
                last = None
            if last is not None and accept(*last):
                return last
            await asyncio.sleep(0.05)
        raise AssertionError(f"{path}: never {what} within {timeout:g} s (last answer {last})")

    async def readyz(self) -> tuple[int, dict[str, Any]]:
        status, text = await self.get("/readyz")
        return status, json.loads(text)

    async def samples(self) -> Samples:
        status, text = await self.get("/metrics")
        assert status == 200
        return parse(text)


@contextlib.asynccontextmanager
async def ops_of(world: World) -> AsyncIterator[Ops]:
    """The world's bot's operating endpoints (its ``HTTP_PORT``)."""
    async with aiohttp.ClientSession() as session:
        yield Ops(session, int(world.env["HTTP_PORT"]))


def parse(text: str) -> Samples:
    """Every sample of an exposition: (name, labels) -> value."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """One sample's value, or None when the exposition has no such sample."""
    return samples.get((name, frozenset(labels.items())))


def ready_body(text: str) -> dict[str, Any]:
    """``/readyz``'s JSON body."""
    return dict(json.loads(text))
