"""The delivery's timing knobs (from configuration; ``bot.py`` fills them in)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeliveryTimings"]


@dataclass(frozen=True)
class DeliveryTimings:
    """When a job's message is edited, and when it moves."""

    #: Seconds before its expiry that an interaction token stops being used for the job's message.
    token_margin: float
    #: Age in seconds after which a channel message is posted afresh (Discord stops edits at an hour).
    status_message_max_age: float
    #: The least time between two edits of one job's message.
    edit_interval: float
    #: The service's poll timeout (a running job's message shows it as the latest end).
    poll_timeout: float
