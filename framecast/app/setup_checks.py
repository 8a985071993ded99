"""The operator's setup, checked before the bot logs in to Discord: every problem at once, one line each.

A newcomer's mistakes (``DATABASE_PATH`` naming a directory or a file that is not SQLite, a
``DATABASE_URL`` or ``REDIS_URL`` nothing answers at) must not wait for Discord to accept the token,
nor come one per start: :func:`check_setup` opens (and migrates) the job store and reaches Redis
together, and reports each problem as a :class:`SetupProblem` naming its variable. The store it
opened is handed to :meth:`Core.open <framecast.app.core.Core.open>`, so it is opened once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from framecast.clock import Clock
from framecast.config import Secret, Settings
from framecast.keys.redis_names import SecretMismatch, check_secret, connect
from framecast.storage import Store, StoreError, open_store

__all__ = ["CheckedSetup", "SetupProblem", "check_setup"]

log = logging.getLogger(__name__)

#: Seconds Redis has to answer a PING at start-up (its connection timeout is 5 s too).
REDIS_TIMEOUT = 6.0


@dataclass(frozen=True)
class SetupProblem:
    """One thing in the operator's setup that stops the start: the variable to fix and why."""

    variable: str
    problem: str

    def __str__(self) -> str:
        return f"{self.variable}: {self.problem}"


@dataclass
class CheckedSetup:
    """What :func:`check_setup` found: the opened store (None if it could not be opened) and the problems."""

    store: Store | None
    problems: list[SetupProblem] = field(default_factory=list)

    async def discard(self) -> None:
        """Close the store (when the start is given up)."""
        if self.store is not None:
            store, self.store = self.store, None
            await store.close()


async def check_setup(settings: Settings, *, clock: Clock) -> CheckedSetup:
    """Open (and migrate) the job store and reach Redis, at once; every problem found, one line each.

    Never a password in a problem: URLs are shown by host and port only.
    """
    store, redis = await asyncio.gather(_open_store(settings, clock), _reach_redis(settings))
    _warn_of_shards_without_redis(settings)
    _warn_of_unknown_variables(settings)
    checked = CheckedSetup(store=store if isinstance(store, Store) else None)
    checked.problems.extend(p for p in (store, redis) if isinstance(p, SetupProblem))
    return checked


def _warn_of_shards_without_redis(settings: Settings) -> None:
    # Not a refusal: the other shards' processes may each run on a key of their own.
    count, ids = settings.shard_count, settings.shard_ids
    if settings.redis_url is None and count is not None and ids is not None and not _all_shards(ids, count):
        log.warning(
            "SHARD_IDS names %d of SHARD_COUNT=%d shards and REDIS_URL is not set: a process running the"
            " others on the same API key spends the key's whole budget beside this one, and the service"
            " answers 429; set REDIS_URL and REDIS_KEY_SECRET in every process",
            len(set(ids)),
            count,
        )


def _warn_of_unknown_variables(settings: Settings) -> None:
    # Not a refusal either: a name the bot does not read may be another program's. Names only.
    if settings.unknown_variables:
        log.warning("ignored, not settings of Framecast (a typo?): %s", ", ".join(settings.unknown_variables))


def _all_shards(ids: tuple[int, ...], count: int) -> bool:
    """Whether `ids` name every shard of `count`: counted, never by listing the `count` shards."""
    mine = set(ids)
    return len(mine) == count and all(0 <= i < count for i in mine)


async def _open_store(settings: Settings, clock: Clock) -> Store | SetupProblem:
    variable = "DATABASE_PATH" if settings.database_url is None else "DATABASE_URL"
    try:
        return await open_store(settings, clock=clock)
    except StoreError as exc:
        # StoreError's text is one line without the password (framecast.storage's promise).
        return SetupProblem(variable, str(exc))


async def _reach_redis(settings: Settings) -> SetupProblem | None:
    if settings.redis_url is None:
        return None
    client = connect(settings.redis_url)
    try:
        async with asyncio.timeout(REDIS_TIMEOUT):
            await client.ping()
        if settings.redis_key_secret is not None:
            # Before the login too: processes naming budgets under different secrets would each
            # spend the whole key (the core asks again when it opens, for starts without this check).
            await check_secret(client, settings.redis_key_secret)
    except SecretMismatch as exc:
        return SetupProblem(exc.variable, exc.problem)
    except Exception as exc:
        # The type only: a driver's message may quote the URL, password included.
        return SetupProblem(
            "REDIS_URL", f"cannot reach Redis at {_where(settings.redis_url)} ({type(exc).__name__})"
        )
    finally:
        await client.aclose()
    log.info("Redis answers at %s", _where(settings.redis_url))
    return None


def _where(url: Secret) -> str:
    """``host:port`` (or the socket path) of a Redis URL: never its password."""
    parts = urlsplit(url.reveal())
    if parts.scheme == "unix":
        return parts.path or "a unix socket"
    try:
        port = parts.port or 6379
    except ValueError:
        port = 6379
    return f"{parts.hostname or 'localhost'}:{port}"
