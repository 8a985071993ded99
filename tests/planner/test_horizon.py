"""The key's requests window by window: where a new task's requests would land (``policy.peak_with``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from framecast.planner.policy import peak_with

WINDOW = 60.0


def test_a_window_counts_the_new_requests_with_the_planned_ones_around_them() -> None:
    planned = [(100.0, 2.0), (130.0, 2.0), (200.0, 2.0)]
    # The new poll at 140 shares a window with the two at 100 and 130, not with the one at 200.
    assert peak_with(planned, [(140.0, 1.0)], window=WINDOW, start=0.0) == 5.0


def test_windows_that_hold_none_of_the_new_requests_do_not_count() -> None:
    planned = [(10.0, 16.0)]  # a full window early on
    assert peak_with(planned, [(200.0, 1.0)], window=WINDOW, start=0.0) == 1.0


def test_windows_starting_before_start_are_the_past() -> None:
    planned = [(5.0, 10.0), (50.0, 3.0)]
    assert peak_with(planned, [(60.0, 1.0)], window=WINDOW, start=0.0) == 14.0  # [5, 65) holds all
    assert peak_with(planned, [(60.0, 1.0)], window=WINDOW, start=20.0) == 4.0  # from 20: 50 and 60


@given(
    st.lists(st.tuples(st.floats(0, 600), st.floats(0, 4)), max_size=30),
    st.lists(st.tuples(st.floats(0, 600), st.floats(0.5, 4)), min_size=1, max_size=4),
)
def test_the_peak_is_the_fullest_window_holding_a_new_request(
    planned: list[tuple[float, float]], added: list[tuple[float, float]]
) -> None:
    every = [*planned, *added]
    # Brute force over a fine grid of window starts.
    best = 0.0
    for step in range(0, 6600):
        s = step / 10
        if not any(s <= t < s + WINDOW for t, _ in added):
            continue
        best = max(best, sum(n for t, n in every if s <= t < s + WINDOW))
    assert peak_with(planned, added, window=WINDOW, start=0.0) >= best - 1e-9
    assert peak_with(planned, added, window=WINDOW, start=0.0) <= sum(n for _, n in every) + 1e-9
