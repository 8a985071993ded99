"""Small rules of the pages (web/pages.py): where a login may send the browser back to."""

from __future__ import annotations

import pytest

from web.pages import _local_path


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example",
        "/g/1\r\nSet-Cookie: x=1",
        "",
        None,
        "g/1",
        "/" * 600,
    ],
)
def test_a_login_never_sends_the_browser_off_the_site(target: str | None) -> None:
    assert _local_path(target) == "/"


def test_a_login_sends_the_browser_back_to_the_page_it_came_from() -> None:
    assert _local_path("/g/123?q=cat&before=9") == "/g/123?q=cat&before=9"


def test_numbers_from_addresses_and_forms_are_ascii_digits_only() -> None:
    from web.requests import decimal

    assert decimal("42", 9) == 42 and decimal(" 42 ", 9) == 42
    for odd in ("²", "٣", "１２", "4²", "-1", "+1", "1_000", "", " ", None, 42, "1" * 10):
        assert decimal(odd, 9) is None, odd


def test_the_pages_read_the_browsers_languages_best_first_and_in_the_bots_catalogues() -> None:
    from aiohttp.test_utils import make_mocked_request

    from cogs.web_members import reading_locale
    from web.requests import languages

    asked = make_mocked_request("GET", "/", headers={"Accept-Language": "fr;q=0.5, de-DE, *;q=0.1, x;q=0, é"})
    assert languages(asked) == ("de-DE", "fr")  # "*", a refused language and a non-tag left out
    assert reading_locale(("de-DE", "fr")) == "de"
    assert reading_locale(("es-MX",)) == "es-ES" and reading_locale(("pt",)) == "pt-BR"
    assert reading_locale(("zh-TW",)) == "zh-TW" and reading_locale(("en-GB", "de")) == "en-US"
    assert reading_locale(("xx", "tlh")) is None  # English
