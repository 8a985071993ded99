"""How styles read on Discord (cogs/styles.py, the ``style:`` autocomplete, the job's message): pure
functions of the core's records, no bot."""

from __future__ import annotations

import discord
from hypothesis import given
from hypothesis import strategies as st

from cogs.generate import style_choices
from cogs.i18n import t
from cogs.styles import show_sent_prompt, style_list_text
from cogs.views.render import render_job
from framecast.app import Job, JobKind, JobState, Style, StyleKind, StyleList
from tests.fakes.gen_service import VIDEO_MODEL

STYLED = {
    "prompt": "a cat *on* the moon",
    "model": VIDEO_MODEL,
    "width": 1152,
    "height": 768,
    "num_frames": 121,
    "frame_rate": 24,
    "seconds": 5,
    "style": "Noir <@1>",
    "style_template": "{prompt}, film noir",
    "styled_prompt": "a cat *on* the moon, film noir",
}


def job(params: dict[str, object]) -> Job:
    return Job(
        id=7,
        kind=JobKind.VIDEO,
        state=JobState.QUEUED,
        guild_id=1,
        channel_id=2,
        user_id=3,
        locale="en-US",
        params=params,
        created_at=1.0,
        updated_at=1.0,
    )


NAMES = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=32)


@given(NAMES, st.text(max_size=1000))
def test_autocomplete_choices_fit_discord_and_answer_the_name(name: str, template: str) -> None:
    [choice] = style_choices([Style(name, template + "{prompt}")])
    assert choice.value == name
    assert 1 <= len(choice.name) <= 100 and choice.name.startswith(name[:100])
    assert "\n" not in choice.name.removeprefix(name)


def test_autocomplete_offers_at_most_25() -> None:
    assert len(style_choices([Style(f"s{i}", "{prompt}") for i in range(30)])) == 25


def test_the_message_shows_the_members_prompt_and_the_style_name_literally() -> None:
    rendered = render_job(job(STYLED), position=1, now=2.0, poll_timeout=900)
    embed = rendered.embed
    assert embed.description == "a cat \\*on\\* the moon"
    assert {f.name: f.value for f in embed.fields}["Style"] == "Noir \\<\\@1>"
    plain = render_job(
        job({k: v for k, v in STYLED.items() if "style" not in k}), position=1, now=2.0, poll_timeout=900
    )
    assert "Style" not in {f.name for f in plain.embed.fields}


def test_job_adds_what_the_service_got_within_discords_limits() -> None:
    embed = discord.Embed(description="x")
    show_sent_prompt(embed, job(STYLED), "en-US")
    assert embed.fields[-1].name == "Sent to the service"
    assert embed.fields[-1].value == "a cat \\*on\\* the moon, film noir"
    long = {**STYLED, "styled_prompt": "y" * 2000}
    embed = discord.Embed(description="x")
    show_sent_prompt(embed, job(long), "de")
    assert embed.fields[-1].name == "An den Dienst gesendet"
    assert len(embed.fields[-1].value or "") == 1024 and (embed.fields[-1].value or "").endswith("…")
    embed = discord.Embed(description="z" * 5990)  # no room left in the embed: nothing added
    show_sent_prompt(embed, job(long), "en-US")
    assert embed.fields == []
    embed = discord.Embed()
    show_sent_prompt(embed, job({"prompt": "no style"}), "en-US")
    assert embed.fields == []


def test_the_list_shows_names_and_templates_as_typed() -> None:
    listed = StyleList((Style("*Bold*", "{prompt} @everyone " + "w" * 300, StyleKind.IMAGE),))
    text = style_list_text(listed, "en-US")
    assert text.startswith("**\\*Bold\\*** · images\n{prompt} \\@everyone ")
    assert text.endswith("…") and len(text) < 200
    assert style_list_text(StyleList(()), "fr") == t("style_list_empty", "fr")
