"""Refusals that echo what a member typed or what the service listed, end to end: however long or
full of markup that text is, the member gets their private answer, in one Discord message.

Discord refuses message content over 2,000 characters (50035), and escaping markup can double a
text's length (``_`` is shown as ``\\_``): a refusal that echoed it whole was never delivered, and
the member saw "The application did not respond". The echo is cut (with "…") instead.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.commands import refused
from tests.e2e.harness import StartWorld, World, job_rows, service_creates
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL

MESSAGE_CHARS = 2000
#: What a member may type in a string option (Discord's limit): every character one to escape.
TYPED = "_" * 1500


def echoed(text: str, left: str, right: str) -> str:
    """What `text` quotes between `left` and `right`, unescaped once (as Discord shows it)."""
    found = re.search(re.escape(left) + "(.*?)" + re.escape(right), text, re.S)
    assert found, text
    return re.sub(r"\\(.)", r"\1", found.group(1))


@pytest.mark.parametrize("locale", ["en-US", "de"])
async def test_a_long_style_name_is_refused_in_one_message(world: World, locale: str) -> None:
    for command in ("video", "image"):
        it = await world.discord.slash(
            world.guild, world.channel, world.alice, command, {"prompt": "x", "style": TYPED}, locale=locale
        )
        text = await refused(it)
        assert len(text) <= MESSAGE_CHARS
        left, right = ("“", "”") if locale == "en-US" else ("„", "“")
        shown = echoed(text, left, right)
        assert shown.endswith("…") and TYPED.startswith(shown[:-1]) and len(shown) > 100
    # An admin removing a style by a name nobody made: the same.
    it = await world.discord.slash(
        world.guild,
        world.channel,
        world.admins[0],
        "settings",
        {"name": TYPED},
        subcommand="styles remove",
        locale=locale,
    )
    text = await refused(it)
    assert len(text) <= MESSAGE_CHARS and "…" in text
    assert job_rows(world) == {} and service_creates(world) == []


async def test_a_long_list_of_models_is_cut_in_the_refusal_of_an_unlisted_one(start: StartWorld) -> None:
    many = [f"v{i:02d}" + "_" * 97 for i in range(20)]  # 100 characters: the longest id a model may have

    def listing(world: World) -> None:
        world.service.models = [(VIDEO_MODEL, "video"), *((m, "video") for m in many), (IMAGE_MODEL, "image")]

    world = await start(setup=listing)
    for locale in ("en-US", "hi"):
        it = await world.discord.slash(
            world.guild,
            world.channel,
            world.alice,
            "video",
            {"prompt": "x", "model": "not-a-listed-model"},
            locale=locale,
        )
        text = await refused(it)
        assert len(text) <= MESSAGE_CHARS
        assert "not-a-listed-model" in text and VIDEO_MODEL in text and text.endswith("…")
    assert job_rows(world) == {} and service_creates(world) == []
