"""Signed cookie values: ``value.signature``, an HMAC-SHA256 under the session secret, per purpose.

A value signed for one purpose (the login's state, the session, a CSRF token) is never accepted for
another. Values may carry an expiry (epoch seconds) checked on the way back.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

__all__ = ["Signer"]

#: The largest signed value read back (a cookie is at most 4 KiB anyway).
_MAX_SIGNED = 2048


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """Signs and checks small JSON values under one secret."""

    def __init__(self, secret: str) -> None:
        self._key = hashlib.sha256(b"framecast-web\x00" + secret.encode("utf-8")).digest()

    def __repr__(self) -> str:
        return "<Signer>"

    def _mac(self, purpose: str, body: str) -> str:
        return _b64(hmac.new(self._key, f"{purpose}\x00{body}".encode(), hashlib.sha256).digest())

    def sign(self, purpose: str, value: Any, *, expires_at: float | None = None) -> str:
        """`value` (JSON-able) signed for `purpose`, valid until `expires_at` (None: no end)."""
        body = _b64(json.dumps({"v": value, "e": expires_at}, separators=(",", ":")).encode())
        return f"{body}.{self._mac(purpose, body)}"

    def unsign(self, purpose: str, signed: str | None, *, now: float | None = None) -> Any:
        """The value `signed` carries if it was signed for `purpose` and has not expired; else None."""
        # Only ASCII can be a signed value (and compare_digest raises on other text).
        if not signed or len(signed) > _MAX_SIGNED or not signed.isascii() or signed.count(".") != 1:
            return None
        body, mac = signed.split(".")
        if not hmac.compare_digest(mac, self._mac(purpose, body)):
            return None
        try:
            data = json.loads(_unb64(body))
        except ValueError:
            return None
        expires = data.get("e") if isinstance(data, dict) else None
        if not isinstance(data, dict) or (expires is not None and not isinstance(expires, int | float)):
            return None
        if expires is not None and expires <= (time.time() if now is None else now):
            return None
        return data.get("v")

    def token(self, purpose: str, value: str) -> str:
        """A deterministic MAC of `value` for `purpose` (a CSRF token bound to a session)."""
        return self._mac(purpose, value)

    def is_token(self, purpose: str, value: str, sent: object) -> bool:
        """Whether `sent` (from a form: anything) is :meth:`token` of `value` for `purpose`.

        Text that is not ASCII is no token (``hmac.compare_digest`` raises on it rather than say no).
        """
        return (
            isinstance(sent, str) and sent.isascii() and hmac.compare_digest(sent, self.token(purpose, value))
        )
