"""What each key spent, kept on disk: a restarted process starts each key's budget from it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from framecast.config import Secret
from framecast.keys import spent as spent_module
from framecast.keys.budget import RequestBudget
from framecast.keys.spent import SpentRequests
from tests.fakes.clock import ManualClock

KEY, OTHER = Secret("sk-live-the-operators-key"), Secret("sk-live-a-servers-own-key")
WINDOW = 60.0


Journal = Callable[[Path, ManualClock], Awaitable[SpentRequests]]


@pytest.fixture
async def journal() -> AsyncIterator[Journal]:
    """Opens a process's record; the records of the processes before it have written what they
    recorded (what a crashed process wrote is the kernel's), and every record is closed at the end."""
    opened: list[SpentRequests] = []

    async def open_record(path: Path, clock: ManualClock) -> SpentRequests:
        for before in opened:
            await before.flush()
        opened.append(await asyncio.to_thread(SpentRequests.open, path, window=WINDOW, clock=clock))
        return opened[-1]

    yield open_record
    for record in opened:
        await record.close()


async def spend(budget: RequestBudget, n: int) -> None:
    for _ in range(n):
        async with budget.slot():
            pass


def budget_on(record: SpentRequests, key: Secret, clock: ManualClock, limit: int = 16) -> RequestBudget:
    return RequestBudget(limit, WINDOW, clock=clock, spent=record.on_key(key))


async def test_a_restarted_process_starts_the_key_with_what_the_one_before_spent(
    journal: Journal, tmp_path: Path
) -> None:
    clock, path = ManualClock(), tmp_path / "data" / "framecast.spent-requests"
    before = await journal(path, clock)
    await spend(budget_on(before, KEY, clock), 10)  # the process dies here: nothing closed
    await clock.advance(5.0)
    after = await journal(path, clock)
    budget = budget_on(after, KEY, clock)
    assert budget.used() == 10 and budget.available() == 6
    assert budget_on(after, OTHER, clock).used() == 0  # another key spent nothing
    await clock.advance(WINDOW - 5.0)  # a window after those requests ended, the key is free again
    assert budget.used() == 0


async def test_a_request_cut_off_by_a_crash_counts_from_the_restart(journal: Journal, tmp_path: Path) -> None:
    clock, path = ManualClock(), tmp_path / "spent"
    before = budget_on(await journal(path, clock), KEY, clock)
    in_flight = asyncio.Event()

    async def hold() -> None:
        async with before.slot():
            in_flight.set()
            await asyncio.Event().wait()  # the crash comes first

    task = asyncio.create_task(hold())
    await in_flight.wait()
    await clock.advance(30.0)  # it may have reached the service just before the process died
    after = budget_on(await journal(path, clock), KEY, clock)
    await clock.advance(WINDOW - 1.0)
    assert after.used() == 1
    await clock.advance(1.0)
    assert after.used() == 0
    task.cancel()


async def test_a_request_goes_out_only_once_its_grant_is_on_disk(
    journal: Journal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A SIGKILL a millisecond after the request went out must find its grant in the file (the next
    # process then counts it): with a disk that takes a while, the request waits for its line.
    clock, path = ManualClock(), tmp_path / "spent"
    budget = budget_on(await journal(path, clock), KEY, clock)
    write = spent_module._write_fully

    def slow_write(fd: int, data: bytes) -> None:
        threading.Event().wait(0.1)
        write(fd, data)

    monkeypatch.setattr(spent_module, "_write_fully", slow_write)
    monkeypatch.setattr(spent_module, "WRITE_PATIENCE", 10.0)
    for sent in (1, 2):
        async with budget.slot():
            granted = [line for line in path.read_text().splitlines() if line.startswith("g ")]
        assert len(granted) == sent, granted  # this one's too, written before it went


async def test_after_a_disk_too_slow_for_one_wait_the_waits_resume_once_it_caught_up(
    journal: Journal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wait that ran out lets its request go; the next ones do not wait while the disk is behind,
    # and wait again once what was put then is written (they stopped for the process's life).
    clock, path = ManualClock(), tmp_path / "spent"
    record = await journal(path, clock)
    budget = budget_on(record, KEY, clock)
    write = spent_module._write_fully

    def slow_write(fd: int, data: bytes) -> None:
        threading.Event().wait(0.1)
        write(fd, data)

    monkeypatch.setattr(spent_module, "_write_fully", slow_write)
    monkeypatch.setattr(spent_module, "WRITE_PATIENCE", 0.01)
    await spend(budget, 1)  # its wait runs out
    await record.flush()  # the disk caught up
    monkeypatch.setattr(spent_module, "WRITE_PATIENCE", 10.0)
    async with budget.slot():
        granted = [line for line in path.read_text().splitlines() if line.startswith("g ")]
    assert len(granted) == 2, granted


async def test_a_full_window_carried_over_holds_the_next_request_until_it_frees(
    journal: Journal, tmp_path: Path
) -> None:
    clock, path = ManualClock(), tmp_path / "spent"
    await spend(budget_on(await journal(path, clock), KEY, clock, limit=3), 3)
    await clock.advance(2.0)
    budget = budget_on(await journal(path, clock), KEY, clock, limit=3)
    sent = asyncio.create_task(spend(budget, 1))
    await clock.advance(WINDOW - 2.0 - 0.1)
    assert not sent.done()
    await clock.advance(0.1)
    await asyncio.wait_for(sent, 1)


async def test_the_file_names_no_key_and_only_its_owner_reads_it(journal: Journal, tmp_path: Path) -> None:
    clock, path = ManualClock(), tmp_path / "spent"
    record = await journal(path, clock)
    await spend(budget_on(record, KEY, clock), 2)
    await record.close()
    text = path.read_text()
    assert KEY.reveal() not in text and "the-operators-key" not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_the_file_keeps_only_what_still_counts(
    journal: Journal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spent_module, "REWRITE_AFTER", 50)
    clock, path = ManualClock(), tmp_path / "spent"
    record = await journal(path, clock)
    budget = budget_on(record, KEY, clock, limit=1000)
    for _ in range(40):
        await spend(budget, 10)
        await clock.advance(WINDOW / 4)
    await record.flush()
    # 800 lines were written; what is left is about the last window's requests and the header.
    assert len(path.read_text().splitlines()) < 110
    await clock.advance(WINDOW)
    assert budget_on(await journal(path, clock), KEY, clock).used() == 0
    assert len(path.read_text().splitlines()) == 1  # the header alone


async def test_a_start_rewrites_the_file_with_only_the_last_window(journal: Journal, tmp_path: Path) -> None:
    clock, path = ManualClock(), tmp_path / "spent"
    await spend(budget_on(await journal(path, clock), KEY, clock), 5)
    await clock.advance(WINDOW + 1)
    await spend(budget_on(await journal(path, clock), KEY, clock), 2)
    await (await journal(path, clock)).close()
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and all(line.startswith("d ") for line in lines[1:])


async def test_unreadable_lines_are_skipped_and_a_foreign_file_is_replaced(
    journal: Journal, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock, path = ManualClock(), tmp_path / "spent"
    record = await journal(path, clock)
    await spend(budget_on(record, KEY, clock), 3)
    await record.close()
    with path.open("a") as f:
        f.write("g nonsense\ne x y nan\nd abc inf-ish\n\x00\xff garbage\n")
        f.write(f"d \xff {clock.time()}\np \u00e9t\u00e9 {clock.time() + 5}\n")  # not names it writes
    assert budget_on(await journal(path, clock), KEY, clock).used() == 3
    path.write_text("not ours at all\n")
    with caplog.at_level(logging.WARNING):
        assert budget_on(await journal(path, clock), KEY, clock).used() == 0
    assert "not a record of spent requests" in caplog.text


async def test_a_file_that_cannot_be_opened_is_one_warning_and_the_budget_works_on(
    journal: Journal, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock, path = ManualClock(), tmp_path / "spent"
    path.mkdir()  # in the way, for root too (a read-only folder is not)
    with caplog.at_level(logging.WARNING):
        record = await journal(path, clock)
        budget = budget_on(record, KEY, clock)
        await spend(budget, 3)
        await record.flush()
    assert caplog.text.count("cannot record spent requests") == 1
    assert budget.used() == 3


async def test_a_full_disk_is_one_warning_and_the_budget_works_on(
    journal: Journal, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    record = await journal(tmp_path / "spent", clock)
    budget = budget_on(record, KEY, clock)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, record._fd)  # type: ignore[arg-type]  # every write now fails with ENOSPC
    os.close(full)
    with caplog.at_level(logging.WARNING):
        await spend(budget, 5)
        await record.flush()
    assert caplog.text.count("cannot record spent requests") == 1
    assert budget.used() == 5


async def test_a_disk_that_stalls_never_stalls_the_event_loop(journal: Journal, tmp_path: Path) -> None:
    clock = ManualClock()
    record = await journal(tmp_path / "spent", clock)
    budget = budget_on(record, KEY, clock)
    # The file's descriptor becomes a pipe nobody reads, filled: every write now blocks, as on a
    # network mount that hangs, until the pipe is read.
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_end, b"x" * 65536)
    os.set_blocking(write_end, True)
    os.dup2(write_end, record._fd)  # type: ignore[arg-type]
    os.close(write_end)
    stalled = threading.Event()  # set by the test once the loop has done its work
    drained: list[bool] = []

    def unstall() -> None:  # the disk answers again; after 10 s whether or not the test got there
        drained.append(stalled.wait(10.0))
        os.set_blocking(read_end, False)
        with contextlib.suppress(BlockingIOError):
            while os.read(read_end, 65536):
                pass

    disk = threading.Thread(target=unstall)
    disk.start()
    try:
        await spend(budget, 5)  # on the code before, the first request's write blocked the loop here
        assert budget.used() == 5
        stalled.set()
    finally:
        stalled.set()
        await asyncio.to_thread(disk.join)
        os.close(read_end)
    assert drained == [True]  # the requests went out while the disk still stalled


async def test_a_pause_the_service_asked_for_outlives_a_restart(journal: Journal, tmp_path: Path) -> None:
    clock, path = ManualClock(), tmp_path / "spent"
    before = RequestBudget(
        16, WINDOW, clock=clock, backoff_max=120.0, spent=(await journal(path, clock)).on_key(KEY)
    )
    paused = before.penalize(retry_after=30.0)  # a 429: Retry-After 30 s (and a little jitter)
    await clock.advance(10.0)
    after = RequestBudget(
        16, WINDOW, clock=clock, backoff_max=120.0, spent=(await journal(path, clock)).on_key(KEY)
    )
    assert after.paused_for() == pytest.approx(paused - 10.0)
    sent = asyncio.create_task(spend(after, 1))
    await clock.advance(paused - 10.0 - 0.1)
    assert not sent.done()
    await clock.advance(0.2)  # (epoch seconds carry the end a few nanoseconds off)
    await asyncio.wait_for(sent, 1)
    assert (
        budget_on(await journal(path, clock), OTHER, clock).paused_for() == 0
    )  # the other key was not paused


async def test_a_recorded_pause_is_never_longer_than_a_pause_can_be(journal: Journal, tmp_path: Path) -> None:
    clock, path = ManualClock(), tmp_path / "spent"
    (await journal(path, clock)).on_key(KEY).paused(clock.time() + 10**9)  # a clock set back, a damaged file
    budget = RequestBudget(
        16, WINDOW, clock=clock, backoff_max=120.0, spent=(await journal(path, clock)).on_key(KEY)
    )
    assert budget.paused_for() <= 120.0 * 1.1
