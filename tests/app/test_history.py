"""/history's use case (framecast.app.history): who may look, what a row carries, pages and cursors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from framecast.app import (
    Actor,
    Deletion,
    HistoryRefused,
    MemberHistory,
    PromptHidden,
    QueueViewer,
    may_view,
)
from framecast.storage import Store
from framecast.values import JobKind, JobState, NewJob
from tests.fakes.clock import ManualClock

GUILD, OTHER_GUILD = 1, 2
ALICE, BOB, ADMIN = 11, 12, 13
OPEN_CHANNEL, STAFF_CHANNEL = 100, 200


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(tmp_path / "jobs.sqlite3", clock=ManualClock())
    try:
        yield opened
    finally:
        await opened.close()


async def add(
    store: Store,
    *,
    user_id: int = ALICE,
    guild_id: int = GUILD,
    channel_id: int = OPEN_CHANNEL,
    prompt: str = "p",
    style: Mapping[str, str] | None = None,
) -> int:
    job = NewJob(
        kind=JobKind.VIDEO,
        guild_id=guild_id,
        channel_id=channel_id,
        user_id=user_id,
        locale="en-US",
        params={"prompt": prompt, "model": "m", **(style or {})},
        discord={"message_id": 9},
    )
    return (await store.add(job, member_limit=None, guild_cap=None)).id


def test_may_view_own_jobs_or_anyones_with_manage_server() -> None:
    assert may_view(Actor(ALICE, GUILD), ALICE)
    assert not may_view(Actor(ALICE, GUILD), BOB)
    assert may_view(Actor(ADMIN, GUILD, manages_guild=True), BOB)


async def test_another_members_history_is_refused_without_manage_server(store: Store) -> None:
    await add(store, user_id=BOB)
    with pytest.raises(HistoryRefused) as refused:
        await MemberHistory(store).show(Actor(ALICE, GUILD), QueueViewer(ALICE), BOB)
    assert refused.value.member_id == BOB


async def test_pages_carry_their_number_and_cursors(store: Store) -> None:
    ids = [await add(store) for _ in range(23)]
    await add(store, user_id=BOB)
    await add(store, guild_id=OTHER_GUILD)
    history = MemberHistory(store)
    me, viewer = Actor(ALICE, GUILD), QueueViewer(ALICE)

    first = await history.show(me, viewer, ALICE)
    assert (first.page, first.pages, first.total, first.member_id) == (1, 3, 23, ALICE)
    assert [row.job.id for row in first.rows] == ids[:-11:-1]
    assert first.newer is None and first.older == ids[13]

    second = await history.show(me, viewer, ALICE, before=first.older)
    assert second.page == 2 and second.newer == ids[12] and second.older == ids[3]
    third = await history.show(me, viewer, ALICE, before=second.older)
    assert third.page == 3 and third.older is None and [r.job.id for r in third.rows] == ids[2::-1]
    back = await history.show(me, viewer, ALICE, after=third.newer)
    assert back == second

    empty = await history.show(Actor(BOB, OTHER_GUILD), QueueViewer(BOB), BOB)
    assert (empty.rows, empty.page, empty.pages, empty.older, empty.newer) == ((), 1, 1, None, None)


async def test_anothers_prompts_follow_what_the_viewer_can_read(store: Store) -> None:
    public = await add(store, user_id=BOB, prompt="open words")
    staff = await add(store, user_id=BOB, channel_id=STAFF_CHANNEL, prompt="staff words")
    admin = Actor(ADMIN, GUILD, manages_guild=True)
    viewer = QueueViewer(ADMIN, readable_channels=frozenset({OPEN_CHANNEL}))

    page = await MemberHistory(store).show(admin, viewer, BOB)

    rows = {row.job.id: row for row in page.rows}
    assert rows[public].prompt == "open words" and rows[public].hidden is None
    hidden = rows[staff]
    assert hidden.hidden is PromptHidden.CHANNEL_NOT_READABLE and hidden.prompt is None
    # Absent, not only unshown: no prompt and no chat record (no link) in the row.
    assert "prompt" not in hidden.job.params and hidden.job.discord == {}
    assert "staff words" not in repr(page)


async def test_a_hidden_styled_prompt_is_absent_inside_its_style_too(store: Store) -> None:
    style = {"style": "Noir", "style_template": "noir: {prompt}", "styled_prompt": "noir: staff words"}
    staff = await add(store, user_id=BOB, channel_id=STAFF_CHANNEL, prompt="staff words", style=style)
    admin = Actor(ADMIN, GUILD, manages_guild=True)
    viewer = QueueViewer(ADMIN, readable_channels=frozenset({OPEN_CHANNEL}))

    page = await MemberHistory(store).show(admin, viewer, BOB)

    (row,) = page.rows
    assert row.job.id == staff and row.hidden is PromptHidden.CHANNEL_NOT_READABLE
    assert "staff words" not in repr(row.job.params) and row.job.params["style"] == "Noir"


async def test_own_prompts_are_always_shown_and_a_deleted_result_is_marked(store: Store) -> None:
    staff = await add(store, channel_id=STAFF_CHANNEL, prompt="mine")
    await store.patch_discord(staff, {"deleted_at": 5.0, "deleted_by": ADMIN})
    kept = await add(store)
    page = await MemberHistory(store).show(Actor(ALICE, GUILD), QueueViewer(ALICE), ALICE)
    rows = {row.job.id: row for row in page.rows}
    assert rows[staff].prompt == "mine" and rows[staff].hidden is None
    assert rows[staff].deleted == Deletion(5.0, ADMIN)
    assert rows[kept].deleted is None and rows[kept].job.state is JobState.QUEUED


async def test_a_personal_scope_is_the_persons_own_id(store: Store) -> None:
    # A user install's DM jobs carry the person's own id as their guild id.
    dm_job = await add(store, guild_id=ALICE)
    await add(store)
    page = await MemberHistory(store).show(Actor(ALICE, ALICE), QueueViewer(ALICE), ALICE)
    assert [row.job.id for row in page.rows] == [dm_job]
