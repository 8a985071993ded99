"""/history's page as Discord shows it (cogs/history.py): within Discord's limits whatever the
prompts, prompts literal, links only where the job's message is known and not deleted."""

from __future__ import annotations

import re
from typing import Any

import discord
from hypothesis import given, settings
from hypothesis import strategies as st

from cogs.history import history_view, jump_url, render_history
from framecast.app import Deletion, HistoryPage, HistoryRow, Job, JobKind, JobState, PromptHidden

GUILD, CHANNEL, USER = 10, 20, 30


def job(job_id: int, prompt: str = "a cat", **overrides: Any) -> Job:
    values: dict[str, Any] = {
        "id": job_id,
        "kind": JobKind.IMAGE,
        "state": JobState.DELIVERED,
        "guild_id": GUILD,
        "channel_id": CHANNEL,
        "user_id": USER,
        "locale": "en-US",
        "params": {"prompt": prompt},
        "created_at": 1_700_000_000.0,
        "updated_at": 1_700_000_000.0,
        "discord": {"message_id": 900 + job_id},
    }
    values.update(overrides)
    return Job(**values)


def page(*rows: HistoryRow, newer: int | None = None, older: int | None = None) -> HistoryPage:
    return HistoryPage(member_id=USER, rows=rows, total=len(rows), page=1, pages=1, older=older, newer=newer)


def unescaped(text: str) -> str:
    """What Discord shows of escaped text: a backslash before punctuation shows that character."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)


def test_links_go_to_the_current_message_never_to_a_deleted_or_hidden_one() -> None:
    assert jump_url(HistoryRow(job(1))) == f"https://discord.com/channels/{GUILD}/{CHANNEL}/901"
    moved = job(2, discord={"message_id": 5, "channel_message_id": 77})
    assert jump_url(HistoryRow(moved)) == f"https://discord.com/channels/{GUILD}/{CHANNEL}/77"
    assert jump_url(HistoryRow(job(3), deleted=Deletion(1.0, USER))) is None
    assert jump_url(HistoryRow(job(4, discord={}), hidden=PromptHidden.CHANNEL_NOT_READABLE)) is None
    assert jump_url(HistoryRow(job(5, discord={"token": "t", "message_id": "@original"}))) is None
    personal = job(6, guild_id=USER)  # a user install's DM job: its own id as the scope
    assert jump_url(HistoryRow(personal)) == f"https://discord.com/channels/@me/{CHANNEL}/906"


def test_a_row_says_state_kind_when_and_link() -> None:
    embed = render_history(
        page(HistoryRow(job(7)), HistoryRow(job(8, state=JobState.FAILED), deleted=None)), locale="en-US"
    )
    lines = (embed.description or "").splitlines()
    assert lines[0] == f"Jobs of <@{USER}>, newest first"
    assert lines[2] == (
        f"**#7** · ✅ done · Image · <t:1700000000:R> · [message](https://discord.com/channels/{GUILD}/{CHANNEL}/907)"
    )
    assert lines[3] == "a cat"
    assert lines[4].startswith("**#8** · ❌ failed · Image")
    assert embed.footer.text == "Page 1 of 1 · jobs in all: 2"


def test_hidden_prompts_and_deleted_results_say_so() -> None:
    hidden = HistoryRow(job(1, params={}, discord={}), hidden=PromptHidden.AGE_RESTRICTED)
    gone = HistoryRow(job(2), deleted=Deletion(1.0, USER))
    text = render_history(page(hidden, gone), locale="en-US").description or ""
    assert "(an age-restricted prompt: shown only in age-restricted channels)" in text
    assert "**#2** · 🗑️ deleted · Image" in text and "/902)" not in text


def buttons(view: discord.ui.View) -> list[tuple[str | None, str | None, bool]]:
    """(custom id, label, disabled) of each button (a DynamicItem wraps its button)."""
    out = []
    for child in view.children:
        item = getattr(child, "item", child)
        assert isinstance(item, discord.ui.Button)
        out.append((item.custom_id, item.label, item.disabled))
    return out


def test_previous_and_next_carry_the_member_and_the_cursors() -> None:
    view = history_view(page(HistoryRow(job(1)), newer=15, older=4), "en-US")
    assert buttons(view) == [
        (f"framecast:history:{USER}:newer:15", "Previous", False),
        (f"framecast:history:{USER}:older:4", "Next", False),
    ]
    ends = history_view(page(HistoryRow(job(1))), "de")
    assert [(label, disabled) for _, label, disabled in buttons(ends)] == [("Zurück", True), ("Weiter", True)]


@settings(max_examples=60, deadline=None)
@given(prompts=st.lists(st.text(min_size=0, max_size=2000), min_size=1, max_size=10))
def test_any_ten_prompts_fit_discords_limit_and_read_literally(prompts: list[str]) -> None:
    rows = tuple(HistoryRow(job(n + 1, prompt)) for n, prompt in enumerate(prompts))
    for locale in ("en-US", "hi"):
        embed = render_history(page(*rows), locale=locale)
        text = embed.description or ""
        assert len(text) <= 4096 and len(embed) <= 6000
        lines = text.split("\n")
        shown = lines[3::2]  # after the header and a blank line, each row's two lines
        assert len(shown) == len(prompts)
        for prompt, line in zip(prompts, shown, strict=True):
            folded = " ".join(prompt.split())
            literal = unescaped(line)
            # Whole, or cut visibly: what shows is the prompt's beginning, then "…".
            assert literal == folded or (literal.endswith("…") and folded.startswith(literal[:-1]))
