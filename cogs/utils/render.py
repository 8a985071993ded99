"""What a job's message looks like in each state (pure functions of the job: easy to test).

The message is one embed (prompt, requester, settings, status) plus the buttons that fit the state.
Embeds never ping, and every edit carries ``AllowedMentions.none()``: prompts are user text. (The
requester is pinged by a separate short reply, see the reporter.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import discord

from cogs.utils.i18n import t
from cogs.utils.views import CancelButton, RetryButton
from framecast.jobs import Job, JobKind, JobState

BAR_CELLS = 12
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


def failure_reason(job: Job, *, poll_timeout: float) -> str:
    """The failure in plain words, in the job's language."""
    code = job.error_code or "internal"
    loc = job.locale
    if code == "rejected":
        return t("reason_rejected", loc, detail=job.error_detail) if job.error_detail else t("reason_rejected_unknown", loc)
    if code == "task_failed":
        return t("reason_task_failed", loc, detail=job.error_detail) if job.error_detail else t("reason_task_failed_unknown", loc)
    if code == "timeout":
        return t("reason_timeout", loc, minutes=max(1, round(poll_timeout / 60)))
    known = {"auth", "rate_limited", "unavailable", "bad_response", "download_failed", "download_too_large"}
    return t(f"reason_{code}" if code in known else "reason_internal", loc)


def settings_line(job: Job) -> str:
    """The parameters used, e.g. ``1152×768 · 5 s · 24 fps · svc-video-v2.0``."""
    p = job.params
    if job.kind is JobKind.VIDEO:
        return t("settings_video", job.locale, width=p["width"], height=p["height"],
                 seconds=p.get("seconds", "?"), fps=p["frame_rate"], model=p["model"])
    return t("settings_image", job.locale, size=p["size"].replace("x", "×"), model=p["model"])


def status_line(job: Job, *, position: int | None, now: float, poll_timeout: float) -> str:
    """The one line that says where the job is."""
    loc = job.locale
    state = job.state
    if state is JobState.QUEUED:
        return t("status_queued", loc, position=position) if position else t("status_queued_waiting", loc)
    if state is JobState.SUBMITTING:
        return t("status_submitting", loc)
    if state is JobState.RUNNING:
        if job.progress is not None:
            return t("status_generating_progress", loc, bar=progress_bar(job.progress), percent=int(job.progress * 100 + 1e-9))
        # No progress from the service: an honest elapsed time instead of a made-up percentage.
        started = job.started_at or job.created_at
        return t("status_generating_elapsed", loc, elapsed=format_elapsed(now - started))
    if state is JobState.DELIVERING:
        return t("status_delivering", loc)
    if state is JobState.DELIVERED:
        return t("status_delivered", loc)
    if state is JobState.FAILED:
        return t("status_failed", loc, reason=failure_reason(job, poll_timeout=poll_timeout))
    return t("status_cancelled", loc)


def render_job(
    job: Job, *, position: int | None, now: float, poll_timeout: float,
    notes: tuple[str, ...] = (),
) -> Rendered:
    """The whole message for `job`. `notes` are extra lines (already localised)."""
    loc = job.locale
    kind = t("kind_video" if job.kind is JobKind.VIDEO else "kind_image", loc)
    prompt = job.params.get("prompt", "")
    # Embed descriptions hold 4096 characters; prompts are capped well below (PROMPT_MAX_CHARS).
    shown = prompt if len(prompt) <= 3900 else prompt[:3899] + "…"
    embed = discord.Embed(
        title=t("title", loc, kind=kind, id=job.id),
        description=shown,
        colour=_COLOURS[job.state],
    )
    embed.add_field(name=t("field_requested_by", loc), value=f"<@{job.user_id}>", inline=True)
    embed.add_field(name=t("field_settings", loc), value=settings_line(job), inline=True)
    status = status_line(job, position=position, now=now, poll_timeout=poll_timeout)
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
    key = (embed.title, embed.description, status, notes, job.state, tuple(getattr(i, "custom_id", None) for i in view.children))
    return Rendered(embed=embed, view=view, key=key)
