"""The dashboard, ``/d/<server>``: a server's settings, its queue now, for Manage Server only.

Manage Server is asked of Discord again on every request (the member fetched fresh with the bot
token, read as an :class:`Actor`), who may open it is the application's rule (``Admins.authorize``:
a refusal is a 403), forms carry the session's CSRF token, and every change goes through the use
cases ``/settings`` calls (:class:`Admins`, :class:`ServerStyles`, each given the actor), so it is
checked, saved and logged the same way. The server's key can be set and removed here; it is never shown (its last four
characters at most, as ``/settings show``). A channel is named only to who can read it
(:class:`ServerMember`'s ``channels``), and only those may be added.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from framecast.app import (
    Actor,
    AdminRefused,
    ImageDefaults,
    IntakeError,
    KeySetResult,
    LimitsChange,
    NotAChannel,
    ServerMember,
    SettingsError,
    StyleError,
    StyleKind,
    VideoDefaults,
    WebCases,
    presets,
)
from web.charts import day_bars
from web.requests import check_csrf, decimal, render, say, server_member, server_of

__all__ = ["KEY_WORDS", "add_routes"]

#: What a finished change says, by the `done` in the address it redirects to.
DONE = {
    "limits": "Limits saved.",
    "nsfw": "Saved.",
    "defaults": "Defaults saved.",
    "channels": "Channels saved.",
    "blocklist": "Blocklist saved.",
    "styles": "Styles saved.",
    "key-saved": "The server's key was checked and saved.",
    "key-removed": "The server's key was removed: the bot's own key is used again.",
    "key-none": "There was no server key to remove.",
}
#: A key not saved, worded as /settings key words it (the same catalogue keys: cogs/server_key.py);
#: every result but SAVED (which redirects with `done`) has one: tests/web/test_dashboard_words.py.
KEY_WORDS = {
    KeySetResult.REFUSED: "settings_key_refused",
    KeySetResult.MALFORMED: "settings_key_malformed",
    KeySetResult.UNREACHABLE: "settings_key_unreachable",
    KeySetResult.DISABLED: "settings_key_disabled",
    KeySetResult.NO_SECRET: "settings_key_no_secret",
    KeySetResult.THROTTLED: "settings_key_checks_throttled",
}


class _Refused(Exception):
    """A change the use case refused, in words for the page."""


@dataclass(frozen=True)
class _Posted:
    """One form as its handler reads it: the use cases, who sent it, its fields, and the page's words."""

    cases: WebCases
    member: ServerMember
    form: dict[str, str]
    request: web.Request

    @property
    def by(self) -> Actor:
        return self.member.actor

    def say(self, key: str, /, **params: object) -> str:
        return say(self.request, key, **params)


def add_routes(app: web.Application) -> None:
    """The dashboard's pages and forms."""
    app.router.add_get("/d/{guild}", dashboard)
    app.router.add_post("/d/{guild}/{form}", change)


async def _manager(request: web.Request) -> tuple[int, ServerMember]:
    guild_id, member = await server_member(request, fresh=True)
    try:
        server_of(request).cases.admins.authorize(member.actor)
    except AdminRefused:
        raise web.HTTPForbidden(
            text="Only members with Manage Server may open this server's dashboard."
        ) from None
    return guild_id, member


async def dashboard(request: web.Request, *, problem: str | None = None, status: int = 200) -> web.Response:
    """Every setting with its value and source, the styles, the key's state and the queue now."""
    guild_id, member = await _manager(request)
    cases = server_of(request).cases
    view = await cases.admins.show(member.actor)
    queue = await cases.members.show_queue(guild_id, member.viewer)
    usage = await cases.usage.of_server(guild_id)
    done = DONE.get(request.query.get("done", "")) if problem is None else None
    return render(
        request,
        "dashboard.html",
        status=status,
        guild_id=guild_id,
        server_name=member.server_name,
        view=view,
        styles=cases.styles.list_styles(member.actor).styles,
        style_kinds=[k.value for k in StyleKind],
        channels=member.channels,
        channel_names=dict(member.channels),
        hidden_channel=say(request, "web_channel_hidden"),
        video_sizes=list(presets.VIDEO_SIZES.values()),
        image_sizes=list(presets.IMAGE_SIZES.values()),
        video_seconds=presets.VIDEO_SECONDS,
        frame_rates=presets.FRAME_RATES,
        queue=queue,
        usage=usage,
        chart=day_bars(usage.days),
        now=time.time(),
        done=done,
        problem=problem,
    )


def _number(form: dict[str, str], name: str) -> int | None:
    text = str(form.get(name, "")).strip()
    if not text:
        return None
    number = decimal(text, 9)
    if number is None:
        raise _Refused("Limits are whole numbers (empty: leave as is).")
    return number


async def _limits(posted: _Posted) -> str:
    form = posted.form
    change = LimitsChange(
        member_jobs=_number(form, "member_jobs"),
        daily_videos=_number(form, "daily_videos"),
        daily_images=_number(form, "daily_images"),
        queue_cap=_number(form, "queue_cap"),
    )
    await posted.cases.admins.change_limits(posted.by, change)
    return "limits"


async def _nsfw(posted: _Posted) -> str:
    await posted.cases.admins.set_nsfw_only(posted.by, posted.form.get("only") == "on")
    return "nsfw"


def _choice(form: dict[str, str], name: str, allowed: object) -> str | None:
    value = form.get(name, "").strip()
    if not value:
        return None
    if value not in {str(a) for a in allowed}:  # type: ignore[attr-defined]
        raise _Refused("That choice is not offered.")
    return value


async def _defaults(posted: _Posted) -> str:
    # Only what the admin changed: a value left as shown keeps its source (the operator's default
    # stays the operator's, and follows it), as /settings changes only the options given.
    cases, by, form = posted.cases, posted.by, posted.form
    now = await cases.admins.show(by)

    def changed(name: str, allowed: object, current: object) -> str | None:
        value = _choice(form, name, allowed)
        return value if value is not None and value != str(current) else None

    seconds = changed("video_seconds", presets.VIDEO_SECONDS, now.video_seconds)
    fps = changed("video_fps", presets.FRAME_RATES, now.video_fps)
    video_model = form.get("video_model", "").strip()[:100] or None
    image_model = form.get("image_model", "").strip()[:100] or None
    video = VideoDefaults(
        size=changed("video_size", presets.VIDEO_SIZES, now.video_size.key),
        seconds=int(seconds) if seconds else None,
        fps=int(fps) if fps else None,
        model=video_model if video_model != now.video_model.chosen else None,
    )
    image = ImageDefaults(
        size=changed("image_size", presets.IMAGE_SIZES, now.image_size.key),
        model=image_model if image_model != now.image_model.chosen else None,
    )
    await cases.admins.change_video_defaults(by, video)
    await cases.admins.change_image_defaults(by, image)
    return "defaults"


async def _channels(posted: _Posted) -> str:
    admins, by, form = posted.cases.admins, posted.by, posted.form
    if form.get("action") == "clear":
        await admins.clear_channels(by)
        return "channels"
    channel = decimal(form.get("channel"), 20)
    if channel is None:
        raise _Refused(posted.say("web_pick_channel"))
    if form.get("action") == "remove":
        if not (await admins.remove_channel(by, channel)).saved:
            raise _Refused(posted.say("web_channel_not_listed"))
    else:
        # Only a channel the form offers: this server's, and one the admin can read.
        await admins.add_channel(by, channel, choices={cid for cid, _ in posted.member.channels})
    return "channels"


async def _blocklist(posted: _Posted) -> str:
    admins, by, terms = posted.cases.admins, posted.by, str(posted.form.get("terms", ""))
    if posted.form.get("action") == "remove":
        await admins.unblock_terms(by, terms)
    else:
        await admins.block_terms(by, terms)
    return "blocklist"


async def _styles(posted: _Posted) -> str:
    styles, by, form = posted.cases.styles, posted.by, posted.form
    if form.get("action") == "remove":
        await styles.remove(by, str(form.get("name", "")))
    else:
        kind = str(form.get("kind", StyleKind.BOTH.value))
        kind = kind if kind in {k.value for k in StyleKind} else StyleKind.BOTH.value
        await styles.add(by, str(form.get("name", "")), str(form.get("template", "")), StyleKind(kind))
    return "styles"


async def _key(posted: _Posted) -> str:
    admins, by, form = posted.cases.admins, posted.by, posted.form
    if form.get("action") == "remove":
        removed = await admins.remove_key(by)
        return "key-removed" if removed.value == "removed" else "key-none"
    outcome = await admins.set_key(by, str(form.get("key", ""))[:512])
    if outcome.result is not KeySetResult.SAVED:
        # THROTTLED says when: in whole minutes from now (Discord shows the same moment relatively).
        minutes = max(1, math.ceil(((outcome.retry_at or 0.0) - time.time()) / 60))
        when = posted.say("web_in_minutes", minutes=minutes)
        words = KEY_WORDS[outcome.result]
        raise _Refused(posted.say(words, last4=outcome.last4, max=outcome.checks_per_hour, when=when))
    return "key-saved"


FORMS: dict[str, Callable[[_Posted], Awaitable[str]]] = {
    "limits": _limits,
    "nsfw": _nsfw,
    "defaults": _defaults,
    "channels": _channels,
    "blocklist": _blocklist,
    "styles": _styles,
    "key": _key,
}


async def change(request: web.Request) -> web.StreamResponse:
    """One form: Manage Server asked again, the CSRF token checked, then the use case."""
    guild_id, member = await _manager(request)
    posted = await request.post()
    check_csrf(request, posted)
    handler = FORMS.get(request.match_info["form"])
    if handler is None:
        raise web.HTTPNotFound()
    form = {k: v for k, v in posted.items() if isinstance(v, str)}
    try:
        done = await handler(_Posted(server_of(request).cases, member, form, request))
    except NotAChannel:
        return await dashboard(request, problem=say(request, "web_pick_channel"), status=400)
    except SettingsError as exc:
        return await dashboard(request, problem=_settings_words(exc), status=400)
    except StyleError as exc:
        return await dashboard(request, problem=f"That style was refused ({exc.problem.value}).", status=400)
    except IntakeError:
        return await dashboard(request, problem="That value was refused.", status=400)
    except _Refused as exc:
        return await dashboard(request, problem=str(exc), status=400)
    raise web.HTTPSeeOther(f"/d/{guild_id}?done={done}")


def _settings_words(exc: SettingsError) -> str:
    problem = getattr(exc, "problem", None)
    if problem is None:
        return "Limits are whole numbers."
    ceiling = exc.params.get("ceiling")
    if ceiling is not None:
        return f"That is above the bot's ceiling ({ceiling})."
    return f"That value was refused ({problem.value})."
