"""What a server admin can do: show and change the server's settings, set and remove its own API key."""

from __future__ import annotations

__all__: list[str] = []
