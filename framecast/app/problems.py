"""What is wrong with a member's request, typed: the core never builds message keys.

The chat side maps each :class:`IntakeProblem` to a message in the member's language.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = ["IntakeError", "IntakeProblem"]


class IntakeProblem(StrEnum):
    """What is wrong with a request (the chat side words it; see :class:`IntakeError`)."""

    PROMPT_EMPTY = "prompt_empty"  # nothing visible in the prompt
    PROMPT_TOO_LONG = "prompt_too_long"  # params: max, length
    BAD_OPTION = "bad_option"  # params: option (the option's name: size, length, fps)
    MEMBER_LIMIT = "member_limit"  # params: limit; member (user id) when it is another's limit
    GUILD_QUEUE_FULL = "guild_queue_full"  # params: cap
    ALREADY_RETRIED = "already_retried"  # params: job (the failed one), id (its retry)
    UNKNOWN_MODEL = "unknown_model"  # params: model (not even shaped like a model id)
    UNLISTED_MODEL = "unlisted_model"  # params: model, models (the service's list, comma-separated)
    CHANNEL_NOT_ALLOWED = "channel_not_allowed"  # params: channels (the allowed channel ids)
    NSFW_ONLY = "nsfw_only"  # this server generates only in age-restricted channels
    PROMPT_BLOCKED = "prompt_blocked"  # no params: the blocked term is never echoed
    DAILY_QUOTA = "daily_quota"  # params: kind (JobKind), limit, resets_at (epoch seconds); member
    GUILD_KEY_REJECTED = "guild_key_rejected"  # the server's own key was refused; an admin must replace it
    GUILD_KEY_UNREADABLE = "guild_key_unreadable"  # stored key undecryptable: an admin sets it again
    UNKNOWN_STYLE = "unknown_style"  # params: style (as typed): not one of this server's styles
    STYLE_WRONG_KIND = "style_wrong_kind"  # params: style, kind (the request's JobKind)
    STYLED_PROMPT_TOO_LONG = "styled_prompt_too_long"  # params: style, max, length (with the style)


class IntakeError(Exception):
    """A request the member can fix: `problem` says what is wrong, `params` give the details.

    A member's own limit (MEMBER_LIMIT, DAILY_QUOTA) met by someone acting for them (a server
    manager's Retry of their job) carries ``member``, the user id of the member whose limit it is.
    """

    def __init__(self, problem: IntakeProblem, **params: Any) -> None:
        super().__init__(problem.value)
        self.problem = problem
        self.params = params
