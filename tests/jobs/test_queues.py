"""GuildQueues.ahead: how many queued jobs round-robin starts before a given one."""

from __future__ import annotations

from framecast.jobs import Job, JobKind, JobState
from framecast.jobs.queues import GuildQueues


def job(job_id: int, guild: int) -> Job:
    return Job(
        id=job_id, kind=JobKind.VIDEO, state=JobState.QUEUED, guild_id=guild, channel_id=1, user_id=1,
        locale="en-US", params={}, created_at=0.0, updated_at=0.0,
    )  # fmt: skip


def test_ahead_follows_the_round_robin_order() -> None:
    q = GuildQueues()
    # guild 1: jobs 1, 2, 3; guild 2: job 4; guild 3: jobs 5, 6
    for job_id, guild in ((1, 1), (2, 1), (3, 1), (4, 2), (5, 3), (6, 3)):
        q.push(job(job_id, guild))
    order = []
    expected = {}
    probe = GuildQueues()
    for job_id, guild in ((1, 1), (2, 1), (3, 1), (4, 2), (5, 3), (6, 3)):
        probe.push(job(job_id, guild))
    while (taken := probe.take_next()) is not None:
        order.append(taken[0])
    for place, job_id in enumerate(order):
        expected[job_id] = place
    assert {job_id: q.ahead(job_id) for job_id in range(1, 7)} == expected
    assert q.total() == 6
    assert q.ahead(99) is None


def test_ahead_after_a_guild_was_just_served() -> None:
    q = GuildQueues()
    for job_id, guild in ((1, 1), (2, 1), (3, 2)):
        q.push(job(job_id, guild))
    assert q.take_next() == (1, 1)
    # Guild 2 has its turn before guild 1 comes again.
    assert (q.ahead(3), q.ahead(2)) == (0, 1)


def test_take_next_passes_over_ineligible_guilds_and_keeps_their_turn() -> None:
    q = GuildQueues()
    # guild 1 (its key saturated): jobs 1, 2; guild 2: jobs 3, 4; guild 3: job 5
    for job_id, guild in ((1, 1), (2, 1), (3, 2), (4, 2), (5, 3)):
        q.push(job(job_id, guild))
    blocked = {1}
    assert q.take_next(lambda g: g not in blocked) == (3, 2)
    assert q.take_next(lambda g: g not in blocked) == (5, 3)
    assert q.take_next(lambda g: g not in blocked) == (4, 2)
    assert q.take_next(lambda g: False) is None
    assert q.total() == 2
    blocked.clear()
    # Guild 1 kept its place at the head of the round: it goes first once its key admits again.
    assert q.take_next(lambda g: g not in blocked) == (1, 1)
    assert q.take_next() == (2, 1)
    assert q.take_next() is None


def test_ahead_in_scope_counts_only_guilds_on_the_same_key() -> None:
    q = GuildQueues()
    for job_id, guild in ((1, 1), (2, 2), (3, 3), (4, 1), (5, 2), (6, 3)):
        q.push(job(job_id, guild))
    assert q.ahead(6) == 5
    # Guild 2 runs on its own key: its jobs do not wait for (nor delay) guilds 1 and 3.
    assert q.ahead(6, in_scope=lambda g: g != 2) == 3
    assert q.ahead(5, in_scope=lambda g: g == 2) == 1
