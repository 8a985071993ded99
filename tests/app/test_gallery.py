"""The gallery's use case (framecast.app.gallery) on a real store: /queue's privacy rule applied to
whole results, deleted results never shown, filters and search confirmed row by row, keyset pages."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from framecast.app import Actor, Gallery, GalleryQuery, QueueViewer, ServerMember
from framecast.storage import Store
from framecast.values import JobKind, JobState, NewJob
from tests.fakes.clock import ManualClock
from tests.pg import fresh_database

GUILD, OTHER_GUILD = 1, 2
ALICE, BOB = 11, 12
OPEN, STAFF, ADULT = 100, 200, 300


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store on either database (the gallery's SQL is written once for both)."""
    async with contextlib.AsyncExitStack() as stack:
        where = str(tmp_path / "jobs.sqlite3")
        if request.param == "postgres":
            where = await stack.enter_async_context(fresh_database())
        opened = await Store.open(where, clock=ManualClock())
        try:
            yield opened
        finally:
            await opened.close()


async def delivered(
    store: Store,
    prompt: str,
    *,
    user_id: int = BOB,
    channel_id: int = OPEN,
    guild_id: int = GUILD,
    kind: JobKind = JobKind.IMAGE,
    deleted: bool = False,
    state: JobState = JobState.DELIVERED,
    **params: Any,
) -> int:
    new = NewJob(kind, guild_id, channel_id, user_id, "en-US", {"prompt": prompt, **params})
    job = await store.add(new, member_limit=None, guild_cap=None)
    if state is JobState.DELIVERED:
        for step in (JobState.SUBMITTING, JobState.DELIVERING, JobState.DELIVERED):
            await store.transition(job.id, step)
    if deleted:
        await store.patch_discord(job.id, {"deleted_at": 5.0, "deleted_by": user_id})
    return job.id


def member(readable: set[int], *, adult: set[int] = frozenset(), user: int = ALICE) -> ServerMember:  # type: ignore[assignment]
    viewer = QueueViewer(user, frozenset(readable), frozenset(adult), in_age_restricted=True)
    return ServerMember(Actor(user, GUILD), viewer, "Guild")


def prompts(page: Any) -> list[str]:
    return [item.job.prompt for item in page.items]


async def test_a_result_whose_prompt_queue_would_hide_is_not_shown_at_all(store: Store) -> None:
    await delivered(store, "open")
    await delivered(store, "staff secret", channel_id=STAFF)
    await delivered(store, "my own in staff", channel_id=STAFF, user_id=ALICE)
    await delivered(store, "other server", guild_id=OTHER_GUILD)
    page = await Gallery(store.web).page(GUILD, member({OPEN}), GalleryQuery())
    assert prompts(page) == ["my own in staff", "open"]
    page = await Gallery(store.web).page(GUILD, member({OPEN, STAFF}), GalleryQuery())
    assert prompts(page) == ["my own in staff", "staff secret", "open"]


async def test_age_restricted_results_show_only_to_members_who_can_read_that_channel(store: Store) -> None:
    await delivered(store, "adult", channel_id=ADULT)
    assert prompts(await Gallery(store.web).page(GUILD, member({OPEN}), GalleryQuery())) == []
    assert prompts(
        await Gallery(store.web).page(GUILD, member({OPEN, ADULT}, adult={ADULT}), GalleryQuery())
    ) == ["adult"]


async def test_deleted_and_unfinished_results_never_show(store: Store) -> None:
    await delivered(store, "kept")
    await delivered(store, "deleted", deleted=True)
    await delivered(store, "still queued", state=JobState.QUEUED)
    assert prompts(await Gallery(store.web).page(GUILD, member({OPEN}), GalleryQuery())) == ["kept"]


async def test_pages_are_keyset_newest_first_and_fill_across_hidden_results(store: Store) -> None:
    shown = []
    for i in range(7):
        shown.append(await delivered(store, f"open {i}"))
        for _ in range(5):  # more hidden than a batch holds between two shown results
            await delivered(store, "hidden", channel_id=STAFF)
    gallery = Gallery(store.web, page_size=3)
    first = await gallery.page(GUILD, member({OPEN}), GalleryQuery())
    assert prompts(first) == ["open 6", "open 5", "open 4"] and first.older == shown[4]
    second = await gallery.page(GUILD, member({OPEN}), GalleryQuery(before=first.older))
    assert prompts(second) == ["open 3", "open 2", "open 1"]
    third = await gallery.page(GUILD, member({OPEN}), GalleryQuery(before=second.older))
    assert prompts(third) == ["open 0"] and third.older is None


async def test_search_is_literal_text_in_the_prompt_ignoring_case(store: Store) -> None:
    await delivered(store, 'A "Quoted" 100% cat_like \\ prompt')
    await delivered(store, "a plain cat")
    await delivered(store, "dog", style="cat style", style_template="{prompt}")
    gallery, viewer = Gallery(store.web), member({OPEN})
    assert prompts(await gallery.page(GUILD, viewer, GalleryQuery(search='"quoted" 100%'))) == [
        'A "Quoted" 100% cat_like \\ prompt'
    ]
    assert prompts(await gallery.page(GUILD, viewer, GalleryQuery(search="t_l"))) == [
        'A "Quoted" 100% cat_like \\ prompt'
    ]
    assert prompts(await gallery.page(GUILD, viewer, GalleryQuery(search="%"))) == [
        'A "Quoted" 100% cat_like \\ prompt'
    ]
    # Words of the style's name or other parameters are not the prompt.
    assert prompts(await gallery.page(GUILD, viewer, GalleryQuery(search="CAT"))) == [
        "a plain cat",
        'A "Quoted" 100% cat_like \\ prompt',
    ]


async def test_search_and_style_ignore_case_outside_ascii_on_both_databases(store: Store) -> None:
    # SQLite's lower() and LIKE fold ASCII only: the store's cut must not drop these.
    await delivered(store, "Ärger im Café", style="Ölbild", style_template="oil {prompt}")
    await delivered(store, "Кот на луне")
    await delivered(store, "ΣΟΦΙΑ")
    gallery, viewer = Gallery(store.web), member({OPEN})
    for search, found in (("ärger", "Ärger im Café"), ("кот на", "Кот на луне"), ("σοφια", "ΣΟΦΙΑ")):
        assert prompts(await gallery.page(GUILD, viewer, GalleryQuery(search=search))) == [found], search
    assert prompts(await gallery.page(GUILD, viewer, GalleryQuery(style="Ölbild"))) == ["Ärger im Café"]
    assert prompts(await gallery.page(GUILD, viewer, GalleryQuery(search="кот в"))) == []


async def test_filters_by_member_kind_and_style(store: Store) -> None:
    await delivered(store, "alice video", user_id=ALICE, kind=JobKind.VIDEO)
    await delivered(store, "bob image")
    await delivered(store, "styled", style="Noir", style_template="noir {prompt}")
    await delivered(store, "other style", style="Noir2", style_template="x {prompt}")
    gallery, viewer = Gallery(store.web), member({OPEN})
    assert prompts(await gallery.page(GUILD, viewer, GalleryQuery(member=ALICE))) == ["alice video"]
    assert prompts(await gallery.page(GUILD, viewer, GalleryQuery(kind=JobKind.VIDEO))) == ["alice video"]
    page = await gallery.page(GUILD, viewer, GalleryQuery(style="Noir"))
    assert prompts(page) == ["styled"] and page.items[0].style == "Noir"


def test_a_member_is_told_the_names_of_the_channels_they_can_read_only() -> None:
    viewer = QueueViewer(ALICE, frozenset({OPEN}), frozenset(), in_age_restricted=True)
    seen = ServerMember(Actor(ALICE, GUILD), viewer, "Guild", channels=((OPEN, "general"), (STAFF, "staff")))
    assert seen.channels == ((OPEN, "general"),)
