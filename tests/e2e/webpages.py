"""The web pages from the outside: the bot's WEB_* configuration for a world, a browser without
JavaScript (aiohttp with a cookie jar, following redirects through the fake Discord's login), and
delivered jobs written straight into the bot's database before it starts.

Shared by the web end-to-end tests (the HTTP ones and the real-browser ones).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from framecast.storage import Store
from framecast.values import JobKind, JobState, NewJob
from tests.e2e.endpoints import free_port
from tests.e2e.harness import MANAGE_GUILD, World, close_world, make_world
from tests.fakes.discord_api import READ_MESSAGE_HISTORY, VIEW_CHANNEL, FakeOverwrite

__all__ = ["HOSTILE", "Browser", "Seeded", "Site", "enable_web", "prompts_on", "seed_delivered", "site"]


def enable_web(world: World) -> str:
    """Turn the web pages on for `world`'s bot (before it starts); returns their base URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    oauth = world.discord.oauth
    oauth.redirect_uris.add(f"{base}/login/callback")
    world.env.update(
        {
            "WEB_PORT": str(port),
            "WEB_BASE_URL": base,
            "WEB_CLIENT_SECRET": oauth.client_secret,
            "WEB_SESSION_SECRET": secrets.token_urlsafe(32),
        }
    )
    return base


@dataclass(frozen=True)
class Seeded:
    """A delivered job written before the bot started."""

    id: int
    prompt: str
    channel_id: int
    user_id: int


async def seed_delivered(
    world: World,
    jobs: Sequence[tuple[Any, Any, str]],
    *,
    kind: JobKind = JobKind.IMAGE,
    params: dict[str, Any] | None = None,
    deleted: bool = False,
    personal: bool = False,
) -> list[Seeded]:
    """Write delivered jobs (`(member, channel, prompt)`, oldest first) into the bot's database, each
    with its result message known (as the bot records it); `personal`: in the member's own queue
    (a user install's, scoped by their id). The bot must not be running."""
    store = await Store.open(Path(world.env["DATABASE_PATH"]))
    made = []
    try:
        for member, channel, prompt in jobs:
            scope = member.id if personal else channel.guild.id
            new = NewJob(kind, scope, channel.id, member.id, "en-US", {"prompt": prompt, **(params or {})})
            job = await store.add(new, member_limit=None, guild_cap=None)
            await store.transition(job.id, JobState.SUBMITTING)
            await store.transition(job.id, JobState.DELIVERING)
            await store.transition(job.id, JobState.DELIVERED)
            record: dict[str, Any] = {"channel_message_id": 10**17 + job.id}
            if deleted:
                record.update({"deleted_at": 1.0, "deleted_by": member.id})
            await store.patch_discord(job.id, record)
            made.append(Seeded(job.id, prompt, channel.id, member.id))
    finally:
        await store.close()
    return made


class Browser:
    """A person's browser, without JavaScript: cookies (Secure ones too, over the test's plain
    HTTP to 127.0.0.1, as Chromium treats loopback) and redirects followed."""

    def __init__(self, world: World, base: str) -> None:
        self.world = world
        self.base = base
        self.jar = aiohttp.CookieJar(unsafe=True, treat_as_secure_origin=[URL(base)])
        self.http = aiohttp.ClientSession(cookie_jar=self.jar)

    def set_cookie(self, name: str, value: str) -> None:
        """Put a cookie in this browser (one copied from another: a stolen or forged one)."""
        self.jar.update_cookies({name: value}, response_url=URL(self.base))

    async def close(self) -> None:
        await self.http.close()

    async def get(self, path: str, **kwargs: Any) -> tuple[int, str, aiohttp.ClientResponse]:
        async with self.http.get(self.base + path, **kwargs) as response:
            return response.status, await response.text(), response

    async def post(
        self, path: str, data: dict[str, str], **kwargs: Any
    ) -> tuple[int, str, aiohttp.ClientResponse]:
        async with self.http.post(self.base + path, data=data, **kwargs) as response:
            return response.status, await response.text(), response

    async def login(self, person: Any, *, then: str = "/") -> str:
        """Log in as `person` (a fake member or user) through the fake Discord; the page landed on."""
        self.world.discord.oauth.login = getattr(person, "user", person)
        status, text, _ = await self.get(f"/login?next={then}")
        assert status == 200, text
        return text

    def csrf(self, page: str) -> str:
        """The CSRF token of the first form on `page`."""
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found, "no CSRF token on the page"
        return found.group(1)


def prompts_on(page: str) -> list[str]:
    """The prompts a gallery page shows, as text (unescaped once, as a browser shows them)."""
    return [unescape(p) for p in re.findall(r'<p class="prompt">(.*?)</p>', page, flags=re.S)]


# -- the `site` fixture (registered by tests/conftest.py) -------------------------------------------
HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)> & "quotes"'


@dataclass
class Site:
    """A world with the web pages on, its people and its seeded results."""

    world: World
    base: str
    boss: Any  # staff role (reads #staff) and the mods role (Manage Server)
    staff: Any
    cats: list[Seeded]
    secret: Seeded
    hostile: Seeded
    gone: Seeded
    browsers: list[Browser]

    def browser(self) -> Browser:
        browser = Browser(self.world, self.base)
        self.browsers.append(browser)
        return browser

    @property
    def gallery(self) -> str:
        return f"/g/{self.world.guild.id}"


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    world = await make_world(tmp_path)
    browsers: list[Browser] = []
    try:
        fake, guild = world.discord, world.guild
        staff_role = fake.add_role(guild, "staff")
        mods = fake.add_role(guild, "mods", permissions=MANAGE_GUILD)
        staff = fake.add_channel(
            guild,
            "staff",
            overwrites=[
                FakeOverwrite.of(guild.everyone, deny=VIEW_CHANNEL | READ_MESSAGE_HISTORY),
                FakeOverwrite.of(staff_role, allow=VIEW_CHANNEL | READ_MESSAGE_HISTORY),
            ],
        )
        boss = fake.add_member(guild, "boss", roles=[staff_role, mods])
        base = enable_web(world)
        cats = await seed_delivered(
            world, [(world.alice, world.channel, f"cat number {i}") for i in range(30)]
        )
        (secret,) = await seed_delivered(world, [(boss, staff, "staff only: the secret plan")])
        (hostile,) = await seed_delivered(world, [(world.bob, world.channel, HOSTILE)])
        (gone,) = await seed_delivered(world, [(world.bob, world.channel, "a deleted result")], deleted=True)
        await seed_delivered(world, [(world.alice, world.channel, "my own <queue> job")], personal=True)
        await world.start_bot()
        yield Site(world, base, boss, staff, cats, secret, hostile, gone, browsers)
    finally:
        for browser in browsers:
            await browser.close()
        await close_world(world)
