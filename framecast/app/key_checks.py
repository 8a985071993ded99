"""How often a server may have a typed API key checked: a few times an hour.

Each ``/settings key set`` asks the generation service once (a model-list call). Without a limit an
admin, or a stolen admin account, could make the bot ask the service about key after key, as fast
as Discord lets them type. :class:`KeyCheckThrottle` counts each server's checks in a sliding hour.

It lives in memory, per process: every interaction of a server reaches the process that runs its
shard, so the count is the server's whole count (a restart forgets it, which costs at most one
more hour's checks).
"""

from __future__ import annotations

from collections import deque

from framecast.clock import Clock

__all__ = ["KEY_CHECKS_PER_HOUR", "KEY_CHECK_WINDOW", "KeyCheckThrottle"]

#: Key checks a server may make per hour. It trades an admin who mistypes a key (five tries, then
#: a wait of up to an hour) against what a hostile admin can make the bot send the service with
#: keys that are not the bot's: at most five requests an hour per server, whatever they type.
KEY_CHECKS_PER_HOUR = 5
#: The window the checks are counted in (seconds).
KEY_CHECK_WINDOW = 3600.0


class KeyCheckThrottle:
    """Each server's key checks in the last :data:`KEY_CHECK_WINDOW` seconds, at most `limit`."""

    def __init__(
        self, clock: Clock, *, limit: int = KEY_CHECKS_PER_HOUR, window: float = KEY_CHECK_WINDOW
    ) -> None:
        if limit < 1 or window <= 0:
            raise ValueError("limit must be at least 1 and window positive")
        self._clock = clock
        self.limit = limit
        self.window = window
        self._checks: dict[int, deque[float]] = {}

    def __repr__(self) -> str:
        return f"<KeyCheckThrottle limit={self.limit} window={self.window:g} servers={len(self._checks)}>"

    def take(self, guild_id: int) -> float | None:
        """Count a check for `guild_id` now; None when it may go ahead, else when it next may
        (epoch seconds: the oldest check in the window leaves it then)."""
        now = self._clock.time()
        checks = self._checks.setdefault(guild_id, deque())
        while checks and checks[0] <= now - self.window:
            checks.popleft()
        if len(checks) >= self.limit:
            return checks[0] + self.window
        checks.append(now)
        self._forget_quiet(now)
        return None

    def _forget_quiet(self, now: float) -> None:
        # Servers whose checks all left the window are dropped, so the map stays small.
        if len(self._checks) > 1024:
            for guild_id in [g for g, c in self._checks.items() if not c or c[-1] <= now - self.window]:
                del self._checks[guild_id]
