"""Jobs whose place in the chat is gone: their channel or thread was deleted, or the bot left their
server (kicked, or the server deleted).

Nothing of such a job could ever be shown: its message went with its channel, and a fresh one has
nowhere to go. Left alone, each went on: queued jobs still started, used the service and its
key's budget, and every redraw of their messages was a refused request to Discord (one per job and
edit interval, for as long as they waited), until the delivery failed as an internal error. So
they end at once, failed with :attr:`ErrorCode.CHANNEL_GONE` (their requester reads why in /job,
/history and /me), through the scheduler like a cancel, and the rest of the queue goes on. A job
already being delivered keeps its outcome: its result exists, and waits for its requester in /job
(``framecast.app.parked``) when there is nowhere left to post it.

The chat side tells the core what is gone (:meth:`GonePlaces.channels_gone`,
:meth:`GonePlaces.server_left`, also for a server it finds gone on connecting:
:meth:`GonePlaces.places_with_jobs`); which jobs end, and how, is decided here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from framecast.app.intake import is_personal_queue
from framecast.app.members import ShowsJobs
from framecast.jobs.scheduler import CancelOutcome, Scheduler
from framecast.storage import Store
from framecast.values import Job, JobState
from framecast.values.reasons import ErrorCode

__all__ = ["GonePlaces"]

log = logging.getLogger(__name__)


class GonePlaces:
    """Ends the unfinished jobs of a deleted channel, or of a server the bot left."""

    def __init__(self, *, store: Store, scheduler: Scheduler, shows: ShowsJobs) -> None:
        self._store = store
        self._scheduler = scheduler
        self._shows = shows

    def __repr__(self) -> str:
        return "<GonePlaces>"

    async def channels_gone(self, guild_id: int, channel_ids: Collection[int]) -> list[Job]:
        """Channels (or threads) of server `guild_id` were deleted: end their unfinished jobs.

        Returns the jobs it ended.
        """
        gone = frozenset(channel_ids)
        return await self._end(guild_id, lambda job: job.channel_id in gone)

    async def places_with_jobs(self) -> dict[int, set[int]]:
        """The servers (never a person's own queue) with unfinished jobs, each with the channels they
        are in: for the chat side to say which of them went while the bot was away (no event told
        it then)."""
        places: dict[int, set[int]] = {}
        for job in await self._store.active():
            if not is_personal_queue(job.guild_id, job.user_id):
                places.setdefault(job.guild_id, set()).add(job.channel_id)
        return places

    async def server_left(self, guild_id: int) -> list[Job]:
        """The bot is no longer in server `guild_id`: end every unfinished job of its queue."""
        return await self._end(guild_id, lambda job: True)

    async def _end(self, guild_id: int, where: Callable[[Job], bool]) -> list[Job]:
        ended: list[Job] = []
        # A server's id never names a person's own queue (those are named by a user id), so a
        # user install's jobs are never ended here.
        here = [
            job
            for job in await self._store.active()
            if job.guild_id == guild_id and job.state is not JobState.DELIVERING and where(job)
        ]
        # The queued ones first: a running one ended frees its service slot, which must not go to
        # one of its neighbours that is about to end too (its create would be sent for nothing).
        here.sort(key=lambda job: job.state is not JobState.QUEUED)
        for job in here:
            outcome, stopped = await self._scheduler.abandon(job.id, ErrorCode.CHANNEL_GONE)
            if outcome is not CancelOutcome.CANCELLED or stopped is None:
                continue  # it ended meanwhile (delivered, failed, cancelled): that outcome stands
            log.info("job %s: its channel or server is gone; the job ends", job.id)
            # The chat side learns the job is over, so it stops drawing its message.
            await self._shows.job_changed(stopped, urgent=True)
            ended.append(stopped)
        return ended
