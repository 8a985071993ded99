"""Start ``bot.py`` as a fork of a process that has already imported its libraries.

About a second of every bot start (most of an end-to-end test's set-up) is Python importing
discord.py, aiohttp, SQLAlchemy, Alembic and the rest, again for each of the suite's few hundred
starts. Each pytest worker therefore keeps one *zygote*: a process that imports those libraries once
(only third-party ones: the product's own modules are imported by each bot, as always) and then
forks on request. The fork becomes the bot exactly as ``python bot.py ARGS`` would: its own pid,
working directory, environment and ``sys.argv``; stdin from ``/dev/null``; stdout and stderr
appended to the log file; ``bot.py`` run as ``__main__``, with its ``SystemExit``, uncaught
exceptions, ``atexit`` handlers and exit code handled by the interpreter as in a plain start.

What cannot be the same is decided at interpreter start-up: ``PYTHON*`` variables. A start whose
environment differs from the zygote's in any of them is a plain ``python bot.py`` (so is every start
with ``FRAMECAST_TEST_FORK=0``, and every start after the zygote failed). Tests of start-up itself
(``test_startup_failures.py``, the container test) run ``python bot.py`` directly.

The zygote is the bots' parent, so it reports their exit codes: one line of JSON per event on its
stdout, read by a thread here that settles :class:`ForkedProcess` objects, whichever event loop
awaits them. Run as a script, this module is the zygote (standard library only).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

#: What ``bot.py`` imports before it runs, and what its first start imports next (the SQLite
#: driver, Alembic for the migrations): each bot skips about a second of CPU for them.
PRELOAD = (
    "discord",
    "discord.ext.commands",
    "aiohttp",
    "aiohttp.web",
    "sqlalchemy",
    "sqlalchemy.ext.asyncio",
    "sqlalchemy.dialects.sqlite.aiosqlite",
    "aiosqlite",
    "alembic.command",
    "alembic.config",
    "alembic.script",
    "alembic.runtime.migration",
    "pydantic",
    "pydantic_settings",
    "dotenv",
    "babel",
    "cryptography.fernet",
    "prometheus_client",
)

#: ``FRAMECAST_TEST_FORK=0`` starts every bot with a plain ``python bot.py``.
ENABLED = os.environ.get("FRAMECAST_TEST_FORK", "1") != "0"


def _interpreter_env(env: dict[str, str]) -> dict[str, str]:
    """The variables Python reads when it starts (they cannot change in a fork)."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


class ForkedProcess:
    """A bot forked by the zygote: the part of :class:`asyncio.subprocess.Process` the tests use."""

    def __init__(self, pid: int, exited: concurrent.futures.Future[int]) -> None:
        self.pid = pid
        self._exited = exited

    @property
    def returncode(self) -> int | None:
        """The exit code (negative: the signal that ended it), or None while it runs."""
        return self._exited.result() if self._exited.done() else None

    def send_signal(self, sig: int) -> None:
        """Signal the bot (nothing once it has exited, as :class:`subprocess.Popen` does)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        """Wait for the exit code; cancelling the wait leaves the process and its code alone."""
        if self._exited.done():
            return self._exited.result()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[int] = loop.create_future()

        def settle(done: concurrent.futures.Future[int]) -> None:
            def set_result() -> None:
                if waiter.done():
                    return
                if done.exception() is not None:
                    waiter.set_exception(done.exception())  # type: ignore[arg-type]
                else:
                    waiter.set_result(done.result())

            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits any more
                loop.call_soon_threadsafe(set_result)

        self._exited.add_done_callback(settle)
        return await waiter


class Zygote:
    """This worker's zygote: started at the first fork, kept for the session."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONUNBUFFERED"] = "1"  # as the harness starts every bot
        self.interpreter_env = _interpreter_env(env)
        self._proc = subprocess.Popen(  # noqa: S603 - our own script, our own interpreter
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin: IO[bytes] = self._proc.stdin
        self._lock = threading.Lock()
        self._started: concurrent.futures.Future[int] | None = None
        self._exits: dict[int, concurrent.futures.Future[int]] = {}
        self._early: dict[int, int] = {}  # exit codes that arrived before their pid was registered
        self._exits_lock = threading.Lock()  # the two dicts above, shared with the reading thread
        self.alive = True
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True)
        self._reader.start()
        atexit.register(self.close)

    def close(self) -> None:
        """Let the zygote go (it exits when its stdin closes) and wait for it: none outlives pytest."""
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def fork(
        self, script: Path, args: tuple[str, ...], cwd: Path, env: dict[str, str], log: Path
    ) -> ForkedProcess:
        """Fork a bot; returns once the zygote has named its pid."""
        request = {"argv": [str(script), *args], "cwd": str(cwd), "env": env, "log": str(log)}
        with self._lock:
            if not self.alive:
                raise RuntimeError("the zygote has exited")
            self._started = concurrent.futures.Future()
            self._stdin.write(json.dumps(request).encode() + b"\n")
            self._stdin.flush()
            pid = self._started.result(timeout=30)
        exited: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._exits_lock:
            if pid in self._early:
                exited.set_result(self._early.pop(pid))
            else:
                self._exits[pid] = exited
        return ForkedProcess(pid, exited)

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            event = json.loads(line)
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                if "started" in event and self._started is not None:
                    self._started.set_result(event["started"])
                elif "exited" in event:
                    pid, code = event["exited"], event["code"]
                    with self._exits_lock:
                        exited = self._exits.pop(pid, None)
                        if exited is None:
                            self._early[pid] = code
                    if exited is not None:
                        exited.set_result(code)
        self.alive = False
        gone = RuntimeError("the zygote exited: the bot's exit code is unknown")
        with self._exits_lock:
            waiting = [self._started, *self._exits.values()]
        for future in waiting:
            if future is not None and not future.done():
                future.set_exception(gone)


_zygote: Zygote | None = None


def fork_bot(
    script: Path, args: tuple[str, ...], cwd: Path, env: dict[str, str], log: Path
) -> ForkedProcess | None:
    """A forked bot, or None where a plain start is needed (see the module's docstring).

    A zygote that has died is not replaced: the rest of the session starts bots plainly (slower,
    and said once on stderr).
    """
    global _zygote  # noqa: PLW0603 - one zygote per worker process
    if not ENABLED:
        return None
    if _zygote is None:
        _zygote = Zygote()
    if not _zygote.alive or _interpreter_env(env) != _zygote.interpreter_env:
        return None
    try:
        return _zygote.fork(script, args, cwd, env, log)
    except (RuntimeError, OSError, TimeoutError) as exc:
        print(f"forks: the zygote failed ({exc!r}); bots start as plain python bot.py", file=sys.stderr)
        return None


# ---- the zygote itself (run as a script) ----


def _serve() -> dict[str, Any] | None:
    """Read fork requests until stdin closes; in a fork, return its request (it becomes the bot)."""
    import gc
    import importlib

    sys.path.pop(0)  # this script's folder: the bot gets its own (bot.py's) in _become
    gc.disable()  # as bot.py does around its imports
    for name in PRELOAD:
        importlib.import_module(name)
    gc.freeze()
    gc.enable()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd hears it
    pending = b""

    def say(event: dict[str, Any]) -> None:
        os.write(1, json.dumps(event).encode() + b"\n")

    while True:
        with contextlib.suppress(InterruptedError):
            ready, _, _ = select.select([0, wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            say({"exited": pid, "code": os.waitstatus_to_exitcode(status)})
        if 0 not in ready:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return None  # the worker has gone: so does the zygote
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                return dict(request)
            say({"started": pid})


def _become(request: dict[str, Any]) -> None:
    """In the fork: become ``python bot.py ARGS`` (the interpreter handles how it ends)."""
    import runpy

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, 1 << 16)
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    fork_request = _serve()
    if fork_request is not None:
        _become(fork_request)
