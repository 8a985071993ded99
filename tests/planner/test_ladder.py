"""The poll ladder of tasks without progress: from the median up, then held at the top."""

from __future__ import annotations

from framecast.planner.ladder import TOP_AFTER, ladder_quantile


def test_the_first_poll_comes_at_the_median_and_each_later_one_higher() -> None:
    rungs = [ladder_quantile(polls) for polls in range(TOP_AFTER + 1)]
    assert rungs[0] == 0.5
    assert all(low < high for low, high in zip(rungs, rungs[1:], strict=False))


def test_past_the_top_every_poll_waits_for_the_same_high_quantile() -> None:
    top = ladder_quantile(TOP_AFTER)
    assert 0.9 <= top < 1.0
    assert ladder_quantile(TOP_AFTER + 1) == ladder_quantile(100) == top
    assert ladder_quantile(-1) == ladder_quantile(0)  # nonsense counts start at the bottom
