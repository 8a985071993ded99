"""The servers' styles in the store (framecast.storage.styles), on SQLite and PostgreSQL alike.

"Two processes" are two store objects on one database, as in the contract suite: the per-server
limit and a name taken in another case hold between them, also when both add at once.
"""

from __future__ import annotations

import asyncio

import pytest

from framecast.guilds.styles import Style, StyleError, StyleKind, StyleProblem
from tests.fakes.clock import ManualClock
from tests.stores import Backend

GUILD, OTHER_GUILD = 111_111_111_111_111_111, 444_444_444_444_444_444
ADMIN, OTHER_ADMIN = 666_666_666_666_666_666, 777_777_777_777_777_777
TEMPLATES = [
    "anime style, {prompt}, cel shading",
    "水彩画风格：{prompt}，柔和的光线",
    "{prompt} — 🎬 «cinématique» {0} {{x}} \\n \u202eRTL\u202c",
    "x" * 992 + "{prompt}",
]


@pytest.fixture
def store_clock() -> ManualClock:
    """The stores' clock starts at a real date (October 2025), not at the epoch."""
    return ManualClock(wall_start=1_760_000_000.0)


async def test_styles_round_trip_exactly_and_survive_a_reopen(backend: Backend) -> None:
    store = await backend.open()
    added = []
    for i, template in enumerate(TEMPLATES):
        kind = list(StyleKind)[i % 3]
        added.append(await store.styles.add(GUILD, Style(f"Style {i}", template, kind), by=ADMIN, limit=25))
        await backend.clock.advance(1)
    await store.styles.add(OTHER_GUILD, Style("Noir", "{prompt}, noir"), by=OTHER_ADMIN, limit=25)
    assert [s.template for s in added] == TEMPLATES
    assert added[0].created_by == ADMIN and added[0].created_at == 1_760_000_000.0
    again = await backend.open()
    assert (await again.styles.all()).get(GUILD, []) == added  # oldest first, every byte kept
    everything = await again.styles.all()
    assert everything[GUILD] == added
    assert [s.name for s in everything[OTHER_GUILD]] == ["Noir"]
    # The change is in the audit log (who and when), which /settings' reader skips as not a Setting.
    assert await again.settings_log(GUILD) == []


async def test_a_name_taken_in_any_case_is_refused(backend: Backend) -> None:
    store = await backend.open()
    await store.styles.add(GUILD, Style("Anime", "{prompt}, anime"), by=ADMIN, limit=25)
    for name in ("Anime", "ANIME", "ａｎｉｍｅ"):
        with pytest.raises(StyleError) as refused:
            await store.styles.add(GUILD, Style(name, "{prompt}"), by=ADMIN, limit=25)
        assert refused.value.problem is StyleProblem.NAME_TAKEN
        assert refused.value.params == {"name": "Anime"}
    # Another server may use the name.
    await store.styles.add(OTHER_GUILD, Style("anime", "{prompt}"), by=ADMIN, limit=25)
    assert [s.template for s in (await store.styles.all()).get(GUILD, [])] == ["{prompt}, anime"]


async def test_the_limit_holds_across_processes_adding_at_once(backend: Backend) -> None:
    first, second = await backend.open(), await backend.open()
    for i in range(3):
        await first.styles.add(GUILD, Style(f"s{i}", "{prompt}"), by=ADMIN, limit=5)
    results = await asyncio.gather(
        *(
            (first if i % 2 else second).styles.add(GUILD, Style(f"n{i}", "{prompt}"), by=ADMIN, limit=5)
            for i in range(6)
        ),
        return_exceptions=True,
    )
    refused = [r for r in results if isinstance(r, StyleError)]
    assert len(refused) == 4 and all(r.problem is StyleProblem.TOO_MANY for r in refused)
    assert refused[0].params == {"max": 5}
    assert len((await first.styles.all()).get(GUILD, [])) == 5
    # The same name from two processes at once: one wins, the other is told it is taken.
    same = await asyncio.gather(
        first.styles.add(OTHER_GUILD, Style("Same", "{prompt} 1"), by=ADMIN, limit=25),
        second.styles.add(OTHER_GUILD, Style("SAME", "{prompt} 2"), by=ADMIN, limit=25),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Style) for r in same) == 1
    assert sum(isinstance(r, StyleError) and r.problem is StyleProblem.NAME_TAKEN for r in same) == 1


async def test_remove_finds_the_style_in_any_case(backend: Backend) -> None:
    store = await backend.open()
    kept = await store.styles.add(GUILD, Style("Keep", "{prompt}!"), by=ADMIN, limit=25)
    gone = await store.styles.add(GUILD, Style("Straße", "{prompt}?"), by=ADMIN, limit=25)
    assert await store.styles.remove(GUILD, "STRASSE", by=OTHER_ADMIN) == gone
    assert await store.styles.remove(GUILD, "Straße", by=OTHER_ADMIN) is None
    assert await store.styles.remove(OTHER_GUILD, "Keep", by=OTHER_ADMIN) is None
    assert (await (await backend.open()).styles.all()).get(GUILD, []) == [kept]
