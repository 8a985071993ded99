"""Raising the process's soft limit on open files to its hard limit, once at start-up.

Every socket is a file descriptor: Discord's gateway and REST calls, the generation service,
downloads, PostgreSQL, Redis and the operator port all draw from one budget per process. The
common soft limit is 1,024 while the hard limit is usually far higher; a process may raise its
own soft limit up to the hard one without any privilege, so a burst of connections (or a flood on
the operator port) does not leave the bot unable to open the sockets it needs.
"""

from __future__ import annotations

import logging

__all__ = ["raise_fd_limit"]

log = logging.getLogger(__name__)

#: Target when the hard limit is "unlimited", which the kernel refuses as a soft limit.
_UNLIMITED_TARGET = 1 << 20


def raise_fd_limit() -> tuple[int, int] | None:
    """Set the soft ``RLIMIT_NOFILE`` to the hard one; the (before, after) soft limits.

    ``None`` where the platform has no such limit (Windows). Never raises: a refusal is logged
    and the limit left as it was.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover -- not on POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the open-file limit from %d to %d (%s)", soft, target, exc)
        return soft, soft
    log.info("open-file limit raised from %d to %d", soft, target)
    return soft, target
