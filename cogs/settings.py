"""/settings: a server's admins shape Framecast for their server (limits, defaults, where, content, key).

Every subcommand is hidden from members without Manage Server (``default_permissions``) and checks
it again on every use, since Server Settings -> Integrations can show a command to anyone. Changes
go through the admins' use cases (:class:`framecast.app.Admins`: validated against the operator's
ceilings, persisted and logged with who changed what); a :class:`SettingsError` becomes a private,
localised reply in the command tree's error handler. The server's own API key is typed into a modal
(never prefilled, never echoed); the core checks it with one model-list call and only then stores it
(encrypted).

A key the service later refuses is reported to that server's admins only: the core says whom
(:class:`RefusedKeyNotice`), this cog sends it: a DM to the member who set it, or, when that fails, a
notice in the server's system channel (never a member's channel, never a ping).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.app_commands import Choice, locale_str
from discord.ext import commands

from cogs import tree
from cogs.discord_internals import system_channel_id
from cogs.generate import FPS_CHOICES, IMAGE_SIZE_CHOICES, LENGTH_CHOICES, VIDEO_SIZE_CHOICES
from cogs.i18n import command_name, shipped, t
from cogs.interactions import Where, server_only, where
from cogs.tree import SETTING_NAME_KEYS, NotServerManager, answer_error, relative_time
from cogs.views.key_form import KeySubmit, key_form
from cogs.views.render import as_text
from framecast.app import (
    LIMIT_SETTINGS,
    RESETTABLE,
    ImageDefaults,
    JobKind,
    KeyAvailability,
    KeyLine,
    KeyRemoved,
    KeySetResult,
    LimitsChange,
    RefusedKeyNotice,
    Setting,
    SettingsChanged,
    SettingsView,
    Source,
    VideoDefaults,
)

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)

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
#: The key's state in /settings show, and the reply when an admin may not set one.
_KEY_LINES = {
    KeyLine.DISABLED: "settings_key_disabled",
    KeyLine.NO_SECRET: "settings_key_no_secret",
    KeyLine.NONE: "settings_key_none",
    KeyLine.SET: "settings_key_set",
    KeyLine.REFUSED: "settings_key_rejected",
    KeyLine.UNREADABLE: "settings_key_unreadable",
}
_KEY_UNAVAILABLE = {
    KeyAvailability.DISABLED: "settings_key_disabled",
    KeyAvailability.NO_SECRET: "settings_key_no_secret",
}
_KEY_SET_REPLIES = {
    KeySetResult.SAVED: "settings_key_saved",
    KeySetResult.REFUSED: "settings_key_refused",
    KeySetResult.UNREACHABLE: "settings_key_unreachable",
    KeySetResult.DISABLED: "settings_key_disabled",
    KeySetResult.NO_SECRET: "settings_key_no_secret",
    KeySetResult.THROTTLED: "settings_key_checks_throttled",
}


def is_manager(interaction: discord.Interaction[Any]) -> bool:
    """Manage Server or Administrator in this guild (the guild-level permissions Discord sent)."""
    perms = interaction.permissions
    return interaction.guild_id is not None and bool(perms.manage_guild or perms.administrator)


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


@app_commands.guild_only()
@app_commands.default_permissions(manage_guild=True)
class ServerSettings(
    commands.GroupCog,
    group_name=locale_str("settings"),
    group_description=locale_str("Framecast's settings for this server (Manage Server)"),
):
    """The /settings group."""

    channels = app_commands.Group(
        name=locale_str("channels"), description=locale_str("Channels where generation is allowed")
    )
    blocklist = app_commands.Group(
        name=locale_str("blocklist"), description=locale_str("Words and phrases refused in prompts")
    )
    key = app_commands.Group(name=locale_str("key"), description=locale_str("This server's own API key"))

    def __init__(self, bot: Framecast) -> None:
        self.bot = bot
        super().__init__()

    async def cog_load(self) -> None:
        """Hear about server keys the service refuses (the core says whom to tell, once per key)."""
        self.bot.core.admins.on_key_refused(self._key_refused)

    async def interaction_check(self, interaction: discord.Interaction[Any], /) -> bool:  # type: ignore[override]
        """Manage Server (or Administrator) on every use: Integrations overrides can show it to anyone."""
        if interaction.guild_id is None or where(interaction) is not Where.GUILD:  # not a user install
            raise server_only(interaction)
        if not is_manager(interaction):
            raise NotServerManager()
        if getattr(interaction.command, "callback", None) is not ServerSettings.key_set.callback:
            await tree.acknowledge_privately(interaction)  # before a write, which may outwait Discord
        return True

    # -- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def _who(interaction: discord.Interaction[Any]) -> tuple[int, int]:
        """(guild, admin) of a /settings interaction (the group is guild-only)."""
        assert interaction.guild_id is not None
        return interaction.guild_id, interaction.user.id

    async def _changed(self, interaction: discord.Interaction[Any], outcome: SettingsChanged) -> None:
        """Tell the admin privately what the settings they named are now."""
        if not outcome.asked:
            await self._reply(interaction, t("settings_nothing_to_change", interaction.locale))
            return
        loc = interaction.locale
        text = SettingsText(loc)
        changes = "\n".join(
            t("settings_change_item", loc, name=text.name(s), value=text.value(s, outcome.view))
            for s in outcome.asked
        )
        await self._reply(interaction, t("settings_changed", loc, changes=changes))

    @staticmethod
    async def _reply(interaction: discord.Interaction[Any], content: str, **kwargs: Any) -> None:
        none = discord.AllowedMentions.none()
        if interaction.response.is_done():
            await interaction.followup.send(content, ephemeral=True, allowed_mentions=none, **kwargs)
        else:
            await interaction.response.send_message(content, ephemeral=True, allowed_mentions=none, **kwargs)

    # -- show ------------------------------------------------------------------------------------
    @app_commands.command(name=locale_str("show"), description=locale_str("Show this server's settings"))
    async def show(self, interaction: discord.Interaction[Framecast]) -> None:
        """Every setting with its effective value and its source, privately."""
        view = await self.bot.core.admins.show(self._who(interaction)[0])
        await interaction.followup.send(
            embed=self.render(view, interaction.locale),
            ephemeral=True,
            allowed_mentions=discord.AllowedMentions.none(),
        )

    @staticmethod
    def render(view: SettingsView, locale: str | discord.Locale | None) -> discord.Embed:
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

    # -- limits and defaults ---------------------------------------------------------------------
    @app_commands.command(
        name=locale_str("limits"),
        description=locale_str("Limits for members and the queue (up to the operator's)"),
    )
    @app_commands.rename(
        member_jobs=locale_str("member_jobs"),
        daily_videos=locale_str("daily_videos"),
        daily_images=locale_str("daily_images"),
        queue_cap=locale_str("queue_cap"),
    )
    @app_commands.describe(
        member_jobs=locale_str("Jobs a member may have queued or running"),
        daily_videos=locale_str("Videos a member may make per day (0: none)"),
        daily_images=locale_str("Images a member may make per day (0: none)"),
        queue_cap=locale_str("Jobs this server may have waiting"),
    )
    async def limits(
        self,
        interaction: discord.Interaction[Framecast],
        member_jobs: app_commands.Range[int, 1, 1000] | None = None,
        daily_videos: app_commands.Range[int, 0, 100000] | None = None,
        daily_images: app_commands.Range[int, 0, 100000] | None = None,
        queue_cap: app_commands.Range[int, 1, 100000] | None = None,
    ) -> None:
        """Change the member and queue limits (each capped by the operator's ceiling)."""
        change = LimitsChange(
            member_jobs=member_jobs, daily_videos=daily_videos, daily_images=daily_images, queue_cap=queue_cap
        )
        await self._changed(
            interaction, await self.bot.core.admins.change_limits(*self._who(interaction), change)
        )

    @app_commands.command(name=locale_str("video"), description=locale_str("Defaults for /video"))
    @app_commands.rename(
        size=locale_str("size"), length=locale_str("length"), fps=locale_str("fps"), model=locale_str("model")
    )
    @app_commands.describe(
        size=locale_str("Frame size"),
        length=locale_str("Clip length in seconds"),
        fps=locale_str("Frames per second"),
        model=locale_str("Model to use (from the service's list)"),
    )
    @app_commands.choices(size=VIDEO_SIZE_CHOICES, length=LENGTH_CHOICES, fps=FPS_CHOICES)  # type: ignore[misc]  # str and int choices in one call
    async def video(
        self,
        interaction: discord.Interaction[Framecast],
        size: str | None = None,
        length: int | None = None,
        fps: int | None = None,
        model: str | None = None,
    ) -> None:
        """Change the defaults /video uses when a member picks none."""
        change = VideoDefaults(size=size, seconds=length, fps=fps, model=model)
        outcome = await self.bot.core.admins.change_video_defaults(*self._who(interaction), change)
        await self._changed(interaction, outcome)

    @app_commands.command(name=locale_str("image"), description=locale_str("Defaults for /image"))
    @app_commands.rename(size=locale_str("size"), model=locale_str("model"))
    @app_commands.describe(
        size=locale_str("Frame size"), model=locale_str("Model to use (from the service's list)")
    )
    @app_commands.choices(size=IMAGE_SIZE_CHOICES)
    async def image(
        self,
        interaction: discord.Interaction[Framecast],
        size: str | None = None,
        model: str | None = None,
    ) -> None:
        """Change the defaults /image uses when a member picks none."""
        change = ImageDefaults(size=size, model=model)
        outcome = await self.bot.core.admins.change_image_defaults(*self._who(interaction), change)
        await self._changed(interaction, outcome)

    @video.autocomplete("model")
    async def _video_models(
        self, interaction: discord.Interaction[Framecast], current: str
    ) -> list[Choice[str]]:
        return [Choice(name=m, value=m) for m in self.bot.core.members.suggest_models(JobKind.VIDEO, current)]

    @image.autocomplete("model")
    async def _image_models(
        self, interaction: discord.Interaction[Framecast], current: str
    ) -> list[Choice[str]]:
        return [Choice(name=m, value=m) for m in self.bot.core.members.suggest_models(JobKind.IMAGE, current)]

    # -- where -----------------------------------------------------------------------------------
    @channels.command(name=locale_str("add"), description=locale_str("Allow generation in a channel"))
    @app_commands.rename(channel=locale_str("channel"))
    @app_commands.describe(channel=locale_str("The channel"))
    async def channels_add(
        self, interaction: discord.Interaction[Framecast], channel: discord.TextChannel | discord.Thread
    ) -> None:
        """Add a channel to the allowed ones (the first one limits generation to the list)."""
        await self._changed(
            interaction, await self.bot.core.admins.add_channel(*self._who(interaction), channel.id)
        )

    @channels.command(
        name=locale_str("remove"), description=locale_str("Stop allowing generation in a channel")
    )
    @app_commands.rename(channel=locale_str("channel"))
    @app_commands.describe(channel=locale_str("The channel"))
    async def channels_remove(
        self, interaction: discord.Interaction[Framecast], channel: discord.TextChannel | discord.Thread
    ) -> None:
        """Remove a channel from the allowed ones (an empty list allows every channel)."""
        outcome = await self.bot.core.admins.remove_channel(*self._who(interaction), channel.id)
        await self._changed(interaction, outcome)

    @channels.command(name=locale_str("clear"), description=locale_str("Allow generation in every channel"))
    async def channels_clear(self, interaction: discord.Interaction[Framecast]) -> None:
        """Allow every channel again."""
        await self._changed(interaction, await self.bot.core.admins.clear_channels(*self._who(interaction)))

    # -- content ---------------------------------------------------------------------------------
    @app_commands.command(
        name=locale_str("nsfw"), description=locale_str("Generate only in age-restricted channels")
    )
    @app_commands.rename(only=locale_str("only"))
    @app_commands.describe(only=locale_str("On: only in age-restricted channels"))
    async def nsfw(self, interaction: discord.Interaction[Framecast], only: bool) -> None:
        """Switch NSFW-only on or off."""
        await self._changed(
            interaction, await self.bot.core.admins.set_nsfw_only(*self._who(interaction), only)
        )

    @blocklist.command(name=locale_str("add"), description=locale_str("Block words or phrases in prompts"))
    @app_commands.rename(terms=locale_str("terms"))
    @app_commands.describe(terms=locale_str("Comma-separated words or phrases; cat* blocks cats, catnip too"))
    async def blocklist_add(self, interaction: discord.Interaction[Framecast], terms: str) -> None:
        """Add terms (comma-separated) to the blocklist."""
        await self._changed(
            interaction, await self.bot.core.admins.block_terms(*self._who(interaction), terms)
        )

    @blocklist.command(name=locale_str("remove"), description=locale_str("Unblock words or phrases"))
    @app_commands.rename(terms=locale_str("terms"))
    @app_commands.describe(terms=locale_str("Words or phrases, separated by commas"))
    async def blocklist_remove(self, interaction: discord.Interaction[Framecast], terms: str) -> None:
        """Remove terms (comma-separated, any case) from the blocklist."""
        await self._changed(
            interaction, await self.bot.core.admins.unblock_terms(*self._who(interaction), terms)
        )

    @blocklist.command(name=locale_str("clear"), description=locale_str("Empty the blocklist"))
    async def blocklist_clear(self, interaction: discord.Interaction[Framecast]) -> None:
        """Remove every term."""
        await self._changed(interaction, await self.bot.core.admins.clear_blocklist(*self._who(interaction)))

    # -- reset -----------------------------------------------------------------------------------
    @app_commands.command(
        name=locale_str("reset"), description=locale_str("Go back to the operator's default")
    )
    @app_commands.rename(setting=locale_str("setting"))
    @app_commands.describe(setting=locale_str("The setting to reset"))
    @app_commands.choices(setting=RESET_CHOICES)
    async def reset(self, interaction: discord.Interaction[Framecast], setting: str) -> None:
        """Drop the server's value of one setting: the operator's default applies again."""
        # The key is not offered (it has /settings key remove); the use case refuses it anyway.
        outcome = await self.bot.core.admins.reset(*self._who(interaction), Setting(setting))
        await self._changed(interaction, outcome)

    # -- the server's own key --------------------------------------------------------------------
    @key.command(name=locale_str("set"), description=locale_str("Use this server's own API key"))
    async def key_set(self, interaction: discord.Interaction[Framecast]) -> None:
        """Open the key modal, unless the operator made server keys unavailable."""
        availability = self.bot.core.admins.key_availability()
        if availability is not KeyAvailability.READY:
            await self._reply(interaction, t(_KEY_UNAVAILABLE[availability], interaction.locale))
            return
        # Its own custom id per opening, never kept: the submit comes back through on_interaction.
        await interaction.response.send_modal(key_form(interaction.locale))

    @commands.Cog.listener()
    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        """Hand a key form's submit to :meth:`submit_key` (other interactions are not ours here)."""
        submit = KeySubmit.of(interaction)
        if submit is not None:
            try:
                await self.submit_key(interaction, submit.key)
            except Exception as error:  # the same replies as the commands, never the key
                await answer_error(interaction, error, what="command settings key set")

    async def submit_key(self, interaction: discord.Interaction[Any], key: str) -> None:
        """The modal's submit: the core checks the key with one model-list call, then stores it encrypted."""
        if interaction.guild_id is None or where(interaction) is not Where.GUILD:
            raise server_only(interaction)
        if not is_manager(interaction):
            raise NotServerManager()
        await interaction.response.defer(ephemeral=True, thinking=True)
        outcome = await self.bot.core.admins.set_key(interaction.guild_id, interaction.user.id, key)
        when = relative_time(outcome.retry_at or 0.0)
        shown, limit = as_text(outcome.last4), outcome.checks_per_hour
        reply = _KEY_SET_REPLIES[outcome.result]
        await self._reply(interaction, t(reply, interaction.locale, last4=shown, max=limit, when=when))

    @key.command(name=locale_str("remove"), description=locale_str("Go back to the operator's API key"))
    async def key_remove(self, interaction: discord.Interaction[Framecast]) -> None:
        """Forget the server's key: its jobs use the operator's key again."""
        guild_id, admin = self._who(interaction)
        removed = await self.bot.core.admins.remove_key(guild_id, admin)
        key = "settings_key_removed" if removed is KeyRemoved.REMOVED else "settings_key_none_to_remove"
        await self._reply(interaction, t(key, interaction.locale))

    # -- a refused key ---------------------------------------------------------------------------
    async def _key_refused(self, notice: RefusedKeyNotice) -> None:
        """Tell that server's admins (the member who set the key, else the system channel); nobody else."""
        try:
            await self._tell_admins(notice)
        except Exception:  # a listener must never break the runner that called it
            log.exception("could not tell guild %s that its API key was refused", notice.guild_id)

    async def _tell_admins(self, notice: RefusedKeyNotice) -> None:
        guild_id = notice.guild_id
        guild = self.bot.get_guild(guild_id)
        if guild is None:
            # Another shard's server (a job taken over from a process that died): ask Discord.
            with contextlib.suppress(discord.HTTPException):
                guild = await self.bot.fetch_guild(guild_id)
        locale = str(guild.preferred_locale.value) if guild else None
        name = as_text(guild.name) if guild else str(guild_id)
        text = t("settings_key_rejected_notice", locale, guild=name, last4=as_text(notice.last4))
        none = discord.AllowedMentions.none()
        if notice.set_by and await self._dm(guild, notice.set_by, text):
            log.info("guild %s: told the admin who set its API key that the service refused it", guild_id)
            return
        channel = await self._system_channel(guild)
        if channel is None:
            log.warning("guild %s: its API key was refused and no admin could be told", guild_id)
            return
        try:
            await channel.send(text, allowed_mentions=none)
            log.info("guild %s: its refused API key was announced in the system channel", guild_id)
        except discord.HTTPException as exc:
            log.warning("guild %s: could not post the refused-key notice: HTTP %s", guild_id, exc.status)

    async def _system_channel(self, guild: discord.Guild | None) -> discord.abc.Messageable | None:
        """The guild's system channel, from the cache or (another shard's server) from Discord."""
        if guild is None:
            return None
        if guild.system_channel is not None:
            return guild.system_channel
        channel_id = system_channel_id(guild)
        if channel_id is None:
            return None
        with contextlib.suppress(discord.HTTPException):
            channel = await self.bot.fetch_channel(channel_id)
            if isinstance(channel, discord.abc.Messageable):
                return channel
        return None

    async def _dm(self, guild: discord.Guild | None, user_id: int, text: str) -> bool:
        """DM `user_id` if they are still a member of `guild`; False when that cannot be done."""
        if guild is None:
            return False
        with contextlib.suppress(discord.HTTPException):
            member = await guild.fetch_member(user_id)
            await member.send(text, allowed_mentions=discord.AllowedMentions.none())
            return True
        return False


async def setup(bot: Framecast) -> None:
    """Extension entry point."""
    await bot.add_cog(ServerSettings(bot))
