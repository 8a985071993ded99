"""Signed cookie values (web/signing.py): bound to one purpose, tamper-evident, expiring."""

from __future__ import annotations

from web.signing import Signer


def test_a_value_comes_back_only_for_its_purpose_and_unaltered() -> None:
    signer = Signer("s" * 40)
    signed = signer.sign("session", "token-1")
    assert signer.unsign("session", signed) == "token-1"
    assert signer.unsign("login", signed) is None  # a session cookie is no login state
    body, mac = signed.split(".")
    assert signer.unsign("session", f"{body}.{mac[:-1]}A") is None
    assert signer.unsign("session", f"{body}x.{mac}") is None
    assert Signer("t" * 40).unsign("session", signed) is None  # another secret
    for junk in (None, "", "no-dot", "a.b.c", "." * 3000):
        assert signer.unsign("session", junk) is None


def test_a_value_with_an_expiry_is_refused_after_it() -> None:
    signer = Signer("s" * 40)
    signed = signer.sign("login", {"state": "x"}, expires_at=100.0)
    assert signer.unsign("login", signed, now=99.0) == {"state": "x"}
    assert signer.unsign("login", signed, now=100.0) is None


def test_text_outside_ascii_is_no_signed_value_and_no_token() -> None:
    # hmac.compare_digest raises TypeError on such text: a forged cookie or form answered 503.
    signer = Signer("s" * 40)
    signed = signer.sign("session", "token-1")
    body, mac = signed.split(".")
    assert signer.unsign("session", f"{body}.é{mac[1:]}") is None
    assert signer.unsign("session", f"é{body[1:]}.{mac}") is None
    token = signer.token("csrf", "token-1")
    assert signer.is_token("csrf", "token-1", token)
    for forged in ("é" + token[1:], "", None, 12, token + "x"):
        assert not signer.is_token("csrf", "token-1", forged)
