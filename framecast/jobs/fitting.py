"""Loading a finished result and making it fit the destination's upload limit.

Part of the runner (:mod:`framecast.jobs.runner`), kept apart because it holds the heavy work: the
result's bytes come from the file the bot saved itself or a download of the service's link, and a
file over the limit is re-encoded (one at a time, with a deadline) before it is handed over. It also
bounds the results held in memory at once (:meth:`ResultFitter.held`), for the runner and for a
parked result handed over later (``framecast.app.parked``), which loads and fits it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from framecast import media
from framecast.jobs.results import LocalResults, fit_media, start_daemon_thread
from framecast.ops.metrics import Metrics, ReencodeOutcome
from framecast.service.errors import DownloadError
from framecast.service.transport import Gate
from framecast.values.job import Job, JobKind

if TYPE_CHECKING:
    from framecast.service import GenerationClient

__all__ = ["FitSettings", "ResultFitter"]

log = logging.getLogger(__name__)

#: Extra seconds past `reencode_timeout` before the runner stops waiting for a re-encode stuck inside
#: one FFmpeg call (where the deadline cannot be checked).
_REENCODE_GRACE = 30.0


@dataclass(frozen=True)
class FitSettings:
    """The size and time limits of loading and fitting a result (from the runner's settings)."""

    download_max_bytes: int
    download_timeout: float
    image_max_pixels: int
    reencode_timeout: float


class ResultFitter:
    """Loads results (saved or downloaded) and re-encodes them to fit, one re-encode at a time."""

    def __init__(
        self,
        settings: FitSettings,
        results: LocalResults,
        metrics: Metrics | None = None,
        *,
        at_once: int = 1,
    ) -> None:
        """`results`: where the bot saved inline results; `metrics`: where re-encodes are counted;
        `at_once`: results held in memory at once (see :meth:`held`)."""
        self._settings = settings
        self._results = results
        self._metrics = metrics
        self._fit_slots = asyncio.Semaphore(1)
        self._held = asyncio.Semaphore(max(1, at_once))

    def __repr__(self) -> str:
        return f"<ResultFitter reencoding={self._fit_slots.locked()}>"

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Hold one of the `at_once` memory slots from a result's load to the end of its upload.

        However many results are handed over at once, at most `at_once` are in memory; the others
        wait here, their state on disk.
        """
        async with self._held:
            yield

    def forget(self, job_id: int) -> None:
        """The job's saved result is no longer needed (delivered, failed, or handed to its requester)."""
        self._results.forget(job_id)

    async def sweep(self, lookup: Callable[[int], Awaitable[Job | None]]) -> None:
        """At start-up: delete the saved results nobody needs any more (:meth:`LocalResults.sweep`)."""
        if swept := await self._results.sweep(lookup):
            log.info("deleted the saved results of %d finished jobs (left by a stop before their end)", swept)

    async def load(self, job: Job, client: GenerationClient | None, *, gate: Gate | None = None) -> bytes:
        """The result's bytes: the file the bot saved itself, or a download of the service's link.

        The download goes through the job's own key's `client`: its origin gets that key only.
        `gate` is awaited right before each download request (after its budget slot).
        """
        if job.result_local:
            # Found by job id under our own directory: never a path or URL the service named.
            path = self._results.find(job.id)
            if path is None:
                raise DownloadError("the stored result is missing")
            try:
                return await asyncio.to_thread(path.read_bytes)
            except OSError as exc:
                raise DownloadError(f"the stored result cannot be read ({exc.strerror})") from None
        assert job.result_url is not None and client is not None
        return await client.download(
            job.result_url,
            max_bytes=self._settings.download_max_bytes,
            timeout=self._settings.download_timeout,
            gate=gate,
        )

    async def load_checked(
        self, job: Job, client: GenerationClient | None, *, gate: Gate | None = None
    ) -> tuple[bytes, media.MediaInfo]:
        """:meth:`load`, then the bytes checked from their headers alone (nothing decoded).

        The wrong kind (an HTML error page) or a picture over the pixel limit (a decompression bomb)
        raises here, so it is never uploaded, never linked.
        """
        data = await self.load(job, client, gate=gate)
        expected: Literal["video", "image"] = "video" if job.kind is JobKind.VIDEO else "image"
        return data, media.check_result(data, expected, self._settings.image_max_pixels)

    async def fit(
        self, kind: JobKind, data: bytes, info: media.MediaInfo, limit: int
    ) -> tuple[bytes, str] | None:
        """`data` itself when it fits, else a re-encoded copy and its extension; None if nothing fits.

        Each re-encode is counted in the metrics with its outcome and time (waiting for the slot
        excluded).
        """
        if len(data) <= limit:
            return data, info.ext
        # One re-encode at a time: each takes both cores and ~100 MiB at 720p (benchmarks/). The
        # slot is taken by hand because a stuck re-encode keeps it until its thread really ends.
        await self._fit_slots.acquire()
        began = time.monotonic()
        deadline = began + self._settings.reencode_timeout
        work = start_daemon_thread(
            fit_media, info.kind, data, limit, self._settings.image_max_pixels, deadline
        )
        work.add_done_callback(self._fit_ended)
        outcome = ReencodeOutcome.ERROR
        try:
            # The deadline is checked inside, between frames and encodes; this outer limit only
            # catches a re-encode stuck inside a single FFmpeg call.
            fitted = await asyncio.wait_for(
                asyncio.shield(work), self._settings.reencode_timeout + _REENCODE_GRACE
            )
            outcome = ReencodeOutcome.FITTED if fitted is not None else ReencodeOutcome.NO_FIT
            return fitted
        except TimeoutError:
            outcome = ReencodeOutcome.TIMEOUT
            log.warning("re-encode to fit %d bytes is stuck; given up (its thread is abandoned)", limit)
            return None
        except media.ReencodeTimeout as exc:
            outcome = ReencodeOutcome.TIMEOUT
            log.warning("could not re-encode a result to fit %d bytes: %s", limit, exc)
            return None
        except media.MediaError as exc:
            log.warning("could not re-encode a result to fit %d bytes: %s", limit, exc)
            return None
        finally:
            if self._metrics is not None:
                self._metrics.reencode(kind, time.monotonic() - began, outcome)

    def _fit_ended(self, work: asyncio.Future[tuple[bytes, str] | None]) -> None:
        self._fit_slots.release()
        if not work.cancelled():
            work.exception()  # retrieved: an abandoned re-encode's error is not reported as lost
