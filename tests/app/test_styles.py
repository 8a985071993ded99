"""Servers' styles in the application (framecast.app.styles): the book, the admins' use cases, and
how a request's parameters take a style. A real store (SQLite in ``tmp_path``), no Discord."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from framecast.app import (
    MAX_STYLES,
    Actor,
    AdminRefusal,
    AdminRefused,
    IntakeError,
    IntakeProblem,
    ServerStyles,
    Style,
    StyleBook,
    StyleError,
    StyleKind,
    StyleProblem,
    job_style,
    styled_params,
)
from framecast.storage import Store
from framecast.values import JobKind

GUILD, OTHER_GUILD, ADMIN = 1, 2, 13
#: The server's admin (Manage Server), as the edges read them.
ADMIN_HERE = Actor(ADMIN, GUILD, manages_guild=True)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with await Store.open(tmp_path / "styles.sqlite3") as opened:
        yield opened


async def test_the_book_is_kept_current_and_read_back_at_start_up(store: Store) -> None:
    book = await StyleBook.load(store)
    admins = ServerStyles(book)
    added = await admins.add(ADMIN_HERE, "  Anime  Noir ", "{prompt}, anime", StyleKind.VIDEO)
    assert (added.style.name, added.count) == ("Anime Noir", 1)
    await admins.add(ADMIN_HERE, "Watercolour", "watercolour of {prompt}", StyleKind.IMAGE)
    await admins.add(ADMIN_HERE, "Both", "{prompt}!")
    assert [s.name for s in book.suggest(GUILD, JobKind.VIDEO, "")] == ["Anime Noir", "Both"]
    assert [s.name for s in book.suggest(GUILD, JobKind.IMAGE, "o")] == ["Watercolour", "Both"]
    assert [s.name for s in book.suggest(GUILD, JobKind.IMAGE, "b")] == ["Both"]
    assert book.suggest(OTHER_GUILD, JobKind.VIDEO, "") == [] and book.suggest(None, JobKind.VIDEO, "") == []
    assert book.find(GUILD, "anime noir") == added.style
    removed = await admins.remove(ADMIN_HERE, "ANIME NOIR")
    assert (removed.style.name, removed.count) == ("Anime Noir", 2)
    assert book.find(GUILD, "Anime Noir") is None
    with pytest.raises(StyleError) as refused:
        await admins.remove(ADMIN_HERE, "Anime Noir")
    assert refused.value.problem is StyleProblem.NOT_FOUND
    reloaded = await StyleBook.load(store)
    assert [s.name for s in reloaded.styles(GUILD)] == ["Watercolour", "Both"]
    assert [s.name for s in ServerStyles(reloaded).list_styles(ADMIN_HERE).styles] == ["Watercolour", "Both"]


@pytest.mark.parametrize(
    ("who", "refusal"),
    [
        (Actor(ADMIN, GUILD), AdminRefusal.NOT_MANAGER),  # no Manage Server in the server
        (Actor(ADMIN, ADMIN, manages_guild=True), AdminRefusal.NO_SERVER),  # a person's own queue
    ],
)
async def test_only_a_server_manager_may_add_list_or_remove_styles(
    store: Store, who: Actor, refusal: AdminRefusal
) -> None:
    admins = ServerStyles(await StyleBook.load(store))
    await admins.add(ADMIN_HERE, "Noir", "{prompt}, film noir")
    for attempt in (
        lambda: admins.add(who, "Pastel", "{prompt}, pastel"),
        lambda: admins.remove(who, "Noir"),
    ):
        with pytest.raises(AdminRefused) as refused:
            await attempt()
        assert refused.value.refusal is refusal
    with pytest.raises(AdminRefused):
        admins.list_styles(who)
    assert [s.name for s in (await store.styles.all()).get(GUILD, [])] == ["Noir"]  # nothing written
    assert (await store.styles.all()).get(ADMIN, []) == []


async def test_the_admins_refusals(store: Store) -> None:
    admins = ServerStyles(await StyleBook.load(store))
    cases = [
        (("", "{prompt}"), StyleProblem.BAD_NAME),
        (("x", "no placeholder"), StyleProblem.NO_PLACEHOLDER),
        (("x", "{prompt}" + "y" * 993), StyleProblem.TEMPLATE_TOO_LONG),
    ]
    for (name, template), problem in cases:
        with pytest.raises(StyleError) as refused:
            await admins.add(ADMIN_HERE, name, template)
        assert refused.value.problem is problem
    for i in range(MAX_STYLES):
        await admins.add(ADMIN_HERE, f"s{i}", "{prompt}")
    for name, problem in (("S0", StyleProblem.NAME_TAKEN), ("new", StyleProblem.TOO_MANY)):
        with pytest.raises(StyleError) as refused:
            await admins.add(ADMIN_HERE, name, "{prompt}")
        assert refused.value.problem is problem
    assert len((await store.styles.all()).get(GUILD, [])) == MAX_STYLES


def test_styled_params_keep_the_members_prompt_and_everything_a_later_job_needs() -> None:
    style = Style("Noir", "{prompt}, film noir")
    params = styled_params({"prompt": "猫 {prompt}", "model": "m"}, style, 100)
    assert params == {
        "prompt": "猫 {prompt}",
        "model": "m",
        "style": "Noir",
        "style_template": "{prompt}, film noir",
        "styled_prompt": "猫 {prompt}, film noir",
    }
    assert job_style(params) == Style("Noir", "{prompt}, film noir")
    assert styled_params(params, None, 100) == {"prompt": "猫 {prompt}", "model": "m"}
    assert job_style({"prompt": "x", "style": "Noir"}) is None
    with pytest.raises(IntakeError) as refused:
        styled_params({"prompt": "a" * 90}, style, 100)
    assert refused.value.problem is IntakeProblem.STYLED_PROMPT_TOO_LONG
    assert refused.value.params == {"style": "Noir", "max": 100, "length": 101}
