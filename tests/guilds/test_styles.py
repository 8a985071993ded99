"""A server's named styles (framecast.guilds.styles): names, templates, kinds, and the one expansion."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from framecast.guilds.styles import (
    MAX_STYLES,
    NAME_MAX_CHARS,
    PLACEHOLDER,
    TEMPLATE_MAX_CHARS,
    Style,
    StyleError,
    StyleKind,
    StyleProblem,
    check_name,
    check_template,
    expand,
    style_key,
)
from framecast.values import JobKind

# Prompts as members type them: any script, emoji sequences, markup, braces, format strings, the
# placeholder itself, backslashes, invisible and bidirectional characters.
PROMPTS = st.one_of(
    st.text(),
    st.sampled_from(
        [
            "一只猫在月球上跳舞，电影感",
            "पहाड़ों पर सूर्योदय",
            "قطة تطير فوق المدينة",
            "🐈‍⬛👩🏽‍🚀🏳️‍🌈 ❤️‍🔥",
            "{prompt}",
            "{0} {name!r} {{}} %s %(x)s $x ${x}",
            "\\1 \\g<0> back\\slash",
            "e\u0301 \u202eRTL\u202c \u200d zero\u200bwidth",
        ]
    ),
)
TEMPLATES = st.builds(
    lambda before, after, twice: before + PLACEHOLDER + after + (PLACEHOLDER if twice else ""),
    st.text(max_size=200),
    st.text(max_size=200),
    st.booleans(),
)


@given(PROMPTS)
def test_the_prompt_comes_out_byte_exact_inside_a_plain_template(prompt: str) -> None:
    out = expand("anime style, {prompt}, cel shading", prompt)
    assert out == "anime style, " + prompt + ", cel shading"
    assert out.encode("utf-8") == b"anime style, " + prompt.encode("utf-8") + b", cel shading"


@given(TEMPLATES, PROMPTS)
def test_every_placeholder_takes_the_prompt_and_nothing_else_changes(template: str, prompt: str) -> None:
    # Walk the template: its own text, braces included, is copied; each placeholder is the prompt.
    expected, i = [], 0
    while (found := template.find(PLACEHOLDER, i)) != -1:
        expected += [template[i:found], prompt]
        i = found + len(PLACEHOLDER)
    expected.append(template[i:])
    assert expand(template, prompt).encode("utf-8") == "".join(expected).encode("utf-8")


def test_braces_and_format_fields_in_the_template_stay_as_typed() -> None:
    # Never str.format: a template's other braces are the admin's text, not fields.
    assert expand("{0} {style} {{prompt}} {prompt}!", "cat") == "{0} {style} {cat} cat!"
    assert expand("{prompt}", "{prompt} {0}") == "{prompt} {0}"  # the prompt is never expanded again


def test_names_are_trimmed_one_line_visible_and_at_most_32_characters() -> None:
    assert check_name("  Anime   Noir ") == "Anime Noir"
    assert check_name("水彩") == "水彩"
    assert check_name("x" * NAME_MAX_CHARS) == "x" * NAME_MAX_CHARS
    for bad in ("", "   ", None, "x" * (NAME_MAX_CHARS + 1), "zero\u200bwidth", "bi\u202edi", "a\x00b"):
        with pytest.raises(StyleError) as refused:
            check_name(bad)
        assert refused.value.problem is StyleProblem.BAD_NAME
        assert refused.value.params == {"max": NAME_MAX_CHARS}
    assert check_name("two\nlines") == "two lines"  # whitespace of any kind reads as one space


def test_names_compare_ignoring_case_and_width() -> None:
    assert style_key("Anime") == style_key("ANIME") == style_key("ａｎｉｍｅ")
    assert style_key("Straße") == style_key("STRASSE")
    assert style_key("Anime  Noir") == style_key("anime noir")
    assert style_key("anime") != style_key("anime2")
    assert Style("Noir", "{prompt}").key == "noir"


def test_a_template_must_hold_the_placeholder_and_fit_1000_characters() -> None:
    assert check_template("{prompt}") == "{prompt}"
    fits = "x" * (TEMPLATE_MAX_CHARS - len(PLACEHOLDER)) + PLACEHOLDER
    assert check_template(fits) == fits  # unchanged, not even trimmed
    with pytest.raises(StyleError) as refused:
        check_template("an anime scene")
    assert refused.value.problem is StyleProblem.NO_PLACEHOLDER
    with pytest.raises(StyleError) as refused:
        check_template("{Prompt} and { prompt }")
    assert refused.value.problem is StyleProblem.NO_PLACEHOLDER
    with pytest.raises(StyleError) as refused:
        check_template(fits + "x")
    assert refused.value.problem is StyleProblem.TEMPLATE_TOO_LONG
    assert refused.value.params == {"max": TEMPLATE_MAX_CHARS, "length": TEMPLATE_MAX_CHARS + 1}


def test_kinds_fit_their_requests() -> None:
    assert StyleKind.BOTH.fits(JobKind.VIDEO) and StyleKind.BOTH.fits(JobKind.IMAGE)
    assert StyleKind.VIDEO.fits(JobKind.VIDEO) and not StyleKind.VIDEO.fits(JobKind.IMAGE)
    assert StyleKind.IMAGE.fits("image") and not StyleKind.IMAGE.fits("video")
    assert MAX_STYLES == 25
