"""Durations from the recent tasks, the ones still running included (product-limit estimate)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from framecast.planner.survival import Survival, product_limit_quantile


def test_without_running_tasks_it_is_the_plain_quantile() -> None:
    assert product_limit_quantile([60.0, 90.0, 120.0, 150.0], [], 0.5) == 90.0
    assert product_limit_quantile([60.0, 90.0, 120.0, 150.0], [], 0.75) == 120.0


def test_the_first_to_finish_of_a_batch_do_not_pass_for_the_median() -> None:
    # Sixteen videos created together, 60-180 s: at 95 s the three shortest have finished and the
    # other thirteen were seen pending at 90 s. Finished tasks alone say "median 74 s".
    finished, pending = [67.0, 74.0, 81.0], [90.0] * 13
    assert product_limit_quantile(finished, [], 0.5) == 74.0
    assert product_limit_quantile(finished, pending, 0.5) is None  # beyond 90 s: not known yet
    survival = Survival()
    for seconds in finished:
        survival.finished("video", seconds)
    assert survival.quantile("video", 0.5, pending) == (None, 90.0)  # the floor: the largest age seen


def test_a_batch_drawn_uniformly_gives_its_median_long_before_it_ends() -> None:
    # 40 tasks of 60-180 s started together, looked at after 130 s: each finished one with its
    # duration, each running one seen pending at 130 s. The estimate is the batch's own median,
    # where the finished ones alone (the short ones) say much less.
    rng = random.Random(7)
    durations = sorted(rng.uniform(60, 180) for _ in range(40))
    assert durations[19] < 130
    finished = [d for d in durations if d <= 130]
    pending = [130.0 for d in durations if d > 130]
    assert product_limit_quantile(finished, pending, 0.5) == durations[19]
    assert product_limit_quantile(finished, [], 0.5) < durations[19] - 10  # type: ignore[operator]


def test_it_keeps_only_the_recent_durations() -> None:
    survival = Survival(keep=4)
    for seconds in (300.0, 300.0, 300.0, 300.0, 60.0, 60.0, 60.0):
        survival.finished("video", seconds)
    assert survival.count("video") == 4
    assert survival.quantile("video", 0.5, []) == (60.0, 300.0)
    assert survival.count("image") == 0 and survival.quantile("image", 0.5, []) == (None, 0.0)


@given(
    st.lists(st.floats(1, 1000), min_size=1, max_size=40),
    st.lists(st.floats(1, 1000), max_size=40),
    st.floats(0.05, 0.95),
)
def test_the_estimate_lies_within_what_was_seen_and_grows_with_q(
    finished: list[float], pending: list[float], q: float
) -> None:
    got = product_limit_quantile(finished, pending, q)
    if got is not None:
        assert min(finished) <= got <= max(finished)
        higher = product_limit_quantile(finished, pending, min(0.99, q + 0.04))
        assert higher is None or higher >= got
    # Running tasks only ever push it later: a task seen pending at t takes longer than t.
    alone = product_limit_quantile(finished, [], q)
    assert alone is not None and (got is None or got >= alone)
