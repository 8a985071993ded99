"""Charts drawn on the server as SVG geometry (no script, no inline style: the CSP allows neither).

:func:`day_bars` turns a server's jobs a day into bars the dashboard template draws as ``<rect>``s.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from framecast.app import DayCount

__all__ = ["Bar", "DayChart", "day_bars"]

#: The chart's drawing area (SVG user units; the page scales it).
WIDTH, HEIGHT = 600, 160


@dataclass(frozen=True)
class Bar:
    """One day's stacked bar: images at the bottom, videos above; its label and title."""

    x: float
    width: float
    image_y: float
    image_height: float
    video_y: float
    video_height: float
    label: str
    title: str


@dataclass(frozen=True)
class DayChart:
    """The bars and the busiest day's total (the scale)."""

    bars: tuple[Bar, ...]
    peak: int
    width: int = WIDTH
    height: int = HEIGHT


def day_bars(days: Sequence[DayCount]) -> DayChart:
    """The stacked bars of `days` (oldest first) scaled to the busiest day."""
    peak = max((d.videos + d.images for d in days), default=0)
    if not days:
        return DayChart((), 0)
    step = WIDTH / len(days)
    scale = HEIGHT / peak if peak else 0.0
    bars = []
    for i, day in enumerate(days):
        image_h, video_h = day.images * scale, day.videos * scale
        label = time.strftime("%m-%d", time.gmtime(day.day))
        bars.append(
            Bar(
                x=round(i * step + 1, 2),
                width=round(max(step - 2, 1), 2),
                image_y=round(HEIGHT - image_h, 2),
                image_height=round(image_h, 2),
                video_y=round(HEIGHT - image_h - video_h, 2),
                video_height=round(video_h, 2),
                label=label,
                title=f"{label}: {day.videos} videos, {day.images} images",
            )
        )
    return DayChart(tuple(bars), peak)
