"""The dashboard's channel and key forms, and the login's way back from Discord, end to end: the
real bot.py serving the web pages, the fake Discord's login, and a browser without JavaScript.

A channel is named only to who can read it (as Discord shows it), the channel form adds only the
channels it offers, a server's key check over the hour's limit is worded as /settings key words it,
and a person who pressed Cancel at Discord is told so, in their browser's language.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography.fernet import Fernet

from tests.e2e.commands import settings, text_of
from tests.e2e.harness import MANAGE_GUILD, StartWorld, World
from tests.e2e.webpages import Browser, Site, enable_web

GERMAN = {"Accept-Language": "de-DE,de;q=0.9,en;q=0.5"}
FRENCH = {"Accept-Language": "fr-FR,fr;q=0.9"}


def web_warnings(world: World) -> list[str]:
    """The web server's lines about requests it could not answer (an outage page each)."""
    return [line for line in world.bot.log_text().splitlines() if "web: " in line and "answering" in line]


async def test_the_dashboard_names_no_channel_its_admin_cannot_read(site: Site) -> None:
    world, guild = site.world, site.world.guild
    mods = next(role for role in site.boss.roles if role.name == "mods")
    manager = world.discord.add_member(guild, "manager", roles=[mods])  # Manage Server, not #staff
    dashboard = f"/d/{guild.id}"
    boss = site.browser()
    page = await boss.login(site.boss, then=dashboard)
    assert f'<option value="{site.staff.id}">#staff</option>' in page  # the boss reads #staff
    status, page, _ = await boss.post(
        f"{dashboard}/channels", {"csrf": boss.csrf(page), "action": "add", "channel": str(site.staff.id)}
    )
    assert status == 200 and "<li>#staff</li>" in page

    other = site.browser()
    page = await other.login(manager, then=dashboard)
    assert "Queue now" in page and f"#{world.channel.name}" in page
    assert "#staff" not in page and f'value="{site.staff.id}"' not in page
    assert "<li>a channel you cannot see</li>" in page  # allowed, counted, never named
    # Nor can they add it by its id: the form offers it not.
    status, page, _ = await other.post(
        f"{dashboard}/channels", {"csrf": other.csrf(page), "action": "add", "channel": str(site.staff.id)}
    )
    assert status == 400 and "Pick a channel." in page and "#staff" not in page


async def test_the_channel_form_adds_only_this_servers_channels_and_says_when_nothing_changed(
    site: Site,
) -> None:
    world = site.world
    dashboard = f"/d/{world.guild.id}"
    boss = site.browser()
    page = await boss.login(site.boss, then=dashboard)
    before = text_of(await settings(world, "show"))
    # Another server's channel, 2**63, a 20-digit number: none is a channel of this server.
    for stranger in ("123456789012345678", str(2**63), "9" * 20):
        status, page, _ = await boss.post(
            f"{dashboard}/channels", {"csrf": boss.csrf(page), "action": "add", "channel": stranger}
        )
        assert status == 400 and "Pick a channel." in page and "Channels saved." not in page, stranger
    status, page, _ = await boss.post(
        f"{dashboard}/channels",
        {"csrf": boss.csrf(page), "action": "remove", "channel": str(world.channel.id)},
        headers=GERMAN,
    )
    assert status == 400 and "Dieser Kanal steht nicht auf der Liste: Es wurde nichts geändert." in page
    assert text_of(await settings(world, "show")) == before  # generation still allowed everywhere
    # The channels it offers are added as before, and /settings sees them.
    status, page, _ = await boss.post(
        f"{dashboard}/channels", {"csrf": boss.csrf(page), "action": "add", "channel": str(world.channel.id)}
    )
    assert status == 200 and "Channels saved." in page
    assert f"<#{world.channel.id}>" in text_of(await settings(world, "show"))
    assert web_warnings(world) == []


async def test_a_key_check_over_the_hours_limit_says_when_to_try_again_in_the_readers_language(
    start: StartWorld,
) -> None:
    admins: list[Any] = []

    def setup(world: World) -> None:
        mods = world.discord.add_role(world.guild, "mods", permissions=MANAGE_GUILD)
        admins.append(world.discord.add_member(world.guild, "boss", roles=[mods]))
        enable_web(world)

    world = await start(extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode()}, setup=setup)
    browser = Browser(world, world.env["WEB_BASE_URL"])
    try:
        dashboard = f"/d/{world.guild.id}"
        page = await browser.login(admins[0], then=dashboard)
        for i in range(5):  # KEY_CHECKS_PER_HOUR: each asked of the service, and refused
            status, page, _ = await browser.post(
                f"{dashboard}/key", {"csrf": browser.csrf(page), "key": f"sk-no-{i}"}
            )
            assert status == 400 and "The service refused that key; nothing was stored." in page
        status, page, _ = await browser.post(
            f"{dashboard}/key", {"csrf": browser.csrf(page), "key": "sk-no-5"}
        )
        assert status == 400, page
        assert re.search(
            r"Too many key checks for this server \(at most 5 per hour\)\. You can try again in \d+ minutes?\.",
            page,
        )
        status, page, _ = await browser.post(
            f"{dashboard}/key", {"csrf": browser.csrf(page), "key": "sk-no-6"}, headers=GERMAN
        )
        assert status == 400
        assert re.search(
            r"höchstens 5 pro Stunde\)\. Du kannst es in \d+ Minuten? noch einmal versuchen\.", page
        )
        assert web_warnings(world) == []
    finally:
        await browser.close()


async def _callback(browser: Browser, query: str, **kwargs: object) -> tuple[int, str]:
    """Start a login in `browser`, then come back from Discord with `query` and this login's state."""
    _, _, response = await browser.get("/login", allow_redirects=False)
    state = parse_qs(urlsplit(response.headers["Location"]).query)["state"][0]
    status, page, _ = await browser.get(f"/login/callback?{query}&state={state}", **kwargs)
    return status, page


async def test_a_login_cancelled_at_discord_is_told_as_cancelled_and_offers_to_log_in_again(
    site: Site,
) -> None:
    browser = site.browser()
    denied = "error=access_denied&error_description=The+resource+owner+denied+the+request"
    status, page = await _callback(browser, denied)
    assert status == 400 and "<h1>Login cancelled</h1>" in page
    assert "You cancelled the login at Discord" in page and 'href="/login"' in page
    assert "did not start in this browser" not in page
    assert not any(cookie.key == "fc_session" for cookie in browser.jar)
    status, page = await _callback(browser, denied, headers=FRENCH)
    assert status == 400 and "Connexion annulée" in page and "Tu as annulé la connexion sur Discord" in page
    # A cancel that carries another login's state is still no login of this browser.
    _, _, response = await site.browser().get("/login", allow_redirects=False)
    foreign = parse_qs(urlsplit(response.headers["Location"]).query)["state"][0]
    status, page, _ = await browser.get(f"/login/callback?{denied}&state={foreign}")
    assert status == 400 and "did not start in this browser" in page
