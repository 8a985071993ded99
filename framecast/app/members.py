"""What a member can do: request a video or an image, cancel, retry, again, remix, look at jobs and queues."""

from __future__ import annotations

__all__: list[str] = []
