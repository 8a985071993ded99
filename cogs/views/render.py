"""What a job's message looks like in each state (pure functions of the job: easy to test).

The message is one embed (prompt, requester, settings, status) plus the buttons that fit the state:
Cancel while it can be cancelled, Retry after a failure, Again, Remix and Delete on a delivered result.
Embeds never ping, and every edit carries ``AllowedMentions.none()``: prompts are user text. (The
requester is pinged by a separate short reply, see the reporter.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import discord

from cogs.i18n import t
from cogs.i18n.personal import place_key
from cogs.literal import as_text
from cogs.views.buttons import AgainButton, CancelButton, DeleteButton, RemixButton, RetryButton
from framecast.app import ErrorCode, Estimate, Job, JobKind, JobState, is_personal_queue, job_style

BAR_CELLS = 12
#: An estimated percentage moves in steps of this size ("≈ 60%"): an estimate is not precise to
#: the percent, and coarse steps keep the edits of a message between polls few.
ESTIMATE_STEP = 5
#: An estimate never shows more than this: only the service may say a task is at 100 %.
ESTIMATE_CEILING = 95
_COLOURS = {
    JobState.QUEUED: discord.Colour.light_grey(),
    JobState.SUBMITTING: discord.Colour.blurple(),
    JobState.RUNNING: discord.Colour.blurple(),
    JobState.DELIVERING: discord.Colour.blurple(),
    JobState.DELIVERED: discord.Colour.green(),
    JobState.FAILED: discord.Colour.red(),
    JobState.CANCELLED: discord.Colour.dark_grey(),
}


@dataclass
class Rendered:
    """A job message ready to send: `key` identifies the visible content (to skip no-op edits)."""

    embed: discord.Embed
    view: discord.ui.View | None
    key: tuple[object, ...] = field(default_factory=tuple)
    #: The percentage the status shows (None: none), for the caller to keep as the next floor.
    percent: int | None = None


def progress_bar(fraction: float) -> str:
    """A text progress bar, e.g. ``▰▰▰▰▱▱▱▱▱▱▱▱``."""
    filled = max(0, min(BAR_CELLS, round(fraction * BAR_CELLS)))
    return "▰" * filled + "▱" * (BAR_CELLS - filled)


def format_elapsed(seconds: float) -> str:
    """``45s``, ``3m 05s``, ``1h 02m``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {(s % 3600) // 60:02d}m"


#: The message key of each failure (:class:`ErrorCode` is what the core stores in ``Job.error_code``).
REASON_KEYS: dict[ErrorCode, str] = {
    ErrorCode.SERVICE_ERROR: "reason_internal",
    ErrorCode.AUTH: "reason_auth",
    ErrorCode.RATE_LIMITED: "reason_rate_limited",
    ErrorCode.REJECTED: "reason_rejected",
    ErrorCode.UNAVAILABLE: "reason_unavailable",
    ErrorCode.BAD_RESPONSE: "reason_bad_response",
    ErrorCode.TASK_FAILED: "reason_task_failed",
    ErrorCode.TIMEOUT: "reason_timeout",
    ErrorCode.DOWNLOAD_FAILED: "reason_download_failed",
    ErrorCode.DOWNLOAD_TOO_LARGE: "reason_download_too_large",
    ErrorCode.RESULT_REFUSED: "reason_result_refused",
    ErrorCode.NOT_MEDIA: "reason_not_media_video",
    ErrorCode.MEDIA_TOO_LARGE: "reason_media_too_large",
    ErrorCode.INTERNAL: "reason_internal",
    ErrorCode.GUILD_KEY_REJECTED: "reason_guild_key_rejected",
    ErrorCode.KEY_REMOVED: "reason_key_removed",
    ErrorCode.GUILD_KEY_UNREADABLE: "reason_guild_key_unreadable",
    ErrorCode.MODEL_GONE: "reason_model_gone",
    ErrorCode.CHANNEL_GONE: "reason_channel_gone",
}
#: Failures that quote the service's own words, when the service gave none.
REASON_KEYS_WITHOUT_DETAIL: dict[ErrorCode, str] = {
    ErrorCode.REJECTED: "reason_rejected_unknown",
    ErrorCode.TASK_FAILED: "reason_task_failed_unknown",
    ErrorCode.MODEL_GONE: "reason_model_gone_unknown",  # no model of the kind is known now
}
#: "Not media" names what was expected.
_NOT_MEDIA_KEYS = {JobKind.VIDEO: "reason_not_media_video", JobKind.IMAGE: "reason_not_media_image"}


def failure_reason(job: Job, *, poll_timeout: float) -> str:
    """The failure in plain words, in the job's language."""
    code = ErrorCode.parse(job.error_code)
    # The detail is the service's own text: shown literally, never as links or formatting.
    detail = as_text(job.error_detail) if job.error_detail else None
    if code is ErrorCode.NOT_MEDIA:
        key = _NOT_MEDIA_KEYS[job.kind]
    elif detail is None and code in REASON_KEYS_WITHOUT_DETAIL:
        key = REASON_KEYS_WITHOUT_DETAIL[code]
    else:
        key = REASON_KEYS[code]
    key = place_key(key, personal=is_personal_queue(job.guild_id, job.user_id))
    model = as_text(str(job.params.get("model", "")))  # an id the member picked: shown literally
    return t(key, job.locale, detail=detail, minutes=max(1, round(poll_timeout / 60)), model=model)


def settings_line(job: Job) -> str:
    """The parameters used, e.g. ``1152×768 · 5 s · 24 fps · svc-video-v2.0``."""
    p = job.params
    model = as_text(p["model"])  # an id from the service's list: shown literally
    if job.kind is JobKind.VIDEO:
        return t(
            "settings_video",
            job.locale,
            width=p["width"],
            height=p["height"],
            seconds=p.get("seconds", "?"),
            fps=p["frame_rate"],
            model=model,
        )
    return t("settings_image", job.locale, size=p["size"].replace("x", "×"), model=model)


def shown_percent(job: Job, estimate: Estimate | None, floor: int = 0) -> tuple[int, bool] | None:
    """The percentage a running job's status shows, and whether it is the service's own figure.

    The estimate's progress when it has one, else the service's last report (``job.progress``).
    The service's figure is shown to the percent; an estimate in steps of :data:`ESTIMATE_STEP`,
    never above :data:`ESTIMATE_CEILING`. Never below `floor`, the highest percentage the message
    showed before: a figure that would go backwards shows `floor` again, as an estimate. ``None``
    when there is nothing honest to show.
    """
    fraction: float | None = job.progress
    measured = True
    if estimate is not None and estimate.progress is not None:
        fraction, measured = estimate.progress, estimate.measured
    if fraction is None or not math.isfinite(fraction):
        return (floor, False) if floor > 0 else None
    whole = int(fraction * 100 + 1e-9)  # 0.29 * 100 is 28.999...: still 29 %
    if measured:
        percent = max(0, min(100, whole))
    else:
        percent = max(0, min(ESTIMATE_CEILING, whole - whole % ESTIMATE_STEP))
    if percent < floor:
        return floor, False
    return percent, measured


def time_ahead(seconds: float) -> tuple[str, int]:
    """A coarse reading of a time ahead, as (unit, count).

    ``("overdue", 0)`` when it is due already, ``("under_minute", 0)`` under a minute, then
    ``("minutes", n)`` to the nearest minute, to the nearest five from ten minutes on, and
    ``("hours", n)`` to the nearest hour from an hour on. An estimate is never precise to the
    second: a coarse reading claims no more than is known, and changes rarely.
    """
    if seconds <= 0:
        return "overdue", 0
    if seconds < 60:
        return "under_minute", 0
    minutes = max(1, math.floor(seconds / 60 + 0.5))
    if minutes >= 10:
        minutes = 5 * math.floor(minutes / 5 + 0.5)
    if minutes < 60:
        return "minutes", minutes
    return "hours", max(1, math.floor(seconds / 3600 + 0.5))


#: The words for a time ahead (see :func:`time_ahead`): until a running job's result, and until
#: a queued job starts.
_LEFT_KEYS = {
    "overdue": "left_finishing",
    "under_minute": "left_under_minute",
    "minutes": "left_minutes",
    "hours": "left_hours",
}
_STARTS_KEYS = {
    "overdue": "starts_soon",
    "under_minute": "starts_under_minute",
    "minutes": "starts_minutes",
    "hours": "starts_hours",
}


def _time_text(keys: dict[str, str], seconds: float | None, locale: str) -> str | None:
    """The words for `seconds` ahead, or None when the time is unknown."""
    if seconds is None or not math.isfinite(seconds):
        return None
    unit, count = time_ahead(seconds)
    return t(keys[unit], locale, minutes=count, hours=count)


def _status(
    job: Job, *, position: int | None, now: float, poll_timeout: float, estimate: Estimate | None, floor: int
) -> tuple[str, int | None]:
    """The status line and the percentage it shows."""
    loc = job.locale
    state = job.state
    if state is JobState.QUEUED:
        personal = is_personal_queue(job.guild_id, job.user_id)
        queued_key = place_key("status_queued", personal=personal)
        queued = t(queued_key, loc, position=position) if position else t("status_queued_waiting", loc)
        starts = _time_text(_STARTS_KEYS, estimate.starts_in if estimate else None, loc)
        return (queued if starts is None else t("status_and_time", loc, status=queued, time=starts)), None
    if state is JobState.SUBMITTING:
        return t("status_submitting", loc), None
    if state is JobState.RUNNING:
        left = _time_text(_LEFT_KEYS, estimate.remaining if estimate else None, loc)
        shown = shown_percent(job, estimate, floor)
        if shown is not None:
            percent, measured = shown
            key = "status_generating_progress" if measured else "status_generating_estimate"
            text = t(key, loc, bar=progress_bar(percent / 100), percent=percent)
            return (text if left is None else t("status_and_time", loc, status=text, time=left)), percent
        if left is not None:
            return t("status_generating_left", loc, left=left), None
        # Nothing known about progress: an honest elapsed time instead of a made-up figure.
        started = job.started_at or job.created_at
        return t("status_generating_elapsed", loc, elapsed=format_elapsed(now - started)), None
    return _final_status(job, poll_timeout=poll_timeout), None


def _final_status(job: Job, *, poll_timeout: float) -> str:
    """The status of a job past the service: delivering, or finished one way or another."""
    loc = job.locale
    state = job.state
    if state is JobState.DELIVERING:
        return t("status_delivering", loc)
    if state is JobState.DELIVERED:
        return t("status_delivered", loc)
    if state is JobState.FAILED:
        return t("status_failed", loc, reason=failure_reason(job, poll_timeout=poll_timeout))
    return t("status_cancelled", loc)


def render_job(
    job: Job,
    *,
    position: int | None,
    now: float,
    poll_timeout: float,
    notes: tuple[str, ...] = (),
    estimate: Estimate | None = None,
    floor: int = 0,
) -> Rendered:
    """The whole message for `job`. `notes` are extra lines (already localised).

    `estimate` is what is known between polls (a running job's progress and time left, a queued
    job's start); `floor` the highest percentage the message has shown, so that no percentage
    ever goes backwards on screen (``Rendered.percent`` is the next floor).
    """
    loc = job.locale
    kind = t("kind_video" if job.kind is JobKind.VIDEO else "kind_image", loc)
    # The prompt is the member's text: shown as typed, never as markdown, links or mentions (the
    # service got the exact bytes). Embed descriptions hold 4096 characters; escapes count too.
    shown = as_text(job.params.get("prompt", ""), limit=3900)
    embed = discord.Embed(
        title=t("title", loc, kind=kind, id=job.id),
        description=shown,
        colour=_COLOURS[job.state],
    )
    embed.add_field(name=t("field_requested_by", loc), value=f"<@{job.user_id}>", inline=True)
    embed.add_field(name=t("field_settings", loc), value=settings_line(job), inline=True)
    style = job_style(job.params)
    if style is not None and style.name:
        # The style's name beside the member's prompt (the service got the prompt inside the style).
        embed.add_field(name=t("style_field", loc), value=as_text(style.name), inline=True)
    status, percent = _status(
        job, position=position, now=now, poll_timeout=poll_timeout, estimate=estimate, floor=floor
    )
    embed.add_field(name=t("field_status", loc), value=status, inline=False)
    if notes:
        # Discord caps a footer at 2048 characters and a whole embed at 6000.
        room = max(0, min(2048, 5990 - len(embed)))
        embed.set_footer(text="\n".join(notes)[:room])
    view: discord.ui.View | None = discord.ui.View(timeout=None)
    assert view is not None
    if job.state in (JobState.QUEUED, JobState.SUBMITTING, JobState.RUNNING):
        view.add_item(CancelButton(job.id, job.user_id, label=t("button_cancel", loc)))
    elif job.state is JobState.FAILED:
        view.add_item(RetryButton(job.id, job.user_id, label=t("button_retry", loc)))
    elif job.state is JobState.DELIVERED:
        # Any member may iterate on a result: the new job is theirs, under their own limits.
        view.add_item(AgainButton(job.id, job.user_id, label=t("button_again", loc)))
        view.add_item(RemixButton(job.id, job.user_id, label=t("button_remix", loc)))
        # Only its requester or Manage Server may (the use case decides, from the stored job).
        view.add_item(DeleteButton(job.id, label=t("delete_button", loc)))
    key = (
        embed.title,
        embed.description,
        status,
        notes,
        job.state,
        tuple(getattr(i, "custom_id", None) for i in view.children),
    )
    return Rendered(embed=embed, view=view, key=key, percent=percent)
