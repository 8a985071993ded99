"""The nonce of each message the bot posts for a job, so that posting it again posts nothing new.

A post whose answer is lost (a connection reset, a 5xx after Discord stored it) or whose bot dies
before it records the new message is posted again: by the job's worker, or by the restarted bot.
Discord deduplicates a create with ``enforce_nonce`` (discord.py sends it with every nonce): a
message created by the same author with the same nonce "in the past few minutes" is returned
instead of a new one. discord.py's own nonce is random per call, which only covers its own retries;
ours is derived from the job and from which message it is, so our retries are covered too. Each
intended message has its own: the job's n-th channel message (a move; a later move, after that one
was deleted or got too old, is another message) and its one mention of the requester.

Past Discord's few minutes (a restart after a long downtime) a retry posts a new message.
"""

from __future__ import annotations

import hashlib

__all__ = ["message_nonce"]

#: Discord's longest string nonce.
_MAX_LENGTH = 25


def message_nonce(job_id: int, what: str) -> str:
    """The nonce of job `job_id`'s message `what` (e.g. ``"move0"``, ``"ping"``): the same every time.

    Readable (``fc42-move0``) when it fits Discord's 25 characters; else a digest of that text.
    """
    nonce = f"fc{job_id}-{what}"
    if len(nonce) <= _MAX_LENGTH:
        return nonce
    return "fc" + hashlib.blake2b(nonce.encode(), digest_size=11).hexdigest()
