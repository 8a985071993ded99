"""Accepting a request: validate it, persist it, queue it. No Discord here.

Errors a member can fix are :class:`IntakeError`; each carries a typed :class:`IntakeProblem` and
its parameters, and the chat side maps the problem to a message in the member's language (the core
never builds message keys).

Each server's own rules (:class:`framecast.guilds.settings.Policy`: limits capped by the operator's
ceilings, allowed channels, NSFW-only, a prompt blocklist, daily quotas and defaults for the
options a member leaves out) are applied here, from memory, so the chat side can refuse before it
acknowledges the interaction; the store re-checks the limits and the quota in the inserting
transaction.
"""

from __future__ import annotations

import asyncio
import logging
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from framecast.app.model_choice import choose_model
from framecast.app.problems import IntakeError, IntakeProblem
from framecast.clock import Clock, SystemClock
from framecast.guilds.settings import (
    Ceilings,
    GuildSettings,
    KeyStatus,
    Policy,
    blocked_term,
    quota_window,
    resolve,
)
from framecast.jobs.scheduler import Scheduler
from framecast.storage import Store, StoreUnavailable
from framecast.values import (
    ACTIVE,
    AlreadyRetried,
    DailyQuotaReached,
    GuildQueueFull,
    Job,
    JobKind,
    JobState,
    MemberLimitReached,
    NewJob,
    presets,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Requester:
    """Who asked, where, and in which language.

    `guild_id` names the queue the job joins: a server's, or, for a person who added the app to
    their own account and asks outside a server that installed it, their own queue, named by their
    own user id (:meth:`personal`). Discord's ids are unique across users and servers, so a personal
    queue never meets a server's settings or key: it has the operator's limits, quotas and key.
    """

    guild_id: int
    channel_id: int
    user_id: int
    locale: str
    parent_id: int | None = None  # a thread's parent channel (channel rules apply to it too)
    nsfw: bool = False  # the channel, or the thread's parent, is age-restricted

    @classmethod
    def personal_queue(cls, *, user_id: int, channel_id: int, locale: str) -> Requester:
        """A person asking outside a server that installed the app (a DM, a group DM, another server)."""
        return cls(guild_id=user_id, channel_id=channel_id, user_id=user_id, locale=locale)

    @property
    def personal(self) -> bool:
        """The request joins the person's own queue (see :meth:`personal_queue`)."""
        return is_personal_queue(self.guild_id, self.user_id)


def is_personal_queue(queue_id: int, user_id: int) -> bool:
    """Whether a queue (a job's ``guild_id``) is `user_id`'s own: its id is theirs (no server's id is)."""
    return queue_id == user_id


@dataclass
class Limits:
    """Per-member and per-guild caps, and the longest prompt accepted."""

    member_jobs: int
    guild_queue: int
    prompt_chars: int


@dataclass
class _ActiveIndex:
    """Who has which unfinished job: lets the chat side refuse over-limit requests instantly."""

    jobs: dict[int, tuple[int, int, bool]] = field(default_factory=dict)  # id -> (guild, user, queued)

    def track(self, job: Job) -> None:
        if job.state in ACTIVE:
            self.jobs[job.id] = (job.guild_id, job.user_id, job.state is JobState.QUEUED)
        else:
            self.jobs.pop(job.id, None)

    def member_count(self, guild_id: int, user_id: int) -> int:
        return sum(1 for g, u, _ in self.jobs.values() if g == guild_id and u == user_id)

    def queued_count(self, guild_id: int) -> int:
        return sum(1 for g, _, q in self.jobs.values() if g == guild_id and q)


def clean_prompt(prompt: str | None, max_chars: int) -> str:
    """Check a prompt; returns it unchanged (byte-exact) or raises :class:`IntakeError`.

    Only emptiness is judged on a stripped copy: what the member typed is what the service gets.
    """
    if prompt is None or not "".join(ch for ch in prompt if not _invisible(ch)).strip():
        raise IntakeError(IntakeProblem.PROMPT_EMPTY)
    if len(prompt) > max_chars:
        raise IntakeError(IntakeProblem.PROMPT_TOO_LONG, max=max_chars, length=len(prompt))
    return prompt


def _invisible(ch: str) -> bool:
    # Zero-width and other format characters make a prompt look non-empty while saying nothing.
    return unicodedata.category(ch) in ("Cf", "Cc", "Zs", "Zl", "Zp")


class Intake:
    """Turns a validated request into a persisted, queued job, under the guild's policy.

    ``policy_for(guild_id)`` gives a guild's effective :class:`Policy` (from memory: it is called
    before the interaction is acknowledged); without it every guild gets the fixed ``limits``.
    ``key_state(guild_id)`` says whether the guild's own API key was rejected by the service, and
    ``key_unreadable(guild_id)`` whether its stored key cannot be decrypted here.
    ``clock`` and ``quota_period`` place the daily quota windows (see :func:`quota_window`).
    """

    def __init__(
        self,
        *,
        store: Store,
        scheduler: Scheduler,
        limits: Limits,
        policy_for: Callable[[int], Policy] | None = None,
        clock: Clock | None = None,
        quota_period: float = 86400.0,
        key_state: Callable[[int], KeyStatus | None] | None = None,
        key_unreadable: Callable[[int], bool] | None = None,
    ) -> None:
        self._store = store
        self._scheduler = scheduler
        self.limits = limits
        self._policy_for = policy_for
        self._clock: Clock = clock if clock is not None else SystemClock()
        quota_window(0.0, quota_period)  # refuses a period that is not a positive number, now
        self._quota_period = quota_period
        self._key_state = key_state
        self._key_unreadable = key_unreadable
        self._index = _ActiveIndex()

    def policy(self, guild_id: int) -> Policy:
        """The guild's effective policy (the fixed :class:`Limits` when no ``policy_for`` was given)."""
        if self._policy_for is not None:
            return self._policy_for(guild_id)
        ceilings = Ceilings(
            member_jobs=self.limits.member_jobs,
            queue_cap=self.limits.guild_queue,
            daily_videos=None,
            daily_images=None,
        )
        return resolve(GuildSettings(), ceilings)

    def quota_window(self) -> tuple[float, float]:
        """``(start, reset_at)`` of the current quota period, in epoch seconds."""
        return quota_window(self._clock.time(), self._quota_period)

    def track(self, jobs: Iterable[Job]) -> None:
        """Record the state of `jobs` (the unfinished jobs restored at start-up)."""
        for job in jobs:
            self._index.track(job)

    def observe(self, job: Job) -> None:
        """Record one job's state change (a :meth:`Store.subscribe` listener)."""
        self._index.track(job)

    def precheck(self, who: Requester, kind: JobKind | None = None) -> None:
        """Refuse at once, from memory, what the guild's policy forbids (no I/O: safe before ack).

        In order: the guild's stored key cannot be decrypted (never the operator's key instead); the
        guild's own key was rejected; the channel is not one of the allowed ones
        (a thread counts as its parent channel); the server is NSFW-only and the channel is not
        age-restricted; a daily quota of 0 for ``kind``; the member limit; the guild's queue cap.
        """
        # A personal queue has no server key (the operator's is used): nothing to refuse for it.
        if not who.personal and self._key_unreadable is not None and self._key_unreadable(who.guild_id):
            raise IntakeError(IntakeProblem.GUILD_KEY_UNREADABLE)
        if (
            not who.personal
            and self._key_state is not None
            and self._key_state(who.guild_id) is KeyStatus.REJECTED
        ):
            raise IntakeError(IntakeProblem.GUILD_KEY_REJECTED)
        policy = self.policy(who.guild_id)
        channels = policy.settings.channels
        if channels and who.channel_id not in channels and who.parent_id not in channels:
            raise IntakeError(IntakeProblem.CHANNEL_NOT_ALLOWED, channels=list(channels))
        if policy.settings.nsfw_only and not who.nsfw:
            raise IntakeError(IntakeProblem.NSFW_ONLY)
        if kind is not None and policy.daily_quota(kind) == 0:
            # Counting needs the store; a quota of 0 ("no videos here") needs nothing.
            raise self._quota_error(JobKind(kind), 0)
        # Each refusal names the jobs there are, which a limit lowered below them leaves above it.
        if (held := self._index.member_count(who.guild_id, who.user_id)) >= policy.member_jobs:
            raise IntakeError(IntakeProblem.MEMBER_LIMIT, limit=held)
        if (queued := self._index.queued_count(who.guild_id)) >= policy.queue_cap:
            raise IntakeError(IntakeProblem.GUILD_QUEUE_FULL, cap=queued)

    def check_prompt(self, guild_id: int, prompt: str | None) -> str:
        """The prompt unchanged, or :class:`IntakeError`: empty, too long, or on the guild's blocklist.

        PROMPT_BLOCKED carries no parameters: the blocked term is never shown back.
        """
        prompt = clean_prompt(prompt, self.limits.prompt_chars)
        blocklist = self.policy(guild_id).settings.blocklist
        if blocklist and blocked_term(prompt, blocklist) is not None:
            raise IntakeError(IntakeProblem.PROMPT_BLOCKED)
        return prompt

    def video_params(
        self,
        *,
        guild_id: int,
        prompt: str,
        model: str | None,
        size: str | None,
        seconds: int | None,
        frame_rate: int | None,
        known_models: Iterable[str],
        default_model: str,
    ) -> dict[str, Any]:
        """Validate /video options and return the job's parameters.

        `model` is the member's pick (checked against `known_models`, the service's list). With
        none, the server's default model is used if the service still lists it, else
        `default_model` with ``model_default`` set in the parameters, so a retry can follow the
        service's list if that default disappears from it. Other options the member left out take
        the server's defaults, then the operator's presets.
        """
        prompt = self.check_prompt(guild_id, prompt)
        server = self.policy(guild_id).settings
        listed = tuple(known_models)
        size_key = size or _valid(server.video_size, presets.VIDEO_SIZES) or presets.DEFAULT_VIDEO_SIZE
        preset = presets.VIDEO_SIZES.get(size_key)
        if preset is None:
            raise IntakeError(IntakeProblem.BAD_OPTION, option="size")
        # Only an option left out takes a default: a 0 typed into the Remix form is refused below.
        secs = seconds if seconds is not None else _valid(server.video_seconds, presets.VIDEO_SECONDS)
        secs = secs if secs is not None else presets.DEFAULT_VIDEO_SECONDS
        fps = frame_rate if frame_rate is not None else _valid(server.video_fps, presets.FRAME_RATES)
        fps = fps if fps is not None else presets.DEFAULT_FRAME_RATE
        if secs not in presets.VIDEO_SECONDS:
            raise IntakeError(IntakeProblem.BAD_OPTION, option="length")
        if fps not in presets.FRAME_RATES:
            raise IntakeError(IntakeProblem.BAD_OPTION, option="fps")
        return {
            **choose_model(
                model, server_default=server.video_model, operator_default=default_model, listed=listed
            ).params(),
            "prompt": prompt,
            "width": preset.width,
            "height": preset.height,
            "num_frames": presets.num_frames(secs, fps),
            "frame_rate": fps,
            "seconds": secs,
            "size_key": preset.key,
        }

    def image_params(
        self,
        *,
        guild_id: int,
        prompt: str,
        model: str | None,
        size: str | None,
        known_models: Iterable[str],
        default_model: str,
    ) -> dict[str, Any]:
        """Validate /image options and return the job's parameters (defaults as for :meth:`video_params`)."""
        prompt = self.check_prompt(guild_id, prompt)
        server = self.policy(guild_id).settings
        size_key = size or _valid(server.image_size, presets.IMAGE_SIZES) or presets.DEFAULT_IMAGE_SIZE
        preset = presets.IMAGE_SIZES.get(size_key)
        if preset is None:
            raise IntakeError(IntakeProblem.BAD_OPTION, option="size")
        return {
            **choose_model(
                model,
                server_default=server.image_model,
                operator_default=default_model,
                listed=tuple(known_models),
            ).params(),
            "prompt": prompt,
            "size": preset.size,
            "size_key": preset.key,
        }

    async def accept(
        self,
        who: Requester,
        kind: JobKind,
        params: dict[str, Any],
        *,
        discord: dict[str, Any] | None = None,
        retry_of: int | None = None,
    ) -> tuple[Job, int]:
        """Persist the job (limits and daily quota checked in the same transaction), then queue it.

        Returns the job and its place in the guild's queue. The job is committed to the database
        before this returns, so it is safe to tell the member it is queued. A second retry of the
        same job (`retry_of`) is refused by the store: ``error_already_retried``.
        """
        new = NewJob(
            kind=kind,
            guild_id=who.guild_id,
            channel_id=who.channel_id,
            user_id=who.user_id,
            locale=who.locale,
            params=params,
            retry_of=retry_of,
            discord=dict(discord or {}),
        )
        # Shielded as one unit: a cancelled caller must not leave a committed job that was never queued.
        job, position = await asyncio.shield(self._persist_and_queue(new, self.policy(who.guild_id)))
        log.info("job %s accepted: %s for user %s in guild %s", job.id, kind, who.user_id, who.guild_id)
        return job, position

    async def _persist_and_queue(self, new: NewJob, policy: Policy) -> tuple[Job, int]:
        limit = policy.daily_quota(new.kind)
        quota = None
        if limit is not None:
            since, _ = self.quota_window()
            quota = (limit, since)
        try:
            job = await self._store.add(
                new,
                member_limit=policy.member_jobs,
                guild_cap=policy.queue_cap,
                quota=quota,
            )
        except DailyQuotaReached as exc:
            raise self._quota_error(new.kind, exc.limit) from None
        except MemberLimitReached:
            raise IntakeError(IntakeProblem.MEMBER_LIMIT, limit=policy.member_jobs) from None
        except GuildQueueFull:
            raise IntakeError(IntakeProblem.GUILD_QUEUE_FULL, cap=policy.queue_cap) from None
        except AlreadyRetried as exc:
            raise IntakeError(IntakeProblem.ALREADY_RETRIED, job=new.retry_of, id=exc.existing_id) from None
        self._index.track(job)
        try:
            claimed = await self._scheduler.claim(job)
        except StoreUnavailable:
            # Committed, so accepted (refusing now would hide a job that runs): its lease is free,
            # and the lease scan of this process (or another) takes it up once the store answers.
            log.warning("job %s: accepted, but its lease could not be taken yet; the lease scan will", job.id)
            return job, 1
        if not claimed:
            # Another process on the shared store took it over in the instant before our claim:
            # it runs there (and shows its place there); queuing it here too would run it twice.
            return job, 1
        return job, self._scheduler.submit(job)

    def _quota_error(self, kind: JobKind, limit: int) -> IntakeError:
        _, reset_at = self.quota_window()
        return IntakeError(IntakeProblem.DAILY_QUOTA, kind=kind, limit=limit, resets_at=reset_at)


def _valid(value: Any, choices: Iterable[Any]) -> Any:
    """A server default if it is still one of the presets (an older preset list may have had it)."""
    return value if value is not None and value in choices else None
