"""The job message: progress bar, elapsed time, the status line of every state, the whole embed + buttons.

Pure functions of a Job: every test builds its jobs directly.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any

import discord
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cogs.i18n import SOURCE, shipped, t
from cogs.literal import as_text, link_text
from cogs.views.render import (
    BAR_CELLS,
    ESTIMATE_CEILING,
    REASON_KEYS,
    REASON_KEYS_WITHOUT_DETAIL,
    Rendered,
    format_elapsed,
    progress_bar,
    render_job,
    shown_percent,
    time_ahead,
)
from framecast.planner.estimate import Estimate
from framecast.values import Job, JobKind, JobState
from framecast.values.reasons import ErrorCode
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL

S = JobState
NOW = 1_700_000_000.0
POLL_TIMEOUT = 900.0
USER = 333_333_333_333_333_333
FULL, EMPTY = "▰", "▱"
VIDEO_PARAMS = {
    "model": VIDEO_MODEL,
    "prompt": "a cat on the moon",
    "width": 1152,
    "height": 768,
    "num_frames": 121,
    "frame_rate": 24,
    "seconds": 5,
}
IMAGE_PARAMS = {"model": IMAGE_MODEL, "prompt": "a red fox", "size": "1024x1024"}


def english_keys() -> frozenset[str]:
    """Every message key of the source (en-US) catalogue."""
    return frozenset(shipped().by_locale[SOURCE].messages)


def make_job(state: JobState = S.QUEUED, **overrides: Any) -> Job:
    fields: dict[str, Any] = {
        "id": 7,
        "kind": JobKind.VIDEO,
        "state": state,
        "guild_id": 1,
        "channel_id": 2,
        "user_id": USER,
        "locale": "en-US",
        "params": dict(VIDEO_PARAMS),
        "created_at": NOW - 600,
        "updated_at": NOW - 1,
    }
    fields.update(overrides)
    return Job(**fields)


def status(
    job: Job,
    position: int | None = None,
    now: float = NOW,
    poll_timeout: float = POLL_TIMEOUT,
    estimate: Estimate | None = None,
    floor: int = 0,
) -> str:
    """The job message's status line."""
    shown = render_job(
        job, position=position, now=now, poll_timeout=poll_timeout, estimate=estimate, floor=floor
    )
    return next(f.value or "" for f in shown.embed.fields if f.name == t("field_status", job.locale))


def render(
    job: Job,
    position: int | None = None,
    now: float = NOW,
    notes: tuple[str, ...] = (),
    estimate: Estimate | None = None,
    floor: int = 0,
) -> Rendered:
    return render_job(
        job,
        position=position,
        now=now,
        poll_timeout=POLL_TIMEOUT,
        notes=notes,
        estimate=estimate,
        floor=floor,
    )


def buttons(rendered: Rendered) -> list[tuple[str, str | None]]:
    """(custom_id, label) of every button on the message."""
    if rendered.view is None:
        return []
    out = []
    for child in rendered.view.children:
        item = getattr(child, "item", child)  # DynamicItem wraps the real button
        assert isinstance(item, discord.ui.Button)
        assert item.custom_id is not None
        out.append((item.custom_id, item.label))
    return out


def visible(rendered: Rendered) -> tuple[object, ...]:
    """Everything a member can see of the message (the text of the embed and of the buttons)."""
    embed = rendered.embed.to_dict()
    embed.pop("color", None)
    embed.pop("type", None)
    embed.pop("flags", None)
    return repr(sorted(embed.items())), tuple(buttons(rendered))


# ---------------------------------------------------------------------- progress bar and elapsed time


@pytest.mark.parametrize(
    ("fraction", "filled"),
    [
        (0, 0),
        (0.0, 0),
        (0.5, 6),
        (1, 12),
        (1.0, 12),
        (0.25, 3),
        (1 / 12, 1),
        (-0.3, 0),
        (-5, 0),
        (1.2, 12),
        (40, 12),
    ],
)
def test_progress_bar(fraction: float, filled: int) -> None:
    bar = progress_bar(fraction)
    assert BAR_CELLS == 12
    assert len(bar) == 12
    assert bar == FULL * filled + EMPTY * (12 - filled)


def test_progress_bar_grows_monotonically() -> None:
    fills = [progress_bar(i / 100).count(FULL) for i in range(101)]
    assert fills == sorted(fills)
    assert fills[0] == 0 and fills[-1] == 12


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (45, "45s"),
        (45.9, "45s"),
        (59, "59s"),
        (60, "1m 00s"),
        (185, "3m 05s"),
        (3599, "59m 59s"),
        (3600, "1h 00m"),
        (3720, "1h 02m"),
        (3725, "1h 02m"),
        (36000, "10h 00m"),
        (-3, "0s"),
    ],
)
def test_format_elapsed(seconds: float, text: str) -> None:
    assert format_elapsed(seconds) == text


# ---------------------------------------------------------------------- status line, every state


def test_status_queued_with_and_without_position() -> None:
    job = make_job(S.QUEUED)
    assert status(job, position=3) == "⏳ Queued: #3 in this server's queue"
    assert status(job, position=1) == "⏳ Queued: #1 in this server's queue"
    assert status(job, position=None) == "⏳ Queued"


def test_status_submitting_delivering_delivered_cancelled() -> None:
    assert status(make_job(S.SUBMITTING)) == "🚀 Sending to the generation service…"
    assert status(make_job(S.DELIVERING)) == "📤 Uploading the result…"
    assert status(make_job(S.DELIVERED)) == "✅ Done"
    assert status(make_job(S.CANCELLED)) == "🚫 Cancelled"


def test_position_is_only_shown_while_queued() -> None:
    for state in set(JobState) - {S.QUEUED}:
        assert "#4" not in status(make_job(state), position=4), state


@pytest.mark.parametrize(
    ("progress", "bar", "percent"),
    [
        (0.0, EMPTY * 12, "0%"),
        (0.5, FULL * 6 + EMPTY * 6, "50%"),
        (0.4, FULL * 5 + EMPTY * 7, "40%"),
        (0.41, FULL * 5 + EMPTY * 7, "41%"),
        (1.0, FULL * 12, "100%"),
    ],
)
def test_status_running_with_progress(progress: float, bar: str, percent: str) -> None:
    job = make_job(S.RUNNING, progress=progress, started_at=NOW - 100)
    assert status(job) == f"🎬 Generating… {bar} {percent}"


@pytest.mark.parametrize("percent", [29, 57, 58])
def test_status_running_shows_the_services_percentage(percent: int) -> None:
    job = make_job(S.RUNNING, progress=percent / 100, started_at=NOW - 100)
    assert status(job).endswith(f" {percent}%")


def test_every_whole_percentage_but_the_float_victims_is_shown_exactly() -> None:
    for percent in set(range(101)) - {29, 57, 58}:
        job = make_job(S.RUNNING, progress=percent / 100)
        assert status(job).endswith(f" {percent}%"), percent


def test_status_running_without_progress_shows_time_since_start() -> None:
    job = make_job(S.RUNNING, progress=None, started_at=NOW - 185, created_at=NOW - 5000)
    assert status(job) == "🎬 Generating… 3m 05s elapsed"
    assert status(job, now=NOW + 3535) == "🎬 Generating… 1h 02m elapsed"
    assert "%" not in status(job)
    # Not started yet on the service (e.g. restored): counted from acceptance.
    unstarted = make_job(S.RUNNING, progress=None, started_at=None, created_at=NOW - 45)
    assert status(unstarted) == "🎬 Generating… 45s elapsed"


# ---------------------------------------------------------------------- estimates between polls


def bar(percent: int) -> str:
    return progress_bar(percent / 100)


def test_an_estimate_between_polls_is_marked_and_coarse() -> None:
    job = make_job(S.RUNNING, progress=0.4, started_at=NOW - 100)
    shown = status(job, estimate=Estimate(progress=0.62, remaining=70))
    assert shown == f"🎬 Generating… {bar(60)} ≈ 60% · about 1 minute left"


def test_the_services_own_figure_is_shown_exactly_and_without_the_mark() -> None:
    job = make_job(S.RUNNING, progress=0.62, started_at=NOW - 100)
    shown = status(job, estimate=Estimate(progress=0.62, remaining=70, measured=True))
    assert shown == f"🎬 Generating… {bar(62)} 62% · about 1 minute left"
    assert "≈" not in shown


def test_only_the_time_left_is_known_without_progress_from_the_service() -> None:
    job = make_job(S.RUNNING, progress=None, started_at=NOW - 100)
    shown = status(job, estimate=Estimate(remaining=130))
    assert shown == "🎬 Generating… about 2 minutes left"
    assert "%" not in shown and "▰" not in shown and "▱" not in shown


def test_nothing_known_keeps_the_elapsed_time() -> None:
    job = make_job(S.RUNNING, progress=None, started_at=NOW - 185)
    assert status(job, estimate=Estimate()) == "🎬 Generating… 3m 05s elapsed"
    assert status(job, estimate=None) == "🎬 Generating… 3m 05s elapsed"


def test_without_an_estimate_of_progress_the_services_last_report_is_shown() -> None:
    job = make_job(S.RUNNING, progress=0.41, started_at=NOW - 100)
    assert status(job, estimate=Estimate(remaining=30)) == (
        f"🎬 Generating… {bar(41)} 41% · less than a minute left"
    )


@pytest.mark.parametrize("remaining", [0.0, -0.1, -30.0, -3600.0])
def test_an_overdue_estimate_says_finishing_never_a_negative_time(remaining: float) -> None:
    job = make_job(S.RUNNING, progress=None, started_at=NOW - 600)
    assert status(job, estimate=Estimate(remaining=remaining)) == "🎬 Generating… finishing…"
    with_progress = status(job, estimate=Estimate(progress=0.97, remaining=remaining))
    assert with_progress == f"🎬 Generating… {bar(ESTIMATE_CEILING)} ≈ 95% · finishing…"
    assert "-" not in with_progress


@pytest.mark.parametrize("remaining", [float("inf"), float("-inf"), float("nan")])
def test_a_time_that_is_not_a_number_is_not_shown(remaining: float) -> None:
    job = make_job(S.RUNNING, progress=None, started_at=NOW - 185)
    assert status(job, estimate=Estimate(remaining=remaining)) == "🎬 Generating… 3m 05s elapsed"


@pytest.mark.parametrize(
    ("seconds", "reading"),
    [
        (-5, ("overdue", 0)),
        (0, ("overdue", 0)),
        (1, ("under_minute", 0)),
        (59.9, ("under_minute", 0)),
        (60, ("minutes", 1)),
        (89, ("minutes", 1)),
        (90, ("minutes", 2)),
        (9 * 60 + 29, ("minutes", 9)),
        (9 * 60 + 31, ("minutes", 10)),
        (12 * 60, ("minutes", 10)),
        (13 * 60, ("minutes", 15)),
        (57 * 60, ("minutes", 55)),
        (58 * 60, ("hours", 1)),
        (3600, ("hours", 1)),
        (5399, ("hours", 1)),
        (5400, ("hours", 2)),
        (21 * 3600, ("hours", 21)),
    ],
)
def test_time_ahead_is_read_coarsely(seconds: float, reading: tuple[str, int]) -> None:
    assert time_ahead(seconds) == reading


@given(st.floats(min_value=-1e6, max_value=1e6), st.floats(min_value=0, max_value=1e6))
def test_a_later_time_never_reads_sooner(a: float, extra: float) -> None:
    order = {"overdue": 0, "under_minute": 1, "minutes": 2, "hours": 3}
    sooner, later = time_ahead(a), time_ahead(a + extra)
    seconds = {"overdue": 0, "under_minute": 0, "minutes": 60, "hours": 3600}
    assert (order[later[0]], later[1] * seconds[later[0]]) >= (
        order[sooner[0]],
        sooner[1] * seconds[sooner[0]],
    )


def test_hours_read_as_hours() -> None:
    job = make_job(S.RUNNING, progress=None)
    assert status(job, estimate=Estimate(remaining=2 * 3600)) == "🎬 Generating… about 2 hours left"
    assert status(job, estimate=Estimate(remaining=3600)) == "🎬 Generating… about 1 hour left"


def test_an_estimate_never_claims_the_end() -> None:
    job = make_job(S.RUNNING, progress=None)
    assert shown_percent(job, Estimate(progress=1.0)) == (ESTIMATE_CEILING, False)
    assert shown_percent(job, Estimate(progress=1.0, measured=True)) == (100, True)
    assert shown_percent(job, Estimate(progress=0.04)) == (0, False)
    assert shown_percent(job, Estimate(progress=-0.5)) == (0, False)
    assert shown_percent(job, Estimate(progress=float("nan"))) is None
    assert shown_percent(job, None) is None
    assert shown_percent(job, Estimate(remaining=60)) is None


# ---------------------------------------------------------------------- no percentage goes backwards


def test_a_lower_figure_shows_the_floor_again_as_an_estimate() -> None:
    job = make_job(S.RUNNING, progress=0.55, started_at=NOW - 100)
    # The service says 55 % after the message showed 63 %: 63 % stays, marked as an estimate.
    rendered = render(job, estimate=Estimate(progress=0.55, remaining=70, measured=True), floor=63)
    assert rendered.embed.fields[2].value == f"🎬 Generating… {bar(63)} ≈ 63% · about 1 minute left"
    assert rendered.percent == 63
    # A higher figure moves on, and is the next floor.
    higher = render(job, estimate=Estimate(progress=0.7, measured=True), floor=63)
    assert higher.percent == 70 and "≈" not in str(higher.embed.fields[2].value)


def test_a_percentage_once_shown_does_not_vanish() -> None:
    job = make_job(S.RUNNING, progress=None, started_at=NOW - 100)
    assert status(job, estimate=Estimate(remaining=60), floor=40) == (
        f"🎬 Generating… {bar(40)} ≈ 40% · about 1 minute left"
    )


def test_the_rendered_percent_is_what_the_status_shows() -> None:
    job = make_job(S.RUNNING, progress=None)
    assert render(job, estimate=Estimate(progress=0.33)).percent == 30
    assert render(job, estimate=Estimate(remaining=60)).percent is None
    assert render(make_job(S.QUEUED), position=1, estimate=Estimate(starts_in=60)).percent is None
    assert render(make_job(S.RUNNING, progress=0.41)).percent == 41


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.floats(min_value=-0.5, max_value=1.5, allow_nan=False)),
            st.booleans(),
            st.one_of(st.none(), st.floats(min_value=-100, max_value=10_000, allow_nan=False)),
        ),
        max_size=25,
    )
)
def test_shown_percentages_never_go_backwards(steps: list[tuple[float | None, bool, float | None]]) -> None:
    # The reporter feeds each render's percent back as the next floor.
    job = make_job(S.RUNNING, progress=None, started_at=NOW - 100)
    floor, seen = 0, [0]
    for progress, measured, remaining in steps:
        rendered = render(job, estimate=Estimate(progress, remaining, None, measured), floor=floor)
        if rendered.percent is not None:
            floor = rendered.percent
            seen.append(floor)
            assert f" {floor}%" in str(rendered.embed.fields[2].value)
        else:
            assert floor == 0  # a percentage, once shown, never vanishes
    assert seen == sorted(seen)


# ---------------------------------------------------------------------- queued: the expected start


@pytest.mark.parametrize(
    ("starts_in", "text"),
    [
        (240, "⏳ Queued: #3 in this server's queue · starts in about 4 minutes"),
        (61, "⏳ Queued: #3 in this server's queue · starts in about 1 minute"),
        (30, "⏳ Queued: #3 in this server's queue · starts in less than a minute"),
        (0, "⏳ Queued: #3 in this server's queue · starting soon"),
        (-20, "⏳ Queued: #3 in this server's queue · starting soon"),
        (7200, "⏳ Queued: #3 in this server's queue · starts in about 2 hours"),
        (None, "⏳ Queued: #3 in this server's queue"),
    ],
)
def test_a_queued_job_shows_its_place_and_expected_start(starts_in: float | None, text: str) -> None:
    assert status(make_job(S.QUEUED), position=3, estimate=Estimate(starts_in=starts_in)) == text


def test_a_queued_job_without_a_place_still_shows_its_start() -> None:
    assert (
        status(make_job(S.QUEUED), estimate=Estimate(starts_in=240))
        == "⏳ Queued · starts in about 4 minutes"
    )


@pytest.mark.parametrize("state", [S.SUBMITTING, S.DELIVERING, S.DELIVERED, S.FAILED, S.CANCELLED])
def test_an_estimate_changes_nothing_past_the_queue_and_the_service(state: JobState) -> None:
    job = make_job(state, progress=0.5, error_code="timeout")
    estimate = Estimate(progress=0.9, remaining=60, starts_in=60)
    assert status(job, estimate=estimate, floor=80) == status(job)


# ---------------------------------------------------------------------- estimates in other languages


@pytest.mark.parametrize(
    ("remaining", "left"),
    [
        (60, "осталось около 1 минуты"),
        (120, "осталось около 2 минут"),
        (300, "осталось около 5 минут"),
        (21 * 3600, "осталось около 21 часа"),
    ],
)
def test_russian_time_left(remaining: float, left: str) -> None:
    job = make_job(S.RUNNING, locale="ru", progress=None)
    assert status(job, estimate=Estimate(remaining=remaining)) == f"🎬 Генерация… {left}"


@pytest.mark.parametrize(
    ("starts_in", "starts"),
    [(60, "za mniej więcej 1 minutę"), (180, "za mniej więcej 3 minuty"), (300, "za mniej więcej 5 minut")],
)
def test_polish_expected_start(starts_in: float, starts: str) -> None:
    job = make_job(S.QUEUED, locale="pl")
    assert status(job, position=2, estimate=Estimate(starts_in=starts_in)) == (
        f"⏳ W kolejce: #2 w kolejce tego serwera · zacznie się {starts}"
    )


def test_japanese_estimate() -> None:
    job = make_job(S.RUNNING, locale="ja", progress=None)
    assert status(job, estimate=Estimate(progress=0.5, remaining=150)) == (
        f"🎬 生成中… {bar(50)} ≈ 50% · 残り約 3 分"
    )
    assert status(make_job(S.QUEUED, locale="ja"), position=1, estimate=Estimate(starts_in=3600)) == (
        "⏳ 待機中: このサーバーのキューで #1 番目 · 約 1 時間後に開始"
    )


@pytest.mark.parametrize(
    ("code", "detail", "reason"),
    [
        (
            "rejected",
            "prompt violates the content policy",
            "the generation service refused this request: prompt violates the content policy",
        ),
        ("rejected", None, "the generation service refused this request."),
        ("rejected", "", "the generation service refused this request."),
        ("task_failed", "GPU out of memory", "the generation service could not make it: GPU out of memory"),
        ("task_failed", None, "the generation service could not make it (it gave no reason)."),
        ("timeout", None, "the generation service did not finish within 15 minutes."),
        ("auth", None, t("reason_auth")),
        ("rate_limited", None, t("reason_rate_limited")),
        ("unavailable", "HTTP 503", t("reason_unavailable")),
        ("bad_response", None, t("reason_bad_response")),
        ("download_failed", None, t("reason_download_failed")),
        ("download_too_large", None, t("reason_download_too_large")),
        (
            "result_refused",
            None,
            "the service's result link pointed somewhere Framecast does not fetch from.",
        ),
        ("not_media", None, "the generation service returned something that is not a video."),
        ("media_too_large", None, "the finished image is too large to process (too many pixels)."),
        ("bad_response", "3 malformed polls", t("reason_bad_response")),
        ("discord_forbidden", None, "something went wrong inside Framecast."),
        (None, None, "something went wrong inside Framecast."),
    ],
)
def test_status_failed_explains_each_error_code(code: str | None, detail: str | None, reason: str) -> None:
    job = make_job(S.FAILED, error_code=code, error_detail=detail)
    assert status(job) == f"❌ Failed: {reason}"


def test_not_media_names_what_the_job_asked_for() -> None:
    image = make_job(S.FAILED, kind=JobKind.IMAGE, params=dict(IMAGE_PARAMS), error_code="not_media")
    assert status(image) == "❌ Failed: the generation service returned something that is not an image."
    de = make_job(S.FAILED, locale="de", error_code="not_media")
    assert status(de) == f"❌ Fehlgeschlagen: {t('reason_not_media_video', 'de')}"


@pytest.mark.parametrize("code", ["result_refused", "not_media", "media_too_large", "bad_response"])
def test_new_failures_keep_the_retry_button(code: str) -> None:
    assert buttons(render(make_job(S.FAILED, id=41, error_code=code))) == [
        (f"framecast:retry:41:{USER}", "Retry")
    ]


def test_known_failure_reasons_are_distinct() -> None:
    codes = [
        "auth",
        "rate_limited",
        "unavailable",
        "bad_response",
        "download_failed",
        "download_too_large",
        "result_refused",
        "not_media",
        "media_too_large",
    ]
    texts = {status(make_job(S.FAILED, error_code=c)) for c in codes}
    assert len(texts) == len(codes)
    assert status(make_job(S.FAILED, error_code="internal")) not in texts


def test_every_error_code_maps_to_a_message() -> None:
    assert set(REASON_KEYS) == set(ErrorCode)
    assert set(REASON_KEYS_WITHOUT_DETAIL) <= set(ErrorCode)
    for key in [*REASON_KEYS.values(), *REASON_KEYS_WITHOUT_DETAIL.values()]:
        assert key in english_keys(), key
    for code in ErrorCode:
        assert not status(make_job(S.FAILED, error_code=code)).endswith(": ")


@pytest.mark.parametrize(
    ("poll_timeout", "minutes"), [(900, 15), (600, 10), (1800, 30), (30, 1), (89, 1), (170, 3)]
)
def test_timeout_reason_uses_the_configured_poll_timeout(poll_timeout: float, minutes: int) -> None:
    job = make_job(S.FAILED, error_code="timeout")
    assert status(job, poll_timeout=poll_timeout).endswith(f"within {minutes} minutes.")


# ---------------------------------------------------------------------- the whole message


@pytest.mark.parametrize("state", [S.QUEUED, S.SUBMITTING, S.RUNNING])
def test_cancel_button_while_cancellable(state: JobState) -> None:
    rendered = render(make_job(state, id=41, user_id=USER, progress=0.3), position=2)
    assert buttons(rendered) == [(f"framecast:cancel:41:{USER}", "Cancel")]


def test_retry_button_when_failed() -> None:
    rendered = render(make_job(S.FAILED, id=41, error_code="unavailable"))
    assert buttons(rendered) == [(f"framecast:retry:41:{USER}", "Retry")]


def test_again_remix_and_delete_buttons_when_delivered() -> None:
    rendered = render(make_job(S.DELIVERED, id=41, user_id=USER))
    assert buttons(rendered) == [
        (f"framecast:again:41:{USER}", "Again"),
        (f"framecast:remix:41:{USER}", "Remix"),
        ("framecast:delete:41", "Delete"),  # who may is the stored job's say, not the button's
    ]
    german = render(make_job(S.DELIVERED, id=41, locale="de"))
    assert [label for _, label in buttons(german)] == ["Nochmal", "Remixen", "Löschen"]


@pytest.mark.parametrize("state", [S.DELIVERING, S.CANCELLED])
def test_no_buttons_otherwise(state: JobState) -> None:
    assert buttons(render(make_job(state))) == []


def test_every_state_is_covered_by_the_button_rules() -> None:
    def having(action: str) -> set[JobState]:
        return {s for s in JobState if any(f":{action}:" in c for c, _ in buttons(render(make_job(s))))}

    assert having("cancel") == {S.QUEUED, S.SUBMITTING, S.RUNNING}
    assert having("retry") == {S.FAILED}
    assert having("again") == having("remix") == having("delete") == {S.DELIVERED}


def test_embed_layout() -> None:
    rendered = render(make_job(S.QUEUED, id=12), position=2)
    embed = rendered.embed
    assert embed.title == "Video · job #12"
    assert embed.description == "a cat on the moon"
    assert [(f.name, f.value, f.inline) for f in embed.fields] == [
        ("Requested by", f"<@{USER}>", True),
        ("Settings", f"1152×768 · 5 s · 24 fps · {VIDEO_MODEL}", True),
        ("Status", "⏳ Queued: #2 in this server's queue", False),
    ]
    assert embed.footer.text is None
    image = render(make_job(S.DELIVERED, kind=JobKind.IMAGE, params=dict(IMAGE_PARAMS)))
    assert image.embed.title == "Image · job #7"
    assert image.embed.fields[1].value == f"1024×1024 · {IMAGE_MODEL}"


def test_colour_follows_the_state() -> None:
    colours = {s: render(make_job(s)).embed.colour for s in JobState}
    assert colours[S.DELIVERED] == discord.Colour.green()
    assert colours[S.FAILED] == discord.Colour.red()
    assert colours[S.QUEUED] != colours[S.RUNNING]


def test_notes_go_to_the_footer() -> None:
    rendered = render(make_job(S.RUNNING), notes=("first note", "second note"))
    assert rendered.embed.footer.text == "first note\nsecond note"
    long = render(make_job(S.RUNNING), notes=("n" * 3000,))
    assert long.embed.footer.text is not None and len(long.embed.footer.text) <= 2048


PROMPTS_WITH_MARKUP = [
    "<@123456789012345678> and <@!42> and <@&987654321> and <#111> and @everyone @here",
    "**bold** __underline__ *italic* ~~strike~~ `code` ```block``` ||spoiler|| > quote",
    "# Heading\n- list\n[link](https://example.com) <https://example.com> :smile: <:custom:123>",
    "[Claim your free Nitro](https://discord.gift/abc) and [multi\nline](<https://x.example>)",
    "## h2\n### h3\n-# subtext\n1. one\n  2. two\n+ plus\n>>> quote block </job:1> <t:1700000000:R>",
    "back\\slash \\*not bold\\* \\[x](y) C:\\path\\ \\\\double",
    "  spaces kept  \n\n\ttab  ",
    "一只猫 🐈‍⬛ e\u0301 \u200b zero-width",
]
# Discord's markdown: a backslash before ASCII punctuation shows that character.
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_INLINE = set("\\*_~|`[]<@")


def shown(text: str) -> str:
    """What Discord displays for `text`, escapes-wise."""
    return _ESCAPE.sub(r"\1", text)


def live_markup(text: str) -> list[str]:
    """Characters of `text` that Discord could read as markup: unescaped specials, line-start marks."""
    found: list[str] = []
    line_start = True
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and _ESCAPE.match(text, i):
            i += 2
            line_start = False
            continue
        if ch in _INLINE or text.startswith("://", i):
            found.append(ch)
        elif line_start and (ch in "#+->" or (ch.isdigit() and re.match(r"\d+\.", text[i:]))):
            found.append(ch)
        if ch == "\n":
            line_start = True
        elif ch not in " \t":
            line_start = False
        i += 1
    return found


@pytest.mark.parametrize("prompt", PROMPTS_WITH_MARKUP, ids=range(len(PROMPTS_WITH_MARKUP)))
def test_prompt_is_shown_as_typed_and_never_as_markup(prompt: str) -> None:
    rendered = render(make_job(S.RUNNING, params={**VIDEO_PARAMS, "prompt": prompt}))
    description = rendered.embed.to_dict()["description"]
    assert shown(description) == prompt  # exactly what was typed, character for character
    assert live_markup(description) == []  # no link, mention, heading, list, code or emphasis
    # Never message content (which could ping): a Rendered has no content at all...
    assert {f.name for f in dataclasses.fields(Rendered)} == {"embed", "view", "key", "percent"}
    # ...and the prompt appears nowhere else in the embed.
    assert all(description not in (f.value or "") for f in rendered.embed.fields)
    assert description not in (rendered.embed.title or "")


def test_a_masked_link_cannot_form() -> None:
    text = as_text("[Claim your free Nitro](https://discord.gift/abc)")
    assert text == "\\[Claim your free Nitro\\](https\\://discord.gift/abc)"
    # Discord's masked-link and autolink rules need an unescaped "[...](" and "://".
    assert not re.search(r"(?<!\\)\[[^\]]*(?<!\\)\]\(", text)
    assert "https://" not in text


@given(st.text())
def test_any_text_is_shown_literally(text: str) -> None:
    escaped = as_text(text)
    assert shown(escaped) == text
    assert live_markup(escaped) == []


@given(st.text(min_size=1, max_size=300), st.integers(min_value=2, max_value=200))
def test_a_cut_never_splits_an_escape(text: str, limit: int) -> None:
    escaped = as_text(text, limit=limit)
    assert len(escaped) <= limit
    if escaped != as_text(text):
        assert escaped.endswith("…")
        assert text.startswith(shown(escaped[:-1]))
        assert live_markup(escaped[:-1]) == []


@pytest.mark.parametrize("code", ["rejected", "task_failed"])
def test_the_services_error_text_is_shown_literally(code: str) -> None:
    detail = "policy [appeal here](https://evil.example) <@&1> **now**"
    line = status(make_job(S.FAILED, error_code=code, error_detail=detail))
    assert detail not in line
    assert shown(line).endswith(detail)
    assert line.endswith(as_text(detail))
    assert live_markup(as_text(detail)) == []


@pytest.mark.parametrize(
    ("url", "text"),
    [
        ("https://cdn.example/files/7.mp4?sig=a%2Fb&x=1", "https://cdn.example/files/7.mp4?sig=a%2Fb&x=1"),
        (
            "https://cdn.example/a b[Free Nitro](https://evil.example)",
            "https://cdn.example/a%20b%5BFree%20Nitro%5D(https://evil.example)",
        ),
        ("https://cdn.example/<@&1>||x||", "https://cdn.example/%3C@&1%3E%7C%7Cx%7C%7C"),
    ],
)
def test_a_service_link_shows_as_one_plain_link(url: str, text: str) -> None:
    shown_text = link_text(url)
    assert shown_text == text
    assert not set(shown_text) & set(" []<>|")


def test_a_model_id_is_shown_literally() -> None:
    rendered = render(make_job(S.RUNNING, params={**VIDEO_PARAMS, "model": "vendor/model:latest"}))
    assert rendered.embed.fields[1].value == "1152×768 · 5 s · 24 fps · vendor/model:latest"
    odd = render(make_job(S.RUNNING, params={**VIDEO_PARAMS, "model": "svc_video*v2*"}))
    assert (odd.embed.fields[1].value or "").endswith("· svc\\_video\\*v2\\*")


def test_requester_is_a_mention_inside_the_embed_field() -> None:
    rendered = render(make_job(S.QUEUED, user_id=555), position=1)
    field = next(f for f in rendered.embed.fields if f.name == "Requested by")
    assert field.value == "<@555>"
    assert "<@555>" not in (rendered.embed.description or "")


@pytest.mark.parametrize("length", [3900, 3901, 4096, 4097, 20_000])
def test_long_prompts_fit_discords_description_limit(length: int) -> None:
    prompt = "".join(itertools.islice(itertools.cycle("abcdefghij "), length))
    rendered = render(
        make_job(S.RUNNING, params={**VIDEO_PARAMS, "prompt": prompt}),
        notes=("Framecast restarted; your job continues where it was.",),
    )
    description = rendered.embed.description
    assert description is not None
    assert len(description) <= 4096
    assert len(rendered.embed) <= 6000  # Discord's limit for the embed as a whole
    if length <= 3900:
        assert description == prompt
    else:
        assert description.endswith("…")
        assert prompt.startswith(description[:-1])
        assert len(description) >= 3000  # truncated, not thrown away


def test_german_locale() -> None:
    job = make_job(S.QUEUED, id=9, locale="de")
    rendered = render(job, position=2)
    assert rendered.embed.title == "Video · Auftrag #9"
    assert [f.name for f in rendered.embed.fields] == ["Angefordert von", "Einstellungen", "Status"]
    assert rendered.embed.fields[2].value == "⏳ In der Warteschlange: Platz #2 auf diesem Server"
    assert buttons(rendered) == [(f"framecast:cancel:9:{USER}", "Abbrechen")]
    assert status(make_job(S.DELIVERED, locale="de")) == t("status_delivered", "de") == "✅ Fertig"
    failed = make_job(S.FAILED, locale="de", error_code="timeout")
    assert (
        status(failed)
        == "❌ Fehlgeschlagen: der Generierungsdienst ist nicht innerhalb von 15 Minuten fertig geworden."
    )
    assert buttons(render(failed)) == [(f"framecast:retry:7:{USER}", "Erneut versuchen")]
    # Discord's regional variants read the base language.
    assert status(make_job(S.CANCELLED, locale="de-AT")) == "🚫 Abgebrochen"


@pytest.mark.parametrize("locale", ["xx-YY", "tlh", "", "en-US", "en-GB"])
def test_unknown_locale_falls_back_to_english(locale: str) -> None:
    job = make_job(S.QUEUED, locale=locale)
    rendered = render(job, position=5)
    assert rendered.embed.title == "Video · job #7"
    assert rendered.embed.fields[2].value == "⏳ Queued: #5 in this server's queue"
    assert buttons(rendered) == [(f"framecast:cancel:7:{USER}", "Cancel")]


# ---------------------------------------------------------------------- the key (skips no-op edits)


def test_same_job_twice_gives_the_same_key() -> None:
    a = render(make_job(S.RUNNING, progress=0.4))
    b = render(make_job(S.RUNNING, progress=0.4))  # an equal but distinct snapshot
    assert a.key == b.key
    hash(a.key)  # usable as a dict key / in a set


def test_progress_step_changes_the_key() -> None:
    assert render(make_job(S.RUNNING, progress=0.40)).key != render(make_job(S.RUNNING, progress=0.41)).key


def test_invisible_progress_jitter_keeps_the_key() -> None:
    # 40.1 % and 40.4 % read the same ("40%", same bar): no edit needed.
    assert render(make_job(S.RUNNING, progress=0.401)).key == render(make_job(S.RUNNING, progress=0.404)).key


def test_key_changes_exactly_when_the_visible_text_changes() -> None:
    variants: list[tuple[Job, int | None, float, tuple[str, ...]]] = []
    for locale in ("en-US", "de"):

        def job(state: JobState, locale: str = locale, **kw: Any) -> Job:
            return make_job(state, locale=locale, id=7, user_id=USER, **kw)

        variants += [
            (job(S.QUEUED), 1, NOW, ()),
            (job(S.QUEUED), 2, NOW, ()),
            (job(S.QUEUED), 2, NOW + 30, ()),  # time does not show while queued
            (job(S.QUEUED), None, NOW, ()),
            (job(S.QUEUED), 0, NOW, ()),
            (job(S.QUEUED), 1, NOW, ("Framecast restarted; your job continues where it was.",)),
            (job(S.SUBMITTING), 1, NOW, ()),
            (job(S.SUBMITTING), None, NOW, ()),
            (job(S.RUNNING, progress=0.40), None, NOW, ()),
            (job(S.RUNNING, progress=0.401), None, NOW, ()),
            (job(S.RUNNING, progress=0.41), None, NOW + 9, ()),
            (job(S.RUNNING, progress=0.5), None, NOW, ()),
            (job(S.RUNNING, started_at=NOW - 100), None, NOW, ()),
            (job(S.RUNNING, started_at=NOW - 100), None, NOW + 0.5, ()),
            (job(S.RUNNING, started_at=NOW - 100), None, NOW + 1, ()),
            (job(S.RUNNING, started_at=NOW - 100), None, NOW + 1, ("a note",)),
            (job(S.DELIVERING), None, NOW, ()),
            (job(S.DELIVERED), None, NOW, ()),
            (job(S.DELIVERED), None, NOW, ("a note",)),
            (job(S.FAILED, error_code="timeout"), None, NOW, ()),
            (job(S.FAILED, error_code="rejected", error_detail="nope"), None, NOW, ()),
            (job(S.FAILED, error_code="rejected", error_detail="nope"), None, NOW + 60, ()),
            (job(S.FAILED, error_code="rejected"), None, NOW, ()),
            (job(S.CANCELLED), None, NOW, ()),
        ]
    rendered = [render(j, position=p, now=n, notes=notes) for j, p, n, notes in variants]
    for (i, a), (k, b) in itertools.combinations(enumerate(rendered), 2):
        same_text = visible(a) == visible(b)
        assert (a.key == b.key) == same_text, (variants[i], variants[k])


def test_key_follows_the_estimates_visible_text() -> None:
    running = make_job(S.RUNNING, progress=None, started_at=NOW - 100)
    queued = make_job(S.QUEUED)
    variants: list[tuple[Job, Estimate, int]] = [
        (running, Estimate(progress=0.61, remaining=70), 0),
        (running, Estimate(progress=0.63, remaining=80), 0),  # still "≈ 60% · about 1 minute"
        (running, Estimate(progress=0.66, remaining=80), 0),
        (running, Estimate(progress=0.61, remaining=70, measured=True), 0),
        (running, Estimate(progress=0.61, remaining=130), 0),
        (running, Estimate(progress=0.61, remaining=70), 65),
        (running, Estimate(remaining=130), 0),
        (running, Estimate(remaining=150), 0),
        (running, Estimate(remaining=-1), 0),
        (running, Estimate(remaining=-100), 0),
        (queued, Estimate(starts_in=240), 0),
        (queued, Estimate(starts_in=250), 0),
        (queued, Estimate(starts_in=400), 0),
        (queued, Estimate(), 0),
    ]
    rendered = [render(job, position=2, estimate=estimate, floor=floor) for job, estimate, floor in variants]
    for (i, a), (k, b) in itertools.combinations(enumerate(rendered), 2):
        assert (a.key == b.key) == (visible(a) == visible(b)), (variants[i], variants[k])
    assert rendered[0].key == rendered[1].key  # estimate jitter inside a step: no edit
    assert rendered[8].key == rendered[9].key  # overdue is overdue, however late
