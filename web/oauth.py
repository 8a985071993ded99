"""Login with Discord: OAuth2's authorization code flow with PKCE (S256) and ``state``.

Only the ``identify`` scope is asked: the person's id is all the web pages take from their token.
Who they are in a server is the bot's own view (the member fetched with the bot token). The access
token is used once, to read ``users/@me``, and never stored.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

import aiohttp

__all__ = ["DiscordOAuth", "LoginFailed", "OAuthEndpoints", "pkce_pair"]

#: Discord's own addresses.
DISCORD_API = "https://discord.com/api/v10"
DISCORD_AUTHORIZE = "https://discord.com/oauth2/authorize"
#: The largest answer read from Discord's token or user endpoint.
_MAX_ANSWER = 64 * 1024
#: Seconds one call to Discord may take.
_TIMEOUT = 10.0


class LoginFailed(Exception):
    """Discord did not confirm who the person is (a refused code, an unreachable Discord)."""


@dataclass(frozen=True)
class OAuthEndpoints:
    """Where the browser is sent to log in, and where the bot exchanges the code."""

    authorize: str
    api: str

    @classmethod
    def for_api(cls, api_base: str | None) -> OAuthEndpoints:
        """Discord's, or (``DISCORD_API_BASE_URL`` set, as the tests do) the same host's."""
        if api_base is None:
            return cls(DISCORD_AUTHORIZE, DISCORD_API)
        parts = urlsplit(api_base)
        return cls(f"{parts.scheme}://{parts.netloc}/oauth2/authorize", api_base.rstrip("/"))


def pkce_pair() -> tuple[str, str]:
    """A PKCE code verifier and its S256 challenge."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class DiscordOAuth:
    """The OAuth2 client of the Discord application (the bot's own application id, ``WEB_CLIENT_SECRET``)."""

    def __init__(
        self, session: aiohttp.ClientSession, endpoints: OAuthEndpoints, *, client_id: str, client_secret: str
    ) -> None:
        self._session = session
        self._endpoints = endpoints
        self._client_id = client_id
        self._client_secret = client_secret

    def __repr__(self) -> str:
        return f"<DiscordOAuth client_id={self._client_id}>"

    def authorize_url(self, *, redirect_uri: str, state: str, challenge: str) -> str:
        """Where the browser goes to log in."""
        query = {
            "client_id": self._client_id,
            "response_type": "code",
            "redirect_uri": redirect_uri,
            "scope": "identify",
            "state": state,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        return f"{self._endpoints.authorize}?{urlencode(query)}"

    async def user_id(self, *, code: str, verifier: str, redirect_uri: str) -> int:
        """Exchange `code` (with its PKCE `verifier`) and read who logged in. Raises :class:`LoginFailed`."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
        # HTTP Basic with the client's id and secret, form-encoded first (RFC 6749, 2.3.1).
        pair = f"{quote(self._client_id, safe='')}:{quote(self._client_secret, safe='')}"
        basic = {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode("ascii")}
        token = await self._json("POST", "/oauth2/token", data=form, headers=basic)
        access = token.get("access_token")
        kind = token.get("token_type", "Bearer")
        if not isinstance(access, str) or not isinstance(kind, str) or kind.lower() != "bearer":
            raise LoginFailed("no access token")
        me = await self._json("GET", "/users/@me", headers={"Authorization": f"Bearer {access}"})
        user_id = me.get("id")
        if not isinstance(user_id, str) or not user_id.isdigit() or len(user_id) > 20:
            raise LoginFailed("no user id")
        return int(user_id)

    async def _json(self, method: str, path: str, **kwargs: object) -> dict[str, object]:
        try:
            async with asyncio.timeout(_TIMEOUT):
                async with self._session.request(
                    method,
                    self._endpoints.api + path,
                    allow_redirects=False,
                    **kwargs,  # type: ignore[arg-type]
                ) as response:
                    body = await response.content.read(_MAX_ANSWER + 1)
                    if response.status != 200 or len(body) > _MAX_ANSWER:
                        raise LoginFailed(f"{path}: HTTP {response.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise LoginFailed(f"{path}: {type(exc).__name__}") from None
        try:
            data = json.loads(body)
        except ValueError:
            raise LoginFailed(f"{path}: not JSON") from None
        if not isinstance(data, dict):
            raise LoginFailed(f"{path}: not an object")
        return data
