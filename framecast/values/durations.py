"""A learned task duration as the store keeps it (the ``durations`` table), and what it is learned
per (:class:`DurationKey`).

The planner learns durations (:class:`framecast.planner.survival.Survival`) and the store
persists them; the row they exchange sits here, below both, so neither imports the other for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

__all__ = ["DurationKey", "DurationRow", "Kind"]

Kind = Literal["video", "image"]


@dataclass(frozen=True)
class DurationRow:
    """One learned duration as persisted (the ``durations`` table).

    ``mean`` is the typical duration in seconds (the geometric mean, i.e. the median of the fitted
    log-normal); ``spread`` is, in seconds, how far one standard deviation (in log space) reaches
    above it; ``count`` how many observations it rests on; ``updated_at`` when it last learned.
    """

    key: str
    mean: float
    spread: float
    count: int
    updated_at: float


@dataclass(frozen=True)
class DurationKey:
    """What a duration is learned per: the model, the kind, and a coarse bucket of the work.

    ``bucket`` is ``round(log2(units))`` with units the pixels times frames of a video, the pixels
    of an image: buckets double in work, so presets that cost about the same share one.
    """

    model: str
    kind: Kind
    bucket: int

    @property
    def text(self) -> str:
        """The key as stored (``video:27:svc-video-v2.0``; the model last, as it may hold ``:``)."""
        return f"{self.kind}:{self.bucket}:{self.model}"

    @classmethod
    def parse(cls, text: str) -> DurationKey | None:
        """The key from its :attr:`text`, or ``None`` for text that is not one."""
        parts = text.split(":", 2)
        if len(parts) != 3 or parts[0] not in ("video", "image") or not parts[2]:
            return None
        try:
            bucket = int(parts[1])
        except ValueError:
            return None
        kind: Kind = "video" if parts[0] == "video" else "image"
        return cls(parts[2], kind, bucket)

    @classmethod
    def of(cls, model: str, width: int, height: int, frames: int | None) -> DurationKey:
        """The key of a video (``frames`` given) or an image (``frames`` None) of that size."""
        units = max(1, width) * max(1, height) * (max(1, frames) if frames is not None else 1)
        return cls(model, "video" if frames is not None else "image", round(math.log2(units)))

    @classmethod
    def for_params(cls, params: Mapping[str, Any]) -> DurationKey | None:
        """The key of a job from its parameters (``framecast.app.intake``'s shapes), or ``None``:
        videos carry ``width``, ``height``, ``num_frames``; images a ``size`` like ``1024x1024``."""
        model = params.get("model")
        if not isinstance(model, str) or not model:
            return None
        width, height, frames = params.get("width"), params.get("height"), params.get("num_frames")
        if _is_int(width) and _is_int(height) and _is_int(frames):
            return cls.of(model, width, height, frames)
        size = params.get("size")
        if isinstance(size, str):
            w, _, h = size.partition("x")
            if w.isdigit() and h.isdigit():
                return cls.of(model, int(w), int(h), None)
        return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
