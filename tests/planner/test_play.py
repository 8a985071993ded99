"""The key played forward: the video rule, the budget's slots, when queued jobs start and when a
running task's next poll goes out."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framecast.planner.play import Played, Slots, play
from framecast.planner.policy import Planned, Requests, video_fits
from framecast.planner.tuning import PlannerTuning
from framecast.values.service_requests import Priority

WINDOW = 60.0
RULE = PlannerTuning(last_creates=4, borrow=1.5, idle=0.5, spread=0.0)


class Rule:
    """The video rule with one tuning, over a window of 16 requests."""

    def __init__(self, tuning: PlannerTuning) -> None:
        self.tuning = tuning

    def fits(self, **asked: Any) -> bool:
        return video_fits(self.tuning, window=WINDOW, allowed=16, **asked)


def no_peak() -> float:
    raise AssertionError("the later windows are looked at only when the next one has room")


def test_a_video_startsonly_while_the_next_window_has_room_for_its_create() -> None:
    assert Rule(RULE).fits(due=15, images=0, videos=10, peak=lambda: 0.0)
    assert not Rule(RULE).fits(due=16, images=0, videos=10, peak=no_peak)
    # Each waiting image goes first: two requests of the window each.
    assert not Rule(RULE).fits(due=12, images=2, videos=10, peak=no_peak)


def test_a_video_whose_polls_would_crowd_a_later_window_waits() -> None:
    assert not Rule(RULE).fits(due=9, images=0, videos=10, peak=lambda: 17.0)
    assert Rule(RULE).fits(due=9, images=0, videos=10, peak=lambda: 16.0)


def test_a_video_startswhatever_the_later_windows_hold_while_the_key_would_idle() -> None:
    # Half the next window or less planned: a slot left idle is lost, a crowded window only waits.
    assert Rule(RULE).fits(due=8, images=0, videos=10, peak=no_peak)
    assert not Rule(RULE).fits(due=8.5, images=0, videos=10, peak=lambda: 17.0)


def test_the_batchs_last_creates_borrow_up_to_half_a_window() -> None:
    assert Rule(RULE).fits(due=23, images=0, videos=4, peak=no_peak)
    assert not Rule(RULE).fits(due=24, images=0, videos=4, peak=no_peak)
    assert not Rule(RULE).fits(due=23, images=0, videos=5, peak=no_peak)


LENDING = Rule(dataclasses.replace(RULE, spread=3.0))


def planned_within(total: float) -> Callable[[float], float]:
    """`ahead` for the rule: `total` requests planned within the three windows it asks about."""

    def ahead(span: float) -> float:
        assert span == pytest.approx(3 * WINDOW)
        return total

    return ahead


def test_a_full_next_window_lends_a_create_its_slot_while_the_next_three_windows_have_room() -> None:
    assert LENDING.fits(due=20, images=0, videos=10, peak=lambda: 16.0, ahead=planned_within(47))
    assert not LENDING.fits(due=20, images=0, videos=10, peak=no_peak, ahead=planned_within(48))
    # Its own polls must still find room in the windows they fall in.
    assert not LENDING.fits(due=20, images=0, videos=10, peak=lambda: 17.0, ahead=planned_within(30))
    # Images waiting go first, within this window: nothing lends past them.
    assert not LENDING.fits(due=14, images=1, videos=10, peak=no_peak, ahead=planned_within(30))
    # A rule without a spread (or nothing to ask) lends nothing.
    assert not Rule(RULE).fits(due=20, images=0, videos=10, peak=no_peak, ahead=planned_within(0))
    assert not LENDING.fits(due=20, images=0, videos=10, peak=no_peak)


def test_a_known_budget_frees_its_slots_a_window_after_each_was_spent() -> None:
    slots = Slots(now=0.0, window=WINDOW, allowed=3, free=0, frees=[10.0, 20.0], spacing=20.0)
    seen = []
    for _ in range(5):
        seen.append(slots.first())
        slots.spend()
    # One free now, the used ones as they age out, then the one spent now a window later.
    assert seen == [0.0, 10.0, 20.0, 60.0, 70.0]


def test_an_idle_slot_stays_free_until_something_wants_it() -> None:
    slots = Slots(now=0.0, window=WINDOW, allowed=1, free=0, frees=[], spacing=60.0)
    slots.idle(25.0)
    assert slots.first() == 25.0
    slots.spend()
    assert slots.first() == 85.0


def test_an_unknown_budget_grants_this_processs_even_part_after_the_free_slots() -> None:
    slots = Slots(now=0.0, window=WINDOW, allowed=16, free=2, frees=None, spacing=7.5)
    seen = []
    for _ in range(5):
        seen.append(slots.first())
        slots.spend()
    assert seen == [0.0, 0.0, 7.5, 15.0, 22.5]


def played(
    count: int,
    planned: Sequence[Requests],
    slots: Slots,
    cost: Sequence[Requests] = (),
    rule: PlannerTuning = RULE,
    **held: Any,
) -> Played:
    """The key of 16 a window played forward with ``count`` videos queued and polls ``planned``, each
    likely to see a result (``held``: what else holds its slots)."""
    return play(
        now=0.0,
        planned=[Planned(at, n, Priority.HIGH) for at, n in planned],
        slots=slots,
        tuning=rule,
        window=WINDOW,
        allowed=16,
        weighed=lambda at: [(at, 1.0)],
        expected=lambda at: [(at + t, n) for t, n in cost],
        horizon=3600.0,
        step=WINDOW / 16,
        videos=count,
        **held,
    )


def video_starts(*args: Any, **kwargs: Any) -> list[float]:
    """When the queued videos start (:func:`played`'s)."""
    return played(*args, **kwargs).videos


def test_an_idle_key_startsa_window_of_videos_at_once_and_the_rest_as_the_window_frees() -> None:
    slots = Slots(now=0.0, window=WINDOW, allowed=16, free=16, frees=[], spacing=WINDOW / 16)
    starts = video_starts(20, [], slots)
    # Not one a pace apart: the budget's free slots all go now, the next ones a window later.
    assert starts == pytest.approx([0.0] * 16 + [60.0] * 4)


def test_a_window_where_completions_come_due_is_spent_on_their_polls() -> None:
    slots = Slots(now=0.0, window=WINDOW, allowed=16, free=16, frees=[], spacing=WINDOW / 16)
    # Twenty polls due in 10 s: no room in the next window for a create until five have gone out
    # (at 10 s); its create waits behind the other polls due (they go first), so it goes out, and
    # the next video starts, when the slots spent at 10 s free again.
    starts = video_starts(10, [(10.0, 20.0)], slots)
    assert starts[:2] == pytest.approx([10.0, 70.0])


def test_a_lent_create_goes_before_the_polls_that_come_due_while_it_waits() -> None:
    # Twenty polls due at 10 s fill the next window, but the three windows from now have room: the
    # first video starts now and its create (in turn with the polls in the budget) takes a slot
    # before they come due; without the spread it waited for them (10 s, then a window on).
    slots = Slots(now=0.0, window=WINDOW, allowed=16, free=16, frees=[], spacing=WINDOW / 16)
    lent = video_starts(10, [(10.0, 20.0)], slots, rule=LENDING.tuning)
    slots = Slots(now=0.0, window=WINDOW, allowed=16, free=16, frees=[], spacing=WINDOW / 16)
    held = video_starts(10, [(10.0, 20.0)], slots)
    assert lent[0] == pytest.approx(0.0)
    assert held[0] == pytest.approx(10.0)
    assert lent[1] <= held[1]


def test_what_the_started_videos_will_ask_holds_back_the_ones_after_them() -> None:
    slots = Slots(now=0.0, window=WINDOW, allowed=16, free=16, frees=[], spacing=WINDOW / 16)
    # Each video polls 30 s after its create and downloads: two requests of the next window, so
    # eight fit beside their creates (the batch's last four may borrow).
    starts = video_starts(20, [], slots, cost=[(30.0, 2.0)])
    assert starts[:8] == pytest.approx([0.0] * 8)
    assert all(later > 0.0 for later in starts[8:])


def test_the_play_stops_at_its_horizon() -> None:
    slots = Slots(now=0.0, window=WINDOW, allowed=1, free=1, frees=[], spacing=WINDOW)
    starts = play(
        now=0.0,
        videos=10,
        planned=[],
        slots=slots,
        tuning=PlannerTuning(last_creates=0, borrow=1.0, idle=0.0, spread=0.0),
        window=WINDOW,
        allowed=1,
        weighed=lambda at: [(at, 1.0)],
        expected=lambda at: [],
        horizon=150.0,
        step=WINDOW,
    ).videos
    assert starts == pytest.approx([0.0, 60.0, 120.0])


@given(
    st.lists(st.tuples(st.floats(-60, 600), st.floats(0, 5)), max_size=20),
    st.integers(0, 16),
    st.integers(0, 30),
)
def test_starts_come_in_queue_order_and_never_before_now(
    planned: list[tuple[float, float]], free: int, count: int
) -> None:
    slots = Slots(now=0.0, window=WINDOW, allowed=16, free=free, frees=[], spacing=WINDOW / 16)
    starts = video_starts(count, planned, slots, cost=[(90.0, 1.5)])
    assert starts == sorted(starts) and all(at >= 0.0 for at in starts)
    assert len(starts) <= count


@given(
    st.lists(
        st.tuples(
            st.floats(-60, 600), st.floats(0.5, 5), st.sampled_from([Priority.HIGH, Priority.PROGRESS])
        ),
        max_size=20,
    ),
    st.integers(0, 16),
    st.integers(0, 10),
    st.integers(0, 10),
    st.booleans(),
)
def test_every_task_is_polled_once_due_and_every_job_starts_in_order_within_the_horizon(
    polls: list[tuple[float, float, Priority]], free: int, videos: int, images: int, known: bool
) -> None:
    horizon = 1800.0
    slots = Slots(
        now=0.0, window=WINDOW, allowed=16, free=free, frees=[] if known else None, spacing=WINDOW / 16
    )
    result = play(
        now=0.0,
        planned=[Planned(at, n, priority, job_id) for job_id, (at, n, priority) in enumerate(polls, start=1)],
        slots=slots,
        tuning=RULE,
        window=WINDOW,
        allowed=16,
        weighed=lambda at: [(at, 1.0), (at + 90.0, 2.0)],
        expected=lambda at: [(at + 90.0, 2.0)],
        horizon=horizon,
        step=WINDOW / 16,
        videos=videos,
        images=images,
    )
    # Each task's next poll: once, not before it is due nor before now, and by the horizon's end.
    assert set(result.polls) == set(range(1, len(polls) + 1))
    for job_id, sent in result.polls.items():
        assert max(0.0, polls[job_id - 1][0]) - 1e-9 <= sent <= horizon
    for starts, queued in ((result.videos, videos), (result.images, images)):
        assert starts == sorted(starts) and len(starts) <= queued
        assert all(0.0 <= at <= horizon for at in starts)


def test_the_images_waiting_start_before_any_video_each_followed_by_its_download() -> None:
    slots = Slots(now=0.0, window=WINDOW, allowed=16, free=0, frees=None, spacing=WINDOW / 16)
    result = played(2, [], slots, images=3)
    spacing = WINDOW / 16
    # An image's create, then its download (it goes before the next image's create, as the budget
    # serves a download before a create); the first video once every image's create went out (its
    # own create behind the last download), the second once that create went out.
    assert result.images == pytest.approx([1 * spacing, 3 * spacing, 5 * spacing])
    assert result.videos == pytest.approx([6 * spacing, 8 * spacing])


def polls_played(*polls: tuple[float, float, Priority], **held: Any) -> Played:
    """Running tasks 1, 2, ... whose next polls are due at these times, each with its download,
    played on a key with no slot free now (one every 3.75 s) and nothing queued but ``held``."""
    return play(
        now=0.0,
        planned=[Planned(at, n, priority, job_id) for job_id, (at, n, priority) in enumerate(polls, start=1)],
        slots=Slots(now=0.0, window=WINDOW, allowed=16, free=0, frees=None, spacing=WINDOW / 16),
        tuning=RULE,
        window=WINDOW,
        allowed=16,
        weighed=lambda at: [(at, 1.0)],
        expected=lambda at: [],
        horizon=3600.0,
        step=WINDOW / 16,
        **held,
    )


def test_a_tasks_next_poll_goes_out_behind_the_polls_due_before_it() -> None:
    # Three polls likely to see a result, each with its download, are due at 0 s, 1 s and 2 s: the
    # third goes out on the fifth slot.
    high = Priority.HIGH
    result = polls_played((0.0, 2.0, high), (1.0, 2.0, high), (2.0, 2.0, high))
    spacing = WINDOW / 16
    assert result.polls == pytest.approx({1: spacing, 2: 3 * spacing, 3: 5 * spacing})


def test_a_poll_that_only_refreshes_progress_goes_after_the_creates_and_likely_results() -> None:
    result = polls_played(
        (0.0, 1.0, Priority.PROGRESS), (1.0, 2.0, Priority.HIGH), images=1, images_first=True
    )
    spacing = WINDOW / 16
    # The image that waited a window first, then the likely result and their downloads.
    assert result.images == pytest.approx([spacing])
    assert result.polls == pytest.approx({2: 2 * spacing, 1: 5 * spacing})


def held_play(images_sent: Sequence[float]) -> list[float]:
    # Twelve polls due in 55 s (within the next window from now on); five videos queued, so the
    # batch's last creates do not borrow.
    slots = Slots(now=0.0, window=WINDOW, allowed=16, free=16, frees=[], spacing=WINDOW / 16)
    rule = PlannerTuning(last_creates=4, borrow=1.5, idle=0.5, spread=0.0)
    return video_starts(5, [(55.0, 12.0)], slots, rule=rule, images_sent=images_sent)


def test_the_images_sent_within_the_window_hold_a_video_back_as_admission_weighs_them() -> None:
    # Two images sent 10 and 5 s ago hold four requests until a window after each was sent:
    # twelve polls, their four and a create do not fit sixteen, so the first video waits until the
    # first image's requests leave the window (admission weighs them: KeyView.images_spent). The
    # play counted none of them and started it at once.
    assert held_play([])[0] == pytest.approx(0.0)
    assert held_play([-10.0, -5.0])[0] >= 50.0


def test_the_creates_in_flight_take_the_first_slots_before_a_video_starts() -> None:
    # A video's and an image's creates are waiting for the budget: admission starts no video while
    # a create is in flight (KeyView.creating), so the first queued video starts on the third slot;
    # its create goes out after the image's download, and the second video starts after it.
    slots = Slots(now=0.0, window=WINDOW, allowed=16, free=0, frees=None, spacing=WINDOW / 16)
    starts = video_starts(2, [], slots, in_flight=(1, 1))
    spacing = WINDOW / 16
    assert starts == pytest.approx([3 * spacing, 5 * spacing])
