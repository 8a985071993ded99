"""Which prompts /queue shows to whom (framecast.app.queue_view): the rule alone, no Discord.

Another member's prompt shows only for a job in a channel the viewer can read, and an
age-restricted channel's prompt only when /queue is used in an age-restricted channel. Places,
counts and the viewer's own jobs never change.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from framecast.app import Job, JobKind, JobState, PromptHidden, QueueView, QueueViewer, order_rows

GUILD = 1
VIEWER, OTHER = 11, 12
GENERAL, STAFF, ADULT, THREAD_OF_ADULT = 100, 200, 300, 301


def job(
    job_id: int, *, user_id: int = OTHER, channel_id: int = GENERAL, state: JobState = JobState.QUEUED
) -> Job:
    return Job(
        id=job_id,
        kind=JobKind.VIDEO,
        state=state,
        guild_id=GUILD,
        channel_id=channel_id,
        user_id=user_id,
        locale="en-US",
        params={"prompt": f"prompt {job_id}", "model": "m", "num_frames": 121},
        created_at=1000.0 + job_id,
        updated_at=1000.0 + job_id,
        discord={"token": "secret-token"},
    )


def rows_for(jobs: list[Job], viewer: QueueViewer) -> QueueView:
    rows = order_rows(jobs, GUILD, position=lambda job_id: job_id, estimate=lambda _: None, viewer=viewer)
    return QueueView(tuple(rows), viewer.user_id, now=0.0)


# A member of the server who reads #general and the age-restricted channel (and its thread), not
# the staff channel, asking from #general.
MEMBER = QueueViewer(
    VIEWER,
    readable_channels=frozenset({GENERAL, ADULT, THREAD_OF_ADULT}),
    age_restricted_channels=frozenset({ADULT, THREAD_OF_ADULT}),
    in_age_restricted=False,
)


def test_a_prompt_from_a_channel_the_viewer_cannot_read_is_hidden_and_keeps_its_place() -> None:
    view = rows_for([job(1, channel_id=STAFF), job(2)], MEMBER)
    assert [row.position for row in view.rows] == [1, 2] and view.queued == 2
    assert [row.hidden for row in view.rows] == [PromptHidden.CHANNEL_NOT_READABLE, None]
    assert [row.prompt for row in view.rows] == [None, "prompt 2"]


def test_a_hidden_row_carries_neither_the_prompt_nor_the_chat_bookkeeping() -> None:
    [row] = rows_for([job(1, channel_id=STAFF)], MEMBER).rows
    assert "prompt" not in row.job.params and row.job.prompt == ""
    assert row.job.params["num_frames"] == 121  # what the row still shows (kind, size) stays
    assert row.job.discord == {}


def test_a_channel_the_chat_side_does_not_know_counts_as_unreadable() -> None:
    [row] = rows_for([job(1, channel_id=999)], MEMBER).rows
    assert row.hidden is PromptHidden.CHANNEL_NOT_READABLE


def test_an_age_restricted_prompt_shows_only_from_an_age_restricted_channel() -> None:
    jobs = [job(1, channel_id=ADULT), job(2, channel_id=THREAD_OF_ADULT)]
    assert [row.hidden for row in rows_for(jobs, MEMBER).rows] == [PromptHidden.AGE_RESTRICTED] * 2
    inside = QueueViewer(
        VIEWER, MEMBER.readable_channels, MEMBER.age_restricted_channels, in_age_restricted=True
    )
    assert [row.prompt for row in rows_for(jobs, inside).rows] == ["prompt 1", "prompt 2"]


def test_an_unreadable_age_restricted_channel_is_hidden_as_unreadable_even_from_an_age_restricted_one() -> (
    None
):
    # Being in an age-restricted channel never opens a channel the viewer cannot read, and the
    # reason given does not tell what kind of channel it is.
    viewer = QueueViewer(VIEWER, frozenset({GENERAL}), frozenset({ADULT}), in_age_restricted=True)
    [row] = rows_for([job(1, channel_id=ADULT)], viewer).rows
    assert row.hidden is PromptHidden.CHANNEL_NOT_READABLE and row.prompt is None


def test_the_viewers_own_jobs_always_show_in_full() -> None:
    nobody = QueueViewer(VIEWER)  # reads nothing the chat side knows of, outside any age-restricted channel
    jobs = [job(1, user_id=VIEWER, channel_id=STAFF), job(2, user_id=VIEWER, channel_id=ADULT)]
    view = rows_for(jobs, nobody)
    assert [(row.prompt, row.mine, row.hidden) for row in view.rows] == [
        ("prompt 1", True, None),
        ("prompt 2", True, None),
    ]


def test_running_jobs_are_hidden_like_queued_ones() -> None:
    view = rows_for([job(1, channel_id=STAFF, state=JobState.RUNNING), job(2)], MEMBER)
    assert (view.running, view.queued) == (1, 1)
    assert view.rows[0].position is None and view.rows[0].hidden is PromptHidden.CHANNEL_NOT_READABLE


channels = st.sampled_from([GENERAL, STAFF, ADULT, THREAD_OF_ADULT, 999])


@given(
    st.lists(st.tuples(channels, st.sampled_from([VIEWER, OTHER])), max_size=12),
    st.booleans(),
)
def test_hiding_never_changes_places_or_counts_and_shows_only_what_the_rule_allows(
    specs: list[tuple[int, int]], in_age_restricted: bool
) -> None:
    jobs = [job(i + 1, channel_id=channel, user_id=user) for i, (channel, user) in enumerate(specs)]
    viewer = QueueViewer(VIEWER, MEMBER.readable_channels, MEMBER.age_restricted_channels, in_age_restricted)
    everyone = QueueViewer(
        OTHER, frozenset({GENERAL, STAFF, ADULT, THREAD_OF_ADULT, 999}), in_age_restricted=True
    )
    seen, full = rows_for(jobs, viewer), rows_for(jobs, everyone)
    assert [(r.job.id, r.position) for r in seen.rows] == [(r.job.id, r.position) for r in full.rows]
    assert (seen.running, seen.queued) == (full.running, full.queued)
    by_id: dict[int, Any] = {j.id: j for j in jobs}
    for row in seen.rows:
        original = by_id[row.job.id]
        readable = original.channel_id in viewer.readable_channels
        adult = original.channel_id in viewer.age_restricted_channels
        allowed = original.user_id == VIEWER or (readable and (in_age_restricted or not adult))
        assert (row.prompt == original.prompt) if allowed else (row.prompt is None and row.job.prompt == "")


def test_a_hidden_row_carries_no_prompt_inside_its_style_either() -> None:
    styled = job(1, channel_id=STAFF)
    styled.params.update(style="Noir", style_template="{prompt}, noir", styled_prompt="prompt 1, noir")
    [row] = rows_for([styled], MEMBER).rows
    assert row.hidden is PromptHidden.CHANNEL_NOT_READABLE
    assert "prompt 1" not in repr(row.job.params) and row.job.service_prompt == ""
    assert row.job.params["style"] == "Noir"  # the style's name is the admin's, not the member's words


def test_a_job_queued_in_another_process_is_shown_queued_after_this_processes_queue() -> None:
    """After a takeover, another process holds some of the server's queued jobs: no place here."""
    jobs = [job(1, state=JobState.RUNNING), job(2), job(3), job(4)]
    here = {4: 1}  # only job 4 is queued in this process
    rows = order_rows(jobs, GUILD, position=here.get, estimate=lambda _: None, viewer=MEMBER)
    view = QueueView(tuple(rows), VIEWER, now=0.0)
    assert [(row.job.id, row.position) for row in view.rows] == [(1, None), (4, 1), (2, 2), (3, 3)]
    assert (view.running, view.queued) == (1, 3)
