"""Discord's per-file upload limits, and the size a result should aim at.

The runner asks :meth:`DiscordReporter.upload_limit` before fitting a result and again after every
"too large" refusal (HTTP 413); the numbers behind both answers live here.
"""

from __future__ import annotations

__all__ = ["DEFAULT_UPLOAD_LIMIT", "KNOWN_LIMITS", "UPLOAD_SLACK", "aim", "limit_below"]

MiB = 1024 * 1024
#: Discord's per-file limit without boosts (also for interaction responses and webhooks).
DEFAULT_UPLOAD_LIMIT = 10 * MiB
#: Multipart framing and rounding: a file aims this far under the advertised limit.
UPLOAD_SLACK = 8 * 1024
#: Per-file limits Discord uses (boost tiers, the default, older defaults), largest first.
KNOWN_LIMITS = tuple(mib * MiB for mib in (500, 100, 50, 25, 10, 8))
#: The smallest size ever aimed at.
_FLOOR = 1024


def limit_below(refused: int) -> int:
    """The size to aim at after a file of `refused` bytes was refused as too large.

    The next limit Discord is known to use clearly below what failed (a little under it), or half
    of what failed when no known limit is below.
    """
    for known in KNOWN_LIMITS:
        if known < refused * 0.95:
            return known - 64 * 1024
    return refused // 2


def aim(advertised: int, refused: int | None = None) -> int:
    """The largest file to send where `advertised` is the limit, after a refusal of `refused` bytes.

    Never above what the destination advertises now (less the slack); after a refusal also never
    above :func:`limit_below` of it (the destination's real limit is lower than advertised).
    """
    limit = max(_FLOOR, advertised - UPLOAD_SLACK)
    if refused is not None:
        limit = min(limit, limit_below(refused))
    return limit
