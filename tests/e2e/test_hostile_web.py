"""The web pages against odd requests, end to end: the real bot.py serving them, the fake Discord's
login, and a browser without JavaScript sending what a browser (or a person with a URL bar) can.

Whatever arrives, a page answers as for any malformed value (the filter left out, "Not found", the
form refused in words, not logged in): never "Something is unavailable", which tells people to try
again and logs a warning each time. And the gallery's search finds prompts in every script members
write in, whatever their case.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, quote, urlsplit

from tests.e2e.commands import settings, text_of
from tests.e2e.harness import StartWorld, World
from tests.e2e.servers import Relay
from tests.e2e.webpages import Browser, Site, enable_web, prompts_on

#: Characters str.isdigit() calls digits that are not ASCII: int() refuses some ("²"), reads others.
ODD_DIGITS = ("²", "٣", "１２")


def web_warnings(world: World) -> list[str]:
    """The web server's lines about requests it could not answer."""
    return [line for line in world.bot.log_text().splitlines() if "web: " in line and "answering" in line]


async def test_odd_digits_in_addresses_and_forms_are_malformed_values_never_an_outage(site: Site) -> None:
    world, guild = site.world, site.world.guild.id
    alice = site.browser()
    first = prompts_on(await alice.login(world.alice, then=site.gallery))
    for odd in ODD_DIGITS:
        # A filter or a page cursor that is not a number is left out, as a word would be.
        for query in (f"before={odd}", f"member={odd}"):
            status, page, _ = await alice.get(f"{site.gallery}?{query}")
            assert (status, prompts_on(page)) == (200, first), query
        status, page, _ = await alice.get(f"/me?before={odd}")
        assert status == 200 and "cat number 29" in page
        status, _, _ = await alice.get(f"/media/{guild}/{odd}", allow_redirects=False)
        assert status == 404

    boss = site.browser()
    page = await boss.login(site.boss, then=f"/d/{guild}")
    before = text_of(await settings(world, "show"))
    for odd in ODD_DIGITS:
        status, page, _ = await boss.post(f"/d/{guild}/limits", {"queue_cap": odd, "csrf": boss.csrf(page)})
        assert status == 400 and "whole numbers" in page
        status, page, _ = await boss.post(f"/d/{guild}/channels", {"channel": odd, "csrf": boss.csrf(page)})
        assert status == 400 and "Pick a channel." in page
    assert text_of(await settings(world, "show")) == before
    assert web_warnings(world) == []


async def test_non_ascii_cookies_and_csrf_tokens_are_refused_like_forged_ones(site: Site) -> None:
    world, guild = site.world, site.world.guild.id
    # A session cookie no signature could make: the front page, not logged in.
    eve = site.browser()
    eve.set_cookie("fc_session", "e30.é")
    status, page, _ = await eve.get("/")
    assert status == 200 and 'href="/login"' in page
    status, _, response = await eve.get(site.gallery, allow_redirects=False)
    assert status == 302 and response.headers["Location"].startswith("/login?next=")

    # A form whose CSRF token has a non-ASCII character: refused like any other forged token.
    boss = site.browser()
    page = await boss.login(site.boss, then=f"/d/{guild}")
    before = text_of(await settings(world, "show"))
    forged = "é" + boss.csrf(page)[1:]
    status, page, _ = await boss.post(f"/d/{guild}/limits", {"queue_cap": "3", "csrf": forged})
    assert status == 403 and "did not come from this site" in page
    status, _, _ = await boss.post("/logout", {"csrf": forged})
    assert status == 403
    assert text_of(await settings(world, "show")) == before
    assert web_warnings(world) == []


async def test_a_form_sent_without_a_session_leads_after_logging_in_to_the_page_it_is_on(site: Site) -> None:
    """Not to the form's own address, which takes only a POST (a 405 after logging in)."""
    world, guild = site.world, site.world.guild.id
    boss = site.browser()
    before = text_of(await settings(world, "show"))
    for form, page in ((f"/d/{guild}/limits", f"/d/{guild}"), ("/logout", "/")):
        status, _, response = await boss.post(form, {"queue_cap": "3"}, allow_redirects=False)
        location = urlsplit(response.headers["Location"])
        assert (status, location.path, parse_qs(location.query)) == (302, "/login", {"next": [page]})
    landed = await boss.login(site.boss, then=quote(f"/d/{guild}", safe=""))
    assert "queue_cap" in landed
    assert text_of(await settings(world, "show")) == before


PROMPTS = ("Ärger im Café", "Кот на луне", "ΣΟΦΙΑ στο φεγγάρι", "Żółw w deszczu", "a plain cat")


async def test_the_gallery_search_ignores_case_in_every_script(start: StartWorld) -> None:
    base = ""

    def web_on(world: World) -> None:
        nonlocal base
        base = enable_web(world)

    world = await start(setup=web_on, extra_env={"MEMBER_JOB_LIMIT": "5"})
    for prompt in PROMPTS:
        await world.delivered(await world.image(prompt))
    browser = Browser(world, base)
    try:
        await browser.login(world.alice)
        for search, found in (
            ("ärger", "Ärger im Café"),
            ("ÄRGER IM", "Ärger im Café"),
            ("кот", "Кот на луне"),
            ("КОТ НА", "Кот на луне"),
            ("σοφια", "ΣΟΦΙΑ στο φεγγάρι"),
            ("ŻÓŁW", "Żółw w deszczu"),
            ("PLAIN", "a plain cat"),
        ):
            status, page, _ = await browser.get(f"/g/{world.guild.id}", params={"q": search})
            assert (status, prompts_on(page)) == (200, [found]), search
        # Words that are in no prompt still find nothing, in any script.
        for search in ("луна", "ärgern", "ΣΟΦΙΕ"):
            _, page, _ = await browser.get(f"/g/{world.guild.id}", params={"q": search})
            assert prompts_on(page) == [], search
    finally:
        await browser.close()
    assert web_warnings(world) == []


async def test_a_person_reloading_the_dashboard_cannot_spend_the_bots_discord_rate_limit(site: Site) -> None:
    """The dashboard asks Discord who the person is on every view (Manage Server may have been taken
    away): a person reloading it in a loop is told to slow down past LOOKUPS_PER_PERSON in a few
    seconds, and Discord is not asked for them meanwhile; another person's pages still answer."""
    world, guild = site.world, site.world.guild.id
    boss = site.browser()
    await boss.login(site.boss, then=f"/d/{guild}")
    member_path = f"/guilds/{guild}/members/{site.boss.id}"
    statuses = [(await boss.get(f"/d/{guild}"))[0] for _ in range(40)]
    assert statuses.count(200) >= 1 and statuses[-1] == 429
    _, page, _ = await boss.get(f"/d/{guild}")
    assert "try again in a moment" in page
    # Without the bound, every view asked Discord (41 look-ups here).
    assert len(world.discord.requests_to("GET", member_path)) <= 30
    alice = site.browser()
    status, _, _ = await alice.get("/")
    assert status == 200
    assert prompts_on(await alice.login(world.alice, then=site.gallery))


async def test_a_person_opening_file_after_file_cannot_spend_the_bots_discord_rate_limit(site: Site) -> None:
    """Each result's file is looked up in Discord when it is opened (its link is signed and expires):
    a person opening file after file (here results whose messages Discord no longer has) is told to
    slow down past LOOKUPS_PER_PERSON, a file already looked up answers from memory, and another
    person's files still answer."""
    world, guild = site.world, site.world.guild.id
    alice = site.browser()
    await alice.login(world.alice, then=site.gallery)
    seeded = [*site.cats, site.hostile]
    statuses = [(await alice.get(f"/media/{guild}/{s.id}", allow_redirects=False))[0] for s in seeded]
    assert statuses[-1] == 429 and set(statuses) == {404, 429}
    _, page, _ = await alice.get(f"/media/{guild}/{seeded[-1].id}", allow_redirects=False)
    assert "try again in a moment" in page
    # Without the bound, every file opened asked Discord (31 look-ups here); the member's own
    # look-ups (the login, the gallery) count too.
    looked_up = len(world.discord.requests_to("GET", "/messages/"))
    assert looked_up < 30
    # A file already looked up (its message gone from Discord) is not asked again.
    assert (await alice.get(f"/media/{guild}/{seeded[0].id}", allow_redirects=False))[0] == 404
    assert len(world.discord.requests_to("GET", "/messages/")) == looked_up
    bob = site.browser()
    await bob.login(world.bob, then=site.gallery)
    status, _, _ = await bob.get(f"/media/{guild}/{seeded[-1].id}", allow_redirects=False)
    assert status == 404  # looked up for bob (the message is gone), not refused
    assert len(world.discord.requests_to("GET", "/messages/")) == looked_up + 1
    assert web_warnings(world) == []


async def test_a_request_head_over_the_cap_is_refused_and_none_of_its_bytes_are_logged(site: Site) -> None:
    """A browser that carries other cookies of the parent domain can send a Cookie header past the
    8 KiB cap: refused (400), with no traceback, and the session cookie it quoted never in the log."""
    world = site.world
    alice = site.browser()
    await alice.login(world.alice)
    session = {cookie.key: cookie.value for cookie in alice.jar}["fc_session"]
    reader, writer = await asyncio.open_connection("127.0.0.1", int(world.env["WEB_PORT"]))
    try:
        head = f"GET /me HTTP/1.1\r\nHost: x\r\nCookie: fc_session={session}; other={'a' * 9000}\r\n\r\n"
        writer.write(head.encode())
        assert (await asyncio.wait_for(reader.read(100), 5)).startswith(b"HTTP/1.0 400")
    finally:
        writer.close()
    await world.discord.wait_for(
        lambda: "a malformed request was refused (LineTooLong)" in world.bot.log_text(), what="the line"
    )
    log = world.bot.log_text()
    assert session[:20] not in log and "Traceback" not in log


async def test_pages_during_a_store_outage_warn_once_not_once_a_view(
    pg_relay: tuple[str, Relay], start: StartWorld
) -> None:
    url, relay = pg_relay
    world = await start(extra_env={"DATABASE_URL": url}, setup=enable_web)
    browser = Browser(world, world.env["WEB_BASE_URL"])
    try:
        await browser.login(world.alice)
        assert (await browser.get(f"/g/{world.guild.id}"))[0] == 200
        await relay.cut()
        statuses = [(await browser.get(f"/g/{world.guild.id}"))[0] for _ in range(5)]
        await relay.restore()
    finally:
        await browser.close()
    assert statuses == [503] * 5
    assert len([line for line in web_warnings(world) if " WARNING " in line]) == 1
