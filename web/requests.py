"""What every page reads from its request: the server it reached, who is logged in, their CSRF
token, and who they are in the server of the path; and a page drawn for them.

Who is logged in comes from the session cookie (signed, HttpOnly, Secure, SameSite=Lax) and its row
in the store; who they are in a server comes from the bot's view (:class:`ServerDirectory`), asked on
every request. A form that changes anything carries a CSRF token bound to the session. What a page
says in the reader's language (:func:`say`) is read from the browser's ``Accept-Language``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from framecast.app import DirectoryBusy, DirectoryUnavailable, ServerMember
from web.server import SERVER_KEY, WebServer

__all__ = [
    "SESSION_COOKIE",
    "check_csrf",
    "current_user",
    "decimal",
    "languages",
    "render",
    "require_user",
    "say",
    "server_member",
    "server_of",
]

SESSION_COOKIE = "fc_session"
#: The browser's languages read at most (``Accept-Language`` is the browser's to fill).
_MAX_LANGUAGES = 8


def decimal(text: object, max_digits: int) -> int | None:
    """`text` as a whole number written in ASCII digits only (at most `max_digits` of them), else None.

    Every number a page reads from an address or a form (ids, cursors, limits) goes through here:
    ``str.isdigit`` also says yes to "²", "٣" or "１２", which ``int`` then refuses (an exception the
    page answered as an outage) or reads as another number than the one shown.
    """
    if not isinstance(text, str):
        return None
    text = text.strip()
    if not (0 < len(text) <= max_digits and text.isascii() and text.isdigit()):
        return None
    return int(text)


def languages(request: web.Request) -> tuple[str, ...]:
    """The browser's languages, best first (``Accept-Language``: its tags by quality; ``*``, refused
    ones and anything that is no language tag left out)."""
    ranked: list[tuple[float, str]] = []
    for part in request.headers.get("Accept-Language", "")[:512].split(",")[:32]:
        tag, _, quality = part.strip().partition(";")
        tag = tag.strip()
        try:
            q = float(quality.strip().removeprefix("q=")) if quality else 1.0
        except ValueError:
            continue
        if 0 < q <= 1 and 0 < len(tag) <= 35 and tag.isascii() and tag.replace("-", "").isalnum():
            ranked.append((q, tag))
    ranked.sort(key=lambda pair: -pair[0])  # stable: equal qualities keep the browser's order
    return tuple(tag for _, tag in ranked[:_MAX_LANGUAGES])


def say(request: web.Request, key: str, /, **params: object) -> str:
    """Message `key` (the bot's catalogue, as its Discord replies word it) in the reader's language."""
    return server_of(request).cases.words.words(key, languages(request), **params)


def server_of(request: web.Request) -> WebServer:
    """The web server a request reached."""
    return request.app[SERVER_KEY]


def render(request: web.Request, template: str, *, status: int = 200, **values: Any) -> web.Response:
    """`template` drawn with `values` (autoescaped), plus who is logged in and their CSRF token."""
    server = server_of(request)
    user = request.get("user_id")
    token = request.get("session_token")
    page = server.templates.get_template(template).render(
        user_id=user,
        csrf=server.signer.token("csrf", token) if token else "",
        **values,
    )
    return web.Response(text=page, status=status, content_type="text/html", charset="utf-8")


async def current_user(request: web.Request) -> int | None:
    """The logged-in user (their session cookie's row still open), or None; kept on the request."""
    if "user_id" in request:
        return request["user_id"]  # type: ignore[no-any-return]
    server = server_of(request)
    token = server.signer.unsign("session", request.cookies.get(SESSION_COOKIE))
    user = await server.cases.sessions.user(token) if isinstance(token, str) else None
    request["user_id"] = user
    request["session_token"] = token if user is not None else None
    return user


async def require_user(request: web.Request) -> int:
    """The logged-in user, or a redirect to log in (and back here; a form, back to its page)."""
    user = await current_user(request)
    if user is None:
        # A form's own address takes only its POST: after logging in, the page it is on (its
        # address's parent: /d/<server> for /d/<server>/limits, / for /logout) is shown instead.
        back = request.path_qs if request.method in ("GET", "HEAD") else request.path.rsplit("/", 1)[0] or "/"
        raise web.HTTPFound(f"/login?{_next_query(back)}")
    return user


def _next_query(path: str) -> str:
    return urlencode({"next": path})


def check_csrf(request: web.Request, form: Any) -> None:
    """Refuse (403) a form whose CSRF token is not the session's."""
    token = request.get("session_token")
    sent = form.get("csrf") if form is not None else None
    if not token or not server_of(request).signer.is_token("csrf", token, sent):
        raise web.HTTPForbidden(text="This form has expired or did not come from this site. Reload the page.")


async def server_member(request: web.Request, *, fresh: bool = False) -> tuple[int, ServerMember]:
    """The server in the path and the logged-in person as the bot sees them there (404: not a member)."""
    user = await require_user(request)
    guild_id = decimal(request.match_info["guild"], 19)
    if guild_id is None or not 0 < guild_id < 2**63:
        raise web.HTTPNotFound()
    try:
        member = await server_of(request).cases.directory.member(guild_id, user, fresh=fresh)
    except DirectoryBusy:
        raise web.HTTPTooManyRequests(
            text="Too many pages in a few seconds; try again in a moment."
        ) from None
    except DirectoryUnavailable:
        raise web.HTTPServiceUnavailable(
            text="Discord cannot be reached just now; try again in a moment."
        ) from None
    if member is None:
        # The same answer for "no such server" and "not a member": nothing is told about servers.
        raise web.HTTPNotFound(text="Not found.")
    return guild_id, member
