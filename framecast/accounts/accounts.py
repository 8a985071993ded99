"""API keys as accounts: the operator's key, and each server's own key, with a budget and planner each.

Every API key the bot uses is one :class:`~framecast.accounts.parts.Account`: its own
:class:`~framecast.service.budget.Budget`
(the service limits each key on its own), its own :class:`~framecast.service.GenerationClient` (which
carries only that key, to the service's origin only) and its own
:class:`~framecast.planner.planner.Planner` (which spends that budget). :class:`Accounts` holds them:

* the operator's account, from ``GEN_API_KEY``;
* one account per server that set its own key (``/settings key``): opened at start-up from the
  store (read and decrypted by :class:`~framecast.keys.server_keys.ServerKeys`) and whenever an admin sets
  one. A server's jobs use its own key from then on, never silently the operator's: a key the
  service rejects (401) stays that server's (new jobs are refused by the intake until an admin sets
  a new one), and a job whose task was created with a key that is gone after a restart fails.
* which key a job runs on (:meth:`Accounts.for_job`), per-key admission for the scheduler
  (:meth:`Accounts.admission_for`) and estimates for the chat side (:meth:`Accounts.estimate`).

Keys are handled as :class:`~framecast.config.Secret` and never logged, not even their last four
characters (those are shown to the server's admins only). In the metrics a key is named by its
:func:`~framecast.ops.metrics.key_label` (``operator``, or ``guild-`` and a keyed hash): each open
account's budget and planner are read there at scrape time, and forgotten when the key is retired.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable

import aiohttp

from framecast.accounts.parts import Account, KeyCheck, KeyParts, can_be_key
from framecast.clock import Clock
from framecast.config import Secret, Settings
from framecast.guilds.settings import KeyStatus
from framecast.jobs.queues import GuildQueues
from framecast.jobs.runner import KeyAccount
from framecast.jobs.scheduler import Admission
from framecast.keys.budget import KeptBudgets
from framecast.keys.redis_names import check_secret, connect, redis_error
from framecast.keys.server_keys import OpenedKey, ServerKeys
from framecast.keys.shared_budget import budget_key_id, open_budget
from framecast.keys.shared_plan import SharedPlanState
from framecast.keys.spent import SpentRequests
from framecast.keys.vault import KeyVault, KeyVaultState
from framecast.logsetup import mask_secrets
from framecast.ops.metrics import UNCHECKED_KEY, Metrics, key_label
from framecast.planner.estimate import Estimate
from framecast.planner.planner import Planner, PlannerSettings
from framecast.planner.shared import SharedView, summed
from framecast.service import GenerationClient
from framecast.service.budget import Budget
from framecast.service.errors import AuthError, ServiceError
from framecast.service.outage import ServiceOutage
from framecast.storage import Store
from framecast.values import Job, JobState
from framecast.values.service_requests import Priority

__all__ = ["Accounts"]

log = logging.getLogger(__name__)


class Accounts:
    """The operator's account and the servers' own (see the module docstring).

    Build with :meth:`open`. Implements :class:`framecast.planner.estimate.Estimates`,
    :class:`framecast.jobs.scheduler.AccountAdmission` and :class:`framecast.jobs.runner.JobAccounts`.
    """

    def __init__(
        self,
        *,
        settings: Settings,
        session: aiohttp.ClientSession,
        clock: Clock,
        store: Store,
        queues: GuildQueues,
        vault: KeyVault,
        planner_settings: PlannerSettings,
        metrics: Metrics | None = None,
        spent: SpentRequests | None = None,
    ) -> None:
        """Use :meth:`open`: the operator's account must be opened before anything else."""
        self._settings = settings
        self._session = session
        self._clock = clock
        self._store = store
        self._queues = queues
        self._keys = ServerKeys(store=store, vault=vault)  # the servers' stored keys, decrypted
        self._planner_settings = planner_settings
        self._metrics = metrics
        #: Whether the service answers, one view for every key's client (one WARNING per outage).
        self._service = ServiceOutage(settings.gen_api_base_url, clock=clock, metrics=metrics)
        self._operator: Account | None = None
        self._guild: dict[int, Account] = {}
        self._parts: dict[Secret, KeyParts] = {}  # one budget, client and planner per key
        self._retired: list[Account] = []  # replaced or removed keys still used by running jobs
        self._bound: dict[int, Account] = {}  # job id -> the account its runner uses
        self._admission_listeners: list[Callable[[], None]] = []
        self._key_listeners: list[Callable[[Hashable], None]] = []
        self._rejected_listeners: list[Callable[[int], Awaitable[None]]] = []
        self._closing: set[asyncio.Task[None]] = set()
        # Setting, removing and loading a server's key: one at a time, so the account its jobs use
        # is the key the store keeps (a removal between a key's write and its account's opening
        # left the jobs on a key the store no longer had). Key changes are rare: one lock for all.
        self._key_changes = asyncio.Lock()
        # Budgets of keys no account uses: one checked before it is set, or one just removed.
        self._idle_budgets: KeptBudgets[Secret] = KeptBudgets(clock)
        # One Redis connection pool for every key's shared budget (REDIS_URL); None: budgets in memory,
        # recorded in `spent` (owned here from now on).
        self._redis = connect(settings.redis_url) if settings.redis_url is not None else None
        self._spent = spent if self._redis is None else None

    async def redis_answers(self) -> bool:
        """Whether the Redis of the shared budgets answers a PING now (a readiness check; True without
        Redis). While it does not, no key grants a request: the bot spends nothing and jobs wait."""
        if self._redis is None:
            return True
        try:
            return bool(await self._redis.ping())
        except (redis_error(), OSError):
            return False  # the budgets log the outage; a probe every few seconds adds nothing

    def __repr__(self) -> str:
        return f"<Accounts guild_keys={len(self._guild)} retired={len(self._retired)} vault={self._keys.vault_state}>"

    @classmethod
    async def open(
        cls,
        *,
        settings: Settings,
        session: aiohttp.ClientSession,
        clock: Clock,
        store: Store,
        queues: GuildQueues,
        vault: KeyVault,
        planner_settings: PlannerSettings,
        metrics: Metrics | None = None,
        spent: SpentRequests | None = None,
    ) -> Accounts:
        """The operator's account plus one per server key in the store (when the vault can read them).

        With `metrics`, every request of every key is counted there, and each key's budget and
        planner are shown under its label. `spent`: where the budgets in memory record what they
        spend, so that a restart starts each key from what it spent (closed by :meth:`close`).
        """
        self = cls(
            settings=settings,
            session=session,
            clock=clock,
            store=store,
            queues=queues,
            vault=vault,
            planner_settings=planner_settings,
            metrics=metrics,
            spent=spent,
        )
        try:
            if self._redis is not None and settings.redis_key_secret is not None:
                # Processes naming budgets under different secrets would each spend the whole key.
                await check_secret(self._redis, settings.redis_key_secret)
            # The operator's planner answers for every guild without a key of its own.
            self._operator = await self._open_account(None, settings.gen_api_key, "")
            queues.assign_scopes(lambda guild: self.for_guild(guild).parts.scope)  # what each planner counts
            await self._load_guild_keys()
            self._mask_keys_in_use()
        except BaseException:
            await self.close()
            raise
        return self

    async def _load_guild_keys(self) -> None:
        stored = await self._keys.open_all()
        if stored is None:
            return
        # A stored key no secret opens is left out by open_all: that server is refused, not moved
        # onto the operator's key. One such key never stops the start.
        for opened in stored:
            await self._load(opened)
        log.info("opened %d server key(s)", len(self._guild))

    async def _load(self, opened: OpenedKey) -> None:
        account = await self._open_account(opened.guild_id, opened.key, opened.last4)
        account.rejected = opened.rejected
        self._guild[opened.guild_id] = account
        self._queues.regroup(opened.guild_id)
        self._admission_changed()

    async def load_guild(self, guild_id: int) -> None:
        """Bring the guild's key in step with the store: another process (the one that serves the
        guild) may have set, replaced or removed it, or seen it refused, after this one started.

        Called before taking over a job of a guild this process does not serve, so the job's task
        is polled (and a queued job created) with the key the store holds now.
        """
        async with self._key_changes:
            opened = await self._keys.open_one(guild_id)
            old = self._guild.get(guild_id)
            if opened is not None and old is not None and opened.key == old.key:
                old.rejected = opened.rejected
                return
            if opened is None and (old is None or self._keys.unreadable(guild_id)):
                return
            if opened is not None:
                await self._load(opened)
            else:
                del self._guild[guild_id]
                self._queues.regroup(guild_id)
                self._admission_changed()
            await self._retire(old)
            self._mask_keys_in_use()
        log.info("guild %s: its API key was changed in another process; this one follows", guild_id)

    async def _open_account(self, owner: int | None, key: Secret, shown: str) -> Account:
        """An account on `key`: the key's parts are opened once, however many servers set it."""
        parts = self._parts.get(key)
        if parts is None:
            parts = await self._open_parts(key, key_label(None if owner is None else key))
            self._parts[key] = parts
        parts.users += 1
        return Account(owner=owner, last4=shown, parts=parts)

    def _open_budget(self, key: Secret) -> Budget:
        spent = self._spent.on_key(key) if self._spent is not None else None
        return open_budget(self._settings, key, clock=self._clock, redis=self._redis, spent=spent)

    async def _open_parts(self, key: Secret, label: str) -> KeyParts:
        s = self._settings
        # Shared through Redis when REDIS_URL is set: every process on this key counts in one window.
        # A budget this key had a moment ago (its check, or its previous account) still counts.
        budget = self._idle_budgets.take(key) or self._open_budget(key)
        client = GenerationClient.from_settings(
            self._session,
            s.replace(gen_api_key=key),
            budget,
            self._clock,
            metrics=self._metrics,
            key_label=label,
            outage=self._service,
        )
        # Every process on this key counts the others' planned requests and tasks (never the key itself).
        shared: SharedPlanState[SharedView] | None = None
        if self._redis is not None and s.redis_key_secret is not None:
            key_id = budget_key_id(key, s.redis_key_secret)
            shared = SharedPlanState(
                redis=self._redis,
                key_id=key_id,
                clock=self._clock,
                window=budget.window,
                read=summed,
                nobody=SharedView(),
            )
        scope = self._queues.scope()
        try:
            planner = await Planner.open(
                budget=budget,
                clock=self._clock,
                store=self._store,
                queues=self._queues,
                settings=self._planner_settings,
                # The guilds whose jobs run on this key: queue estimates count only them.
                scope=scope,
                shared=shared,
            )
        except BaseException:
            await client.close()
            budget.close()
            raise
        parts = KeyParts(key, label, budget, client, planner, scope, shared)
        # Only this key's guilds are asked again when its planner moves (every create and poll does).
        planner.on_change(lambda: self._key_changed(parts))
        if shared is not None:
            shared.start()
        if self._metrics is not None:
            self._metrics.track_budget(label, parts.budget_reading)
            self._metrics.track_planner(label, planner.concurrency)
        return parts

    async def _close_account(self, account: Account) -> None:
        """The account is gone: its key's parts close with the last account using them."""
        parts = account.parts
        parts.users -= 1
        if parts.users > 0:
            return
        if self._parts.get(parts.key) is parts:
            del self._parts[parts.key]
        if self._metrics is not None:
            self._metrics.untrack(parts.label)
        # Its requests of the last window still count if the key is set again: the budget stays.
        self._idle_budgets.keep(parts.key, parts.budget)
        await parts.close(keep_budget=True)

    # -- which key ----------------------------------------------------------------------------------
    @property
    def operator(self) -> Account:
        """The operator's account (``GEN_API_KEY``)."""
        assert self._operator is not None, "Accounts.open() first"
        return self._operator

    @property
    def vault_state(self) -> KeyVaultState:
        """Whether servers may set their own keys (see :class:`~framecast.keys.vault.KeyVaultState`)."""
        return self._keys.vault_state

    def for_guild(self, guild_id: int) -> Account:
        """The guild's own account if it set a key (even one the service rejected), else the operator's."""
        return self._guild.get(guild_id) or self.operator

    def for_job(self, job: Job) -> Account | None:
        """The account `job` runs on.

        Not created yet (QUEUED, SUBMITTING): its guild's account now (None if the guild's stored key
        cannot be decrypted). Otherwise the account its runner uses, else the one of ``key_owner``
        (None: that key is gone, or replaced while the task runs: the service knows a task only by
        the key that created it, and a result's link may be fetched without it).
        """
        if job.state in (JobState.QUEUED, JobState.SUBMITTING):
            return None if self._keys.unreadable(job.guild_id) else self.for_guild(job.guild_id)
        bound = self._bound.get(job.id)
        if bound is not None:
            return bound
        account = self.operator if job.key_owner is None else self._guild.get(job.key_owner)
        if (
            account is not None
            and job.state is JobState.RUNNING
            and job.key_last4 not in (None, account.key_last4)
        ):
            return None
        return account

    def guild_key_state(self, guild_id: int) -> KeyStatus | None:
        """The guild's own key: OK, REJECTED (also when it cannot be decrypted), or None (none set)."""
        if self._keys.unreadable(guild_id):
            return KeyStatus.REJECTED
        account = self._guild.get(guild_id)
        if account is None:
            return None
        return KeyStatus.REJECTED if account.rejected else KeyStatus.OK

    def key_unreadable(self, guild_id: int) -> bool:
        """The guild stored a key that no key of ``KEY_ENCRYPTION_SECRET`` opens (or the secret is
        unset): its jobs are refused, not moved onto the operator's key, until an admin sets or
        removes it."""
        return self._keys.unreadable(guild_id)

    def reveals_key(self, text: str) -> bool:
        """Whether `text` (a result link the service gave) carries any key the bot holds: the
        operator's, a server's, or one retired but still in use. The service may name any of them."""
        return any(account.client.reveals_key(text) for account in self._all_accounts())

    def bind(self, job_id: int, account: KeyAccount) -> None:
        """A runner works on the job with `account` (kept open, even if replaced, until :meth:`unbind`)."""
        if isinstance(account, Account):
            self._bound[job_id] = account
            account.jobs.add(job_id)

    def unbind(self, job_id: int) -> None:
        """The runner is done with the job; a retired account with no jobs left is closed."""
        account = self._bound.pop(job_id, None)
        if account is None:
            return
        account.jobs.discard(job_id)
        account.parts.planner.release(job_id)
        if account in self._retired and not account.jobs:
            self._retired.remove(account)
            self._mask_keys_in_use()
            task = asyncio.get_running_loop().create_task(
                self._close_account(account), name="framecast-close-key"
            )
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    # -- admission (the scheduler) and estimates (the chat side) --------------------------------------
    def admission_for(self, guild_id: int) -> tuple[Hashable, Admission]:
        """The account a guild's next job runs on (its slot key) and that key's planner."""
        account = self.for_guild(guild_id)
        return account.parts, account.planner

    def admission_for_job(self, job: Job) -> tuple[Hashable, Admission]:
        """The account a started (or restored) job runs on and its planner (the operator's if none)."""
        account = self.for_job(job) or self.operator
        return account.parts, account.planner

    def on_admission_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` whenever the key of a guild may have changed (a key set, removed, opened
        or rejected)."""
        self._admission_listeners.append(listener)

    def on_key_change(self, listener: Callable[[Hashable], None]) -> None:
        """Call ``listener(key)`` (the slot key :meth:`admission_for` names) whenever that key's
        admission may have changed (keys opened later too)."""
        self._key_listeners.append(listener)

    def _admission_changed(self) -> None:
        for listener in self._admission_listeners:
            listener()

    def _key_changed(self, parts: KeyParts) -> None:
        for listener in self._key_listeners:
            listener(parts)

    def estimate(self, job: Job) -> Estimate:
        """The job's estimate from the planner of the key it runs (or will run) on."""
        account = self.for_job(job)
        return account.planner.estimate(job) if account is not None else Estimate()

    # -- servers' own keys ----------------------------------------------------------------------------
    async def check_key(self, key: str) -> KeyCheck:
        """Ask the service about `key` with one model-list call (the client's usual retries only).

        The call goes through that key's own budget: the open account's when the key is in use
        already, else the one its account will take over if it is set (so the key's first window
        counts the check). The key is not masked in logs yet (only accepted keys are): the client
        scrubs its own key from everything it says.
        """
        key = key.strip()
        if not can_be_key(key):
            return KeyCheck.REJECTED  # it cannot travel in a header: no request needed
        secret = Secret(key)
        in_use = next((a for a in self._all_accounts() if a.key == secret), None)
        if in_use is not None:
            return await _ask(in_use.client)
        s = self._settings
        budget = self._idle_budgets.get(secret, lambda: self._open_budget(secret))
        # Its requests count like any other, under the one label of unchecked keys (a key the
        # service refuses must leave no series of its own); its budget is not shown.
        client = GenerationClient.from_settings(
            self._session,
            s.replace(gen_api_key=secret),
            budget,
            self._clock,
            metrics=self._metrics,
            key_label=UNCHECKED_KEY,
            outage=self._service,
        )
        try:
            return await _ask(client)
        finally:
            await client.close()

    async def set_guild_key(self, guild_id: int, key: str, *, by: int) -> None:
        """Encrypt and store the guild's own key, and use it for the guild's jobs from now on.

        Raises ``RuntimeError`` when server keys cannot be stored (:attr:`vault_state` not READY).
        Jobs already running keep the key they were created with.
        """
        if guild_id == by:
            # A person's own queue (its id is theirs) always uses the operator's key.
            raise ValueError("a personal queue has no server key")
        async with self._key_changes:
            saved = await self._keys.save(guild_id, key, by=by)
            account = await self._open_account(guild_id, saved.key, saved.last4)
            old = self._guild.get(guild_id)
            self._guild[guild_id] = account
            self._queues.regroup(guild_id)
            self._keys.forget_unreadable(guild_id)
            await self._retire(old)
        self._mask_keys_in_use()
        log.info("guild %s: user %s set the server's own API key", guild_id, by)
        self._admission_changed()

    async def remove_guild_key(self, guild_id: int, *, by: int) -> bool:
        """Back to the operator's key for the guild's new jobs; False if it had no key."""
        async with self._key_changes:
            removed = await self._keys.remove(guild_id, by=by)
            old = self._guild.pop(guild_id, None)
            self._queues.regroup(guild_id)
            unreadable = self._keys.forget_unreadable(guild_id)
            await self._retire(old)
        self._mask_keys_in_use()
        if removed or old is not None or unreadable:
            log.info("guild %s: user %s removed the server's own API key", guild_id, by)
            self._admission_changed()
            return True
        return False

    async def _retire(self, account: Account | None) -> None:
        """Close a replaced or removed account, or keep it open while running jobs still use it."""
        if account is None:
            return
        if account.jobs:
            self._retired.append(account)
        else:
            await self._close_account(account)

    async def key_rejected(self, account: KeyAccount) -> None:
        """A server's own key got a 401: mark it REJECTED and tell the listeners, once per key."""
        if not isinstance(account, Account) or account.owner is None or account.rejected:
            return
        account.rejected = True
        guild_id = account.owner
        if self._guild.get(guild_id) is not account:
            return  # replaced or removed meanwhile: the admins already acted
        first = await self._keys.mark_rejected(guild_id, account.last4)
        self._admission_changed()
        if not first:  # another process heard it first and told the admins, or replaced the key
            log.info("guild %s: the service rejected the server's own API key (already known)", guild_id)
            return
        log.warning("guild %s: the service rejected the server's own API key; telling its admins", guild_id)
        for listener in list(self._rejected_listeners):
            try:
                await listener(guild_id)
            except Exception:
                log.exception("guild %s: a rejected-key listener failed", guild_id)

    def on_key_rejected(self, listener: Callable[[int], Awaitable[None]]) -> None:
        """Await ``listener(guild_id)`` when a server's own key is rejected (the chat side tells its admins)."""
        self._rejected_listeners.append(listener)

    def _mask_keys_in_use(self) -> None:
        # Only keys the service accepted and an account still holds are masked in the logs: a key
        # removed or replaced (once its running jobs end) stops being masked. One the service
        # refused later stays masked while it is stored: it was a real key once (revoked, unpaid).
        mask_secrets(self, {a.key.reveal() for a in self._all_accounts()})

    # -- closing --------------------------------------------------------------------------------------
    def _all_accounts(self) -> list[Account]:
        found = [self._operator] if self._operator is not None else []
        return found + list(self._guild.values()) + list(self._retired)

    async def close(self) -> None:
        """Close every account (clients' own sessions, budget timers). Safe to call twice."""
        accounts = self._all_accounts()
        self._guild.clear()
        self._retired.clear()
        for account in accounts:
            try:
                await self._close_account(account)
            except Exception:
                log.exception("closing an API key's client failed")
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        self._idle_budgets.close()
        if self._spent is not None:
            await self._spent.close()
        mask_secrets(self, ())
        if self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose()


async def _ask(client: GenerationClient) -> KeyCheck:
    try:
        await client.list_models(priority=Priority.HIGH)
    except AuthError:
        return KeyCheck.REJECTED
    except ServiceError as exc:
        log.info("a key check got no usable answer: %s", exc.code)
        return KeyCheck.UNREACHABLE
    return KeyCheck.OK
