"""The poll ladder of tasks without progress: from its first rung up, then held at the top."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from framecast.planner.ladder import FIRST, first_rung, ladder_quantile, poll_at, top_after
from framecast.planner.tuning import PlannerTuning

THRIFTY_FIRST = PlannerTuning().crowded_rung


def test_the_first_poll_comes_at_the_median_and_each_later_one_higher() -> None:
    rungs = [ladder_quantile(polls) for polls in range(top_after() + 1)]
    assert rungs[0] == 0.5
    assert all(low < high for low, high in zip(rungs, rungs[1:], strict=False))


def test_past_the_top_every_poll_waits_for_the_same_high_quantile() -> None:
    top = ladder_quantile(top_after())
    assert 0.9 <= top < 1.0
    assert ladder_quantile(top_after() + 1) == ladder_quantile(100) == top
    assert ladder_quantile(-1) == ladder_quantile(0)  # nonsense counts start at the bottom


def test_a_quiet_key_starts_at_the_median_and_a_crowded_one_higher() -> None:
    assert first_rung(0.0, THRIFTY_FIRST) == FIRST == 0.5
    assert first_rung(1.0, THRIFTY_FIRST) == first_rung(40.0, THRIFTY_FIRST) == THRIFTY_FIRST
    assert FIRST < first_rung(0.5, THRIFTY_FIRST) < THRIFTY_FIRST
    assert first_rung(-3.0, THRIFTY_FIRST) == FIRST  # nonsense counts are a quiet key


def test_a_ladder_from_a_higher_rung_reaches_the_same_top_in_fewer_polls() -> None:
    assert top_after(THRIFTY_FIRST) < top_after(FIRST)
    assert ladder_quantile(top_after(THRIFTY_FIRST), THRIFTY_FIRST) == ladder_quantile(top_after())
    assert ladder_quantile(0, THRIFTY_FIRST) == THRIFTY_FIRST


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
    # One clamp for the plan and the forecast (issue 34: it was written three times).
    at = poll_at(last, target, interval=interval, max_interval=times * interval)
    assert last + interval <= at <= last + times * interval + 1e-6
    if last + interval <= target <= last + times * interval:
        assert at == target
