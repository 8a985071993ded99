"""The words a person's own queue reads (user installs: DMs, group DMs, servers without the bot).

A personal queue is nobody's server: its messages speak of "your jobs" and "your queue", never of
"this server". Each message a personal queue can show that names a server has its personal twin
here; :func:`place_key` picks one of the two, and is the only place that choice is made.
"""

from __future__ import annotations

__all__ = ["PERSONAL_KEYS", "place_key"]

#: A server's message key -> the same message for a person's own queue.
PERSONAL_KEYS: dict[str, str] = {
    "error_job_not_found": "error_job_not_found_personal",
    "error_guild_queue_full": "error_queue_full_personal",
    "settings_refuse_quota_video": "settings_refuse_quota_video_personal",
    "settings_refuse_quota_image": "settings_refuse_quota_image_personal",
    "error_misconfigured": "error_misconfigured_personal",
    "status_queued": "status_queued_personal",
    "note_reencoded": "note_reencoded_personal",
    "note_too_large": "note_too_large_personal",
    "reason_auth": "reason_auth_personal",
    "history_not_allowed": "history_not_allowed_personal",
    "style_error_unknown": "style_error_unknown_personal",
}


def place_key(key: str, *, personal: bool) -> str:
    """`key`, or its personal twin when the message is for a person's own queue."""
    return PERSONAL_KEYS.get(key, key) if personal else key
