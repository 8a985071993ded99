"""The service's model list, kept in memory so autocomplete answers within Discord's 3 seconds."""

from __future__ import annotations

import asyncio
import logging

from framecast.budget import Priority
from framecast.clock import Clock
from framecast.errors import AuthError, ServiceError
from framecast.service import GenerationClient, ModelCatalog

log = logging.getLogger(__name__)


class ModelCache:
    """Refreshes ``GET /v1/models`` in the background (low priority on the budget)."""

    def __init__(
        self, client: GenerationClient, *, clock: Clock, refresh_every: float,
        default_video: str, default_image: str,
    ) -> None:
        self._client = client
        self._clock = clock
        self._refresh_every = refresh_every
        self.default_video = default_video
        self.default_image = default_image
        self.catalog: ModelCatalog | None = None
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<ModelCache loaded={self.catalog is not None}>"

    def start(self) -> None:
        """Start the refresh loop (kept as a task reference; failures are logged and retried)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="framecast-models")

    async def close(self) -> None:
        """Stop the refresh loop."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        delay = self._refresh_every
        while True:
            try:
                self.catalog = await self._client.list_models(priority=Priority.LOW)
                log.info("model list: %d video, %d image", len(self.catalog.video), len(self.catalog.image))
                delay = self._refresh_every
            except AuthError:
                # The operator must hear about a bad key at start-up, not only when a member tries.
                log.error("the generation service rejected the API key (check GEN_API_KEY)")
                delay = min(self._refresh_every, 60.0)
            except ServiceError as exc:
                log.warning("could not load the model list: %s", exc.code)
                delay = min(self._refresh_every, 60.0)
            except Exception:
                log.exception("model list refresh crashed")
                delay = min(self._refresh_every, 60.0)
            await self._clock.sleep(delay)

    def ids(self, kind: str) -> tuple[str, ...]:
        """Known model ids of `kind` ("video" or "image"); empty while the list is unknown."""
        if self.catalog is None:
            return ()
        return tuple(getattr(self.catalog, kind))

    def suggest(self, kind: str, typed: str, limit: int = 25) -> list[str]:
        """Autocomplete: the default first, then the service's models matching what was typed."""
        default = self.default_video if kind == "video" else self.default_image
        seen: list[str] = []
        for model in (default, *self.ids(kind)):
            if model not in seen and typed.lower() in model.lower():
                seen.append(model)
        return seen[:limit]
