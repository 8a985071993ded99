"""Completion prediction: progress tracks, the learned duration model, and their persistence."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from framecast.planner.predict import MAX_DURATION, DurationKey, DurationModel, ProgressTrack
from framecast.storage import Store
from framecast.values.durations import DurationRow

T0 = 1_700_000_000.0
VIDEO = DurationModel.key_for("svc-video-v2.0", 1152, 768, 121)
IMAGE = DurationModel.key_for("svc-image-2.1-flash", 1024, 1024, None)


def assert_rows_close(got: list[DurationRow], want: list[DurationRow]) -> None:
    """Same keys, counts and times; figures equal up to the log/exp round trip."""
    got, want = sorted(got, key=lambda r: r.key), sorted(want, key=lambda r: r.key)
    assert [(r.key, r.count, r.updated_at) for r in got] == [(r.key, r.count, r.updated_at) for r in want]
    assert [x for r in got for x in (r.mean, r.spread)] == pytest.approx(
        [x for r in want for x in (r.mean, r.spread)]
    )


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
    assert track.remaining(T0 + 40.0) == pytest.approx(60.0)
    assert track.progress_at(T0 + 45.0) == pytest.approx(0.45)
    assert track.progress_at(T0 + 500.0) == 0.99  # an estimate never claims the work is done
    assert track.progress_at(T0 + 25.0) == 0.30  # never below the last report
    assert track.reports == 3 and track.last_progress == 0.30 and track.last_at == T0 + 30.0


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
    assert track.last_progress == 0.20
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
    assert silent.last_at == T0 + 30.0 and silent.reports == 0

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


def test_out_of_order_and_non_finite_observations_are_ignored() -> None:
    track = linear_track(100.0, [10.0, 20.0])
    done = track.predicted_done()
    track.observe(T0 + 15.0, 0.9)  # a late answer to an older poll
    track.observe(math.nan, 0.5)
    track.observe(T0 + 25.0, math.nan)
    assert track.predicted_done() == done and track.last_progress == 0.20


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


def test_a_task_known_only_by_bounds_is_learned_as_the_model_expects_inside_them() -> None:
    model = DurationModel(video_prior=120.0)
    for _ in range(20):
        model.learn(VIDEO, 120.0, at=T0)
    # Seen done at its first poll, at 150 s: most such tasks took about the median, not 75 s.
    assert 110.0 < model.typical_within(VIDEO, 0.0, 150.0) < 125.0
    assert 80.0 < model.typical_within(VIDEO, 60.0, 90.0) <= 90.0  # nearer the likelier end
    assert model.typical_within(VIDEO, 400.0, 430.0) == pytest.approx(400.0, abs=3.0)
    assert model.typical_within(VIDEO, 80.0, 80.0) == 80.0
    assert model.typical_within(VIDEO, 1e5, 2e5) == 1e5  # no chance at all: the nearer bound


def test_after_a_restart_a_track_rebuilt_from_the_stored_progress_predicts_alike() -> None:
    live = linear_track(200.0, [30.0, 60.0, 90.0])
    # What the store kept: started_at, the last progress and when it was written.
    rebuilt = ProgressTrack(T0)
    rebuilt.observe(T0 + 90.0, live.last_progress)
    assert rebuilt.predicted_done() == pytest.approx(live.predicted_done(), rel=0.02)


times = st.floats(min_value=-1e12, max_value=1e12) | st.sampled_from([math.nan, math.inf, -math.inf])
progresses = st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 1)


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
        if math.isfinite(at):
            latest = max(latest, at)
    if finish is not None:
        track.complete(finish)
        if math.isfinite(finish):
            latest = max(latest, finish)
    done = track.predicted_done()
    assert done is None or (math.isfinite(done) and done >= latest)
    bounds = track.bounds()
    assert bounds is None or (math.isfinite(bounds[1]) and 0 <= bounds[0] <= bounds[1])
    for value in (track.progress_at(now) for now in probes):
        assert value is None or 0.0 <= value <= 1.0
        assert value != 1.0 or track.completed
    # Between polls, time only moves the estimate forward.
    shown = [track.progress_at(now) for now in sorted(t for t in probes if not math.isnan(t))]
    assert all(a is None or b is None or a <= b for a, b in zip(shown, shown[1:], strict=False))


# ---------------------------------------------------------------------- durations


def test_the_prior_is_cautious_and_per_kind() -> None:
    model = DurationModel()
    video, image = model.expected(VIDEO), model.expected(IMAGE)
    assert (video.mean, video.count) == (pytest.approx(120.0), 0)
    assert (image.mean, image.count) == (pytest.approx(20.0), 0)
    assert video.spread > 0.5 * video.mean  # wide: it knows nothing yet
    q25, q50, q90 = (model.quantile(VIDEO, q) for q in (0.25, 0.5, 0.9))
    assert q25 < q50 < q90
    assert q50 == pytest.approx(120.0)
    with pytest.raises(ValueError):
        model.quantile(VIDEO, 1.0)


def test_learning_moves_towards_observations_and_narrows() -> None:
    model = DurationModel()
    rng = random.Random(1)
    first = model.learn(VIDEO, 60.0, at=T0)
    assert first is not None and first.key == VIDEO.text and first.count == 1 and first.updated_at == T0
    assert 60.0 < first.mean < 120.0  # moved, not jumped: one observation against the prior
    for _ in range(19):
        model.learn(VIDEO, 60.0 * rng.uniform(0.9, 1.1), at=T0)
    learned = model.expected(VIDEO)
    assert learned.count == 20
    assert learned.mean == pytest.approx(60.0, rel=0.1)
    assert learned.spread < 0.25 * learned.mean
    assert model.expected(IMAGE).count == 0  # other keys untouched


def test_learning_follows_a_service_that_slows_down() -> None:
    model = DurationModel()
    for _ in range(50):
        model.learn(VIDEO, 60.0, at=T0)
    for _ in range(50):
        model.learn(VIDEO, 180.0, at=T0)
    assert model.expected(VIDEO).mean == pytest.approx(180.0, rel=0.05)


def test_spread_never_collapses_to_certainty() -> None:
    model = DurationModel(min_sigma=0.1)
    for _ in range(200):
        model.learn(VIDEO, 90.0, at=T0)
    assert model.quantile(VIDEO, 0.9) > 1.1 * model.quantile(VIDEO, 0.5)


@pytest.mark.parametrize("seconds", [0.0, -5.0, math.nan, math.inf, MAX_DURATION + 1])
def test_absurd_observations_are_ignored(seconds: float) -> None:
    model = DurationModel()
    assert model.learn(VIDEO, seconds, at=T0) is None
    assert model.snapshot() == [] and model.expected(VIDEO).count == 0


def test_a_new_bucket_borrows_from_the_nearest_one_of_its_model() -> None:
    model = DurationModel()
    for _ in range(30):
        model.learn(VIDEO, 60.0, at=T0)
    small = DurationModel.key_for("svc-video-v2.0", 768, 512, 49)  # about 4 buckets less work
    big = DurationModel.key_for("svc-video-v2.0", 1280, 720, 241)
    assert small.bucket < VIDEO.bucket < big.bucket
    s, b, own = model.expected(small), model.expected(big), model.expected(VIDEO)
    assert s.mean < own.mean < b.mean
    assert (s.count, b.count) == (0, 0)  # borrowed, not learned
    assert s.spread / s.mean > own.spread / own.mean  # and less certain
    other_model = DurationModel.key_for("svc-video-v3.0", 1152, 768, 121)
    assert model.expected(other_model).mean == pytest.approx(120.0)  # a new model gets the prior
    # Learning the new bucket starts from what it borrowed, not from the prior.
    row = model.learn(small, 30.0, at=T0)
    assert row is not None and row.mean < 60.0


def test_keys_bucket_similar_work_together() -> None:
    assert DurationModel.key_for("m", 1152, 768, 121) == DurationModel.key_for("m", 1280, 720, 121)
    assert DurationModel.key_for("m", 1152, 768, 121) != DurationModel.key_for("m", 1152, 768, 241)
    assert DurationModel.key_for("m", 1024, 1024, None).kind == "image"
    video = {"model": "m", "width": 1152, "height": 768, "num_frames": 121, "prompt": "x"}
    assert DurationModel.key_for_params(video) == DurationModel.key_for("m", 1152, 768, 121)
    image = {"model": "m", "size": "1024x1024", "prompt": "x"}
    assert DurationModel.key_for_params(image) == DurationModel.key_for("m", 1024, 1024, None)
    assert DurationModel.key_for_params({"size": "1024x1024"}) is None  # no model
    assert DurationModel.key_for_params({"model": "m", "size": "huge"}) is None


@pytest.mark.parametrize("model", ["svc-video-v2.0", "org:video:v2", "a"])
def test_key_text_round_trips(model: str) -> None:
    key = DurationModel.key_for(model, 1152, 768, 121)
    assert DurationKey.parse(key.text) == key


@pytest.mark.parametrize("text", ["", "video", "video:27", "video:x:m", "audio:27:m", "video:27:"])
def test_key_text_that_is_not_a_key_parses_to_none(text: str) -> None:
    assert DurationKey.parse(text) is None


def test_snapshot_and_restore_carry_the_model_across_a_restart() -> None:
    model = DurationModel()
    for seconds in (70.0, 80.0, 75.0):
        model.learn(VIDEO, seconds, at=T0)
    model.learn(IMAGE, 12.0, at=T0 + 1)
    restarted = DurationModel()
    restarted.restore(model.snapshot())
    for key in (VIDEO, IMAGE):
        assert restarted.expected(key) == pytest.approx(model.expected(key))
        assert restarted.quantile(key, 0.9) == pytest.approx(model.quantile(key, 0.9))
    assert_rows_close(restarted.snapshot(), model.snapshot())


def test_restore_skips_damaged_rows_and_replaces_what_was_learned() -> None:
    model = DurationModel()
    model.learn(IMAGE, 12.0, at=T0)
    good = DurationRow(VIDEO.text, 80.0, 10.0, 4, T0)
    model.restore(
        [
            good,
            DurationRow("not a key", 80.0, 10.0, 4, T0),
            DurationRow("video:x:svc-video-v2.0", 80.0, 10.0, 4, T0),
            DurationRow("video:30:m", -1.0, 10.0, 4, T0),
            DurationRow("video:31:m", math.nan, 10.0, 4, T0),
            DurationRow("video:32:m", 80.0, -1.0, 4, T0),
            DurationRow("video:33:m", MAX_DURATION * 2, 1.0, 4, T0),
            DurationRow("video:34:m", 80.0, 1.0, -4, T0),
        ]
    )
    assert_rows_close(model.snapshot(), [good])
    assert model.expected(IMAGE).count == 0  # replaced, not merged


async def test_the_model_survives_a_restart_through_the_store(tmp_path: Path) -> None:
    path = tmp_path / "framecast.sqlite3"
    model = DurationModel()
    key = DurationModel.key_for("org:video/v2", 1152, 768, 121)  # ':' and '/' in a model name
    async with await Store.open(path) as store:
        for seconds in (70.0, 80.0, 75.0, 90.0):
            row = model.learn(key, seconds, at=T0)
            assert row is not None
            await store.save_duration(row)
    async with await Store.open(path) as store:
        rows = await store.load_durations()
    restarted = DurationModel()
    restarted.restore(rows)
    assert restarted.expected(key) == pytest.approx(model.expected(key))
    assert restarted.quantile(key, 0.25) == pytest.approx(model.quantile(key, 0.25))


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        DurationModel(video_prior=0)
    with pytest.raises(ValueError):
        DurationModel(alpha=0)
    with pytest.raises(ValueError):
        DurationModel(prior_sigma=0.05, min_sigma=0.1)
