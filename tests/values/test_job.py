"""The job model: states, the transition table, the records and the errors."""

from __future__ import annotations

import pytest

from framecast.values import (
    ACTIVE,
    DELETED_AT,
    DELETED_BY,
    TERMINAL,
    TRANSITIONS,
    AlreadyRetried,
    DailyQuotaReached,
    Deletion,
    GuildQueueFull,
    InvalidTransition,
    Job,
    JobError,
    JobKind,
    JobLimitError,
    JobNotFound,
    JobState,
    MemberLimitReached,
    NewJob,
    check_transition,
)

S = JobState


def make_job(**overrides: object) -> Job:
    values: dict[str, object] = {
        "id": 7,
        "kind": JobKind.VIDEO,
        "state": S.QUEUED,
        "guild_id": 1,
        "channel_id": 2,
        "user_id": 3,
        "locale": "en-US",
        "params": {"model": "m", "prompt": "a cat"},
        "created_at": 100.0,
        "updated_at": 100.0,
    }
    values.update(overrides)
    return Job(**values)  # type: ignore[arg-type]


def test_enum_values_are_the_persisted_strings() -> None:
    assert [k.value for k in JobKind] == ["video", "image"]
    assert [s.value for s in JobState] == [
        "queued",
        "submitting",
        "running",
        "delivering",
        "delivered",
        "failed",
        "cancelled",
    ]
    assert JobState("running") is S.RUNNING
    assert f"{S.RUNNING}" == "running"


def test_transition_table_is_exactly_the_documented_one() -> None:
    assert TRANSITIONS == {
        S.QUEUED: {S.SUBMITTING, S.CANCELLED, S.FAILED},
        S.SUBMITTING: {S.RUNNING, S.DELIVERING, S.FAILED, S.CANCELLED, S.QUEUED},
        S.RUNNING: {S.DELIVERING, S.FAILED, S.CANCELLED},
        S.DELIVERING: {S.DELIVERED, S.FAILED},
        S.DELIVERED: set(),
        S.FAILED: set(),
        S.CANCELLED: set(),
    }
    assert all(isinstance(targets, frozenset) for targets in TRANSITIONS.values())


def test_terminal_and_active_partition_the_states() -> None:
    assert TERMINAL == {S.DELIVERED, S.FAILED, S.CANCELLED}
    assert ACTIVE == {S.QUEUED, S.SUBMITTING, S.RUNNING, S.DELIVERING}
    assert ACTIVE | TERMINAL == set(JobState)
    assert not ACTIVE & TERMINAL
    assert all(not TRANSITIONS[s] for s in TERMINAL)
    assert all(TRANSITIONS[s] for s in ACTIVE)


@pytest.mark.parametrize("old", list(JobState))
@pytest.mark.parametrize("new", list(JobState))
def test_check_transition_follows_the_table(old: JobState, new: JobState) -> None:
    if new in TRANSITIONS[old]:
        check_transition(old, new)
    else:
        with pytest.raises(InvalidTransition) as info:
            check_transition(old, new, job_id=42)
        assert info.value.old is old and info.value.new is new and info.value.job_id == 42
        message = str(info.value)
        assert "42" in message and old.value in message and new.value in message


def test_no_state_may_transition_to_itself() -> None:
    for state in JobState:
        with pytest.raises(InvalidTransition):
            check_transition(state, state)


def test_invalid_transition_message_for_an_unexpected_state() -> None:
    exc = InvalidTransition(S.RUNNING, S.CANCELLED, job_id=9, expected=frozenset({S.QUEUED}))
    assert str(exc) == "job 9: state is running, expected queued (requested running -> cancelled)"
    assert str(InvalidTransition(S.DELIVERED, S.FAILED)) == "job: illegal transition delivered -> failed"


def test_error_hierarchy_and_messages() -> None:
    member = MemberLimitReached(2)
    guild = GuildQueueFull(25)
    assert isinstance(member, JobLimitError) and isinstance(guild, JobLimitError)
    assert isinstance(member, JobError) and not isinstance(member, GuildQueueFull)
    assert member.limit == 2 and "2" in str(member)
    assert guild.cap == 25 and "25" in str(guild)
    missing = JobNotFound(5)
    assert isinstance(missing, LookupError) and isinstance(missing, JobError)
    assert missing.job_id == 5 and str(missing) == "job 5 not found"
    assert issubclass(InvalidTransition, JobError)
    retried = AlreadyRetried(4, 9)
    assert isinstance(retried, JobError) and not isinstance(retried, JobLimitError)
    assert (retried.retry_of, retried.existing_id) == (4, 9)
    assert str(retried) == "job 4 was already retried as job 9"
    quota = DailyQuotaReached(3)
    assert isinstance(quota, JobLimitError) and quota.limit == 3 and "3" in str(quota)


def test_new_job_defaults_and_repr_hides_discord() -> None:
    new = NewJob(JobKind.IMAGE, 1, 2, 3, "fr", {"prompt": "x"})
    assert new.retry_of is None and new.discord == {} and new.key_owner is None
    assert NewJob(JobKind.IMAGE, 1, 2, 3, "fr", {}).discord is not new.discord  # no shared default
    secret = NewJob(JobKind.IMAGE, 1, 2, 3, "fr", {}, discord={"token": "s3cr3t"})
    assert "s3cr3t" not in repr(secret)
    assert "s3cr3t" not in repr(make_job(discord={"interaction_token": "s3cr3t"}))


def test_job_properties() -> None:
    job = make_job()
    assert job.prompt == "a cat"
    assert not job.is_terminal
    for state in TERMINAL:
        assert make_job(state=state).is_terminal
    assert make_job(params={"size": "1024x1024"}).prompt == ""
    assert make_job(params={"prompt": None}).prompt == ""
    assert job.task_id is None and job.discord == {} and job.retry_of is None
    assert job.key_owner is None  # the operator's key unless a server's own key ran the task
    assert job.result_url is None and job.result_local is False  # a result held by the bot is a flag


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({}, None),
        ({"token": "t", "message_id": 5}, None),
        ({"deleted_at": 1700000000.5, "deleted_by": 42}, Deletion(1700000000.5, 42)),
        ({"deleted_at": 1700000000, "deleted_by": 42}, Deletion(1700000000.0, 42)),
        # Malformed (the record is the chat side's JSON): not deleted, never an exception.
        ({"deleted_at": "yesterday", "deleted_by": 42}, None),
        ({"deleted_at": True, "deleted_by": 42}, None),
        ({"deleted_at": 1.0, "deleted_by": "42"}, None),
        ({"deleted_at": 1.0}, None),
    ],
)
def test_deleted_reads_the_chat_record(record: dict[str, object], expected: Deletion | None) -> None:
    assert make_job(discord=record).deleted == expected
    assert (DELETED_AT, DELETED_BY) == ("deleted_at", "deleted_by")
