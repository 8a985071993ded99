"""Typed reasons the core reports: why a job failed, and notes about a delivery.

The core never builds message keys; the Discord side maps each member of these enums to the
text a member reads (``cogs/views/render.py``). They are ``StrEnum``s so they persist as plain
text in the job store (``error_code``) and compare equal to the strings stored before.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ErrorCode", "Note"]


class ErrorCode(StrEnum):
    """Why a job failed (``Job.error_code``; ``ServiceError.code``)."""

    SERVICE_ERROR = "service_error"
    AUTH = "auth"
    RATE_LIMITED = "rate_limited"
    REJECTED = "rejected"
    UNAVAILABLE = "unavailable"
    BAD_RESPONSE = "bad_response"
    TASK_FAILED = "task_failed"
    TIMEOUT = "timeout"
    DOWNLOAD_FAILED = "download_failed"
    DOWNLOAD_TOO_LARGE = "download_too_large"
    RESULT_REFUSED = "result_refused"
    NOT_MEDIA = "not_media"
    MEDIA_TOO_LARGE = "media_too_large"
    INTERNAL = "internal"
    GUILD_KEY_REJECTED = "guild_key_rejected"  # the server's own API key was refused (401)
    KEY_REMOVED = "key_removed"  # the server key that created the task was removed before it finished
    GUILD_KEY_UNREADABLE = "guild_key_unreadable"  # the server's stored key cannot be decrypted here
    MODEL_GONE = "model_gone"  # the member's model is no longer offered (detail: the models offered now)
    CHANNEL_GONE = "channel_gone"  # its channel or thread was deleted, or the bot left the server

    @classmethod
    def parse(cls, value: str | None) -> ErrorCode:
        """The code stored in a job (``None`` or an unknown value reads as :attr:`INTERNAL`)."""
        try:
            return cls(value) if value is not None else cls.INTERNAL
        except ValueError:
            return cls.INTERNAL


class Note(StrEnum):
    """Something the member should know about a job's message."""

    RESUMED = "resumed"  # the bot restarted and the job continues
    REENCODED = "reencoded"  # the file was re-encoded to fit the upload limit
    TOO_LARGE = "too_large"  # no file fits: the service's link is posted instead
    WAITS_IN_JOB = "waits_in_job"  # the chat refused the file where the message is: /job hands it over
