"""Replies in the member's language, end to end: placeholders filled, no English prose left.

Settings replies, refusals, ``/settings show``, ``/help`` and ``/queue`` in Japanese, Hindi and
Polish; ``/settings show`` names the commands as the admin's client shows them (their localised
names). (English command names in ``/settings show`` were a product defect once.)
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.commands import image, refused, settings, text_of
from tests.e2e.harness import StartWorld, World

ENGLISH_WORDS = re.compile(
    r"\b(server|default|daily|queue|channel|allowed|blocklist|ceiling|resets|"
    r"nothing|running|queued|members?|generation|key|saved|refused)\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("locale", ["ja", "hi", "pl"])
async def test_new_replies_are_localised_with_placeholders_filled(
    start_synced: StartWorld, locale: str
) -> None:
    def add(world: World) -> None:
        world.extra = world.discord.add_channel(world.guild, "art")  # type: ignore[attr-defined]

    world = await start_synced(extra_env={"DAILY_IMAGE_QUOTA": "3", "MEMBER_JOB_LIMIT": "3"}, setup=add)
    art = world.extra  # type: ignore[attr-defined]
    texts: dict[str, str] = {}
    texts["limits"] = (await settings(world, "limits", {"member_jobs": 9}, locale=locale)).content
    texts["saved"] = (await settings(world, "limits", {"daily_images": 1}, locale=locale)).content
    texts["blocklist"] = (await settings(world, "blocklist add", {"terms": "zzz"}, locale=locale)).content
    texts["blocked"] = await refused(await image(world, "zzz", locale=locale))
    first = await image(world, "first", locale=locale)
    await world.delivered(first)
    texts["quota"] = await refused(await image(world, "second", locale=locale))
    await settings(world, "channels add", {"channel": art}, locale=locale)
    texts["channel"] = await refused(await image(world, "x", member=world.bob, locale=locale))
    await settings(world, "nsfw", {"only": True}, locale=locale)
    texts["nsfw"] = await refused(await image(world, "x", member=world.bob, channel=art, locale=locale))
    texts["show"] = text_of(await settings(world, "show", locale=locale))
    texts["key"] = (await settings(world, "key set", locale=locale)).content
    it = await world.discord.slash(world.guild, art, world.bob, "help", locale=locale)
    _, data = await it.wait_response()
    assert data is not None
    embed = data["embeds"][0]
    texts["help"] = "\n".join(
        [embed["title"], embed["description"], *(f"{f['name']}: {f['value']}" for f in embed["fields"])]
    )
    it = await world.discord.slash(world.guild, art, world.bob, "queue", locale=locale)
    await it.wait_response()
    reply = await it.wait_original(lambda m: bool(m.embeds))
    texts["queue"] = text_of(reply)
    for name, text in texts.items():
        assert text.strip(), name
        assert not re.search(r"\{\w+\}", text), (name, text)
        # Names of commands and env vars may stay as they are; words of English prose may not.
        prose = re.sub(r"/[\w ]+|KEY_ENCRYPTION_SECRET|<[@#t][^>]*>|\|\|[^|]*\|\||svc-[\w.-]+", "", text)
        assert not ENGLISH_WORDS.search(prose), (name, text)


async def test_settings_show_names_the_commands_as_the_admins_client_does(start_synced: StartWorld) -> None:
    world = await start_synced()
    show = text_of(await settings(world, "show", locale="ja"))
    assert "/動画" in show and "/画像" in show and "/video" not in show, show
