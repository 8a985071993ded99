"""The web pages in a real headless Chromium (Debian's, through chromium-driver and Selenium),
against the real bot.py and the fake Discord's login: a member logs in, browses, pages and searches
the gallery by keyboard; an admin changes a setting that /settings show then agrees with; what is
refused is refused in the browser too. Screenshots (desktop and 390 px) go to the test's tmp_path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.chrome import Chrome
from tests.e2e.commands import settings, text_of
from tests.e2e.harness import wait_state
from tests.e2e.webpages import HOSTILE, Browser, Site


@pytest.fixture
async def chrome(tmp_path: Path) -> AsyncIterator[Chrome]:
    browser = Chrome(tmp_path / "chrome-profile")
    try:
        yield browser
    finally:
        await browser.close()


async def login(chrome: Chrome, site: Site, person: Any, then: str) -> None:
    site.world.discord.oauth.login = getattr(person, "user", person)
    await chrome.open(f"{site.base}{then}")


async def test_a_member_logs_in_pages_and_searches_the_gallery_by_keyboard(
    site: Site, chrome: Chrome, tmp_path: Path
) -> None:
    await login(chrome, site, site.world.alice, site.gallery)
    assert chrome.url == f"{site.base}{site.gallery}"
    session = next(c for c in await chrome.cookies() if c["name"] == "fc_session")
    assert session["httpOnly"] and session["secure"] and session["sameSite"] == "Lax"
    prompts = await chrome.texts(".result .prompt")
    # The HTML prompt is text on the page, first (newest); #staff and the deleted result are absent.
    assert prompts[0] == HOSTILE and prompts[1:] == [f"cat number {i}" for i in range(29, 6, -1)]
    assert await chrome.texts("script") == [] and await chrome.texts(".result img") == []
    assert not any("secret plan" in p or "deleted" in p for p in prompts)
    await chrome.screenshot(tmp_path / "gallery-desktop.png", 1280)
    await chrome.screenshot(tmp_path / "gallery-390.png", 390)
    assert (tmp_path / "gallery-390.png").stat().st_size > 1000
    # By keyboard: the skip link, the search field and the pages are all tab stops.
    stops = await chrome.tab_stops(14)
    assert stops[0].startswith("a:Skip") and "input:q" in stops
    await chrome.click('a[rel="next"]')
    assert await chrome.texts(".result .prompt") == [f"cat number {i}" for i in range(6, -1, -1)]
    await chrome.fill('input[name="q"]', "number 2", submit=True)  # Enter submits the filters
    assert await chrome.texts(".result .prompt") == [
        f"cat number {i}" for i in (29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 2)
    ]


async def test_an_admin_changes_a_setting_that_settings_show_agrees_with(site: Site, chrome: Chrome) -> None:
    dashboard = f"/d/{site.world.guild.id}"
    await login(chrome, site, site.boss, dashboard)
    assert "Queue now" in await chrome.page()
    await chrome.fill('input[name="queue_cap"]', "6")
    await chrome.click('form[action$="/limits"] button')
    assert await chrome.texts(".done") == ["Limits saved."]
    assert "**Server queue cap**: 6 (set by this server" in text_of(await settings(site.world, "show"))
    # A forged form: the same page's form without its CSRF token is refused, nothing changes.
    await chrome.run_script(
        "document.querySelector('form[action$=\"/limits\"] input[name=csrf]').remove();"
        "document.querySelector('form[action$=\"/limits\"] input[name=queue_cap]').value='2';"
        "document.querySelector('form[action$=\"/limits\"]').submit();",
        navigates=True,
    )
    assert "did not come from this site" in await chrome.page()
    assert "**Server queue cap**: 6 (set by this server" in text_of(await settings(site.world, "show"))


async def test_a_member_without_manage_server_is_refused_and_staff_results_stay_hidden(
    site: Site, chrome: Chrome
) -> None:
    await login(chrome, site, site.world.alice, f"/d/{site.world.guild.id}")
    assert "Only members with Manage Server" in await chrome.page()
    await chrome.open(f"{site.base}{site.gallery}?q=secret")
    assert await chrome.texts(".result") == [] and "Nothing to show here." in await chrome.page()


async def test_a_login_started_elsewhere_is_refused_in_this_browser(site: Site, chrome: Chrome) -> None:
    """Login CSRF: someone else's code and state (their login, to log this browser into their
    account) land here; this browser never started that login, so it is refused."""
    attacker = Browser(site.world, site.base)
    site.browsers.append(attacker)
    site.world.discord.oauth.login = site.world.bob.user
    _, _, started = await attacker.get("/login", allow_redirects=False)
    async with attacker.http.get(started.headers["Location"], allow_redirects=False) as back:
        stolen = back.headers["Location"]
    await chrome.open(stolen)
    assert "Login refused" in await chrome.page()
    assert not any(c["name"] == "fc_session" for c in await chrome.cookies())


async def test_a_video_plays_in_the_gallery(site: Site, chrome: Chrome) -> None:
    world = site.world
    it = await world.video("a clip to play", member=world.bob)
    await world.delivered(it)
    await wait_state(world, await world.job_id(it), "delivered")
    await login(chrome, site, world.alice, site.gallery)
    # A click on the video (a person's gesture: Chromium plays media only after one) starts it; it
    # loads from Discord's link through /media, and plays.
    await chrome.call(lambda: chrome.driver.find_element("css selector", "video").click())
    await chrome.run_script("document.querySelector('video').play();")  # after the gesture: allowed
    loaded = await chrome.wait_until(
        "const v = document.querySelector('video'); return v.readyState >= 2 && v.currentTime > 0;"
    )
    assert loaded, await chrome.console()
