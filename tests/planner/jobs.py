"""What the planner's tests queue: a member's video as ``/video`` makes it, stored as intake does;
and a create sent through a job's handle, as the runner sends it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from framecast.jobs.job_keys import CreateFailure, JobPlan
from framecast.storage import Store
from framecast.values import Job, JobKind, NewJob
from framecast.values.service_requests import Priority
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL

__all__ = ["IMAGE", "VIDEO", "add_job", "create_through", "new_job"]

#: A 5-second 1152x768 video's parameters (the planner reads only their kind and model).
VIDEO: dict[str, Any] = {
    "model": VIDEO_MODEL,
    "prompt": "p",
    "width": 1152,
    "height": 768,
    "num_frames": 121,
    "frame_rate": 24,
}
#: A square image's parameters.
IMAGE: dict[str, Any] = {"model": IMAGE_MODEL, "prompt": "p", "size": "1024x1024"}


def new_job(guild: int = 1, *, kind: JobKind = JobKind.VIDEO, params: dict[str, Any] | None = None) -> NewJob:
    """A job of ``guild`` (``params`` default to :data:`VIDEO`'s)."""
    return NewJob(
        kind=kind, guild_id=guild, channel_id=2, user_id=3, locale="en-US", params=dict(params or VIDEO)
    )


async def add_job(
    store: Store, guild: int = 1, *, kind: JobKind = JobKind.VIDEO, params: dict[str, Any] | None = None
) -> Job:
    """:func:`new_job`, stored with no member limit or server cap."""
    return await store.add(new_job(guild, kind=kind, params=params), member_limit=None, guild_cap=None)


async def create_through(plan: JobPlan, sending: Callable[[], Awaitable[None]] | None = None) -> Priority:
    """Create `plan`'s job as the runner does, the create going through once `sending` (what
    happens while it is sent: nothing by default) returns; the priority it was sent at."""

    async def send(sent_now: Callable[[], Priority]) -> Priority:
        priority = sent_now()
        if sending is not None:
            await sending()
        return priority

    return await plan.create(send, failure=_not_a_failure, sleep=_never_waited)


def _not_a_failure(exc: Exception) -> CreateFailure | None:
    return None  # whatever `sending` raised goes on as it is


async def _never_waited(seconds: float) -> None:
    raise AssertionError("a create that went through at once waited")
