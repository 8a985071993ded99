"""The poll ladder of tasks without progress: each poll expects to see done the share the first rung did."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framecast.planner.polls import FIRST, TOP, first_rung, ladder_quantile, poll_at
from framecast.planner.tuning import PlannerTuning

THRIFTY_FIRST = PlannerTuning().crowded_rung


def test_the_first_poll_comes_at_the_median_and_each_later_one_halves_what_remains() -> None:
    rungs = [ladder_quantile(polls) for polls in range(4)]
    assert rungs == [0.5, 0.75, 0.875, 0.9375]
    # From a higher rung, each poll sees done as large a share of the rest: 80 %, then 80 % of 20 %.
    assert [ladder_quantile(polls, THRIFTY_FIRST) for polls in range(2)] == pytest.approx(
        [THRIFTY_FIRST, 0.96]
    )


def test_past_the_top_every_poll_waits_for_the_same_high_quantile() -> None:
    assert ladder_quantile(10) == ladder_quantile(100) == TOP < 1.0
    assert ladder_quantile(-1) == ladder_quantile(0)  # nonsense counts start at the bottom


def test_a_quiet_key_starts_at_the_median_and_a_crowded_one_higher() -> None:
    assert first_rung(0.0, THRIFTY_FIRST) == FIRST == 0.5
    assert first_rung(1.0, THRIFTY_FIRST) == first_rung(40.0, THRIFTY_FIRST) == THRIFTY_FIRST
    assert FIRST < first_rung(0.5, THRIFTY_FIRST) < THRIFTY_FIRST
    assert first_rung(-3.0, THRIFTY_FIRST) == FIRST  # nonsense counts are a quiet key


@given(st.floats(allow_nan=False), st.integers(min_value=-5, max_value=50))
def test_every_rung_is_a_quantile_that_never_falls_with_more_polls(waiting: float, polls: int) -> None:
    first = first_rung(waiting, THRIFTY_FIRST)
    assert FIRST <= first <= THRIFTY_FIRST
    q = ladder_quantile(polls, first)
    assert 0.0 < q < 1.0
    assert ladder_quantile(polls + 1, first) >= q


@given(
    st.floats(min_value=0, max_value=1e6),
    st.floats(min_value=-1e6, max_value=2e6),
    st.floats(min_value=0.1, max_value=100),
    st.floats(min_value=1, max_value=10),
)
def test_a_poll_goes_at_its_target_within_the_interval_and_the_longest_gap(
    last: float, target: float, interval: float, times: float
) -> None:
    # One clamp for the plan and the forecast (it had been written three times, and drifted).
    at = poll_at(last, target, interval=interval, max_interval=times * interval)
    assert last + interval <= at <= last + times * interval + 1e-6
    if last + interval <= target <= last + times * interval:
        assert at == target
