"""A server's key checks (framecast.app.key_checks): a few an hour, each server on its own."""

from __future__ import annotations

import pytest

from framecast.app.key_checks import KEY_CHECK_WINDOW, KEY_CHECKS_PER_HOUR, KeyCheckThrottle
from tests.fakes.clock import ManualClock

GUILD, OTHER = 1, 2


async def test_a_few_checks_an_hour_per_server_then_the_oldest_leaving_frees_one() -> None:
    clock = ManualClock()
    throttle = KeyCheckThrottle(clock)
    assert (throttle.limit, throttle.window) == (KEY_CHECKS_PER_HOUR, KEY_CHECK_WINDOW) == (5, 3600.0)
    first = clock.time()
    for _ in range(KEY_CHECKS_PER_HOUR):
        assert throttle.take(GUILD) is None
        await clock.advance(60)
    assert throttle.take(GUILD) == first + KEY_CHECK_WINDOW  # when the oldest check leaves the hour
    assert throttle.take(OTHER) is None  # another server counts on its own
    await clock.advance(first + KEY_CHECK_WINDOW - clock.time())
    assert throttle.take(GUILD) is None  # the oldest left: one more
    assert throttle.take(GUILD) is not None  # and no more until the next leaves


def test_the_throttle_refuses_nonsense_knobs() -> None:
    with pytest.raises(ValueError):
        KeyCheckThrottle(ManualClock(), limit=0)
    with pytest.raises(ValueError):
        KeyCheckThrottle(ManualClock(), window=0)
