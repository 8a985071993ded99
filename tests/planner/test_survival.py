"""Durations from the recent tasks: the running ones included, finished ones as their polls bound them."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framecast.planner.survival import MAX_DURATION, Survival, fit_durations
from framecast.storage import Store
from framecast.values.durations import DurationKey, DurationRow

T0 = 1_700_000_000.0
VIDEO = DurationKey.of("svc-video-v2.0", 1152, 768, 121)
IMAGE = DurationKey.of("svc-image-2.1-flash", 1024, 1024, None)


def model(keep: int = 32) -> Survival:
    return Survival(priors={"video": 120.0, "image": 20.0}, keep=keep)


def exact(durations: list[float]) -> list[tuple[float, float]]:
    return [(d, d) for d in durations]


def test_without_running_tasks_it_is_the_plain_quantile() -> None:
    fit = fit_durations(exact([60.0, 90.0, 120.0, 150.0]), [])
    assert fit.quantile(0.5) == pytest.approx(90.0)
    assert fit.quantile(0.75) == pytest.approx(120.0)


def test_the_first_to_finish_of_a_batch_do_not_pass_for_the_median() -> None:
    # Sixteen videos created together, 60-180 s: at 95 s the three shortest have finished and the
    # other thirteen were seen pending at 90 s. Finished tasks alone say "median 74 s".
    finished, pending = exact([67.0, 74.0, 81.0]), [90.0] * 13
    assert fit_durations(finished, []).quantile(0.5) == pytest.approx(74.0)
    assert fit_durations(finished, pending).quantile(0.5) is None  # beyond 90 s: not known yet
    survival = model()
    for lower, upper in finished:
        survival.finished(VIDEO, lower, upper, at=T0)
    assert survival.quantile(VIDEO, 0.5, pending) == 90.0  # the floor: the largest age seen


def test_a_batch_drawn_uniformly_gives_its_median_long_before_it_ends() -> None:
    # 40 tasks of 60-180 s started together, looked at after 130 s: each finished one with its
    # duration, each running one seen pending at 130 s. The estimate is the batch's own median,
    # where the finished ones alone (the short ones) say much less.
    rng = random.Random(7)
    durations = sorted(rng.uniform(60, 180) for _ in range(40))
    assert durations[19] < 130
    finished = exact([d for d in durations if d <= 130])
    pending = [130.0 for d in durations if d > 130]
    assert fit_durations(finished, pending).quantile(0.5) == pytest.approx(durations[19])
    assert fit_durations(finished, []).quantile(0.5) < durations[19] - 10  # type: ignore[operator]


def polled(duration: float, first: float, interval: float) -> tuple[float, float]:
    """The bounds a task's polls (the first at `first`, then every `interval`) put on its end."""
    before, at = 0.0, first
    while at < duration:
        before, at = at, at + interval
    return before, at


def test_tasks_seen_done_at_their_first_poll_are_not_taken_for_half_as_long() -> None:
    # Without progress reports: 32 videos of 60-180 s, each first polled at 100-140 s (as the
    # budget allows), then every 30 s. A task seen done at its first poll ended somewhere before
    # it: the middle of that gap (what was learned before) makes the median far too short.
    # Eight such batches: interval data say less than exact durations (each estimate misses its
    # batch's median by up to 20 s), but the middles of the gaps miss by far more, and always short.
    errors, middle_errors = [], []
    for seed in range(8):
        rng = random.Random(seed)
        durations = [rng.uniform(60, 180) for _ in range(32)]
        bounds = [polled(d, rng.uniform(100, 140), 30.0) for d in durations]
        truth = statistics.median(durations)
        median = fit_durations(bounds, []).quantile(0.5)
        assert median is not None
        errors.append(abs(median - truth))
        middles = exact([(lower + upper) / 2 for lower, upper in bounds])
        middle_errors.append(truth - fit_durations(middles, []).quantile(0.5))  # type: ignore[operator]
    assert max(errors) < 20.0
    assert statistics.mean(middle_errors) > 2 * statistics.mean(errors)
    assert min(middle_errors) > -5.0  # the middles' error is a bias: short


def test_it_keeps_only_the_recent_durations() -> None:
    survival = model(keep=4)
    for seconds in (300.0, 300.0, 300.0, 300.0, 60.0, 60.0, 60.0):
        survival.finished(VIDEO, seconds, seconds, at=T0)
    assert survival.count(VIDEO) == 4
    assert survival.quantile(VIDEO, 0.5) == pytest.approx(60.0)
    assert survival.count(IMAGE) == 0 and survival.quantile(IMAGE, 0.5) == pytest.approx(20.0)  # the prior


def test_a_new_running_age_or_finished_task_is_seen_by_the_next_answer() -> None:
    # The fit is kept between questions: what it was fitted to must still decide every answer.
    survival = model()
    for seconds in (60.0, 90.0, 120.0):
        survival.finished(VIDEO, seconds, seconds, at=T0)
    assert survival.quantile(VIDEO, 0.5, []) == pytest.approx(90.0)
    assert survival.quantile(VIDEO, 0.5, [200.0, 200.0]) == pytest.approx(120.0)
    survival.finished(VIDEO, 30.0, 30.0, at=T0)
    assert survival.quantile(VIDEO, 0.5, [200.0, 200.0]) == pytest.approx(90.0)


@given(
    st.lists(st.floats(1, 1000), min_size=1, max_size=40),
    st.lists(st.floats(1, 1000), max_size=40),
    st.floats(0.05, 0.95),
)
def test_the_estimate_lies_within_what_was_seen_and_grows_with_q(
    finished: list[float], pending: list[float], q: float
) -> None:
    got = fit_durations(exact(finished), pending).quantile(q)
    if got is not None:
        assert min(finished) - 1e-5 <= got <= max(finished)
        higher = fit_durations(exact(finished), pending).quantile(min(0.99, q + 0.04))
        assert higher is None or higher >= got - 1e-6
    # Running tasks only ever push it later: a task seen pending at t takes longer than t.
    alone = fit_durations(exact(finished), []).quantile(q)
    assert alone is not None and (got is None or got >= alone - 1e-3)


@given(
    st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 300)), min_size=1, max_size=40),
    st.lists(st.floats(0, 1000), max_size=20),
    st.lists(st.floats(0.01, 0.99), min_size=2, max_size=6),
)
def test_any_bounds_give_quantiles_inside_them_and_in_order(
    finished: list[tuple[float, float]], pending: list[float], qs: list[float]
) -> None:
    bounds = [(lower, lower + width) for lower, width in finished]
    fit = fit_durations(bounds, pending)
    answers = [fit.quantile(q) for q in sorted(qs)]
    known = [a for a in answers if a is not None]
    # Once a quantile lies beyond what was seen, every higher one does too.
    assert known == answers[: len(known)]
    assert all(a <= b + 1e-6 for a, b in zip(known, known[1:], strict=False))
    assert all(min(lo for lo, _ in bounds) - 1e-5 <= a <= max(hi for _, hi in bounds) for a in known)


@given(
    st.lists(
        st.tuples(
            st.floats(allow_nan=True, allow_infinity=True), st.floats(allow_nan=True, allow_infinity=True)
        ),
        max_size=20,
    ),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20),
    st.floats(0.01, 0.99),
)
def test_no_figures_make_the_fit_raise_or_answer_outside_what_was_seen(
    finished: list[tuple[float, float]], pending: list[float], q: float
) -> None:
    # Exact points at any magnitude (their width must survive rounding), absurd and missing figures.
    bounds = [(min(a, b), max(a, b)) for a, b in finished]
    got = fit_durations(bounds, pending).quantile(q)
    uppers = [hi for _, hi in bounds if math.isfinite(hi) and hi > 0]
    assert got is None or (math.isfinite(got) and 0 <= got <= max(uppers))


# ---------------------------------------------------------------------- the prior and persistence


def test_the_prior_is_cautious_and_per_kind() -> None:
    survival = model()
    assert survival.quantile(VIDEO, 0.5) == pytest.approx(120.0)
    assert survival.quantile(IMAGE, 0.5) == pytest.approx(20.0)
    assert survival.quantile(VIDEO, 0.9) > 2 * survival.quantile(VIDEO, 0.5)  # wide: it knows nothing yet
    assert survival.count(VIDEO) == 0


@pytest.mark.parametrize("seconds", [0.0, -5.0, math.nan, math.inf, MAX_DURATION + 1])
def test_absurd_durations_are_ignored(seconds: float) -> None:
    survival = model()
    assert survival.finished(VIDEO, 0.0, seconds, at=T0) is None
    assert survival.count(VIDEO) == 0


def test_the_rows_persisted_carry_the_durations_across_a_restart() -> None:
    survival = model()
    rows = [survival.finished(VIDEO, s, s, at=T0 + s) for s in (70.0, 80.0, 75.0, 90.0)]
    last = rows[-1]
    assert last is not None and (last.key, last.count, last.updated_at) == (VIDEO.text, 4, T0 + 90.0)
    assert last.mean == pytest.approx(77.5, rel=0.05) and 0 < last.spread < 0.5 * last.mean
    restarted = model()
    restarted.restore([last])
    assert restarted.count(VIDEO) == 4  # learned: polls are timed by it at once
    assert restarted.quantile(VIDEO, 0.5) == pytest.approx(last.mean)
    # Once enough tasks finished here, their own sample is read, the restored row only counted.
    for seconds in (200.0, 200.0, 200.0):
        restarted.finished(VIDEO, seconds, seconds, at=T0)
    assert restarted.quantile(VIDEO, 0.5) == pytest.approx(200.0) and restarted.count(VIDEO) == 7


async def test_the_durations_survive_a_restart_through_the_store(tmp_path: Path) -> None:
    path = tmp_path / "framecast.sqlite3"
    key = DurationKey.of("org:video/v2", 1152, 768, 121)  # ':' and '/' in a model name
    survival = model()
    async with await Store.open(path) as store:
        for seconds in (70.0, 80.0, 75.0, 90.0):
            row = survival.finished(key, seconds, seconds, at=T0)
            assert row is not None
            await store.save_duration(row)
    async with await Store.open(path) as store:
        restarted = model()
        restarted.restore(await store.load_durations())
    assert restarted.count(key) == 4
    assert restarted.quantile(key, 0.25) == pytest.approx(survival.quantile(key, 0.25), rel=0.05)


def test_restore_skips_damaged_rows() -> None:
    survival = model()
    good = DurationRow(VIDEO.text, 80.0, 10.0, 4, T0)
    survival.restore(
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
    assert survival.count(VIDEO) == 4 and survival.quantile(VIDEO, 0.5) == pytest.approx(80.0)
    for bucket in range(30, 35):
        assert survival.count(DurationKey("m", "video", bucket)) == 0
