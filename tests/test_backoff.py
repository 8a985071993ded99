"""framecast.backoff: the one backoff rule (exponential, capped, jittered) and its stateful loop."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framecast.backoff import Backoff, backoff_delay


def test_exact_without_jitter_doubles_then_caps() -> None:
    delays = [backoff_delay(n, base=0.5, cap=5.0, jitter=0) for n in range(1, 8)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_attempts_below_one_count_as_the_first() -> None:
    assert backoff_delay(0, base=2.0, cap=60.0, jitter=0) == 2.0
    assert backoff_delay(-3, base=2.0, cap=60.0, jitter=0) == 2.0


def test_huge_attempt_numbers_stay_at_the_cap() -> None:
    assert backoff_delay(10_000, base=1.0, cap=120.0, jitter=0) == 120.0
    assert 60.0 <= backoff_delay(10**9, base=1.0, cap=120.0) <= 120.0


@given(
    attempt=st.integers(min_value=-5, max_value=200),
    base=st.floats(min_value=1e-3, max_value=100.0),
    cap=st.floats(min_value=1e-3, max_value=1000.0),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_jitter_draws_from_the_top_fraction_of_the_step(
    attempt: int, base: float, cap: float, jitter: float, seed: int
) -> None:
    raw = backoff_delay(attempt, base=base, cap=cap, jitter=0)
    assert 0 < raw <= cap
    delay = backoff_delay(attempt, base=base, cap=cap, jitter=jitter, rng=random.Random(seed))
    assert raw * (1 - jitter) - 1e-9 <= delay <= raw + 1e-9


def test_default_jitter_is_half_the_step() -> None:
    rng = random.Random(5)
    delays = [backoff_delay(3, base=1.0, cap=100.0, rng=rng) for _ in range(500)]
    assert min(delays) >= 2.0 and max(delays) <= 4.0
    assert max(delays) - min(delays) > 1.5  # actually spread over the range, not a constant


def test_extremes_of_the_random_draw() -> None:
    class Fixed(random.Random):
        def __init__(self, value: float) -> None:
            super().__init__(0)
            self.value = value

        def random(self) -> float:
            return self.value

    assert backoff_delay(2, base=1.0, cap=10.0, jitter=0.5, rng=Fixed(0.0)) == 1.0
    assert backoff_delay(2, base=1.0, cap=10.0, jitter=0.5, rng=Fixed(1.0)) == 2.0
    assert backoff_delay(2, base=1.0, cap=10.0, jitter=1.0, rng=Fixed(0.0)) == 0.0


def test_seeded_rng_is_deterministic() -> None:
    first = [backoff_delay(n, base=0.1, cap=30.0, rng=random.Random(42)) for n in range(1, 10)]
    second = [backoff_delay(n, base=0.1, cap=30.0, rng=random.Random(42)) for n in range(1, 10)]
    assert first == second
    one, two = random.Random(9), random.Random(9)
    assert [backoff_delay(4, base=1.0, cap=30.0, rng=one) for _ in range(20)] == [
        backoff_delay(4, base=1.0, cap=30.0, rng=two) for _ in range(20)
    ]


def test_matches_the_equal_jitter_formula_it_replaced() -> None:
    # The budget and the client used raw / 2 + rng.uniform(0, raw / 2); the same draws give the same delays.
    old, new = random.Random(11), random.Random(11)
    for streak in range(12):
        raw = min(120.0, 2.0 * 2 ** min(streak, 30))
        expected = raw / 2 + old.uniform(0, raw / 2)
        assert backoff_delay(streak + 1, base=2.0, cap=120.0, rng=new) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("base", "cap", "jitter"),
    [(0, 1, 0.5), (-1, 1, 0.5), (1, 0, 0.5), (1, -2, 0.5), (1, 1, -0.1), (1, 1, 1.5)],
)
def test_bad_arguments_are_refused(base: float, cap: float, jitter: float) -> None:
    with pytest.raises(ValueError):
        backoff_delay(1, base=base, cap=cap, jitter=jitter)
    with pytest.raises(ValueError):
        Backoff(base=base, cap=cap, jitter=jitter)  # at construction, not at the first retry


def test_backoff_steps_through_the_delays_and_resets() -> None:
    backoff = Backoff(base=0.25, cap=2.0, jitter=0)
    assert backoff.attempt == 0
    assert [backoff.next() for _ in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert backoff.attempt == 6
    backoff.reset()
    assert backoff.attempt == 0
    assert backoff.next() == 0.25


def test_backoff_with_a_seeded_rng_matches_the_function() -> None:
    backoff = Backoff(base=1.0, cap=60.0, rng=random.Random(3))
    rng = random.Random(3)
    expected = [backoff_delay(n, base=1.0, cap=60.0, rng=rng) for n in range(1, 9)]
    assert [backoff.next() for _ in range(8)] == expected


def test_backoff_repr_names_its_state() -> None:
    backoff = Backoff(base=0.5, cap=30.0)
    backoff.next()
    assert repr(backoff) == "<Backoff base=0.5 cap=30 attempt=1>"
