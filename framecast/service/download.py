"""Fetching a result the service names, from where :mod:`~framecast.service.netguard` allows.

The service's own origin gets the API key and goes through the budget. Any other host gets
neither, and is reached only through a session of its own whose connector resolves names with
:class:`~framecast.service.netguard.GuardedResolver`: only public addresses, or hosts the operator
listed in ``GEN_RESULT_HOSTS``, are ever connected to. Redirects are followed by hand, each hop
checked like the first URL. Retries and backoff are the transport's (:meth:`Transport.retrying`).
Every request of a download, each redirect hop and each host included, is counted in the metrics as
:attr:`~framecast.values.service_requests.RequestKind.DOWNLOAD`.

A download must keep moving (:func:`stall_rule`, checked by the body's reader: ``pace`` of
:func:`~framecast.service.body.read_body`): one that stalls fails early, instead of holding one of
the results slots (``RESULTS_AT_ONCE``: :meth:`framecast.jobs.fitting.ResultFitter.held`) until its
total timeout while every server's finished results wait behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver

from framecast.safetext import clean_text
from framecast.service.body import ACCEPT_ENCODING, BodyStalled, BodyTooLarge
from framecast.service.errors import (
    AuthError,
    DownloadError,
    DownloadTooLarge,
    DownloadUnavailable,
    UnsafeResultURL,
)
from framecast.service.netguard import (
    REASON_BAD_URL,
    REASON_INTERNAL,
    REASON_TOO_MANY_REDIRECTS,
    GuardedResolver,
    RefusedAddress,
    normalize_host,
    refusal_before_connecting,
)
from framecast.service.transport import Answer, Gate, Retry, Transport
from framecast.values.service_requests import Priority, RequestKind

__all__ = ["STALL_MIN_RATE", "STALL_SHARE", "STALL_WINDOW", "ResultFetcher", "stall_rule"]

log = logging.getLogger(__name__)

_Origin = tuple[str, str, int | None]

# The minimum progress of a download, curl's --speed-limit/--speed-time: a body that brings fewer
# than STALL_MIN_RATE bytes a second, on average over a window of STALL_WINDOW seconds, has stalled
# and fails then (each request alone, its windows counted from its answer's headers). What it
# trades: a stalled result host holds a results slot one window or two (30-60 s) instead of the
# whole GEN_DOWNLOAD_TIMEOUT (300 s), during which every server's finished results wait; in
# exchange a host that sends next to nothing for 30 s fails a download it might have finished.
# 4 KiB/s is far below any useful speed (a 720p clip of a few MB at that speed would not arrive
# within 300 s anyway) and far above a trickle (a byte every 0.3 s is 3 bytes a second); a slow CDN
# at 20 KB/s brings five times the floor. 30 s rides out a host's or a link's pause (a
# retransmission, a CDN fetching from its origin) but not a dead one.
STALL_MIN_RATE = 4096
STALL_WINDOW = 30.0
#: A window is at most this share of the download's total timeout (a 10 s total gets 3.3 s
#: windows): a download allowed a short time must not spend most of it stalled.
STALL_SHARE = 1 / 3


def stall_rule(timeout: float) -> tuple[float, int]:
    """The window (seconds) and the least bytes each window must bring, for a total `timeout`."""
    window = min(STALL_WINDOW, timeout * STALL_SHARE)
    return window, max(1, int(STALL_MIN_RATE * window))


class ResultFetcher:
    """Downloads of result URLs over `transport`, guarded for every host but the service's.

    `result_hosts` are the operator's trusted hosts (``GEN_RESULT_HOSTS``); `max_redirects` bounds
    the redirects of one attempt; `resolver` is the DNS resolver behind the guard (default: the
    system's). The session for foreign hosts is opened on first use and closed by :meth:`close`.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        result_hosts: Iterable[str],
        max_redirects: int,
        resolver: AbstractResolver | None,
    ) -> None:
        self._transport = transport
        self._origin = _origin(yarl.URL(transport.base_url))
        self._result_hosts = tuple(result_hosts)
        self._max_redirects = int(max_redirects)
        self._resolver = resolver
        self._guard: GuardedResolver | None = None
        self._foreign: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        """Close the session for foreign hosts and its resolver, if opened. Safe to call twice."""
        foreign, guard = self._foreign, self._guard
        self._foreign = self._guard = None
        if foreign is not None:
            await foreign.close()
        if guard is not None:
            await guard.close()

    async def download(
        self,
        url: str,
        *,
        max_bytes: int,
        timeout: float,  # noqa: ASYNC109 -- passed to aiohttp as each request's total timeout
        priority: Priority | int,
        gate: Gate | None = None,
    ) -> bytes:
        """Fetch `url`, streaming, at most `max_bytes` bytes after decompression (see the client).

        `gate`: awaited before each request is sent, after its budget slot (see ``Transport.exchange``).
        Each body must keep moving (:func:`stall_rule` of `timeout`), else it fails as stalled.
        """
        try:
            target = yarl.URL(url)
        except (ValueError, TypeError):
            raise self._refuse(REASON_BAD_URL) from None

        async def attempt() -> bytes | Retry:
            return await self._attempt(target, max_bytes, timeout, priority, gate)

        return await self._transport.retrying("download", attempt)

    async def _attempt(
        self,
        url: yarl.URL,
        max_bytes: int,
        timeout: float,
        priority: Priority | int,  # noqa: ASYNC109
        gate: Gate | None = None,
    ) -> bytes | Retry:
        """One attempt, redirects followed: the bytes, or a :class:`Retry`."""
        transport = self._transport
        hops = 0
        while True:
            same_origin = _origin(url) == self._origin
            if same_origin and (url.raw_user is not None or url.raw_password is not None):
                # The key is the service's credential: aiohttp refuses to send it along with
                # credentials in the URL (a ValueError, not a failed download), so drop those.
                url = url.with_user(None)
            if not same_origin:
                reason = refusal_before_connecting(url, self._result_hosts)
                if reason is not None:
                    raise self._refuse(reason, url)
            answer = await transport.exchange(
                transport.session if same_origin else await self._foreign_session(),
                "GET",
                url,
                headers=transport.headers() if same_origin else {"Accept-Encoding": ACCEPT_ENCODING},
                kind=RequestKind.DOWNLOAD,
                budgeted=same_origin,
                priority=priority,
                timeout=timeout,
                max_bytes=max_bytes,
                gate=gate,
                pace=stall_rule(timeout),
            )
            if answer.timed_out:
                raise DownloadError(f"the download did not finish within {timeout:g} s")
            if isinstance(answer.failure, aiohttp.InvalidURL):
                raise self._refuse(REASON_BAD_URL, url)
            if isinstance(answer.failure, aiohttp.ClientConnectorError) and _refused_by_guard(answer.failure):
                raise self._refuse(REASON_INTERNAL, url)
            if answer.ok:
                if isinstance(answer.unreadable, BodyTooLarge):
                    raise DownloadTooLarge(limit=max_bytes, size=answer.unreadable.size)
                if isinstance(answer.unreadable, BodyStalled):
                    raise DownloadError(answer.unreadable.reason)  # not retried: the host is stuck
                if answer.unreadable is not None:
                    raise DownloadError("the result's compression is broken or unknown")
                if same_origin:
                    transport.budget.reward()
                return answer.body
            if answer.location is None:
                return self._retry(answer, same_origin)
            hops += 1
            if hops > self._max_redirects:
                raise self._refuse(REASON_TOO_MANY_REDIRECTS, url)
            try:
                url = url.join(yarl.URL(answer.location))
            except (ValueError, TypeError):
                raise self._refuse(REASON_BAD_URL, url) from None

    def _retry(self, answer: Answer, same_origin: bool) -> Retry:
        """The :class:`Retry` for a failed download, or the error that ends it."""
        status = answer.status
        if status is not None:
            if status == 401 and same_origin:
                raise AuthError(f"download: the service rejected the API key (HTTP {status})", status=status)
            if status in (401, 403, 404, 410):
                raise DownloadError(
                    f"the result link has expired or is not accessible (HTTP {status})", status=status
                )
            if not (status == 429 or status >= 500 or status == 408):
                raise DownloadError(f"the result could not be downloaded (HTTP {status})", status=status)
        problem = f"HTTP {status}" if status is not None else answer.problem

        def give_up(attempts: int) -> DownloadError:
            return DownloadUnavailable(
                f"the result could not be downloaded after {attempts} attempts ({problem})", status=status
            )

        return Retry(problem, give_up, self._transport.retry_after(answer), answer.penalty)

    async def _foreign_session(self) -> aiohttp.ClientSession:
        # Created on first use (a session wants a running loop) and closed by close(). No proxy
        # from the environment (trust_env=False): the connection must go where the guard looked.
        if self._foreign is None:
            self._guard = GuardedResolver(self._result_hosts, self._resolver)
            connector = aiohttp.TCPConnector(resolver=self._guard, use_dns_cache=False)
            self._foreign = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._foreign

    def _refuse(self, reason: str, url: yarl.URL | None = None) -> UnsafeResultURL:
        # The operator may need the host to fill GEN_RESULT_HOSTS; the error itself names nothing.
        host = clean_text(url.raw_host or "", 100) if url is not None else ""
        log.warning("refused a result link: %s%s", reason, f" (host {host})" if host else "")
        return UnsafeResultURL(reason)


def _refused_by_guard(exc: aiohttp.ClientConnectorError) -> bool:
    """Whether a connection failed because the guard refused every address of the host."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, RefusedAddress) or isinstance(getattr(seen, "os_error", None), RefusedAddress):
            return True
        seen = seen.__cause__
    return False


def _origin(url: yarl.URL) -> _Origin:
    return url.scheme.lower(), normalize_host(url.raw_host or ""), url.port
