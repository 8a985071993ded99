"""A server's blocklist, end to end: what it catches and what it lets through.

Terms in any script, with punctuation, emoji and case or width variants are refused, also when an
invisible variation selector or Arabic vowel points sit inside the term; a term is no substring of
an innocent word in a spaced language. Again and Remix check the blocklist of today, and a refusal
never repeats the blocked term. (The variation selector and the Arabic diacritics were product
defects once; so were zero-width spaces, look-alike letters, Hangul fillers, small capitals and
letters split by dots.)
"""

from __future__ import annotations

from tests.e2e.commands import button, image, modal_values, refused, settings, video, with_buttons
from tests.e2e.harness import StartWorld, job_rows, service_creates


async def test_blocklist_scripts_punctuation_emoji_and_innocent_words(start_synced: StartWorld) -> None:
    world = await start_synced(members=4, extra_env={"MEMBER_JOB_LIMIT": "10"})
    terms = "バカ, 바보, ควาย, кот, f*ck, 🍆, ass, Straße"
    msg = await settings(world, "blocklist add", {"terms": terms})
    assert "8 terms" in msg.content, msg.content
    long_prompt = "a calm lake at dawn, " * 90 + "and a КОТ"  # ~1900 characters, the term at the end
    blocked = [
        "ﾊﾞｶやろう",  # half-width katakana with a voiced mark
        "너는 바보야",  # Korean, with a particle attached
        "ควายป่าในทุ่ง",  # Thai, no spaces
        "Кот на крыше",  # Cyrillic, other case
        "F*CK this",  # punctuation inside the term
        "a 🍆 emoji",
        "STRASSE at night",  # ß folds to ss
        long_prompt,
    ]
    for prompt in blocked:
        text = await refused(await image(world, prompt))
        assert "does not allow" in text, (prompt[:40], text)
        for term in ("バカ", "바보", "ควาย", "кот", "f*ck", "🍆", "Straße"):
            assert term not in text.casefold()
        assert not service_creates(world, prompt)
    # A term is no substring of an innocent word in a spaced language.
    innocent = ["a class of grass", "котлета на тарелке", "passion fruit"]
    for member, prompt in zip(world.members[0], innocent, strict=False):
        await world.job_id(await image(world, prompt, member=member))


async def test_an_invisible_variation_selector_does_not_slip_past_the_blocklist(
    start_synced: StartWorld,
) -> None:
    world = await start_synced(members=4, extra_env={"MEMBER_JOB_LIMIT": "10"})
    await settings(world, "blocklist add", {"terms": "禁止词, नमस्ते, 🍆"})
    for prompt in ("这是禁\ufe0f止词", "नम\ufe0fस्ते दुनिया", "a 🍆\ufe0f emoji"):
        text = await refused(await image(world, prompt))
        assert "does not allow" in text, (prompt, text)
        assert not service_creates(world, prompt)


async def test_look_alikes_invisible_characters_and_spelled_out_letters_do_not_slip_past(
    start_synced: StartWorld,
) -> None:
    # A zero-width space and a Cyrillic "е" inside the term, small capitals with a suffix caught by
    # "nude*", letters split by dots, a Hangul filler between words; yet "ass" is no part of "class".
    world = await start_synced(members=4, extra_env={"MEMBER_JOB_LIMIT": "10"})
    msg = await settings(world, "blocklist add", {"terms": "nude*, ass"})
    assert "2 terms" in msg.content, msg.content
    for prompt in (
        "a nu\u200bd\u0435 portrait",
        "\u0274\u1d1c\u1d05\u1d07s at the beach",
        "n.u.d.e",
        "kick\u3164ass",
    ):
        text = await refused(await video(world, prompt))
        assert "does not allow" in text, (prompt, text)
        assert "nude" not in text.casefold() and "ass" not in text.casefold().split()
        assert not service_creates(world, prompt)
    for member, prompt in zip(
        world.members[0], ["a class of grass", "my assistant, with passion"], strict=False
    ):
        await world.job_id(await video(world, prompt, member=member))


async def test_arabic_diacritics_do_not_slip_past_the_blocklist(start_synced: StartWorld) -> None:
    world = await start_synced()
    await settings(world, "blocklist add", {"terms": "كلب"})
    text = await refused(await image(world, "كَلْب كبير"))
    assert "does not allow" in text


async def test_remix_and_again_with_a_blocked_or_empty_prompt(start_synced: StartWorld) -> None:
    world = await start_synced()
    it = await image(world, "a quiet harbour")
    message = await with_buttons(world, it)
    await settings(world, "blocklist add", {"terms": "harbour"})
    # Again re-checks today's blocklist, for another member too.
    text = await refused(await world.discord.click(message, button(message, "again"), world.bob))
    assert "does not allow" in text and "harbour" not in text
    click = await world.discord.click(message, button(message, "remix"), world.bob)
    await click.wait_response()
    values = modal_values(click)
    for prompt in ("   ", "a HARBOUR at night"):
        submit = await world.discord.submit_modal(click, {**values, "prompt": prompt})
        text = await refused(submit)
        assert "harbour" not in text.casefold()
    assert len(service_creates(world)) == 1
    assert len(job_rows(world)) == 1
