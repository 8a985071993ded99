"""Which job store a process uses, and the contract every job store keeps.

``DATABASE_URL`` set: :class:`framecast.pgstore.PgStore` (PostgreSQL, shared by several processes).
Otherwise: :class:`framecast.store.JobStore` (SQLite at ``DATABASE_PATH``, one process), the default
for a small server. Both keep the :class:`Store` contract; ``tests/test_store_contract.py`` runs one
test suite against both.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from framecast.clock import Clock
    from framecast.config import Settings
    from framecast.guilds.settings import GuildSettings, KeyStatus, Setting
    from framecast.jobs import Job, JobState, NewJob
    from framecast.pgstore import PgStore
    from framecast.planner.predict import DurationRow
    from framecast.store import JobStore, SettingsChange, StoredKey

__all__ = ["Store", "open_store"]


class Store(Protocol):
    """The job store contract (see :class:`framecast.store.JobStore` for the full semantics).

    Every write is committed before its coroutine returns; :meth:`transition` is the only way a state
    changes; :meth:`add` checks retry uniqueness and the limits atomically with the insert, against
    every process using the same database. Operations after :meth:`close` raise ``StoreClosed``.
    """

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        ...

    async def close(self) -> None:
        """Finish the operations in flight and release the database. Idempotent."""
        ...

    def subscribe(self, listener: Callable[[Job], None]) -> None:
        """Call ``listener(job)`` after every committed add and state change made through this object."""
        ...

    async def add(
        self,
        job: NewJob,
        *,
        member_limit: int | None,
        guild_cap: int | None,
        quota: tuple[int, float] | None = None,
    ) -> Job:
        """Store a new QUEUED job (AlreadyRetried, MemberLimitReached, GuildQueueFull, DailyQuotaReached)."""
        ...

    async def transition(
        self,
        job_id: int,
        to: JobState,
        *,
        expect: JobState | Collection[JobState] | None = None,
        **fields: Any,
    ) -> Job:
        """Compare-and-set the job's state to ``to`` (InvalidTransition, JobNotFound), writing ``fields``."""
        ...

    async def update(self, job_id: int, **fields: Any) -> Job:
        """Write fields other than id/state/updated_at (JobNotFound)."""
        ...

    async def patch_discord(self, job_id: int, changes: Mapping[str, Any]) -> Job:
        """Shallow-merge ``changes`` into the job's ``discord`` dict, atomically (JobNotFound)."""
        ...

    async def get(self, job_id: int) -> Job | None:
        """The job, or None."""
        ...

    async def ping(self) -> bool:
        """Whether the database answers (a readiness check)."""
        ...

    async def hold_owner(self, owner: str) -> bool:
        """Hold the lease owner name `owner` for this process's life (False: a live process has it)."""
        ...

    async def active(self) -> list[Job]:
        """Every non-terminal job in id (acceptance) order."""
        ...

    async def load_durations(self) -> list[DurationRow]:
        """Every learned duration row, ordered by key."""
        ...

    async def save_duration(self, row: DurationRow) -> None:
        """Insert or replace the duration row with ``row.key``."""
        ...

    async def guild_settings(self, guild_id: int) -> GuildSettings:
        """The guild's own settings (``GuildSettings()`` when it has none)."""
        ...

    async def all_guild_settings(self) -> dict[int, GuildSettings]:
        """Every guild with settings of its own."""
        ...

    async def save_guild_settings(
        self, guild_id: int, settings: GuildSettings, *, by: int, changed: Sequence[Setting]
    ) -> None:
        """Upsert the settings and log one row per changed setting, in one transaction."""
        ...

    async def settings_log(self, guild_id: int, limit: int = 20) -> list[SettingsChange]:
        """The guild's latest setting changes (who, what, when)."""
        ...

    async def guild_key(self, guild_id: int) -> StoredKey | None:
        """The guild's encrypted API key, or None."""
        ...

    async def all_guild_keys(self) -> list[StoredKey]:
        """Every stored guild key."""
        ...

    async def set_guild_key(self, guild_id: int, token: bytes, last4: str, *, by: int) -> None:
        """Store (replace) the guild's encrypted key with status OK; logged."""
        ...

    async def delete_guild_key(self, guild_id: int, *, by: int) -> bool:
        """Remove the guild's key; False if there was none."""
        ...

    async def mark_guild_key(self, guild_id: int, status: KeyStatus) -> None:
        """Set the stored key's status."""
        ...

    async def claim(self, job_id: int, owner: str, until: float) -> bool:
        """Take or renew the lease of an active job if free, expired or already ``owner``'s."""
        ...

    async def claimable(
        self, owner: str, now: float, guilds: Callable[[int], bool] | None = None
    ) -> list[Job]:
        """Active jobs whose lease is free or expired at ``now`` (optionally only ``guilds``' jobs)."""
        ...

    async def release(self, job_id: int, owner: str) -> bool:
        """Give up ``owner``'s lease; False if ``owner`` did not hold it."""
        ...


async def open_store(settings: Settings, *, clock: Clock) -> JobStore | PgStore:
    """Open the job store the settings select: PostgreSQL if ``database_url`` is set, else SQLite."""
    if settings.database_url is not None:
        # Imported here: a SQLite-only installation never loads the PostgreSQL driver.
        from framecast.pgstore import PgStore

        return await PgStore.open(settings.database_url, clock=clock)
    from framecast.store import JobStore

    return await JobStore.open(settings.database_path, clock=clock)
