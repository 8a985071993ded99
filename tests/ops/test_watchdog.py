"""The loop watchdog: a loop blocked past its bound ends the process (code 3); a loop that runs never does."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import threading
import time

from framecast.ops.watchdog import EXIT_GAVE_UP, LoopWatchdog


async def test_a_loop_blocked_past_the_bound_is_reported_once_with_its_lag() -> None:
    stalled = threading.Event()
    lags: list[float] = []

    def on_stall(lag: float) -> None:
        lags.append(lag)
        stalled.set()

    watchdog = LoopWatchdog(0.3, tick=0.05, on_stall=on_stall)
    watchdog.start(asyncio.get_running_loop())
    try:
        # A blocking wait on the loop's own thread (a synchronous call gone wrong): no beat until it ends.
        assert stalled.wait(timeout=10), "the watchdog never saw the blocked loop"
        await asyncio.sleep(0.2)  # the loop runs again: no second report
    finally:
        watchdog.stop()
    assert len(lags) == 1 and lags[0] > 0.3


async def test_a_loop_that_keeps_running_is_never_reported() -> None:
    reports: list[float] = []
    watchdog = LoopWatchdog(0.3, tick=0.05, on_stall=reports.append)
    watchdog.start(asyncio.get_running_loop())
    try:
        for _ in range(20):  # a second of short awaits: the loop beats throughout
            await asyncio.sleep(0.05)
    finally:
        watchdog.stop()
    assert reports == []


def test_by_default_a_blocked_loop_ends_the_process_with_code_3_and_one_line() -> None:
    code = (
        "import asyncio, time\n"
        "from framecast.ops.watchdog import LoopWatchdog\n"
        "async def main():\n"
        "    LoopWatchdog(0.5, tick=0.05).start(asyncio.get_running_loop())\n"
        "    await asyncio.sleep(0.2)\n"
        "    time.sleep(30)\n"  # blocked for good: only the watchdog ends this
        "asyncio.run(main())\n"
    )
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=25)
    assert proc.returncode == EXIT_GAVE_UP == 3
    assert time.monotonic() - started < 20
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(
        r"framecast: the event loop has been blocked for \d+ s \(LOOP_STALL_EXIT\): exiting with code 3 for a restart",
        lines[0],
    ), proc.stderr


def test_a_paused_process_is_not_a_blocked_loop() -> None:
    # SIGSTOP stops the watchdog's thread too; on SIGCONT it must not mistake the pause for a stall
    # (a process paused past its leases lets its jobs go and carries on: README, "Outgrowing one process").
    code = (
        "import asyncio, sys\n"
        "from framecast.ops.watchdog import LoopWatchdog\n"
        "async def main():\n"
        "    LoopWatchdog(0.5, tick=0.05).start(asyncio.get_running_loop())\n"
        "    print('watching', flush=True)\n"
        "    await asyncio.to_thread(sys.stdin.readline)\n"  # the loop runs; the test says when to end
        "asyncio.run(main())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "watching\n"
        proc.send_signal(signal.SIGSTOP)
        time.sleep(2.5)  # the pause under test: longer than the bound and than the thread's own slack
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate("\n", timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "LOOP_STALL_EXIT" not in err
