"""What each key spent lately, kept on disk so that a restart does not hand the key a fresh window.

A key's :class:`~framecast.keys.budget.RequestBudget` lives in memory. Without this record, a process
that restarts (a crash, ``kill -9``, a container stopped and started, an upgrade) starts every key
with its whole window free while the service still counts what the process before it sent: the
restart's burst (each running task polled again, the queued creates) went over the key's limit and
was answered 429. :class:`SpentRequests` appends one line when a budget grants a slot and one when
the request ends; the next process on the same data directory reads them back, and each key's budget
starts with the requests still inside its window as spent (a request granted and never ended, cut off
by the crash, counts as ending when the new process starts). A pause the service asked for (a 429's
``Retry-After``, or the backoff after one) is kept the same way: the next process waits it out too.

* **Not with Redis** (``REDIS_URL``): there the key's window lives in Redis, which outlives the
  processes, and no record is kept.
* **Cheap, and off the event loop**: one line of some 40 bytes per grant and per end, handed to a
  thread that writes it without ``fsync``: a process's writes outlive its crash (they are the
  kernel's then), and a machine's crash outlives the window. A grant's request waits for its line
  to be written (:meth:`SpentOnKey.recorded`: the thread's wake-up, well under a millisecond), so a
  crash right after a request went out still counts it; at most :data:`WRITE_PATIENCE`, and not
  while the disk is behind. A disk that stalls stalls that thread, never the loop: lines wait in a
  bounded queue, and past :data:`QUEUED_MAX` are dropped with a warning.
* **Bounded**: the file is rewritten with only what still counts at start-up and whenever it has
  grown by :data:`REWRITE_AFTER` lines more than that.
* **No key in it**: a key is named by an HMAC under a random salt kept in the file's first line; the
  file is the process owner's only (0600), beside the database.
* **Never in the way**: a file that cannot be read or written is one warning, and the budgets go on
  without it (as before it existed); a line it cannot read is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import queue
import re
import secrets
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from framecast.clock import Clock
from framecast.config import Secret

__all__ = ["CLOSE_PATIENCE", "QUEUED_MAX", "REWRITE_AFTER", "WRITE_PATIENCE", "SpentRequests", "SpentOnKey"]

log = logging.getLogger(__name__)

#: Lines appended past what still counts before the file is rewritten: a rewrite costs one pass over
#: the live records (at most each key's limit), so this keeps the file small and rewrites rare.
REWRITE_AFTER = 4096
#: Lines waiting for a slow disk before new ones are dropped (with a warning): some 600 KB of memory
#: against a disk that stalls for longer than four windows of a busy key's requests.
QUEUED_MAX = 16384
#: Seconds a granted request waits for its line to be written (a disk slower than this lets the
#: request go and loses the line only to a crash in that moment; the next waits resume once it caught up).
WRITE_PATIENCE = 0.05
#: Seconds :meth:`SpentRequests.close` waits for the disk to take what is queued before the process
#: goes on without it.
CLOSE_PATIENCE = 5.0
_MAGIC = "framecast-spent-requests 1"
_NAME = re.compile("[0-9a-f]{32}")  # a key's name, and the salt


class SpentRequests:
    """The record of this process's requests, per key (see the module docstring). Build with
    :meth:`open`; :meth:`on_key` gives each key's budget its part."""

    def __init__(self, path: Path, *, window: float, clock: Clock) -> None:
        """Use :meth:`open`."""
        self.path = path
        self._window = window
        self._clock = clock
        self._salt = secrets.token_hex(16)
        # Each key's requests that ended (epoch seconds), and those granted and not ended yet.
        self._ended: defaultdict[str, list[float]] = defaultdict(list)
        self._open: dict[tuple[str, int], float] = {}
        self._paused: dict[str, float] = {}  # each key's 429 pause: no grant before (epoch seconds)
        self._seq = 0
        self._lines = 0  # appended since the last rewrite
        self._behind = False  # lines were dropped: the writer could not keep up
        # The file is written by a thread of its own, in order, from this queue: a disk that stalls
        # (a hung network mount) must not stall the event loop, which only ever puts lines here.
        self._queue: queue.Queue[bytes | _Rewrite | None] = queue.Queue(maxsize=QUEUED_MAX)
        self._writer = threading.Thread(target=self._write_all, name="framecast-spent-requests", daemon=True)
        self._closed = False
        self._fd: int | None = None  # the writer thread's alone once it runs
        self._failing = False  # ditto
        # Items put in the queue, those the writer finished (set by its thread, then the loop woken),
        # and the requests waiting for their line: (its item's number, its future); see recorded().
        self._put_count = self._written_count = 0
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._late_from = 0  # a wait ran out with this item unwritten: none waits until it is written

    @classmethod
    def open(cls, path: Path, *, window: float, clock: Clock) -> SpentRequests:
        """Read what the process before this one left at `path`, rewrite it with only what still
        counts, and keep appending there. A file that cannot be used is logged, and the record is kept
        in memory only (each key's budget then starts afresh after a restart, as without it).

        Blocking (it reads and writes the file): call it off the event loop."""
        self = cls(path, window=window, clock=clock)
        try:
            self._load()
            self._replace(self._snapshot())
        except OSError as exc:
            self._fail(exc)
        self._writer.start()
        return self

    def on_key(self, key: Secret) -> SpentOnKey:
        """What `key`'s budget records through, and starts from."""
        name = hmac.new(self._salt.encode(), key.reveal().encode(), hashlib.sha256).hexdigest()[:32]
        return SpentOnKey(self, name)

    async def flush(self) -> None:
        """Wait until every line recorded so far is written (the kernel's: it outlives a crash)."""
        await asyncio.to_thread(self._queue.join)

    async def close(self, patience: float = CLOSE_PATIENCE) -> None:
        """Write what is queued and stop writing (what was written stays for the next process).

        A disk that does not take the lines within `patience` seconds is left to its thread, with a
        warning: the process's exit does not wait for it."""
        if self._closed:
            return
        self._closed = True
        self._put(None)
        await asyncio.to_thread(self._writer.join, patience)
        if self._writer.is_alive():
            log.warning("the record of spent requests in %s was not written in time at close", self.path)

    async def _recorded(self) -> None:
        """Wait until what was put so far is written (see the module docstring: WRITE_PATIENCE)."""
        mine, written_count = self._put_count, self._written_count
        if self._closed or mine <= written_count or written_count < self._late_from:
            return
        self._loop = asyncio.get_running_loop()
        written: asyncio.Future[None] = self._loop.create_future()
        self._waiting.append((mine, written))
        self._written()  # finished before the writer knew of the loop
        try:
            await asyncio.wait_for(written, WRITE_PATIENCE)
        except TimeoutError:
            self._late_from = mine

    def _written(self) -> None:
        """(On the loop.) The requests whose lines the writer finished go."""
        done = self._written_count
        still = []
        for mine, written in self._waiting:
            if mine > done:
                still.append((mine, written))
            elif not written.done():
                written.set_result(None)
        self._waiting = still

    # -- what SpentOnKey calls ---------------------------------------------------------------------
    def _still_counting(self, name: str) -> list[float]:
        now = self._clock.time()
        kept = [end for end in self._ended.get(name, ()) if end + self._window > now]
        self._ended[name] = kept
        return sorted(kept)

    def _granted(self, name: str) -> int:
        self._seq += 1
        self._open[name, self._seq] = now = self._clock.time()
        self._append(f"g {name} {self._seq} {now!r}\n")
        return self._seq

    def _ended_now(self, name: str, seq: int) -> None:
        if self._open.pop((name, seq), None) is None:
            return
        self._ended[name].append(now := self._clock.time())
        self._append(f"e {name} {seq} {now!r}\n")

    def _paused_until(self, name: str) -> float | None:
        until = self._paused.get(name)
        return until if until is not None and until > self._clock.time() else None

    def _pause(self, name: str, until: float) -> None:
        self._paused[name] = until
        self._append(f"p {name} {until!r}\n")

    # -- what the file should say -----------------------------------------------------------
    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="ascii", errors="replace")
        except FileNotFoundError:
            return
        lines = text.splitlines()
        if not lines or not lines[0].startswith(_MAGIC + " "):
            if text:
                log.warning("%s is not a record of spent requests; starting a new one", self.path)
            return
        salt = lines[0].split()[-1]
        self._salt = salt if _NAME.fullmatch(salt) else self._salt
        now = self._clock.time()
        granted: dict[tuple[str, str], float] = {}
        for line in lines[1:]:
            # Only lines as this module writes them (a damaged one must not stop the start).
            match line.split():
                case ["d", name, at] if _NAME.fullmatch(name) and _number(at):
                    self._ended[name].append(min(float(at), now))
                case ["p", name, until] if _NAME.fullmatch(name) and _number(until):
                    self._paused[name] = float(until)
                case ["g", name, seq, at] if _NAME.fullmatch(name) and _number(at):
                    granted[name, seq] = float(at)
                case ["e", name, seq, at] if _number(at) and granted.pop((name, seq), None) is not None:
                    self._ended[name].append(min(float(at), now))
        for name, _ in granted:  # cut off by the end of the process before: it may have reached the service
            self._ended[name].append(now)

    def _snapshot(self) -> _Rewrite:
        # What still counts: the file's whole new text.
        lines = [f"{_MAGIC} {self._salt}\n"]
        for name in list(self._ended):
            lines += [f"d {name} {end!r}\n" for end in self._still_counting(name)]
            if not self._ended[name]:
                del self._ended[name]
        lines += [f"g {name} {seq} {at!r}\n" for (name, seq), at in self._open.items()]
        for name in list(self._paused):
            if (until := self._paused_until(name)) is None:
                del self._paused[name]
            else:
                lines.append(f"p {name} {until!r}\n")
        self._lines = 0
        return _Rewrite("".join(lines).encode("ascii"))

    def _append(self, line: str) -> None:
        if self._closed:
            return
        self._lines += 1
        self._put(self._snapshot() if self._lines > REWRITE_AFTER else line.encode("ascii"))

    def _put(self, item: bytes | _Rewrite | None) -> None:
        try:
            self._queue.put_nowait(item)
            self._put_count += 1
        except queue.Full:
            if not self._behind:
                self._behind = True
                log.warning(
                    "the disk under %s does not keep up: spent requests go unrecorded until it does",
                    self.path,
                )
            return
        if self._behind and self._queue.qsize() < QUEUED_MAX // 2:
            self._behind = False
            log.info("spent requests are recorded again in %s", self.path)

    # -- the writer thread -------------------------------------------------------------------------
    def _write_all(self) -> None:
        # What was queued meanwhile goes out at once: the thread wakes once per burst, not once per
        # line (each wake-up takes the interpreter's lock from the event loop), and of several
        # rewrites only the last is written (it holds all that the ones before it and their lines say).
        done = 0  # items finished, in the order they were put
        while True:
            items = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while items[-1] is not None:
                    items.append(self._queue.get_nowait())
            stop = items[-1] is None
            try:
                body = [item for item in items if item is not None]
                rewrites = [i for i, item in enumerate(body) if isinstance(item, _Rewrite)]
                if rewrites:
                    self._write(body[rewrites[-1]])
                    body = body[rewrites[-1] + 1 :]
                if lines := b"".join(item for item in body if isinstance(item, bytes)):
                    self._write(lines)
            except Exception:  # a bug here must not end the thread: close() and flush() wait on it
                log.exception("recording spent requests failed")
            finally:
                if stop:
                    with contextlib.suppress(OSError):
                        self._close_file()
                for _ in items:
                    self._queue.task_done()
                done += len(items) - stop
                self._written_count = done  # before the loop is read: see _recorded
                if (loop := self._loop) is not None:
                    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                        loop.call_soon_threadsafe(self._written)
            if stop:
                return

    def _write(self, item: bytes | _Rewrite) -> None:
        try:
            if isinstance(item, _Rewrite):
                self._replace(item)
            elif self._fd is not None:
                _write_fully(self._fd, item)
            else:
                return
        except OSError as exc:
            self._fail(exc)
            return
        if self._failing:
            self._failing = False
            log.info("spent requests are recorded again in %s", self.path)

    def _replace(self, text: _Rewrite) -> None:
        # Written aside and moved over the old file (a crash keeps one or the other).
        self._close_file()
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        aside = self.path.with_name(self.path.name + ".new")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_fully(fd, text.text)
        finally:
            os.close(fd)
        os.replace(aside, self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)

    def _close_file(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _fail(self, exc: OSError) -> None:
        if not self._failing:
            self._failing = True
            log.warning(
                "cannot record spent requests in %s (%s): a restart within a minute may send a key's"
                " requests past its limit (the service answers 429, and the bot backs off)",
                self.path,
                exc.strerror or type(exc).__name__,
            )
        if self._fd is None:
            with contextlib.suppress(OSError):
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


@dataclass(frozen=True, slots=True)
class _Rewrite:
    """The file's whole new text (for the writer thread: a line is plain bytes)."""

    text: bytes


def _write_fully(fd: int, data: bytes) -> None:
    # A regular file takes it all at once, but for a signal or a disk filling up mid-write.
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _number(text: str) -> bool:
    try:
        return float(text) == float(text)  # not NaN
    except ValueError:
        return False


class SpentOnKey:
    """One key's part of :class:`SpentRequests`: what its budget records and starts from."""

    def __init__(self, spent: SpentRequests, name: str) -> None:
        self._spent = spent
        self._name = name

    def still_counting(self) -> list[float]:
        """When the key's requests that still count in its window ended (epoch seconds, oldest first)."""
        return self._spent._still_counting(self._name)

    def granted(self) -> int:
        """Record a slot granted; returns its number for :meth:`ended`."""
        return self._spent._granted(self._name)

    async def recorded(self) -> None:
        """Wait until the grant is written (at most ``WRITE_PATIENCE``): its request may go."""
        await self._spent._recorded()

    def ended(self, seq: int) -> None:
        """Record the end of the request granted as `seq`."""
        self._spent._ended_now(self._name, seq)

    def paused_until(self) -> float | None:
        """When the key's last 429 pause ends (epoch seconds), if it has not ended yet."""
        return self._spent._paused_until(self._name)

    def paused(self, until: float) -> None:
        """Record a 429 pause of the key's grants until `until` (epoch seconds)."""
        self._spent._pause(self._name, until)
