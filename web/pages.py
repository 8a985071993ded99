"""The pages: log in and out, the gallery, a person's own page, and the dashboard's routes.

Each handler reads the request (:mod:`web.requests`), asks one use case (``framecast.app``) and draws
a template.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time

from aiohttp import web

from framecast.app import DirectoryBusy, DirectoryUnavailable, GalleryQuery, JobKind
from web import dashboard
from web.oauth import LoginFailed, pkce_pair
from web.requests import (
    SESSION_COOKIE,
    check_csrf,
    current_user,
    decimal,
    render,
    require_user,
    say,
    server_member,
    server_of,
)

__all__ = ["add_routes"]

log = logging.getLogger(__name__)

LOGIN_COOKIE = "fc_login"
#: How long a login may take between leaving for Discord and coming back.
LOGIN_SECONDS = 600


def add_routes(app: web.Application) -> None:
    """Register every page on `app` (the routes :class:`web.server.WebServer` is given)."""
    app.router.add_get("/", index)
    app.router.add_get("/login", login)
    app.router.add_get("/login/callback", callback)
    app.router.add_post("/logout", logout)
    app.router.add_get("/g/{guild}", gallery)
    app.router.add_get("/me", me)
    app.router.add_get("/media/{guild}/{job}", media)
    dashboard.add_routes(app)


def _cookie(response: web.StreamResponse, name: str, value: str, *, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max_age, path="/", secure=True, httponly=True, samesite="Lax")


def _local_path(value: str | None) -> str:
    # Only a path on this site: never "//host", "/\\host" or a full URL (an open redirect), and
    # nothing a header could not carry.
    if not value or not value.startswith("/") or value.startswith("//") or len(value) > 512:
        return "/"
    if "\\" in value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "/"
    return value


# -- log in and out ---------------------------------------------------------------------------------
async def index(request: web.Request) -> web.StreamResponse:
    """The front page: log in, or where to go."""
    await current_user(request)
    return render(request, "index.html")


async def login(request: web.Request) -> web.StreamResponse:
    """Off to Discord, with a fresh `state` and PKCE verifier kept in a signed cookie of this browser."""
    server = server_of(request)
    assert server.oauth is not None
    state = secrets.token_urlsafe(24)
    verifier, challenge = pkce_pair()
    target = _local_path(request.query.get("next"))
    signed = server.signer.sign(
        "login",
        {"state": state, "verifier": verifier, "next": target},
        expires_at=time.time() + LOGIN_SECONDS,
    )
    url = server.oauth.authorize_url(
        redirect_uri=server.config.redirect_uri, state=state, challenge=challenge
    )
    response = web.HTTPFound(url)
    _cookie(response, LOGIN_COOKIE, signed, max_age=LOGIN_SECONDS)
    return response


async def callback(request: web.Request) -> web.StreamResponse:
    """Back from Discord: the `state` must be the one this browser left with; then the code is
    exchanged (with the verifier) and a session opened. A person who pressed Cancel at Discord
    comes back with ``error=access_denied`` and their state: told so, and offered to log in again."""
    server = server_of(request)
    assert server.oauth is not None
    pending = server.signer.unsign("login", request.cookies.get(LOGIN_COOKIE))
    state = request.query.get("state", "")
    code = request.query.get("code", "")
    ours = (
        isinstance(pending, dict)
        and isinstance(pending.get("state"), str)
        and hmac.compare_digest(pending["state"].encode(), state.encode())
    )
    if ours and request.query.get("error") == "access_denied":
        title = say(request, "web_login_cancelled_title")
        return _refused(request, say(request, "web_login_cancelled"), title=title)
    if not ours or not isinstance(pending, dict) or not code or len(code) > 256:
        return _refused(request, "This login did not start in this browser, or took too long. Log in again.")
    try:
        user = await server.oauth.user_id(
            code=code, verifier=str(pending.get("verifier")), redirect_uri=server.config.redirect_uri
        )
    except LoginFailed as exc:
        log.warning("web: a login was not confirmed by Discord (%s)", exc)
        return _refused(request, "Discord did not confirm this login. Log in again.")
    token = await server.cases.sessions.open(user)
    response = web.HTTPFound(_local_path(str(pending.get("next") or "/")))
    lifetime = int(server.cases.sessions.lifetime)
    _cookie(response, SESSION_COOKIE, server.signer.sign("session", token), max_age=lifetime)
    response.del_cookie(LOGIN_COOKIE, path="/")
    return response


def _refused(request: web.Request, why: str, *, title: str = "Login refused") -> web.StreamResponse:
    response = render(request, "message.html", status=400, title=title, message=why)
    response.del_cookie(LOGIN_COOKIE, path="/")
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    """End the session (a form with its CSRF token), then back to the front page."""
    await require_user(request)
    check_csrf(request, await request.post())
    token = request.get("session_token")
    if token:
        await server_of(request).cases.sessions.close(token)
    response = web.HTTPSeeOther("/")
    response.del_cookie(SESSION_COOKIE, path="/")
    return response


# -- the gallery ------------------------------------------------------------------------------------
def _int_arg(request: web.Request, name: str) -> int | None:
    number = decimal(request.query.get(name), 20)
    return number if number is not None and 0 < number < 2**63 else None


def gallery_query(request: web.Request) -> GalleryQuery:
    """The gallery's filters from the address (anything malformed is left out)."""
    kind = request.query.get("kind", "")
    return GalleryQuery(
        member=_int_arg(request, "member"),
        kind=JobKind(kind) if kind in {k.value for k in JobKind} else None,
        style=request.query.get("style", "").strip()[:64] or None,
        search=request.query.get("q", "").strip()[:200] or None,
        before=_int_arg(request, "before"),
    )


async def gallery(request: web.Request) -> web.StreamResponse:
    """``/g/<server>``: the server's results the person may see, newest first, a page at a time."""
    guild_id, member = await server_member(request)
    server = server_of(request)
    query = gallery_query(request)
    page = await server.cases.gallery.page(guild_id, member, query)
    items = [(item, server.cases.directory.message_link(item.job)) for item in page.items]
    older = None
    if page.older is not None:
        from urllib.parse import urlencode

        keep = {k: v for k, v in request.query.items() if k in {"member", "kind", "style", "q"} and v}
        older = f"/g/{guild_id}?{urlencode({**keep, 'before': page.older})}"
    return render(
        request,
        "gallery.html",
        guild_id=guild_id,
        server_name=member.server_name,
        manages=member.actor.manages_guild,
        items=items,
        query=query,
        older=older,
        first_page=query.before is None,
    )


async def media(request: web.Request) -> web.StreamResponse:
    """A result's file: if the gallery shows it to this person, off to Discord's fresh link for it
    (fetched now with the bot token; never a stored one)."""
    guild_id, member = await server_member(request)
    job_id = decimal(request.match_info["job"], 19)
    if job_id is None:
        raise web.HTTPNotFound()
    cases = server_of(request).cases
    item = await cases.gallery.item(guild_id, member, job_id)
    if item is None:
        raise web.HTTPNotFound(text="Not found.")
    try:
        url = await cases.directory.media_url(item.job, member.actor.user_id)
    except DirectoryBusy:
        raise web.HTTPTooManyRequests(
            text="Too many files in a few seconds; try again in a moment."
        ) from None
    except DirectoryUnavailable:
        raise web.HTTPServiceUnavailable(
            text="Discord cannot be reached just now; try again in a moment."
        ) from None
    if url is None or not url.startswith(("https://", "http://")):
        raise web.HTTPNotFound(text="This result's message or file is gone from Discord.")
    raise web.HTTPFound(url)


# -- a person's own page ----------------------------------------------------------------------------
async def me(request: web.Request) -> web.StreamResponse:
    """``/me``: the person's own jobs in every server and in their own queue, newest first."""
    user = await require_user(request)
    cases = server_of(request).cases
    page = await cases.my_jobs.page(user, before=_int_arg(request, "before"))
    rows = [(row, None if row.deleted else cases.directory.message_link(row.job)) for row in page.rows]
    return render(
        request, "me.html", rows=rows, older=page.older, first_page=_int_arg(request, "before") is None
    )
