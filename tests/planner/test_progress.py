"""Completion prediction: a task's progress reports and the end they predict."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framecast.planner.progress import ProgressTrack

T0 = 1_700_000_000.0


def linear_track(duration: float, polls: list[float], *, start: float = T0) -> ProgressTrack:
    """A task whose progress grows linearly from its start, reported in whole percents."""
    track = ProgressTrack(start)
    for t in polls:
        track.observe(start + t, round(min(0.99, t / duration) * 100) / 100)
    return track


# ---------------------------------------------------------------------- with progress


def test_linear_progress_predicts_the_end_and_fills_in_between_polls() -> None:
    track = linear_track(100.0, [10.0, 20.0, 30.0])
    assert track.predicted_done() == pytest.approx(T0 + 100.0)
    assert track.progress_at(T0 + 45.0) == pytest.approx(0.45)
    assert track.progress_at(T0 + 500.0) == 0.99  # an estimate never claims the work is done
    assert track.progress_at(T0 + 25.0) == 0.30  # never below the last report
    assert track.last_at == T0 + 30.0


def test_one_report_uses_elapsed_times_remaining_over_done() -> None:
    track = ProgressTrack(T0)
    track.observe(T0 + 30.0, 0.25)
    assert track.predicted_done() == pytest.approx(T0 + 120.0)


def test_noisy_reports_still_predict_within_ten_percent() -> None:
    rng = random.Random(9)
    duration = 150.0
    for _ in range(20):
        track = ProgressTrack(T0)
        for t in (30.0, 60.0, 90.0):
            noisy = t / duration + rng.uniform(-0.02, 0.02)
            track.observe(T0 + t, round(noisy * 100) / 100)
        done = track.predicted_done()
        assert done is not None and abs(done - (T0 + duration)) <= 0.1 * duration


def test_a_stall_pushes_the_prediction_out_and_never_lowers_progress() -> None:
    track = linear_track(100.0, [10.0, 20.0, 30.0, 40.0])
    before = track.predicted_done()
    assert before == pytest.approx(T0 + 100.0)
    predictions = []
    for t in (50.0, 60.0, 70.0):
        track.observe(T0 + t, 0.40)
        done = track.predicted_done()
        assert done is not None and done >= T0 + t
        predictions.append(done)
        assert track.progress_at(T0 + t + 5.0) >= 0.40  # type: ignore[operator]
    assert predictions == sorted(predictions) and predictions[0] > before  # type: ignore[operator]


def test_a_regressing_report_counts_as_a_stall() -> None:
    track = linear_track(100.0, [10.0, 20.0])
    track.observe(T0 + 30.0, 0.05)
    assert track.progress_at(T0 + 30.0) >= 0.20  # type: ignore[operator]


def test_a_huge_jump_moves_the_prediction_only_part_of_the_way() -> None:
    track = linear_track(1000.0, [10.0, 20.0, 30.0])  # 1 % per 10 s: done at +1000 s
    track.observe(T0 + 40.0, 0.95)
    done = track.predicted_done()
    assert done is not None and T0 + 40.0 < done < T0 + 1000.0
    assert track.progress_at(T0 + 41.0) <= 0.99  # type: ignore[operator]
    assert track.progress_at(T0 + 40.0) == 0.95


def test_zero_or_missing_progress_says_nothing_about_the_end() -> None:
    silent = ProgressTrack(T0)
    silent.observe(T0 + 30.0, None)
    assert silent.predicted_done() is None and silent.progress_at(T0 + 40.0) is None
    assert silent.last_at == T0 + 30.0

    zero = ProgressTrack(T0)
    zero.observe(T0 + 30.0, 0.0)
    zero.observe(T0 + 60.0, 0.0)
    assert zero.predicted_done() is None
    assert zero.progress_at(T0 + 90.0) == 0.0


def test_work_starting_late_is_forgotten_after_a_few_reports() -> None:
    # Queued 60 s on the service, then 1 % per second: done at +160 s.
    track = ProgressTrack(T0)
    track.observe(T0 + 30.0, 0.0)
    track.observe(T0 + 60.0, 0.0)
    for t in (70.0, 80.0, 90.0, 100.0, 110.0, 120.0):
        track.observe(T0 + t, (t - 60.0) / 100)
    assert track.predicted_done() == pytest.approx(T0 + 160.0, rel=0.02)


def test_a_pending_task_reported_at_100_percent_is_due_now_but_not_shown_done() -> None:
    track = linear_track(100.0, [50.0])
    track.observe(T0 + 80.0, 1.0)
    assert track.predicted_done() == T0 + 80.0
    assert track.progress_at(T0 + 90.0) == 0.99
    track.complete(T0 + 95.0)
    assert track.completed and track.progress_at(T0 + 95.0) == 1.0
    assert track.predicted_done() == T0 + 95.0


def test_a_poll_without_progress_past_the_prediction_moves_it() -> None:
    track = linear_track(100.0, [50.0])
    track.observe(T0 + 130.0, None)  # still pending past the predicted end
    assert track.predicted_done() == T0 + 130.0


def test_a_late_answer_to_an_older_poll_is_ignored() -> None:
    track = linear_track(100.0, [10.0, 20.0])
    done = track.predicted_done()
    track.observe(T0 + 15.0, 0.9)  # a late answer to an older poll
    assert track.predicted_done() == done and track.progress_at(T0 + 20.0) == 0.20


def test_a_finished_task_is_bounded_by_the_last_pending_poll_and_completion() -> None:
    with_progress = linear_track(100.0, [30.0, 60.0, 90.0])
    assert with_progress.bounds() is None
    with_progress.complete(T0 + 120.0)
    assert with_progress.bounds() == pytest.approx((100.0, 100.0))  # the rate placed its end

    without = ProgressTrack(T0)
    without.observe(T0 + 30.0, None)
    without.observe(T0 + 60.0, None)
    without.complete(T0 + 90.0)
    assert without.bounds() == pytest.approx((60.0, 90.0))  # somewhere in the last gap

    never_polled = ProgressTrack(T0)
    never_polled.complete(T0 + 40.0)
    assert never_polled.bounds() == pytest.approx((0.0, 40.0))


def test_after_a_restart_a_track_rebuilt_from_the_stored_progress_predicts_alike() -> None:
    live = linear_track(200.0, [30.0, 60.0, 90.0])
    # What the store kept: started_at, the last progress and when it was written.
    rebuilt = ProgressTrack(T0)
    rebuilt.observe(T0 + 90.0, live.progress_at(T0 + 90.0))
    assert rebuilt.predicted_done() == pytest.approx(live.predicted_done(), rel=0.02)


# What the clock and the parser give: finite times, progress a fraction (or nothing).
times = st.floats(min_value=-1e12, max_value=1e12)
progresses = st.none() | st.floats(0, 1)


@settings(max_examples=500, deadline=None)
@given(
    start=st.floats(min_value=-1e12, max_value=1e12),
    steps=st.lists(st.tuples(times, progresses), max_size=30),
    finish=st.none() | times,
    probes=st.lists(times, min_size=1, max_size=5),
)
def test_no_observations_make_a_track_raise_or_claim_the_impossible(
    start: float,
    steps: list[tuple[float, float | None]],
    finish: float | None,
    probes: list[float],
) -> None:
    track = ProgressTrack(start)
    latest = -math.inf
    for at, progress in steps:
        track.observe(at, progress)
        latest = max(latest, at)
    if finish is not None:
        track.complete(finish)
        latest = max(latest, finish)
    done = track.predicted_done()
    assert done is None or (math.isfinite(done) and done >= latest)
    bounds = track.bounds()
    assert bounds is None or (math.isfinite(bounds[1]) and 0 <= bounds[0] <= bounds[1])
    for value in (track.progress_at(now) for now in probes):
        assert value is None or 0.0 <= value <= 1.0
        assert value != 1.0 or track.completed
    # Between polls, time only moves the estimate forward.
    shown = [track.progress_at(now) for now in sorted(probes)]
    assert all(a is None or b is None or a <= b for a, b in zip(shown, shown[1:], strict=False))
