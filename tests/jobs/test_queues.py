"""GuildQueues: round-robin between guilds, FIFO within a kind, places and what goes ahead of what."""

from __future__ import annotations

import copy as copy_module
import dataclasses
import math
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from framecast.jobs.queues import GuildQueues, Scope
from framecast.values import Job, JobKind, JobState


def job(job_id: int, guild: int, kind: JobKind = JobKind.VIDEO) -> Job:
    return Job(
        id=job_id, kind=kind, state=JobState.QUEUED, guild_id=guild, channel_id=1, user_id=1,
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
    assert q.take_next(lambda g, k: g not in blocked) == (3, 2)
    assert q.take_next(lambda g, k: g not in blocked) == (5, 3)
    assert q.take_next(lambda g, k: g not in blocked) == (4, 2)
    assert q.take_next(lambda g, k: False) is None
    assert q.total() == 2
    blocked.clear()
    # Guild 1 kept its place at the head of the round: it goes first once its key admits again.
    assert q.take_next(lambda g, k: g not in blocked) == (1, 1)
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


VID, IMG = JobKind.VIDEO, JobKind.IMAGE


def queues(*jobs: tuple[int, int, JobKind]) -> GuildQueues:
    q = GuildQueues()
    for job_id, guild, kind in jobs:
        q.push(job(job_id, guild, kind))
    return q


def only(kind: JobKind) -> Callable[[int, JobKind], bool]:
    """A key that admits only jobs of `kind` now (the other kind cannot start yet)."""
    return lambda guild, k: k is kind


def test_an_image_behind_videos_that_cannot_start_goes_ahead() -> None:
    q = queues((1, 1, VID), (2, 1, VID), (3, 1, IMG))
    assert q.take_next(only(IMG)) == (3, 1)
    assert q.queued(1) == [1, 2]
    assert q.position(3) == 1  # starting


def test_a_video_that_can_start_is_not_overtaken() -> None:
    q = queues((1, 1, VID), (2, 1, IMG))
    assert q.take_next(lambda guild, kind: True) == (1, 1)
    assert q.take_next(lambda guild, kind: True) == (2, 1)


def test_an_image_that_cannot_start_lets_a_video_behind_it_go() -> None:
    q = queues((1, 1, IMG), (2, 1, VID))
    assert q.take_next(only(VID)) == (2, 1)


def test_order_within_each_kind_is_kept() -> None:
    q = queues((1, 1, VID), (2, 1, IMG), (3, 1, VID), (4, 1, IMG))
    assert q.take_next(only(IMG)) == (2, 1)
    assert q.take_next(only(IMG)) == (4, 1)
    assert q.take_next(only(IMG)) is None
    assert q.take_next(only(VID)) == (1, 1)
    assert q.take_next(only(VID)) == (3, 1)


def test_going_ahead_keeps_the_round_robin_between_guilds() -> None:
    # Guild 1 has a long line of videos then images; guild 2 only images: they alternate.
    q = queues((1, 1, VID), (2, 1, VID), (3, 1, IMG), (4, 1, IMG), (5, 2, IMG), (6, 2, IMG))
    taken = [q.take_next(only(IMG)) for _ in range(4)]
    assert taken == [(3, 1), (5, 2), (4, 1), (6, 2)]
    assert q.take_next(only(IMG)) is None
    assert q.total() == 2


def test_each_kind_is_asked_once_per_guild() -> None:
    q = queues((1, 1, VID), (2, 1, VID), (3, 1, VID), (4, 1, IMG), (5, 1, IMG))
    asked: list[tuple[int, JobKind]] = []

    def refuse(guild: int, kind: JobKind) -> bool:
        asked.append((guild, kind))
        return False

    assert q.take_next(refuse) is None
    assert asked == [(1, VID), (1, IMG)]
    assert q.total() == 5


def test_places_and_ahead_are_counted_within_a_kind() -> None:
    q = queues((1, 1, VID), (2, 1, VID), (3, 1, IMG), (4, 2, IMG), (5, 1, IMG))
    assert [q.position(j) for j in (1, 2, 3, 4, 5)] == [1, 2, 1, 1, 2]
    # The image 3 waits for no video; image 5 waits for image 3 and (round-robin) image 4.
    assert (q.ahead(3), q.ahead(4), q.ahead(5)) == (0, 1, 2)
    assert q.ahead(2) == 1
    assert (q.waiting(IMG), q.waiting(VID)) == ((3, 0.0), (2, 0.0))
    assert q.waiting(IMG, in_scope=lambda guild: guild == 2) == (1, 0.0)
    assert q.waiting(IMG, in_scope=lambda guild: guild == 3) == (0, math.inf)
    q.remove(3)
    assert q.position(5) == 1


# -- the per-kind counts agree with the queues, whatever happened (Hypothesis) -----------------------

_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(1, 4), st.sampled_from(list(JobKind)), st.floats(0, 100)),
        st.tuples(st.just("remove"), st.integers(0, 30)),
        st.tuples(st.just("take"), st.sampled_from([None, *JobKind]), st.integers(0, 4)),
    ),
    max_size=60,
)


def admitting(kind: JobKind, blocked: int) -> Callable[[int, JobKind], bool]:
    """A key that admits only `kind`, and nothing in guild `blocked`."""
    return lambda guild, k: k is kind and guild != blocked


@settings(max_examples=300, deadline=None)
@given(steps=_STEPS, scoped=st.frozensets(st.integers(1, 4)))
def test_waiting_and_places_match_the_queues_after_any_pushes_removals_and_takes(
    steps: list[tuple[Any, ...]], scoped: frozenset[int]
) -> None:
    # The counts admission and the forecast read on every decision (kept per kind and guild, not
    # recomputed) must always say what the guilds' queues hold, earliest created_at included.
    q = GuildQueues()
    kind_of: dict[int, JobKind] = {}
    since_of: dict[int, float] = {}
    next_id = 0
    for step in steps:
        if step[0] == "push":
            _, guild, kind, since = step
            pushed = job(next_id, guild, kind)
            q.push(dataclasses.replace(pushed, created_at=since))
            kind_of[next_id], since_of[next_id] = kind, since
            next_id += 1
        elif step[0] == "remove":
            q.remove(step[1])
        else:
            _, admits, blocked = step
            q.take_next(None if admits is None else admitting(admits, blocked))
        queued = {g: q.queued(g) for g in range(1, 5)}
        for kind in JobKind:
            for scope in (None, lambda g: g in scoped):
                mine = [
                    j
                    for g, jobs in queued.items()
                    if scope is None or scope(g)
                    for j in jobs
                    if kind_of[j] is kind
                ]
                assert q.waiting(kind, scope) == (
                    len(mine),
                    min((since_of[j] for j in mine), default=math.inf),
                )
        for jobs in queued.values():
            for j in jobs:
                same = [other for other in jobs if kind_of[other] is kind_of[j]]
                assert q.position(j) == same.index(j) + 1
        assert q.total() == sum(len(jobs) for jobs in queued.values())


# -- per-key scopes: the index answers what asking every guild answered -------------------

_KEYED_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(1, 5), st.sampled_from(list(JobKind)), st.floats(0, 100)),
        st.tuples(st.just("remove"), st.integers(0, 30)),
        st.tuples(st.just("take"), st.sampled_from([None, *JobKind]), st.integers(0, 5)),
        st.tuples(st.just("rekey"), st.integers(1, 5), st.integers(0, 2)),
    ),
    max_size=60,
)


def simulated_ahead(q: GuildQueues, job_id: int, kind: JobKind, in_scope: Callable[[int], bool]) -> int:
    """The jobs of `kind` that round-robin starts before `job_id`, found by taking them: its own
    guild's, and those of the guilds in scope."""
    copy = copy_module.deepcopy(q)
    own = next(guild for guild in range(1, 6) if job_id in q.queued(guild))
    count = 0
    while (taken := copy.take_next(lambda guild, k: k is kind)) is not None and taken[0] != job_id:
        count += taken[1] == own or in_scope(taken[1])
    return count


@settings(max_examples=300, deadline=None)
@given(steps=_KEYED_STEPS)
def test_a_keys_scope_answers_as_asking_every_guild_whatever_happened(steps: list[tuple[Any, ...]]) -> None:
    # Each key's planner asks through its Scope, which the queues answer from their index of guilds
    # per key; a guild whose key changes is regrouped. Every answer must be the one a plain
    # predicate gets by being asked of every queued guild, and places the ones taking jobs gives.
    q = GuildQueues()
    scopes = [q.scope() for _ in range(3)]
    key_of = dict.fromkeys(range(1, 6), 0)
    q.assign_scopes(lambda guild: scopes[key_of[guild]])
    kind_of: dict[int, JobKind] = {}
    next_id = 0
    for step in steps:
        if step[0] == "push":
            _, guild, kind, since = step
            q.push(dataclasses.replace(job(next_id, guild, kind), created_at=since))
            kind_of[next_id] = kind
            next_id += 1
        elif step[0] == "remove":
            q.remove(step[1])
        elif step[0] == "take":
            _, admits, blocked = step
            q.take_next(None if admits is None else admitting(admits, blocked))
        else:
            _, guild, key = step
            key_of[guild] = key
            q.regroup(guild)
        queued = [j for g in range(1, 6) for j in q.queued(g)]
        for key, scope in enumerate(scopes):
            plain = (lambda k: lambda guild: key_of[guild] == k)(key)
            assert [scope(g) for g in range(1, 6)] == [plain(g) for g in range(1, 6)]
            for kind in JobKind:
                assert q.waiting(kind, scope) == q.waiting(kind, plain)
            for j in queued:
                assert q.ahead(j, scope) == q.ahead(j, plain) == simulated_ahead(q, j, kind_of[j], plain)
        for j in queued:
            assert q.ahead(j) == simulated_ahead(q, j, kind_of[j], lambda guild: True)


def test_a_keys_answers_never_ask_about_the_other_keys_guilds() -> None:
    # Counted, not timed: each guild's key is looked up once, when it joins the line; what a key's
    # planner asks (how many wait, the places ahead) never asks
    # about a guild, however many guilds on other keys wait.
    for guilds in (10, 200):
        q = GuildQueues()
        scopes = {guild: q.scope() for guild in range(guilds)}
        looked_up: list[int] = []

        def scope_of(
            guild: int, scopes: dict[int, Scope] = scopes, looked_up: list[int] = looked_up
        ) -> Scope:
            looked_up.append(guild)
            return scopes[guild]

        q.assign_scopes(scope_of)
        for guild in range(guilds):
            q.push(job(guild, guild))
            q.push(job(1000 + guild, guild, JobKind.IMAGE))
        assert len(looked_up) == guilds
        mine = scopes[guilds // 2]
        assert q.waiting(JobKind.VIDEO, mine) == (1, 0.0)
        assert q.ahead(guilds // 2, mine) == 0
        assert len(looked_up) == guilds


# -- lanes: the dispatcher looks only at the keys woken since they refused -----------------------------

_LANE_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(1, 6), st.sampled_from(list(JobKind))),
        st.tuples(st.just("remove"), st.integers(0, 40)),
        st.tuples(st.just("take")),
        st.tuples(st.just("admits"), st.integers(0, 2), st.frozensets(st.sampled_from(list(JobKind)))),
        st.tuples(st.just("rekey"), st.integers(1, 6), st.integers(0, 2)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps=_LANE_STEPS)
def test_taking_from_the_awake_lanes_takes_what_walking_every_guild_takes(
    steps: list[tuple[Any, ...]],
) -> None:
    # Three keys (lanes), each admitting some kinds; a key whose answer changes is woken, a guild
    # whose key changes is regrouped. Taking from the awake lanes only must take, every time, the
    # job a walk of the whole rotation takes (round-robin kept across keys, each key's guilds
    # keeping their turn while it refuses), and asking no key twice for a kind within one take.
    key_of = dict.fromkeys(range(1, 7), 0)
    admits: dict[int, frozenset[JobKind]] = dict.fromkeys(range(3), frozenset(JobKind))
    lanes, walk = GuildQueues(), GuildQueues()
    for q in (lanes, walk):
        q.assign_lanes(lambda guild: key_of[guild])
    next_id = 0
    for step in steps:
        if step[0] == "push":
            _, guild, kind = step
            for q in (lanes, walk):
                q.push(job(next_id, guild, kind))
            next_id += 1
        elif step[0] == "remove":
            assert lanes.remove(step[1]) == walk.remove(step[1])
        elif step[0] == "take":
            asked: list[tuple[int, JobKind]] = []

            def eligible(guild: int, kind: JobKind, asked: list[tuple[int, JobKind]] = asked) -> bool:
                asked.append((key_of[guild], kind))
                return kind in admits[key_of[guild]]

            expected = walk.take_next(lambda guild, kind: kind in admits[key_of[guild]])
            assert lanes.take_awake(eligible) == expected
            assert len(asked) == len(set(asked))
        elif step[0] == "admits":
            _, key, kinds = step
            admits[key] = kinds
            lanes.wake(key)
        else:
            _, guild, key = step
            key_of[guild] = key
            for q in (lanes, walk):
                q.regroup(guild)
        assert [lanes.queued(g) for g in range(1, 7)] == [walk.queued(g) for g in range(1, 7)]


def test_a_sleeping_lane_is_not_asked_until_woken() -> None:
    # Counted: a hundred keys, each refusing; once each has refused, taking asks nobody, and a
    # woken key is the only one asked.
    q = GuildQueues()
    q.assign_lanes(lambda guild: guild)  # each guild on its own key
    for guild in range(100):
        q.push(job(guild, guild))
    asked: list[int] = []
    room: set[int] = set()

    def eligible(guild: int, kind: JobKind) -> bool:
        asked.append(guild)
        return guild in room

    assert q.take_awake(eligible) is None
    assert sorted(asked) == list(range(100))
    asked.clear()
    assert q.take_awake(eligible) is None and asked == []
    room.add(42)
    q.wake(42)
    assert q.take_awake(eligible) == (42, 42)
    assert asked == [42]
