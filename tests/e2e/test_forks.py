"""A script forked from the zygote ends as the same script started with ``python`` would."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.e2e.forks import ENABLED, fork_bot

pytestmark = pytest.mark.skipif(not ENABLED, reason="FRAMECAST_TEST_FORK=0: bots start plainly")

SCRIPT = """
import atexit, os, sys, time
atexit.register(lambda: print("atexit ran", flush=True))
print("argv", sys.argv[1:], "cwd", os.getcwd(), "env", os.environ.get("FORK_PROBE"), "path0", sys.path[0])
print("stdin", repr(sys.stdin.read()), "name", __name__)
print("to stderr", file=sys.stderr)
mode = sys.argv[1]
if mode == "raise":
    raise ValueError("boom")
if mode == "wait":
    print("waiting", flush=True)
    time.sleep(60)
sys.exit(int(mode))
"""


async def _run(tmp_path: Path, *args: str) -> tuple[int, str, object]:
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    log = tmp_path / f"probe-{args[0]}.log"
    env = {**os.environ, "FORK_PROBE": "given", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = fork_bot(script, args, tmp_path, env, log)
    assert proc is not None, "the zygote did not fork"
    if args[0] == "wait":
        for _ in range(400):  # the log is the only sign that it runs: looked at every 50 ms
            if log.exists() and "waiting" in log.read_text():
                break
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
    code = await asyncio.wait_for(proc.wait(), 20)
    return code, log.read_text(), proc


async def test_a_fork_sees_its_own_argv_cwd_env_and_stdin_and_writes_both_streams_to_the_log(
    tmp_path: Path,
) -> None:
    code, log, _ = await _run(tmp_path, "3", "--sync")
    assert code == 3
    assert f"argv ['3', '--sync'] cwd {tmp_path} env given path0 {tmp_path}" in log
    assert "stdin '' name __main__" in log
    assert "to stderr" in log
    assert "atexit ran" in log


async def test_an_uncaught_exception_prints_its_traceback_and_exits_1(tmp_path: Path) -> None:
    code, log, _ = await _run(tmp_path, "raise")
    assert code == 1
    assert "ValueError: boom" in log
    assert "atexit ran" in log


async def test_a_signal_ends_it_with_the_negative_signal_number(tmp_path: Path) -> None:
    code, _, proc = await _run(tmp_path, "wait")
    assert code == -signal.SIGTERM
    assert getattr(proc, "returncode", None) == code


async def test_an_interpreter_setting_that_differs_from_the_zygotes_means_a_plain_start(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONOPTIMIZE": "2"}
    assert fork_bot(Path(sys.executable), ("0",), tmp_path, env, tmp_path / "x.log") is None
