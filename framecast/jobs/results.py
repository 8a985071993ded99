"""What the runner keeps outside the event loop: results held on disk, and re-encodes in threads.

* :class:`LocalResults`: an image the service sent inline (base64) is kept under the runner's results
  directory until it is delivered (or, posted nowhere, handed to its requester through ``/job``),
  found by job id (never by a path or URL the service named), and owner-only (0700 directory, 0600
  files): a result is the member's until it is posted.
* :func:`start_daemon_thread` and :func:`fit_media`: a re-encode to fit an upload limit runs in a
  daemon thread, so a stopping bot never waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from framecast import media
from framecast.values.job import Job

__all__ = ["LocalResults", "fit_media", "start_daemon_thread"]

_T = TypeVar("_T")


class LocalResults:
    """Results the bot holds itself, one file per job under `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __repr__(self) -> str:
        return f"<LocalResults {self.directory}>"

    def save(self, job_id: int, data: bytes) -> Path:
        """Write the job's result (atomically, fsynced); its extension comes from the bytes."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.directory.stat().st_mode & 0o077:
            os.chmod(self.directory, 0o700)
        info = media.sniff(data)
        path = self.directory / f"job-{job_id}.{info.ext if info else 'bin'}"
        tmp = path.with_suffix(path.suffix + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path

    def find(self, job_id: int) -> Path | None:
        """The file :meth:`save` wrote for the job, if any."""
        found = sorted(p for p in self.directory.glob(f"job-{job_id}.*") if not p.name.endswith(".tmp"))
        return found[0] if found else None

    def forget(self, job_id: int) -> None:
        """Delete the job's result (delivered or failed)."""
        for path in self.directory.glob(f"job-{job_id}.*"):
            with contextlib.suppress(OSError):
                path.unlink()

    async def sweep(self, lookup: Callable[[int], Awaitable[Job | None]]) -> int:
        """Delete the files of jobs that need them no more; how many jobs had some.

        A crash between a job's end and :meth:`forget` (or a cancel while its create answered with
        the image) leaves its file here for ever: at start-up, every file whose job `lookup` finds
        finished and not parked for its requester, or does not find, goes. Files of unfinished jobs
        stay (another process on the same store may be about to deliver one).
        """
        names = (p.name for p in self.directory.glob("job-*.*")) if self.directory.is_dir() else ()
        held = {int(n) for name in names if (n := name.removeprefix("job-").split(".", 1)[0]).isdigit()}
        swept = 0
        for job_id in sorted(held):
            job = await lookup(job_id)
            if job is None or (job.is_terminal and not job.parked):
                self.forget(job_id)  # its .tmp too
                swept += 1
        return swept


def start_daemon_thread(fn: Callable[..., _T], /, *args: Any) -> asyncio.Future[_T]:
    """Run CPU-bound `fn(*args)` in a daemon thread; the future settles when it ends.

    Not ``asyncio.to_thread``: ``asyncio.run`` joins the default executor's threads on exit, so a
    stopping bot would wait for a re-encode that can take minutes, past SHUTDOWN_TIMEOUT. A job cut
    off here keeps its DELIVERING state and is fitted again after the restart; the abandoned thread
    only holds memory until it finishes or the process exits.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def work() -> None:
        outcome: tuple[bool, Any]
        try:
            outcome = (True, fn(*args))
        except BaseException as exc:  # handed to the awaiting coroutine
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=work, name=f"framecast-{getattr(fn, '__name__', 'work')}", daemon=True).start()
    return future


def fit_media(
    kind: str, data: bytes, limit: int, max_pixels: int, deadline: float
) -> tuple[bytes, str] | None:
    """Re-encode a video or an image to fit `limit` (see :mod:`framecast.media`); runs in a thread."""
    if kind == "video":
        out = media.fit_video(data, limit, max_pixels=max_pixels, deadline=deadline)
        return (out, "mp4") if out is not None else None
    return media.fit_image(data, limit, max_pixels=max_pixels, deadline=deadline)
