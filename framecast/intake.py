"""Accepting a request: validate it, persist it, queue it. No Discord here.

Errors a member can fix are :class:`IntakeError`; each carries a typed :class:`IntakeProblem` and
its parameters, and the chat side maps the problem to a message in the member's language (the core
never builds message keys).
"""

from __future__ import annotations

import asyncio
import logging
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from framecast import presets
from framecast.catalog import is_model_id
from framecast.jobs import ACTIVE, AlreadyRetried, Job, JobKind, JobState, NewJob
from framecast.scheduler import Scheduler
from framecast.store import GuildQueueFull, JobStore, MemberLimitReached

log = logging.getLogger(__name__)

# At most this many model ids are listed when a member's pick is refused (a message holds 2000 chars).
_LISTED_MODELS = 15


class IntakeProblem(StrEnum):
    """What is wrong with a request (the chat side words it; see :class:`IntakeError`)."""

    PROMPT_EMPTY = "prompt_empty"  # nothing visible in the prompt
    PROMPT_TOO_LONG = "prompt_too_long"  # params: max, length
    BAD_OPTION = "bad_option"  # params: option (the option's name: size, length, fps)
    MEMBER_LIMIT = "member_limit"  # params: limit
    GUILD_QUEUE_FULL = "guild_queue_full"  # params: cap
    ALREADY_RETRIED = "already_retried"  # params: job (the failed one), id (its retry)
    UNKNOWN_MODEL = "unknown_model"  # params: model (not even shaped like a model id)
    UNLISTED_MODEL = "unlisted_model"  # params: model, models (the service's list, comma-separated)


class IntakeError(Exception):
    """A request the member can fix: `problem` says what is wrong, `params` give the details."""

    def __init__(self, problem: IntakeProblem, **params: Any) -> None:
        super().__init__(problem.value)
        self.problem = problem
        self.params = params


@dataclass(frozen=True)
class Requester:
    """Who asked, where, and in which language."""

    guild_id: int
    channel_id: int
    user_id: int
    locale: str


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
    """Turns a validated request into a persisted, queued job."""

    def __init__(self, *, store: JobStore, scheduler: Scheduler, limits: Limits) -> None:
        self._store = store
        self._scheduler = scheduler
        self.limits = limits
        self._index = _ActiveIndex()

    def track(self, jobs: Iterable[Job]) -> None:
        """Record the state of `jobs` (the unfinished jobs restored at start-up)."""
        for job in jobs:
            self._index.track(job)

    def observe(self, job: Job) -> None:
        """Record one job's state change (a :meth:`JobStore.subscribe` listener)."""
        self._index.track(job)

    def precheck(self, who: Requester) -> None:
        """Refuse at once, from memory, when a limit is already reached (no I/O: safe before ack)."""
        if self._index.member_count(who.guild_id, who.user_id) >= self.limits.member_jobs:
            raise IntakeError(IntakeProblem.MEMBER_LIMIT, limit=self.limits.member_jobs)
        if self._index.queued_count(who.guild_id) >= self.limits.guild_queue:
            raise IntakeError(IntakeProblem.GUILD_QUEUE_FULL, cap=self.limits.guild_queue)

    def video_params(
        self,
        *,
        prompt: str,
        model: str | None,
        size: str | None,
        seconds: int | None,
        frame_rate: int | None,
        known_models: Iterable[str],
        default_model: str,
    ) -> dict[str, Any]:
        """Validate /video options and return the job's parameters.

        `model` is the member's pick (checked against `known_models`, the service's list); with
        none, `default_model` is used and ``model_default`` is set in the parameters, so a retry
        can follow the service's list if that default disappears from it.
        """
        prompt = clean_prompt(prompt, self.limits.prompt_chars)
        preset = presets.VIDEO_SIZES.get(size or presets.DEFAULT_VIDEO_SIZE)
        if preset is None:
            raise IntakeError(IntakeProblem.BAD_OPTION, option="size")
        secs = seconds or presets.DEFAULT_VIDEO_SECONDS
        fps = frame_rate or presets.DEFAULT_FRAME_RATE
        if secs not in presets.VIDEO_SECONDS:
            raise IntakeError(IntakeProblem.BAD_OPTION, option="length")
        if fps not in presets.FRAME_RATES:
            raise IntakeError(IntakeProblem.BAD_OPTION, option="fps")
        return {
            **_model_params(model, default_model, known_models),
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
        prompt: str,
        model: str | None,
        size: str | None,
        known_models: Iterable[str],
        default_model: str,
    ) -> dict[str, Any]:
        """Validate /image options and return the job's parameters (models as for :meth:`video_params`)."""
        prompt = clean_prompt(prompt, self.limits.prompt_chars)
        preset = presets.IMAGE_SIZES.get(size or presets.DEFAULT_IMAGE_SIZE)
        if preset is None:
            raise IntakeError(IntakeProblem.BAD_OPTION, option="size")
        return {
            **_model_params(model, default_model, known_models),
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
        """Persist the job (limits checked in the same transaction), then queue it.

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
        job, position = await asyncio.shield(self._persist_and_queue(new))
        log.info("job %s accepted: %s for user %s in guild %s", job.id, kind, who.user_id, who.guild_id)
        return job, position

    async def _persist_and_queue(self, new: NewJob) -> tuple[Job, int]:
        try:
            job = await self._store.add(
                new,
                member_limit=self.limits.member_jobs,
                guild_cap=self.limits.guild_queue,
            )
        except MemberLimitReached:
            raise IntakeError(IntakeProblem.MEMBER_LIMIT, limit=self.limits.member_jobs) from None
        except GuildQueueFull:
            raise IntakeError(IntakeProblem.GUILD_QUEUE_FULL, cap=self.limits.guild_queue) from None
        except AlreadyRetried as exc:
            raise IntakeError(IntakeProblem.ALREADY_RETRIED, job=new.retry_of, id=exc.existing_id) from None
        self._index.track(job)
        return job, self._scheduler.submit(job)


def _model_params(model: str | None, default: str, known: Iterable[str]) -> dict[str, Any]:
    if model is None:
        # The default comes from the configuration or the service's own list: no member to refuse.
        return {"model": default, "model_default": True}
    return {"model": _check_model(model, known), "model_default": False}


def _check_model(model: str, known: Iterable[str]) -> str:
    model = model.strip()
    listed = tuple(known)
    # Autocomplete values are not validated by Discord: check against the service's list when we
    # have one, and at least the shape otherwise (the service will judge the rest).
    if not is_model_id(model):
        raise IntakeError(IntakeProblem.UNKNOWN_MODEL, model=model[:100])
    if listed and model not in listed:
        raise IntakeError(
            IntakeProblem.UNLISTED_MODEL, model=model, models=", ".join(listed[:_LISTED_MODELS])
        )
    return model
