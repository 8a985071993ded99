"""The service's model list, kept in memory so autocomplete answers within Discord's 3 seconds.

It also decides which model a job gets when the member picks none. The service's list is the
truth (the contract says the current set comes from ``GET /v1/models``): when it stops listing
``GEN_VIDEO_MODEL`` or ``GEN_IMAGE_MODEL``, the newest model of the same family is used instead
(``svc-video-v2.0`` -> ``svc-video-v2.1``), and the operator is told once.

Between the periodic refreshes, a create refused for an unknown model (the service renamed it while
the bot runs) reads the list at once with that job's key: :meth:`ModelCache.refresh_now`, at most
once a minute per key.
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from collections.abc import Sequence

from framecast.clock import Clock
from framecast.service import GenerationClient, ModelCatalog
from framecast.service.errors import AuthError, ServiceError
from framecast.values.service_requests import Priority

log = logging.getLogger(__name__)

#: What a model id may look like: anything else (from a member or from the service) is refused.
MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/\-]{0,99}$")
# A version part of an id: "v2.0", "2.1", "2024"; numbers bounded so int() never meets a giant.
_VERSION_PART = re.compile(r"^v?(\d{1,9}(?:\.\d{1,9})*)$", re.IGNORECASE)
_SEPARATOR = re.compile(r"([-_/:])")
_VERSION_SLOT = re.compile(r"[-_/:]?#")  # a version part in a family, with its separator
_SETTING = {"video": "GEN_VIDEO_MODEL", "image": "GEN_IMAGE_MODEL"}
#: Seconds between two refreshes asked for by refused creates, per key (each costs that key a request).
REFRESH_GAP = 60.0


def is_model_id(text: str) -> bool:
    """Whether `text` has the shape of a model id."""
    return MODEL_ID.match(text) is not None


def split_version(model_id: str) -> tuple[str, tuple[int, ...]]:
    """``(family, version)`` of a model id.

    The family is the id (lower case) with every version-looking part replaced by ``#``; the
    version is the numbers of those parts, in order: ``svc-video-v2.0`` -> ``("svc-video-#",
    (2, 0))``, ``svc-image-2.1-flash`` -> ``("svc-image-#-flash", (2, 1))``.
    """
    family: list[str] = []
    version: list[int] = []
    for part in _SEPARATOR.split(model_id.lower()):
        match = _VERSION_PART.match(part)
        if match:
            family.append("#")
            version.extend(int(number) for number in match[1].split("."))
        else:
            family.append(part)
    return "".join(family), tuple(version)


def _base(family: str) -> str:
    """A family without its version parts: ``svc-video-#`` -> ``svc-video`` (an unversioned id's kin)."""
    return _VERSION_SLOT.sub("", family)


def _relatives(wanted: str, candidates: Sequence[str]) -> list[str]:
    """The models of `wanted`'s family among `candidates`: the same family (``svc-video-v2.0`` and
    ``svc-video-v2.1``), else the same family once versions are set aside (``svc-video`` and
    ``svc-video-v2.1``: an id without a version, or a family that dropped or gained one)."""
    family, _ = split_version(wanted)
    same = [model for model in candidates if split_version(model)[0] == family]
    if same:
        return same
    base = _base(family)
    return [model for model in candidates if _base(split_version(model)[0]) == base]


def best_match(wanted: str, available: Sequence[str]) -> str | None:
    """The model to use for `wanted` among `available` (the service's models of one kind).

    `wanted` itself when listed; else the newest version of its family (versions compared as
    numbers, so v10 beats v9; an id without a version counts as its family's oldest); else the
    first model listed; ``None`` when nothing usable is listed.
    """
    candidates = [model for model in available if is_model_id(model)]
    if wanted in candidates:
        return wanted
    if not candidates:
        return None
    relatives = _relatives(wanted, candidates)
    if relatives:
        return max(relatives, key=lambda model: split_version(model)[1])  # a tie: the first listed
    return candidates[0]


class ModelCache:
    """Refreshes ``GET /v1/models`` in the background (low priority on the budget)."""

    def __init__(
        self,
        client: GenerationClient,
        *,
        clock: Clock,
        refresh_every: float,
        default_video: str,
        default_image: str,
        refresh_gap: float = REFRESH_GAP,
    ) -> None:
        """`client`: the operator's key, for the periodic refresh every `refresh_every` seconds.
        `refresh_gap`: the least time between two :meth:`refresh_now` of one key.
        """
        self._client = client
        self._clock = clock
        self._refresh_every = refresh_every
        self._refresh_gap = refresh_gap
        # Per key (its client): when refresh_now last read the list, and the lock that makes a
        # burst of refused creates share one read. Weak: a removed server key takes its entry along.
        self._refreshed_at: weakref.WeakKeyDictionary[GenerationClient, float] = weakref.WeakKeyDictionary()
        self._refreshing: weakref.WeakKeyDictionary[GenerationClient, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self.default_video = default_video
        self.default_image = default_image
        self.catalog: ModelCatalog | None = None
        # kind -> (model used by default, whether the configured one is listed): logged on change.
        self._defaults: dict[str, tuple[str, bool]] = {}
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
                self.update(await self._client.list_models(priority=Priority.LOW))
                delay = self._refresh_every
            except AuthError:
                # The operator must hear about a bad key at start-up, not only when a member tries.
                log.error("the generation service rejected the API key (check GEN_API_KEY)")
                delay = min(self._refresh_every, 60.0)
            except ServiceError as exc:
                # While the service is out, its one WARNING says why (not one per refresh).
                say = log.debug if self._client.service_down else log.warning
                say("could not load the model list: %s", exc.code)
                delay = min(self._refresh_every, 60.0)
            except Exception:
                log.exception("model list refresh crashed")
                delay = min(self._refresh_every, 60.0)
            await self._clock.sleep(delay)

    async def refresh_now(self, client: GenerationClient) -> bool:
        """Read the list at once with `client`'s key: a create on that key named an unknown model.

        At most once per ``refresh_gap`` seconds per key, each read a request from that key's
        budget (at normal priority: a job waits on it). A call within the gap, or one that waited
        for the same key's read in flight, finds the list as it is then. True when this call read
        the list; a failure is logged and the list kept.
        """
        lock = self._refreshing.setdefault(client, asyncio.Lock())
        async with lock:
            last = self._refreshed_at.get(client)
            now = self._clock.monotonic()
            if last is not None and now - last < self._refresh_gap:
                return False
            self._refreshed_at[client] = now
            try:
                catalog = await client.list_models(priority=Priority.NORMAL)
            except ServiceError as exc:
                log.warning("could not reload the model list after a refused model: %s", exc.code)
                return False
            log.info("model list reloaded: the service refused a model it no longer knows")
            self.update(catalog)
            return True

    def update(self, catalog: ModelCatalog) -> None:
        """Take a fresh model list and re-decide the default models (logging what changed)."""
        self.catalog = catalog
        log.info("model list: %d video, %d image", len(catalog.video), len(catalog.image))
        for kind in ("video", "image"):
            self._choose_default(kind)

    def _choose_default(self, kind: str) -> None:
        configured = self.configured(kind)
        listed = tuple(getattr(self.catalog, kind)) if self.catalog is not None else ()
        chosen = best_match(configured, listed) or configured
        state = (chosen, configured in listed or not listed)
        previous = self._defaults.get(kind, (configured, True))
        self._defaults[kind] = state
        if state == previous:
            return  # one warning per change, not one per refresh
        setting = _SETTING[kind]
        if chosen != configured:
            how = (
                "the newest of its family"
                if chosen in _relatives(configured, [chosen])
                else f"the first {kind} model listed"
            )
            log.warning(
                "%s %s is not in the service's model list: using %s (%s) instead; update %s",
                setting,
                configured,
                chosen,
                how,
                setting,
            )
        elif not state[1]:
            log.warning(
                "%s %s is not in the service's model list, which has no usable %s model: keeping it",
                setting,
                configured,
                kind,
            )
        else:
            log.info("%s %s is in the service's model list again: using it", setting, configured)

    def configured(self, kind: str) -> str:
        """The default model of `kind` ("video" or "image") as configured."""
        return self.default_video if kind == "video" else self.default_image

    def default(self, kind: str) -> str:
        """The model a job of `kind` gets when the member picks none (configured, or its stand-in)."""
        return self._defaults.get(kind, (self.configured(kind), True))[0]

    def ids(self, kind: str) -> tuple[str, ...]:
        """Known model ids of `kind` ("video" or "image"); empty while the list is unknown.

        Only ids of the shape a member may pick (:func:`is_model_id`): one the bot would refuse is
        never offered, listed in a refusal or chosen as a stand-in.
        """
        if self.catalog is None:
            return ()
        return tuple(model for model in getattr(self.catalog, kind) if is_model_id(model))

    def suggest(self, kind: str, typed: str, limit: int = 25) -> list[str]:
        """Autocomplete: the default first, then the service's models matching what was typed.

        Ids of a shape the bot would refuse (or Discord could not show as a choice) are left out.
        """
        seen: list[str] = []
        for model in (self.default(kind), *self.ids(kind)):
            if model not in seen and is_model_id(model) and typed.lower() in model.lower():
                seen.append(model)
        return seen[:limit]
