"""The job's Discord bookkeeping as a typed record: today's rows load, the wire keys stay the same."""

from __future__ import annotations

from cogs.delivery.record import DiscordRecord

#: A row as the code before the typed record wrote it (start_job, then the reporter's patches).
OLD_ROW = {
    "application_id": 1234,
    "token": "interaction-token-secret",
    "token_expires_at": 1_700_000_900.5,
    "attachment_limit": 26_214_400,
    "message_id": "@original",
}


def test_a_row_written_by_older_code_loads_and_writes_back_the_same_keys() -> None:
    record = DiscordRecord.from_dict(OLD_ROW)
    assert record.application_id == 1234 and record.token == "interaction-token-secret"
    assert record.message_id is None  # "@original": the real id is not known yet
    assert record.to_dict() == OLD_ROW


def test_what_the_delivery_learned_loads_from_its_keys() -> None:
    later = OLD_ROW | {
        "message_id": 555,
        "channel_message_id": "777",
        "token_dead": True,
        "pinged": True,
        "shown_percent": 42,
        "retried_as": 9,
    }
    record = DiscordRecord.from_dict(later)
    assert (record.message_id, record.channel_message_id) == (555, 777)
    assert record.token_dead and record.pinged and record.shown_percent == 42 and record.retried_as == 9
    assert DiscordRecord.from_dict(record.to_dict()) == record


def test_malformed_values_read_as_unset() -> None:
    record = DiscordRecord.from_dict({"shown_percent": True, "message_id": "x", "channel_message_id": None})
    assert record == DiscordRecord()
    assert DiscordRecord.from_dict({}).to_dict() == {}


def test_the_token_is_never_in_the_repr() -> None:
    assert "interaction-token-secret" not in repr(DiscordRecord.from_dict(OLD_ROW))


def test_a_stale_copy_never_rolls_back_what_the_delivery_learned() -> None:
    known = DiscordRecord.from_dict(
        OLD_ROW | {"message_id": 555, "channel_message_id": 777, "shown_percent": 40}
    )
    stale = DiscordRecord.from_dict(OLD_ROW | {"shown_percent": 10})
    merged = stale.merged(known)
    assert (merged.message_id, merged.channel_message_id, merged.shown_percent) == (555, 777, 40)


def test_the_token_is_usable_until_the_margin_before_its_expiry() -> None:
    record = DiscordRecord.from_dict(OLD_ROW)
    expires = OLD_ROW["token_expires_at"]
    assert isinstance(expires, float)
    assert record.token_usable(expires - 61, margin=60)
    assert not record.token_usable(expires - 59, margin=60)
    assert record.token_usable(expires - 1, margin=60, spare=-60)  # reading lasts until the expiry
    assert not DiscordRecord.from_dict(OLD_ROW | {"token_dead": True}).token_usable(0, margin=60)


def test_a_personal_jobs_context_and_dm_fallback_round_trip() -> None:
    # A user install's job: where it was asked, its requester's DM, and whether it is parked.
    row = OLD_ROW | {"context": "group_dm", "dm_channel_id": "888", "dm_refused": True, "parked": True}
    record = DiscordRecord.from_dict(row)
    assert record.personal and record.context == "group_dm" and record.dm_channel_id == 888
    assert record.dm_refused and record.parked
    assert DiscordRecord.from_dict(record.to_dict()) == record
    # What the delivery learns is saved with its patches; a stale copy never rolls it back.
    assert {
        "dm_channel_id": 888,
        "dm_refused": True,
        "parked": True,
    }.items() <= record.delivery_changes().items()
    stale = DiscordRecord.from_dict(OLD_ROW | {"context": "group_dm"})
    assert stale.merged(record).parked and stale.merged(record).dm_channel_id == 888
    # A server's job stores no context (rows stay as they were) and is not personal.
    assert (
        not DiscordRecord.from_dict(OLD_ROW).personal
        and "context" not in DiscordRecord.from_dict(OLD_ROW).to_dict()
    )
