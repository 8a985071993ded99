"""The one backoff rule: exponential, capped, with jitter.

Every retry loop in Framecast (service requests, deferred creates, the request budget's pause
after 429s, Discord deliveries, reaching Discord at start-up) takes its delays from here, so the
rule is written once.
"""

from __future__ import annotations

import random

__all__ = ["Backoff", "backoff_delay"]


def backoff_delay(
    attempt: int, *, base: float, cap: float, jitter: float = 0.5, rng: random.Random | None = None
) -> float:
    """The wait before retry number `attempt` (1 for the first retry).

    ``base * 2 ** (attempt - 1)``, at most `cap`; then the top `jitter` fraction of it is drawn at
    random (``jitter=0.5``: between half and all of it; ``0``: exact), so many clients backing off
    together spread out instead of retrying in lockstep.
    """
    if base <= 0 or cap <= 0:
        raise ValueError("base and cap must be > 0")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError("jitter must be between 0 and 1")
    raw = min(float(cap), base * 2.0 ** min(max(attempt, 1) - 1, 60))
    if jitter == 0:
        return raw
    r = rng.random() if rng is not None else random.random()
    return raw * (1.0 - jitter) + raw * jitter * r


class Backoff:
    """A retry loop's state: :meth:`next` gives successive :func:`backoff_delay` values."""

    def __init__(
        self, *, base: float, cap: float, jitter: float = 0.5, rng: random.Random | None = None
    ) -> None:
        backoff_delay(1, base=base, cap=cap, jitter=jitter)  # validate now, not at the first retry
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self._rng = rng
        self.attempt = 0

    def __repr__(self) -> str:
        return f"<Backoff base={self.base:g} cap={self.cap:g} attempt={self.attempt}>"

    def next(self) -> float:
        """The wait before the next attempt (the first call gives the shortest delay)."""
        self.attempt += 1
        return backoff_delay(self.attempt, base=self.base, cap=self.cap, jitter=self.jitter, rng=self._rng)

    def reset(self) -> None:
        """Start again from the shortest delay (after a success)."""
        self.attempt = 0
