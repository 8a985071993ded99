"""What the application needs of the chat side, and what it gives it to deliver jobs with."""

from __future__ import annotations

__all__: list[str] = []
