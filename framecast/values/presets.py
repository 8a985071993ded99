"""The choices members get for /video and /image: presets, never free numbers.

Defaults follow the service's sample request (1152x768, 121 frames at 24 fps, about 5 s). No video
preset exceeds the 720p class (1280 x 720 = 921,600 pixels), the service's output ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_VIDEO_PIXELS = 1280 * 720


@dataclass(frozen=True)
class SizePreset:
    """A named frame size."""

    key: str
    width: int
    height: int
    label: str

    @property
    def size(self) -> str:
        """The size as the service's `size` string, e.g. ``1024x1024``."""
        return f"{self.width}x{self.height}"


VIDEO_SIZES: dict[str, SizePreset] = {
    p.key: p
    for p in (
        SizePreset("landscape", 1152, 768, "Landscape 3:2 · 1152×768 (default)"),
        SizePreset("widescreen", 1280, 720, "Widescreen 16:9 · 1280×720"),
        SizePreset("portrait", 768, 1152, "Portrait 2:3 · 768×1152"),
        SizePreset("vertical", 720, 1280, "Vertical 9:16 · 720×1280"),
        SizePreset("square", 960, 960, "Square 1:1 · 960×960"),
        SizePreset("small", 768, 512, "Small 3:2 · 768×512 (faster)"),
    )
}
DEFAULT_VIDEO_SIZE = "landscape"

VIDEO_SECONDS: tuple[int, ...] = (3, 5, 8)
DEFAULT_VIDEO_SECONDS = 5
FRAME_RATES: tuple[int, ...] = (16, 24, 30)
DEFAULT_FRAME_RATE = 24

IMAGE_SIZES: dict[str, SizePreset] = {
    p.key: p
    for p in (
        SizePreset("square", 1024, 1024, "Square 1:1 · 1024×1024 (default)"),
        SizePreset("landscape", 1152, 768, "Landscape 3:2 · 1152×768"),
        SizePreset("portrait", 768, 1152, "Portrait 2:3 · 768×1152"),
        SizePreset("widescreen", 1280, 720, "Widescreen 16:9 · 1280×720"),
        SizePreset("vertical", 720, 1280, "Vertical 9:16 · 720×1280"),
    )
}
DEFAULT_IMAGE_SIZE = "square"

assert all(p.width * p.height <= MAX_VIDEO_PIXELS for p in VIDEO_SIZES.values())


def num_frames(seconds: int, frame_rate: int) -> int:
    """Frames for a clip of `seconds` at `frame_rate` (the sample: 5 s at 24 fps is 121 frames)."""
    return seconds * frame_rate + 1
