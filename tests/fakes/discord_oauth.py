"""The fake Discord's OAuth2 (Login with Discord): authorize, token, and ``users/@me`` with a Bearer token.

A separate block of :class:`tests.fakes.discord_api.FakeDiscord` (``fake.oauth``), served on the
same port. ``GET /oauth2/authorize`` is the browser's page at Discord: it answers as if the person
in ``login`` (a :class:`FakeUser`) were logged in to Discord and approved, redirecting to the
registered ``redirect_uri`` with a one-time ``code`` and the caller's ``state``; no ``login`` is a
401 page. ``POST /api/v10/oauth2/token`` checks what Discord checks: the client's id and secret
(HTTP Basic or form), the code (once, for 10 minutes), the same ``redirect_uri``, and the PKCE
``code_verifier`` against the S256 challenge. ``GET /api/v10/users/@me`` with a Bearer token answers
the token's user (the route is checked against Discord's OpenAPI spec like every other);
without one, it is the bot's own ``/users/@me``.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from tests.fakes.openapi import SpecViolation, spec

if TYPE_CHECKING:
    from tests.fakes.discord_api import FakeDiscord, FakeUser

__all__ = ["FakeOAuth"]

#: How long a code may wait for its exchange.
CODE_TTL = 600.0


@dataclass
class _Grant:
    user_id: int
    redirect_uri: str
    challenge: str
    issued: float
    used: bool = False


@dataclass
class FakeOAuth:
    """Discord's OAuth2 for one application (``client_id``, ``client_secret``, ``redirect_uris``)."""

    discord: FakeDiscord
    client_id: str = ""
    client_secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    redirect_uris: set[str] = field(default_factory=set)
    #: The person logged in to Discord in "the browser" (None: nobody: authorize answers 401).
    login: FakeUser | None = None
    #: Every authorize request's query, token request's form, and their answers' statuses.
    authorizations: list[dict[str, str]] = field(default_factory=list)
    exchanges: list[tuple[dict[str, str], int]] = field(default_factory=list)
    _grants: dict[str, _Grant] = field(default_factory=dict)
    _tokens: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.client_id = self.client_id or str(self.discord.application_id)

    def add_routes(self, app: web.Application) -> None:
        """Serve the OAuth2 routes (before the fake's catch-all REST route)."""
        app.router.add_get("/oauth2/authorize", self._authorize)
        for version in ("9", "10"):
            app.router.add_post(f"/api/v{version}/oauth2/token", self._token)
            app.router.add_get(f"/api/v{version}/users/@me", self._me)

    async def _authorize(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.authorizations.append(query)
        if query.get("client_id") != self.client_id:
            return web.Response(status=400, text="Unknown application")
        redirect = query.get("redirect_uri", "")
        if redirect not in self.redirect_uris:
            return web.Response(status=400, text="Invalid OAuth2 redirect_uri")
        if query.get("response_type") != "code" or set(query.get("scope", "").split()) - {
            "identify",
            "guilds",
        }:
            return web.Response(status=400, text="Invalid response_type or scope")
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            return web.Response(status=400, text="PKCE required by this fake (S256)")
        if self.login is None:
            return web.Response(status=401, text="Log in to Discord first")
        code = secrets.token_urlsafe(24)
        self._grants[code] = _Grant(self.login.id, redirect, query["code_challenge"], time.monotonic())
        back = {"code": code, **({"state": query["state"]} if "state" in query else {})}
        raise web.HTTPFound(f"{redirect}?{urlencode(back)}")

    def _client_ok(self, request: web.Request, form: dict[str, str]) -> bool:
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            try:
                client_id, _, client_secret = base64.b64decode(header[6:]).decode().partition(":")
            except ValueError:
                return False
        else:
            client_id, client_secret = form.get("client_id", ""), form.get("client_secret", "")
        return secrets.compare_digest(client_id, self.client_id) and secrets.compare_digest(
            client_secret, self.client_secret
        )

    async def _token(self, request: web.Request) -> web.StreamResponse:
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        status, body = self._exchange(request, form)
        self.exchanges.append(({k: v for k, v in form.items() if k != "client_secret"}, status))
        return web.json_response(body, status=status)

    def _exchange(self, request: web.Request, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if request.content_type != "application/x-www-form-urlencoded":
            return 400, {"error": "invalid_request"}
        if not self._client_ok(request, form):
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") != "authorization_code":
            return 400, {"error": "unsupported_grant_type"}
        grant = self._grants.get(form.get("code", ""))
        if grant is None or grant.used or time.monotonic() - grant.issued > CODE_TTL:
            return 400, {"error": "invalid_grant"}
        grant.used = True  # a code is good once, whatever comes next
        if form.get("redirect_uri") != grant.redirect_uri:
            return 400, {"error": "invalid_grant", "error_description": "redirect_uri mismatch"}
        verifier = form.get("code_verifier", "")
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if not verifier or not secrets.compare_digest(digest, grant.challenge):
            return 400, {"error": "invalid_grant", "error_description": "code_verifier mismatch"}
        token = secrets.token_urlsafe(24)
        self._tokens[token] = grant.user_id
        return 200, {
            "access_token": token,
            "token_type": "Bearer",
            "expires_in": 604800,
            "refresh_token": secrets.token_urlsafe(24),
            "scope": "identify",
        }

    async def _me(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return await self.discord._api_handler(request)  # the bot asking for itself
        check = spec().check("GET", "/users/@me", query=dict(request.query))
        if not check.in_spec or check.problems:
            self.discord.spec_violations.append(
                SpecViolation(
                    "GET", "/users/@me", check.template, check.problems, refused=bool(check.problems)
                )
            )
        user_id = self._tokens.get(header[7:])
        user = self.discord.users.get(user_id) if user_id is not None else None
        if user is None:
            return web.json_response({"message": "401: Unauthorized", "code": 0}, status=401)
        return web.json_response(user.to_payload())
