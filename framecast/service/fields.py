"""Reading the single values the service sends loosely: a task's progress and ``Retry-After``.

Both are pure and never raise, whatever the value: what cannot be read is unknown (``None``).
"""

from __future__ import annotations

import email.utils
import math
from datetime import UTC
from numbers import Real

__all__ = ["normalize_progress", "parse_retry_after"]


def normalize_progress(value: object) -> float | None:
    """Turn whatever the service sends as ``progress`` into a fraction in ``0..1``, or ``None``.

    Integers are percentages (``45`` -> 0.45); floats in ``0..1`` are fractions and floats above 1
    percentages; strings may be ``"45%"``, ``"0.45"`` or ``"45"`` (read like the number they spell).
    Results are clamped to ``0..1``. ``None``, booleans and anything unreadable give ``None``:
    unknown progress is not zero progress. Never raises, whatever the value (a 400-digit integer
    is simply 100 %).
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _from_percent(value)
    if isinstance(value, Real):
        try:
            return _from_float(float(value))
        except (OverflowError, ValueError, TypeError):
            return None
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 64:  # a progress is never a long text
            return None
        if text.endswith("%"):
            number = _float_or_none(text[:-1].strip())
            return _clamp(number / 100) if number is not None and math.isfinite(number) else None
        try:
            return _from_percent(int(text))
        except ValueError:
            pass
        number = _float_or_none(text)
        return _from_float(number) if number is not None else None
    return None


def _from_percent(value: int) -> float:
    # Compared before dividing: a huge integer divided by 100 overflows a float.
    return 0.0 if value <= 0 else 1.0 if value >= 100 else value / 100


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _from_float(number: float) -> float | None:
    if not math.isfinite(number):
        return None
    return _clamp(number if number <= 1.0 else number / 100)


def _clamp(fraction: float) -> float:
    return min(1.0, max(0.0, fraction))


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date.

    `now` is the current wall-clock time (epoch seconds) that an HTTP date is measured against.
    Returns ``None`` for a missing or unreadable header; never raises.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or len(text) > 100:  # no real header is longer
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        delay = when.timestamp() - now
    except (TypeError, ValueError, IndexError, OverflowError, AttributeError):
        return None
    return max(0.0, delay) if math.isfinite(delay) else None
