"""The heap policy: freeze once every shard is ready, sweep again after large guild churn, never on
every event; and what it shows on /metrics."""

from __future__ import annotations

import gc
import weakref
from itertools import count

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from framecast.ops.heap import CHURN_FLOOR, HeapFreezer, PythonGc, SweepReason, track_heap


class RecordingGc:
    """A stand-in for :mod:`gc` that records the calls and models the permanent generation."""

    def __init__(self, *, live: int = 1000) -> None:
        self.calls: list[str] = []
        self.live = live  # objects a collection would leave alive
        self.permanent = 0

    def collect(self) -> int:
        self.calls.append("collect")
        return 7

    def freeze(self) -> None:
        self.calls.append("freeze")
        self.permanent = self.live

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")
        self.permanent = 0

    def get_freeze_count(self) -> int:
        return self.permanent


def freezer(fake: RecordingGc, **kwargs: float) -> HeapFreezer:
    ticks = count()
    return HeapFreezer(gc_ops=fake, clock=lambda: next(ticks) * 0.25, **kwargs)  # type: ignore[arg-type]


def test_nothing_is_frozen_while_the_cache_fills() -> None:
    fake = RecordingGc()
    heap = freezer(fake)
    for n in range(1, 5000):
        assert heap.guilds_changed(1, n) is None
    assert fake.calls == []


def test_ready_collects_then_freezes_and_reports_what_it_froze() -> None:
    fake = RecordingGc(live=123_456)
    heap = freezer(fake)
    sweep = heap.ready(25_000)
    # Collect before freezing: garbage frozen would never be reclaimed.
    assert fake.calls == ["unfreeze", "collect", "freeze"]
    assert (sweep.reason, sweep.guilds, sweep.frozen, sweep.collected) == (
        SweepReason.READY,
        25_000,
        123_456,
        7,
    )
    assert sweep.seconds == 0.25
    assert heap.frozen_objects == 123_456
    assert heap.sweeps[SweepReason.READY] == 1


def test_guild_events_after_ready_only_count_until_half_the_frozen_guilds_changed() -> None:
    fake = RecordingGc()
    heap = freezer(fake)
    heap.ready(1000)
    fake.calls.clear()
    for n in range(499):
        assert heap.guilds_changed(1, 1001 + n) is None
    assert fake.calls == []  # 499 joins: no full collection, no freeze
    sweep = heap.guilds_changed(1, 1500)
    assert sweep is not None and sweep.reason is SweepReason.CHURN and sweep.guilds == 1500
    assert fake.calls == ["unfreeze", "collect", "freeze"]


def test_after_a_sweep_the_next_one_waits_for_half_the_new_guild_count() -> None:
    fake = RecordingGc()
    heap = freezer(fake)
    heap.ready(1000)
    assert heap.guilds_changed(500, 1500) is not None
    assert heap.guilds_changed(749, 2249) is None
    assert heap.guilds_changed(1, 2250) is not None
    assert heap.sweeps == {SweepReason.READY: 1, SweepReason.CHURN: 2}


def test_leaves_and_re_sent_guilds_count_as_churn_too() -> None:
    # A guild that left, or whose shard identified again, left dead frozen cycles behind: the
    # guild count stays flat, and the sweep must come all the same.
    fake = RecordingGc()
    heap = freezer(fake)
    heap.ready(400)
    assert heap.guilds_changed(100, 400) is None  # a shard re-sent its 100 guilds
    assert heap.guilds_changed(1, 399) is None  # one left
    assert heap.guilds_changed(99, 400) is not None


def test_a_small_bot_does_not_sweep_on_every_join() -> None:
    fake = RecordingGc()
    heap = freezer(fake)
    heap.ready(3)
    fake.calls.clear()
    for n in range(CHURN_FLOOR - 1):
        assert heap.guilds_changed(1, 4 + n) is None
    assert fake.calls == []
    assert heap.guilds_changed(1, 3 + CHURN_FLOOR) is not None


def test_every_ready_sweeps_again() -> None:
    # A later on_ready follows a full reconnect: discord.py rebuilt its cache, the old one is dead.
    fake = RecordingGc()
    heap = freezer(fake)
    heap.ready(10)
    heap.ready(10)
    assert fake.calls == ["unfreeze", "collect", "freeze"] * 2


def test_the_real_collector_reclaims_a_dead_frozen_cycle_at_the_next_sweep() -> None:
    class Guild:
        def __init__(self) -> None:
            self.channel: dict[str, object] = {"guild": self}  # a cycle, like discord.py's cache

    assert gc.get_freeze_count() == 0, "another test left the heap frozen"
    heap = HeapFreezer(gc_ops=PythonGc(), churn_floor=1)
    try:
        guild = Guild()
        dead = weakref.ref(guild)
        heap.ready(1)
        assert gc.get_freeze_count() > 0
        del guild
        gc.collect()
        assert dead() is not None  # frozen: a collection does not see the dead cycle
        heap.guilds_changed(1, 0)
        assert dead() is None  # the sweep unfroze it first, so the collection reclaimed it
    finally:
        gc.unfreeze()


def test_metrics_show_the_frozen_objects_and_the_sweeps_by_reason() -> None:
    fake = RecordingGc(live=4242)
    heap = freezer(fake)
    registry = CollectorRegistry(auto_describe=True)
    track_heap(registry, heap)
    heap.ready(10)
    text = generate_latest(registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("framecast_gc_frozen_objects", ())] == 4242
    assert samples[("framecast_heap_sweeps_total", (("reason", "ready"),))] == 1
    assert samples[("framecast_heap_sweeps_total", (("reason", "churn"),))] == 0
    assert ("python_gc_collections_total", (("generation", "2"),)) in samples
