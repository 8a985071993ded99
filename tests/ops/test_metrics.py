"""framecast.ops.metrics: what each recording method and tracked callable shows in the exposition."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from framecast.config import Secret
from framecast.ops.metrics import OPERATOR_KEY, ActiveJobs, BudgetReading, Metrics, ReencodeOutcome, key_label
from framecast.storage import Store
from framecast.values import JobKind, JobState, NewJob
from framecast.values.reasons import ErrorCode
from framecast.values.service_requests import RequestKind

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(metrics: Metrics) -> tuple[str, set[str], Samples]:
    """The exposition text, its family names and every sample by (name, labels)."""
    text = generate_latest(metrics.registry).decode("utf-8")
    families = list(text_string_to_metric_families(text))
    samples: Samples = {}
    for family in families:
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return text, {f.name for f in families}, samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


NAMED_FAMILIES = {
    "framecast_jobs",
    "framecast_queue_depth",
    "framecast_shard_queue_depth",
    "framecast_service_requests",
    "framecast_service_429",
    "framecast_budget_used",
    "framecast_budget_limit",
    "framecast_planner_concurrency",
    "framecast_completion_to_file_seconds",
    "framecast_discord_errors",
    "framecast_reencodes",
    "framecast_reencode_seconds",
    "framecast_jobs_delivered",
    "framecast_jobs_failed",
    "framecast_event_loop_lag_seconds",
    "framecast_ready",
}


def test_every_named_family_is_exposed() -> None:
    _, families, _ = scrape(Metrics())
    assert NAMED_FAMILIES <= families
    assert "process_resident_memory_bytes" in families or "process_cpu_seconds" in families


def test_readiness_shows_each_check_as_1_or_0() -> None:
    m = Metrics()
    m.readiness("database", True)
    m.readiness("models", False)
    _, _, s = scrape(m)
    assert value(s, "framecast_ready", check="database") == 1
    assert value(s, "framecast_ready", check="models") == 0
    m.readiness("models", True)
    assert value(scrape(m)[2], "framecast_ready", check="models") == 1


def test_reencode_series_exist_at_zero_before_the_first_re_encode() -> None:
    # So the dashboard's rate() and histogram_quantile() see the first re-encode as an increase.
    _, _, s = scrape(Metrics())
    for kind in JobKind:
        assert value(s, "framecast_reencode_seconds_count", kind=kind.value) == 0
        for outcome in ReencodeOutcome:
            assert value(s, "framecast_reencodes_total", kind=kind.value, outcome=outcome.value) == 0


def test_service_requests_by_kind_and_status_and_429s_by_key() -> None:
    m = Metrics()
    m.service_request(RequestKind.CREATE_VIDEO, 200)
    m.service_request(RequestKind.CREATE_VIDEO, 200)
    m.service_request(RequestKind.POLL, None)
    m.service_request(RequestKind.POLL, 429, key="guild-0badcafe")
    m.service_request(RequestKind.MODELS, 429)
    _, _, s = scrape(m)
    assert value(s, "framecast_service_requests_total", kind="create_video", status="200") == 2
    assert value(s, "framecast_service_requests_total", kind="poll", status="error") == 1
    assert value(s, "framecast_service_requests_total", kind="poll", status="429") == 1
    assert value(s, "framecast_service_429_total", key="guild-0badcafe") == 1
    assert value(s, "framecast_service_429_total", key=OPERATOR_KEY) == 1
    assert value(s, "framecast_service_requests_total", kind="download", status="200") is None


def test_job_outcomes_discord_errors_and_reencodes() -> None:
    m = Metrics()
    m.job_delivered(JobKind.VIDEO)
    m.job_failed(JobKind.IMAGE, ErrorCode.TIMEOUT)
    m.job_failed(JobKind.IMAGE, ErrorCode.TIMEOUT)
    m.discord_error(404, 10008)
    m.discord_error(None, None)
    m.reencode(JobKind.VIDEO, 3.0, ReencodeOutcome.FITTED)
    m.reencode(JobKind.VIDEO, 40.0, ReencodeOutcome.NO_FIT)
    m.completion_to_file(JobKind.VIDEO, 4.0)
    _, _, s = scrape(m)
    assert value(s, "framecast_jobs_delivered_total", kind="video") == 1
    # Pre-created so that rate() has a series before the first image is delivered.
    assert value(s, "framecast_jobs_delivered_total", kind="image") == 0
    assert value(s, "framecast_jobs_failed_total", kind="image", code="timeout") == 2
    assert value(s, "framecast_discord_errors_total", status="404", code="10008") == 1
    assert value(s, "framecast_discord_errors_total", status="error", code="none") == 1
    assert value(s, "framecast_reencodes_total", kind="video", outcome="fitted") == 1
    assert value(s, "framecast_reencodes_total", kind="video", outcome="no_fit") == 1
    assert value(s, "framecast_reencode_seconds_count", kind="video") == 2
    assert value(s, "framecast_reencode_seconds_sum", kind="video") == 43.0
    assert value(s, "framecast_reencode_seconds_bucket", kind="video", le="5.0") == 1
    assert value(s, "framecast_completion_to_file_seconds_count", kind="video") == 1
    assert value(s, "framecast_completion_to_file_seconds_bucket", kind="video", le="2.0") == 0
    assert value(s, "framecast_completion_to_file_seconds_bucket", kind="video", le="5.0") == 1


def test_jobs_are_read_at_scrape_time_with_active_states_zero_filled() -> None:
    m = Metrics()
    _, _, s = scrape(m)
    assert not [k for k in s if k[0] == "framecast_jobs"]  # nothing tracked yet: no made-up zeros
    counts = {(JobState.RUNNING, JobKind.VIDEO): 3}
    m.track_jobs(lambda: counts)
    _, _, s = scrape(m)
    assert value(s, "framecast_jobs", state="running", kind="video") == 3
    assert value(s, "framecast_jobs", state="queued", kind="image") == 0
    assert value(s, "framecast_jobs", state="delivered", kind="video") is None  # terminal: the counters
    counts[(JobState.RUNNING, JobKind.VIDEO)] = 1
    counts[(JobState.QUEUED, JobKind.IMAGE)] = 7
    _, _, s = scrape(m)
    assert value(s, "framecast_jobs", state="running", kind="video") == 1
    assert value(s, "framecast_jobs", state="queued", kind="image") == 7


def test_queue_depth_total_and_per_shard() -> None:
    m = Metrics()
    depth = [5]
    m.track_queue(lambda: depth[0])
    _, _, s = scrape(m)
    assert value(s, "framecast_queue_depth") == 5
    assert not [k for k in s if k[0] == "framecast_shard_queue_depth"]
    m.track_queue(lambda: depth[0], lambda: {1: 2, 0: 3})
    depth[0] = 6
    _, _, s = scrape(m)
    assert value(s, "framecast_queue_depth") == 6
    assert value(s, "framecast_shard_queue_depth", shard="0") == 3
    assert value(s, "framecast_shard_queue_depth", shard="1") == 2


def test_budgets_and_planners_per_key_read_live_and_untracked() -> None:
    m = Metrics()
    guild = key_label("sk-guild-secret-key-1234")
    used = [2]
    m.track_budget(OPERATOR_KEY, lambda: BudgetReading(used=used[0], limit=10, allowed=10, waiting=1))
    m.track_budget(guild, lambda: BudgetReading(used=0, limit=5, allowed=2))
    m.track_planner(OPERATOR_KEY, lambda: 4)
    m.track_planner(guild, lambda: None)
    _, _, s = scrape(m)
    assert value(s, "framecast_budget_used", key=OPERATOR_KEY) == 2
    assert value(s, "framecast_budget_limit", key=OPERATOR_KEY) == 10
    assert value(s, "framecast_budget_waiting", key=OPERATOR_KEY) == 1
    assert value(s, "framecast_budget_allowed", key=guild) == 2
    assert value(s, "framecast_planner_concurrency", key=OPERATOR_KEY) == 4
    assert value(s, "framecast_planner_concurrency", key=guild) is None  # no ceiling: no series
    used[0] = 9
    _, _, s = scrape(m)
    assert value(s, "framecast_budget_used", key=OPERATOR_KEY) == 9
    m.untrack(guild)
    _, _, s = scrape(m)
    assert not [k for k in s if ("key", guild) in k[1]]
    assert value(s, "framecast_budget_used", key=OPERATOR_KEY) == 9


def test_a_failing_reader_costs_only_its_own_series(caplog: pytest.LogCaptureFixture) -> None:
    m = Metrics()

    def broken() -> BudgetReading:
        raise RuntimeError("token sk-should-not-be-logged")

    m.track_budget("guild-broken", broken)
    m.track_budget(OPERATOR_KEY, lambda: BudgetReading(used=1, limit=3, allowed=3))
    m.track_jobs(lambda: 1 // 0)  # type: ignore[arg-type,return-value]
    m.service_request(RequestKind.DOWNLOAD, 200)
    with caplog.at_level(logging.WARNING, logger="framecast.ops.metrics"):
        _, _, s = scrape(m)
    assert value(s, "framecast_budget_used", key=OPERATOR_KEY) == 1
    assert value(s, "framecast_service_requests_total", kind="download", status="200") == 1
    assert not [k for k in s if ("key", "guild-broken") in k[1]]
    assert "RuntimeError" in caplog.text and "ZeroDivisionError" in caplog.text
    assert "sk-should-not-be-logged" not in caplog.text


def test_key_label_never_shows_the_key() -> None:
    key = "sk-live-0123456789abcdef"
    label = key_label(key)
    assert label.startswith("guild-") and len(label) == len("guild-") + 8
    assert int(label.removeprefix("guild-"), 16) >= 0
    assert key_label(Secret(key)) == label  # stable, whatever the key's wrapper
    assert key_label(key + "x") != label
    assert key_label(None) == OPERATOR_KEY
    m = Metrics()
    m.track_budget(label, lambda: BudgetReading(used=1, limit=1, allowed=1))
    m.service_request(RequestKind.POLL, 429, key=label)
    text, _, _ = scrape(m)
    assert key not in text and label in text


def test_two_metrics_objects_are_independent() -> None:
    a, b = Metrics(), Metrics()
    a.job_delivered(JobKind.IMAGE)
    _, _, sa = scrape(a)
    _, _, sb = scrape(b)
    assert value(sa, "framecast_jobs_delivered_total", kind="image") == 1
    assert value(sb, "framecast_jobs_delivered_total", kind="image") == 0


async def test_active_jobs_follow_the_real_store(tmp_path: Path) -> None:
    m = Metrics()
    active = ActiveJobs()
    async with await Store.open(tmp_path / "jobs.sqlite3") as store:
        store.subscribe(active.observe)
        m.track_jobs(active.counts)
        video = await store.add(
            NewJob(JobKind.VIDEO, 1, 2, 3, "en-US", {"prompt": "a"}), member_limit=None, guild_cap=None
        )
        image = await store.add(
            NewJob(JobKind.IMAGE, 1, 2, 4, "en-US", {"prompt": "b"}), member_limit=None, guild_cap=None
        )
        await store.transition(video.id, JobState.SUBMITTING, expect=JobState.QUEUED)
        _, _, s = scrape(m)
        assert value(s, "framecast_jobs", state="submitting", kind="video") == 1
        assert value(s, "framecast_jobs", state="queued", kind="video") == 0
        assert value(s, "framecast_jobs", state="queued", kind="image") == 1
        await store.transition(image.id, JobState.CANCELLED, expect=JobState.QUEUED)
        await store.transition(video.id, JobState.FAILED, expect=JobState.SUBMITTING, error_code="internal")
        _, _, s = scrape(m)
        assert sum(v for k, v in s.items() if k[0] == "framecast_jobs") == 0
        assert active.counts() == {}
