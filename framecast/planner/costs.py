"""What a job costs its key, in requests: one owner, read by admission and by the forecast."""

from __future__ import annotations

__all__ = ["IMAGE_REQUESTS", "MIN_REQUESTS_PER_VIDEO"]

#: Requests a video costs at the least: its create, the poll that sees it done, the download.
MIN_REQUESTS_PER_VIDEO = 3.0
#: Requests an image costs: its create and the download of the result the create answered.
IMAGE_REQUESTS = 2.0
