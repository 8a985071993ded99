"""The admission policy as a pure function: a read-only snapshot of a key in, a decision out.

No planner, no clock, no budget: each snapshot is written out, so each test reads as the situation
it decides (one policy, every tuned number from one record, and asking records nothing).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

from framecast.planner import tuning as tuning_module
from framecast.planner.policy import KeyView, admits
from framecast.planner.tuning import PlannerTuning
from framecast.values import JobKind

DEFAULT = PlannerTuning()


def quiet_key(**changes: object) -> KeyView:
    """A key with nothing running and nothing queued (16 requests a minute)."""
    view = KeyView(
        now=100.0,
        window=60.0,
        allowed=16.0,
        profile=lambda: (),
        new_video=lambda: ((100.0, 1.0), (190.0, 2.0)),
        videos_waiting=1,
    )
    return dataclasses.replace(view, **changes)  # type: ignore[arg-type]


def test_a_quiet_key_starts_either_kind() -> None:
    assert admits(quiet_key(), JobKind.VIDEO, DEFAULT)
    assert admits(quiet_key(), JobKind.IMAGE, DEFAULT)


def test_one_video_create_waits_at_a_time_and_as_many_image_creates_as_the_window_holds() -> None:
    one_in_flight = quiet_key(running=1)  # started, its create not through yet
    assert not admits(one_in_flight, JobKind.VIDEO, DEFAULT)
    assert admits(one_in_flight, JobKind.IMAGE, DEFAULT)
    assert admits(quiet_key(running=7), JobKind.IMAGE, DEFAULT)  # 7 x 2 + 2 <= 16
    assert not admits(quiet_key(running=8), JobKind.IMAGE, DEFAULT)


def test_the_tuning_record_moves_the_decision() -> None:
    # Polls planned for 23 requests: an image may push them back up to `borrow` windows.
    planned = quiet_key(demand=23.0, ahead_of_images=4.0, polled=6, running=6)
    assert not admits(planned, JobKind.IMAGE, DEFAULT)  # 23 + 2 > 1.5 x 16
    assert admits(planned, JobKind.IMAGE, dataclasses.replace(DEFAULT, borrow=2.0))


def test_images_not_created_yet_hold_their_two_requests() -> None:
    # Polls that will see a result fill the window but four slots: two images started, their
    # creates not sent yet, hold them, so a third waits (admission recorded nothing of the first
    # two: they are counted from what the key's running jobs are).
    busy = quiet_key(demand=12.0, ahead_of_images=12.0, polled=5)
    assert admits(dataclasses.replace(busy, running=5), JobKind.IMAGE, DEFAULT)
    assert admits(dataclasses.replace(busy, running=6), JobKind.IMAGE, DEFAULT)
    assert not admits(dataclasses.replace(busy, running=7), JobKind.IMAGE, DEFAULT)


def test_an_image_that_waited_a_window_goes_before_the_polls_and_holds_the_videos() -> None:
    crowded = quiet_key(demand=16.0, ahead_of_images=16.0, polled=6, running=6, images_waiting=1)
    assert not admits(crowded, JobKind.IMAGE, DEFAULT)
    waited = dataclasses.replace(crowded, images_first=True)
    assert admits(waited, JobKind.IMAGE, DEFAULT)
    assert not admits(dataclasses.replace(waited, demand=0.0, ahead_of_images=0.0), JobKind.VIDEO, DEFAULT)


def test_a_ceiling_and_failing_creates_stop_admission() -> None:
    assert not admits(quiet_key(running=3, polled=3, ceiling=3), JobKind.IMAGE, DEFAULT)
    assert admits(quiet_key(running=1, deferred=1), JobKind.VIDEO, DEFAULT)  # one error may pass
    assert not admits(quiet_key(running=2, deferred=2), JobKind.IMAGE, DEFAULT)


def test_every_tuned_number_is_one_of_at_most_eight_each_saying_what_it_trades_and_its_figure() -> None:
    fields = dataclasses.fields(PlannerTuning)
    assert len(fields) <= 8
    source = inspect.getsource(tuning_module)
    readme = (Path(__file__).resolve().parents[2] / "benchmarks" / "README.md").read_text()
    headings = set(re.findall(r"^#+ (.+)$", readme, flags=re.MULTILINE))
    for field in fields:
        comment = re.search(r"((?:    #:.*\n)+)    " + field.name + r":", source)
        assert comment is not None, f"{field.name} has no line saying what it trades"
        text = " ".join(line.strip().removeprefix("#:").strip() for line in comment.group(1).splitlines())
        cited = re.findall(r'README, "([^"]+)"', text)
        assert cited or "Same figure as" in text, f"{field.name} cites no figure"
        assert all(any(h.startswith(c) for h in headings) for c in cited), f"{field.name}: {cited}"


def test_an_image_whose_create_is_being_sent_is_counted_once() -> None:
    # Its two requests are in images_spent from the moment its create is sent; the started job is
    # still "creating" until the service answers, and must not count twice.
    busy = quiet_key(demand=12.0, ahead_of_images=12.0, polled=5, running=6)
    sent = dataclasses.replace(busy, sending=1, images_spent=2.0)
    assert admits(sent, JobKind.IMAGE, DEFAULT)  # 12 + 2 + 2 <= 16
    assert not admits(dataclasses.replace(sent, sending=0), JobKind.IMAGE, DEFAULT)  # 12 + 2 + 2 + 2
