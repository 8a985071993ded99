"""The web pages end to end: the real bot.py serving them (WEB_PORT), the fake Discord's login
(OAuth2 with PKCE and state), and a browser without JavaScript (aiohttp with a cookie jar).

Who sees what is Discord's view as the bot fetches it: a private #staff channel (the staff role may
read it), an admin who has Manage Server through a role, and members who have neither.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.e2e.commands import settings, text_of
from tests.e2e.harness import REPO, close_world, job_rows, make_world, wait_state
from tests.e2e.webpages import HOSTILE, Site, enable_web, prompts_on


async def test_login_opens_a_signed_http_only_secure_lax_session_that_logout_ends(site: Site) -> None:
    browser = site.browser()
    status, _, response = await browser.get(site.gallery, allow_redirects=False)
    assert status == 302 and response.headers["Location"].startswith("/login?next=")
    page = await browser.login(site.world.alice, then=site.gallery)
    assert "cat number 29" in page
    # The authorize request: PKCE S256 and a state, scope identify only.
    asked = site.world.discord.oauth.authorizations[-1]
    assert (
        asked["code_challenge_method"] == "S256"
        and asked["scope"] == "identify"
        and len(asked["state"]) >= 32
    )
    assert site.world.discord.oauth.exchanges[-1][1] == 200
    cookie = next(c for c in browser.jar if c.key == "fc_session")
    assert cookie["httponly"] and cookie["secure"] and cookie["samesite"] == "Lax"
    assert "." in cookie.value  # signed
    # A tampered cookie is nobody.
    forged = site.browser()
    forged.set_cookie("fc_session", cookie.value[:-2] + "xx")
    status, _, _ = await forged.get(site.gallery, allow_redirects=False)
    assert status == 302
    # Logout (a form with its CSRF token) ends the session row, not just the cookie.
    stolen = cookie.value
    status, _, _ = await browser.post("/logout", {"csrf": browser.csrf(page)})
    assert status == 200
    replay = site.browser()
    replay.set_cookie("fc_session", stolen)
    status, _, _ = await replay.get(site.gallery, allow_redirects=False)
    assert status == 302


async def test_a_stolen_state_and_code_are_refused_in_another_browser(site: Site) -> None:
    victim, attacker = site.browser(), site.browser()
    site.world.discord.oauth.login = site.world.alice.user
    status, _, response = await victim.get("/login", allow_redirects=False)
    assert status == 302
    authorize = response.headers["Location"]
    # Discord sends the victim back with a code and the state; the attacker gets hold of that URL.
    async with attacker.http.get(authorize, allow_redirects=False) as back:
        callback = back.headers["Location"]
    assert parse_qs(urlsplit(callback).query)["state"]
    await attacker.get("/login", allow_redirects=False)  # even with a login of their own under way
    status, page, _ = await attacker.get(callback.removeprefix(site.base))
    assert status == 400 and "Login refused" in page
    assert not any(c.key == "fc_session" for c in attacker.jar)
    status, _, _ = await attacker.get(site.gallery, allow_redirects=False)
    assert status == 302


async def test_the_gallery_pages_newest_first_and_never_shows_deleted_or_unreadable_results(
    site: Site,
) -> None:
    alice = site.browser()
    page = await alice.login(site.world.alice, then=site.gallery)
    shown = prompts_on(page)
    expected = [HOSTILE] + [f"cat number {i}" for i in range(29, 6, -1)]
    assert shown == expected
    older = page.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0].replace("&amp;", "&")
    status, page2, _ = await alice.get(older)
    assert status == 200 and prompts_on(page2) == [f"cat number {i}" for i in range(6, -1, -1)]
    assert 'rel="next"' not in page2
    everything = page + page2
    assert "secret plan" not in everything and "a deleted result" not in everything
    # Each result links to its message in Discord.
    assert (
        f"https://discord.com/channels/{site.world.guild.id}/{site.world.channel.id}/{10**17 + site.cats[-1].id}"
        in page
    )
    # The boss reads #staff: its result shows to them.
    boss = site.browser()
    assert "staff only: the secret plan" in prompts_on(await boss.login(site.boss, then=site.gallery))


async def test_search_and_filters_narrow_the_gallery(site: Site) -> None:
    alice = site.browser()
    await alice.login(site.world.alice)
    _, page, _ = await alice.get(f"{site.gallery}?q=NUMBER+1")
    assert prompts_on(page) == [f"cat number {i}" for i in (19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 1)]
    _, page, _ = await alice.get(f"{site.gallery}?member={site.world.bob.id}")
    assert prompts_on(page) == [HOSTILE]
    _, page, _ = await alice.get(f"{site.gallery}?q=secret")
    assert prompts_on(page) == []
    _, page, _ = await alice.get(f"{site.gallery}?kind=video")
    assert prompts_on(page) == []


async def test_a_prompt_full_of_html_is_shown_as_text(site: Site) -> None:
    alice = site.browser()
    page = await alice.login(site.world.alice, then=site.gallery)
    assert "<script>alert(1)</script>" not in page and "<img src=x" not in page
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt; &amp; &#34;quotes&#34;"
        in page
    )


async def test_every_answer_carries_a_content_security_policy_without_scripts(site: Site) -> None:
    alice = site.browser()
    await alice.login(site.world.alice)
    for path in (
        "/",
        site.gallery,
        "/static/framecast.css",
        "/g/12345",
        "/nowhere",
        f"/d/{site.world.guild.id}",
    ):
        _, _, response = await alice.get(path, allow_redirects=False)
        csp = response.headers.get("Content-Security-Policy", "")
        assert "default-src 'none'" in csp and "script-src" not in csp and "unsafe-inline" not in csp, path
        assert "frame-ancestors 'none'" in csp and response.headers["X-Content-Type-Options"] == "nosniff"


async def test_a_member_without_manage_server_is_refused_the_dashboard(site: Site) -> None:
    alice = site.browser()
    await alice.login(site.world.alice)
    status, page, _ = await alice.get(f"/d/{site.world.guild.id}")
    assert status == 403 and "Manage Server" in page
    boss = site.browser()
    await boss.login(site.boss)
    status, page, _ = await boss.get(f"/d/{site.world.guild.id}")
    assert status == 200 and "Queue now" in page
    # Usage over 30 days, drawn on the server: 30 stacked bars, today's 33 seeded results the last.
    assert page.count("<rect ") == 60 and "33 images in 30 days" in page
    # Manage Server is asked again on every request: the role taken away, the dashboard closes.
    site.boss.roles = [r for r in site.boss.roles if r.name != "mods"]
    status, _, _ = await boss.get(f"/d/{site.world.guild.id}")
    assert status == 403


async def test_a_forged_form_without_the_csrf_token_changes_nothing(site: Site) -> None:
    boss = site.browser()
    await boss.login(site.boss)
    dashboard = f"/d/{site.world.guild.id}"
    before = text_of(await settings(site.world, "show"))
    status, _, _ = await boss.post(f"{dashboard}/limits", {"queue_cap": "3"})
    assert status == 403
    other = site.browser()
    _, other_page, _ = await other.get("/")  # another session's token is no better
    await other.login(site.world.alice)
    _, alice_page, _ = await other.get("/")
    status, _, _ = await boss.post(f"{dashboard}/limits", {"queue_cap": "3", "csrf": other.csrf(alice_page)})
    assert status == 403
    assert text_of(await settings(site.world, "show")) == before


async def test_a_setting_changed_on_the_dashboard_is_what_settings_show_says(site: Site) -> None:
    boss = site.browser()
    await boss.login(site.boss)
    dashboard = f"/d/{site.world.guild.id}"
    _, page, _ = await boss.get(dashboard)
    status, page, _ = await boss.post(f"{dashboard}/limits", {"queue_cap": "7", "csrf": boss.csrf(page)})
    assert status == 200 and "Limits saved." in page
    shown = text_of(await settings(site.world, "show"))
    assert "**Server queue cap**: 7 (set by this server" in shown, shown
    # A value over the operator's ceiling is refused in words, and nothing changes.
    status, page, _ = await boss.post(f"{dashboard}/limits", {"queue_cap": "999", "csrf": boss.csrf(page)})
    assert status == 400 and "ceiling" in page
    # The key: set through the same use case, and never shown (its last four at most).
    _, page, _ = await boss.get(dashboard)
    assert 'type="password"' in page


async def test_me_shows_the_persons_own_jobs_in_every_server_and_their_own_queue(site: Site) -> None:
    alice, bob = site.browser(), site.browser()
    await alice.login(site.world.alice)
    status, page, _ = await alice.get("/me")
    assert status == 200 and "my own &lt;queue&gt; job" in page and "your own queue" in page
    assert "cat number 29" in page and f"server {site.world.guild.id}" in page
    assert "Older" in page  # 31 jobs: pages of 20
    await bob.login(site.world.bob)
    _, page, _ = await bob.get("/me")
    assert "my own" not in page and "cat number" not in page
    assert "a deleted result" in page and "· deleted" in page  # their own, marked, with no link to it
    assert page.count("Open in Discord") == 1


async def test_defaults_and_channels_change_through_the_dashboard_as_settings_would(site: Site) -> None:
    boss = site.browser()
    await boss.login(site.boss)
    dashboard = f"/d/{site.world.guild.id}"
    _, page, _ = await boss.get(dashboard)
    form = {
        "csrf": boss.csrf(page),
        "video_size": "landscape",
        "video_seconds": "8",
        "video_fps": "24",
        "video_model": "",
        "image_size": "square",
        "image_model": "",
    }
    status, page, _ = await boss.post(f"{dashboard}/defaults", form)
    assert status == 200 and "Defaults saved." in page
    status, page, _ = await boss.post(
        f"{dashboard}/channels",
        {"csrf": boss.csrf(page), "channel": str(site.world.channel.id), "action": "add"},
    )
    assert status == 200 and "Channels saved." in page and "#general" in page
    shown = text_of(await settings(site.world, "show"))
    assert "**Video length**: 8 s (set by this server)" in shown
    # What the form sent back unchanged keeps its source: still the operator's default.
    assert "**Video frame rate**: 24 fps (operator's default)" in shown
    assert f"<#{site.world.channel.id}>" in shown
    # A model the service does not list is refused, as by /settings.
    status, page, _ = await boss.post(
        f"{dashboard}/defaults", {**form, "csrf": boss.csrf(page), "video_model": "nope"}
    )
    assert status == 400 and "refused" in page


async def test_a_result_plays_from_a_link_fetched_fresh_from_discord_for_those_who_may_see_it(
    site: Site,
) -> None:
    world = site.world
    it = await world.video("a real clip", member=world.bob)
    message = await world.delivered(it)
    job_id = await world.job_id(it)
    await wait_state(world, job_id, "delivered")
    alice = site.browser()
    page = await alice.login(world.alice, then=site.gallery)
    assert f'<video controls preload="none" src="/media/{world.guild.id}/{job_id}"' in page
    status, _, response = await alice.get(f"/media/{world.guild.id}/{job_id}", allow_redirects=False)
    assert status == 302 and response.headers["Location"] == message.attachments[0].url
    async with alice.http.get(f"{site.base}/media/{world.guild.id}/{job_id}") as played:
        assert played.status == 200 and (await played.read())[4:8] == b"ftyp"  # the MP4 itself
    # Nothing is fetched for what the gallery does not show: #staff's result, a deleted one, another server's.
    for hidden in (site.secret.id, site.gone.id):
        status, _, _ = await alice.get(f"/media/{world.guild.id}/{hidden}", allow_redirects=False)
        assert status == 404
    # No signed link is kept in the database.
    assert "attachments/" not in str(job_rows(world)[job_id])


async def test_a_taken_web_port_stops_the_start_up_with_one_line(tmp_path: Path) -> None:
    world = await make_world(tmp_path)
    try:
        enable_web(world)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            env = {**world.env, "WEB_PORT": str(port), "LOG_LEVEL": "INFO"}
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, str(REPO / "bot.py")],
                cwd=str(REPO),
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
            )
    finally:
        await close_world(world)
    out = done.stdout + done.stderr
    assert done.returncode == 1 and f"WEB_PORT: cannot listen on 127.0.0.1:{port}" in out, out[-2000:]
    assert "Traceback" not in out
    assert env["WEB_CLIENT_SECRET"] not in out and env["WEB_SESSION_SECRET"] not in out
