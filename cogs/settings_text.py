"""How /settings reads: a :class:`~framecast.app.SettingsView` and a change's outcome in words.

Pure functions of the admins' use cases' outcomes (no bot, no I/O): the ``show`` embed, the reply to
a change, and the choices ``/settings reset`` offers. Values are shown literally (a model's name, a
blocked term: never markdown, links or mentions); channels as mentions, which never ping.
"""

from __future__ import annotations

import discord
from discord.app_commands import Choice, locale_str

from cogs.error_text import SETTING_NAME_KEYS, relative_time
from cogs.i18n import command_name, shipped, t
from cogs.literal import as_text
from framecast.app import (
    LIMIT_SETTINGS,
    RESETTABLE,
    JobKind,
    KeyLine,
    Setting,
    SettingsChanged,
    SettingsView,
    Source,
)

__all__ = ["BLOCKLIST_SHOWN_CHARS", "RESET_CHOICES", "SettingsText", "changed_text", "settings_embed"]

#: An embed field holds at most 1024 characters; the blocklist is cut well before that.
BLOCKLIST_SHOWN_CHARS = 900
#: /settings reset's labels; what may be reset is the core's rule (every setting but the key).
_RESET_LABELS = {
    Setting.MEMBER_JOBS: "Jobs per member",
    Setting.DAILY_VIDEOS: "Daily videos per member",
    Setting.DAILY_IMAGES: "Daily images per member",
    Setting.QUEUE_CAP: "Server queue cap",
    Setting.VIDEO_SIZE: "Video size",
    Setting.VIDEO_SECONDS: "Video length",
    Setting.VIDEO_FPS: "Video frame rate",
    Setting.VIDEO_MODEL: "Video model",
    Setting.IMAGE_SIZE: "Image size",
    Setting.IMAGE_MODEL: "Image model",
    Setting.CHANNELS: "Allowed channels",
    Setting.NSFW_ONLY: "NSFW only",
    Setting.BLOCKLIST: "Blocklist",
}
RESET_CHOICES: list[Choice[str]] = [
    Choice(name=locale_str(_RESET_LABELS[setting]), value=setting.value) for setting in RESETTABLE
]
_DEFAULT_SETTINGS = (
    Setting.VIDEO_SIZE,
    Setting.VIDEO_SECONDS,
    Setting.VIDEO_FPS,
    Setting.VIDEO_MODEL,
    Setting.IMAGE_SIZE,
    Setting.IMAGE_MODEL,
)
#: The key's state in /settings show.
_KEY_LINES = {
    KeyLine.DISABLED: "settings_key_disabled",
    KeyLine.NO_SECRET: "settings_key_no_secret",
    KeyLine.NONE: "settings_key_none",
    KeyLine.SET: "settings_key_set",
    KeyLine.REFUSED: "settings_key_rejected",
    KeyLine.UNREADABLE: "settings_key_unreadable",
}


class SettingsText:
    """How a :class:`SettingsView` reads in one locale (values, sources, the key line); pure."""

    def __init__(self, locale: str | discord.Locale | None) -> None:
        self.locale = locale

    def name(self, setting: Setting) -> str:
        """The setting's name in this locale."""
        return t(SETTING_NAME_KEYS[setting], self.locale)

    def _choice(self, label: str) -> str:
        # Size names are the /video and /image choices: the same translation.
        return shipped().command(label, self.locale) or label

    def value(self, setting: Setting, view: SettingsView) -> str:
        """The effective value of `setting` (the server's, else the operator's default), as text."""
        loc = self.locale
        if setting in LIMIT_SETTINGS:
            effective = view.limit(setting)
            return t("settings_value_unlimited", loc) if effective is None else str(effective)
        if setting is Setting.VIDEO_SIZE:
            return self._choice(view.video_size.label)
        if setting is Setting.IMAGE_SIZE:
            return self._choice(view.image_size.label)
        if setting is Setting.VIDEO_SECONDS:
            return t("settings_value_seconds", loc, seconds=view.video_seconds)
        if setting is Setting.VIDEO_FPS:
            return t("settings_value_fps", loc, fps=view.video_fps)
        if setting in (Setting.VIDEO_MODEL, Setting.IMAGE_MODEL):
            model = view.model(JobKind.VIDEO if setting is Setting.VIDEO_MODEL else JobKind.IMAGE)
            if model.dropped and model.chosen:
                # The service stopped offering the server's pick: say what jobs get instead.
                return t(
                    "settings_value_model_dropped", loc, model=as_text(model.chosen), used=as_text(model.used)
                )
            return as_text(model.used)
        settings = view.settings
        if setting is Setting.CHANNELS:
            # Channel mentions never ping; they show as links to the channels.
            if not settings.channels:
                return t("settings_value_everywhere", loc)
            return ", ".join(f"<#{cid}>" for cid in settings.channels)
        if setting is Setting.NSFW_ONLY:
            return t("settings_value_on" if settings.nsfw_only else "settings_value_off", loc)
        if setting is Setting.BLOCKLIST:
            return t("settings_value_terms", loc, count=len(settings.blocklist))
        return ""  # the key has its own line (key_line)

    def source(self, view: SettingsView, setting: Setting) -> str:
        """ "set by this server" or "operator default"."""
        key = (
            "settings_source_server" if view.source(setting) is Source.SERVER else "settings_source_operator"
        )
        return t(key, self.locale)

    def line(self, view: SettingsView, setting: Setting) -> str:
        """One line of ``show``: name, effective value, where it comes from, and the ceiling if any."""
        ceiling = view.ceiling(setting)
        params = {
            "name": self.name(setting),
            "value": self.value(setting, view),
            "source": self.source(view, setting),
        }
        if ceiling is not None:
            return t("settings_line_ceiling", self.locale, ceiling=ceiling, **params)
        return t("settings_line", self.locale, **params)

    def key_line(self, view: SettingsView) -> str:
        """The server key's state: none, set (…abcd), refused, or unavailable, and why."""
        params = {"last4": as_text(view.key.last4)} if view.key.last4 is not None else {}
        return t(_KEY_LINES[view.key.line], self.locale, **params)

    def blocklist(self, terms: tuple[str, ...]) -> str:
        """The blocked terms as spoilers (literal text: never links, never pings), cut to fit an embed."""
        shown: list[str] = []
        used = 0
        for term in terms:
            piece = f"||{as_text(term)}||"
            if used + len(piece) > BLOCKLIST_SHOWN_CHARS:
                shown.append(t("settings_value_more", self.locale, count=len(terms) - len(shown)))
                break
            shown.append(piece)
            used += len(piece) + 2
        return ", ".join(shown)


def settings_embed(view: SettingsView, locale: str | discord.Locale | None) -> discord.Embed:
    """The ``show`` embed: limits (with ceilings and the quota reset), defaults, where, content, key."""
    text = SettingsText(locale)
    embed = discord.Embed(title=t("settings_show_title", locale), colour=discord.Colour.blurple())
    limits = [text.line(view, s) for s in LIMIT_SETTINGS]
    if view.quota_resets_at is not None:
        limits.append(t("settings_quota_resets", locale, when=relative_time(view.quota_resets_at)))
    embed.add_field(name=t("settings_section_limits", locale), value="\n".join(limits), inline=False)
    embed.add_field(
        name=t(
            "settings_section_defaults",
            locale,
            video=command_name("video", locale),
            image=command_name("image", locale),
        ),
        value="\n".join(text.line(view, s) for s in _DEFAULT_SETTINGS),
        inline=False,
    )
    where = [text.line(view, Setting.CHANNELS), text.line(view, Setting.NSFW_ONLY)]
    embed.add_field(name=t("settings_section_where", locale), value="\n".join(where), inline=False)
    content = [text.line(view, Setting.BLOCKLIST)]
    if view.settings.blocklist:
        content.append(text.blocklist(view.settings.blocklist))
    embed.add_field(name=t("settings_section_content", locale), value="\n".join(content), inline=False)
    embed.add_field(name=t("settings_name_api_key", locale), value=text.key_line(view), inline=False)
    return embed


def changed_text(outcome: SettingsChanged, locale: str | discord.Locale | None) -> str:
    """The reply to a change: what the settings the admin named are now (or that nothing changed)."""
    if not outcome.asked:
        return t("settings_nothing_to_change", locale)
    text = SettingsText(locale)
    changes = "\n".join(
        t("settings_change_item", locale, name=text.name(s), value=text.value(s, outcome.view))
        for s in outcome.asked
    )
    return t("settings_changed", locale, changes=changes)
