"""The web server: aiohttp on ``HTTP_HOST:WEB_PORT``, behind the operator's reverse proxy (TLS).

Every answer carries the security headers (:data:`SECURITY_HEADERS`): a Content-Security-Policy
without inline scripts (no script at all is needed: the pages work without JavaScript), no
framing, no sniffing, no referrer off the site, and no caching of pages made for one person.
Requests are capped (head and body sizes) and nothing is logged per request.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import jinja2
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from framecast.app import WebCases
from web.oauth import DiscordOAuth, OAuthEndpoints
from web.signing import Signer

__all__ = [
    "DISCORD_MEDIA",
    "SECURITY_HEADERS",
    "SERVER_KEY",
    "WebConfig",
    "WebServer",
    "security_headers_for",
]

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
#: The largest request body (a dashboard form).
MAX_BODY = 64 * 1024

#: Where Discord serves attachments (a result's video plays from there; its link is fetched fresh).
DISCORD_MEDIA = ("https://cdn.discordapp.com", "https://media.discordapp.net")


def security_headers_for(media: tuple[str, ...] = DISCORD_MEDIA) -> dict[str, str]:
    """The headers every answer carries: no script at all, styles from this site, media from Discord."""
    sources = " ".join(media)
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'self'; img-src 'self' {sources}; media-src 'self' {sources}; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "same-origin",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cache-Control": "no-store",
    }


#: Sent with every answer (Discord's own media origins).
SECURITY_HEADERS = security_headers_for()
_HEADERS_KEY: web.AppKey[dict[str, str]] = web.AppKey("headers", dict)
#: When each kind of dependency failure (by type name) was last logged as a WARNING: once a minute,
#: not once a page view (the outage itself is the store's or the directory's to report).
_FAILING_KEY: web.AppKey[dict[str, float]] = web.AppKey("failing", dict)
_WARN_EVERY = 60.0


@dataclass(frozen=True)
class WebConfig:
    """What the web edge is configured with (from ``Settings``: ``bot.py`` builds it)."""

    host: str
    port: int
    base_url: str
    client_id: str
    client_secret: str
    session_secret: str
    #: ``DISCORD_API_BASE_URL`` (None: Discord's own).
    discord_api: str | None = None

    @property
    def media_origins(self) -> tuple[str, ...]:
        """Where results play from: Discord's CDN, or (``DISCORD_API_BASE_URL`` set) that host."""
        if self.discord_api is None:
            return DISCORD_MEDIA
        parts = urlsplit(self.discord_api)
        return (f"{parts.scheme}://{parts.netloc}",)

    @property
    def redirect_uri(self) -> str:
        """Where Discord sends the browser back after login (the application's OAuth2 Redirect)."""
        return f"{self.base_url}/login/callback"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _MalformedRequests(logging.Filter):
    """aiohttp logs a request it cannot parse (a header over the size cap, a bad ``Content-Length``)
    at ERROR, its traceback quoting the offending bytes: a cookie's, a session token. Anyone can send
    one, so it is one DEBUG line naming the kind, nothing quoted (and nothing at INFO)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.msg, record.args = "web: a malformed request was refused (%s)", (type(exc).__name__,)
        record.exc_info, record.exc_text = None, None
        return log.isEnabledFor(logging.DEBUG)


#: The web server's own account of its requests (aiohttp's), without what malformed ones quote.
_requests_log = logging.getLogger("web.requests")
_requests_log.addFilter(_MalformedRequests())


def _utc(epoch: float, fmt: str = "%Y-%m-%d %H:%M UTC") -> str:
    """An epoch time as UTC text (the templates' ``utc`` filter; no script converts it locally)."""
    return time.strftime(fmt, time.gmtime(epoch))


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every answer, errors included, carries :data:`SECURITY_HEADERS`."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        response = exc
    except Exception as exc:  # a dependency gone (the database, Discord): one line an outage, no traceback
        name, now, warned = type(exc).__name__, time.monotonic(), request.app.get(_FAILING_KEY, {})
        quiet = now - warned.get(name, -math.inf) < _WARN_EVERY
        (log.debug if quiet else log.warning)("web: %s answering %s", name, request.path)
        if not quiet:
            warned[name] = now
        response = web.HTTPServiceUnavailable(
            text="Something is unavailable just now; try again in a moment."
        )
    for name, value in request.app.get(_HEADERS_KEY, SECURITY_HEADERS).items():
        response.headers.setdefault(name, value)
    if request.path.startswith("/static/"):
        response.headers["Cache-Control"] = "public, max-age=3600"
    return response


class WebServer:
    """The web pages, started and stopped by ``bot.py``."""

    def __init__(self, cases: WebCases, config: WebConfig, routes: Callable[[web.Application], None]) -> None:
        """`routes` registers the pages' handlers (:func:`web.pages.add_routes`); a handler finds this
        server on its request's application (:data:`SERVER_KEY`)."""
        self.cases = cases
        self._routes = routes
        self.config = config
        self.signer = Signer(config.session_secret)
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every value is text unless a template says otherwise (none does)
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["utc"] = _utc
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.oauth: DiscordOAuth | None = None

    def __repr__(self) -> str:
        return f"<WebServer {self.config.host}:{self.port}>"

    @property
    def port(self) -> int:
        """The bound port once started (the real one for port 0), else the configured one."""
        if self._runner is not None:
            for site in self._runner.sites:
                server = getattr(site, "_server", None)
                sockets = getattr(server, "sockets", None)
                if sockets:
                    return int(sockets[0].getsockname()[1])
        return self.config.port

    def app(self) -> web.Application:
        """The aiohttp application: the routes given, the security headers and the static files."""
        app = web.Application(client_max_size=MAX_BODY, middlewares=[security_headers])
        app[_HEADERS_KEY] = security_headers_for(self.config.media_origins)
        app[_FAILING_KEY] = {}
        app[SERVER_KEY] = self
        self._routes(app)
        app.router.add_static("/static", HERE / "static", append_version=False)
        return app

    async def start(self) -> None:
        """Listen on ``HTTP_HOST:WEB_PORT``. Raises :class:`OSError` when the port cannot be had."""
        self._session = aiohttp.ClientSession()
        self.oauth = DiscordOAuth(
            self._session,
            OAuthEndpoints.for_api(self.config.discord_api),
            client_id=self.config.client_id,
            client_secret=self.config.client_secret,
        )
        runner = web.AppRunner(
            self.app(),
            access_log=None,
            logger=_requests_log,
            max_line_size=8190,
            max_field_size=8190,
            shutdown_timeout=2.0,
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, self.config.host, self.config.port, backlog=512).start()
        except OSError:
            await runner.cleanup()
            await self._session.close()
            raise
        self._runner = runner
        log.info("web pages on %s:%d (%s)", self.config.host, self.port, self.config.base_url)

    async def close(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


#: Where a handler finds the :class:`WebServer` its request reached (:func:`web.requests.server_of`).
SERVER_KEY: web.AppKey[WebServer] = web.AppKey("server", WebServer)
