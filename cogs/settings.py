"""/settings: a server's admins shape Framecast for their server (limits, defaults, where, content, key).

Every subcommand is hidden from members without Manage Server (``default_permissions``) and checks
it again on every use, since Server Settings -> Integrations can show a command to anyone. Changes
go through :meth:`Core.update_settings` (validated against the operator's ceilings, persisted and
logged with who changed what); its :class:`SettingsError` becomes a private, localised reply in the
command tree's error handler. The server's own API key is typed into a modal (never prefilled,
never echoed), checked with one model-list call, and only then stored (encrypted).

A key the service later refuses is reported to that server's admins only: a DM to the member who set
it, or, when that fails, a notice in the server's system channel (never a member's channel, never a
ping).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands
from discord.app_commands import Choice, locale_str
from discord.ext import commands

from cogs.generate import FPS_CHOICES, IMAGE_SIZE_CHOICES, LENGTH_CHOICES, VIDEO_SIZE_CHOICES
from cogs.i18n import command_name, shipped, t
from cogs.tree import SETTING_NAME_KEYS, NotServerManager, relative_time
from cogs.views.render import as_text
from framecast.app.intake import IntakeError, IntakeProblem
from framecast.guilds.settings import GuildSettings, KeyStatus, Policy, Setting, Source, quota_window
from framecast.jobs import JobKind, presets
from framecast.keys.accounts import KeyCheck
from framecast.keys.vault import KeyVaultState, last4
from framecast.logsetup import SECRET_INPUT_MARK, add_secret
from framecast.service.model_list import is_model_id

if TYPE_CHECKING:
    from bot import Framecast

log = logging.getLogger(__name__)

#: The key modal's ids; the text input's id carries the log filter's secret mark, so discord.py's
#: DEBUG log of the raw submission shows ``***`` instead of the key.
KEY_MODAL_ID = "settings:key"
KEY_INPUT_ID = f"settings:key:{SECRET_INPUT_MARK}"
#: Lengths Discord enforces on the key's text input (API keys are long; anything shorter is a typo).
KEY_MIN_CHARS = 8
KEY_MAX_CHARS = 400
#: An embed field holds at most 1024 characters; the blocklist is cut well before that.
BLOCKLIST_SHOWN_CHARS = 900
#: Models listed in a refusal of an unknown model.
LISTED_MODELS = 10

#: /settings reset's choices: every setting but the key (it has /settings key remove).
RESET_CHOICES: list[Choice[str]] = [
    Choice(name=locale_str(label), value=setting.value)
    for setting, label in (
        (Setting.MEMBER_JOBS, "Jobs per member"),
        (Setting.DAILY_VIDEOS, "Daily videos per member"),
        (Setting.DAILY_IMAGES, "Daily images per member"),
        (Setting.QUEUE_CAP, "Server queue cap"),
        (Setting.VIDEO_SIZE, "Video size"),
        (Setting.VIDEO_SECONDS, "Video length"),
        (Setting.VIDEO_FPS, "Video frame rate"),
        (Setting.VIDEO_MODEL, "Video model"),
        (Setting.IMAGE_SIZE, "Image size"),
        (Setting.IMAGE_MODEL, "Image model"),
        (Setting.CHANNELS, "Allowed channels"),
        (Setting.NSFW_ONLY, "NSFW only"),
        (Setting.BLOCKLIST, "Blocklist"),
    )
]
_DEFAULTS = GuildSettings()
_LIMITS = (Setting.MEMBER_JOBS, Setting.DAILY_VIDEOS, Setting.DAILY_IMAGES, Setting.QUEUE_CAP)
_DEFAULT_SETTINGS = (
    Setting.VIDEO_SIZE,
    Setting.VIDEO_SECONDS,
    Setting.VIDEO_FPS,
    Setting.VIDEO_MODEL,
    Setting.IMAGE_SIZE,
    Setting.IMAGE_MODEL,
)


def is_manager(interaction: discord.Interaction[Any]) -> bool:
    """Manage Server or Administrator in this guild (the guild-level permissions Discord sent)."""
    perms = interaction.permissions
    return interaction.guild_id is not None and bool(perms.manage_guild or perms.administrator)


def split_terms(text: str) -> list[str]:
    """Comma-separated blocklist terms (also the full-width and ideographic commas), trimmed."""
    for comma in ("，", "、", "،"):
        text = text.replace(comma, ",")
    return [term.strip() for term in text.split(",") if term.strip()]


class SettingsText:
    """How settings read in one locale (values, sources, the key line); pure, from the core's state."""

    def __init__(self, bot: Framecast, locale: str | discord.Locale | None) -> None:
        self.bot = bot
        self.locale = locale

    def name(self, setting: Setting) -> str:
        """The setting's name in this locale."""
        return t(SETTING_NAME_KEYS[setting], self.locale)

    def _choice(self, label: str) -> str:
        # Size names are the /video and /image choices: the same translation.
        return shipped().command(label, self.locale) or label

    def value(self, setting: Setting, settings: GuildSettings, policy: Policy | None = None) -> str:
        """The effective value of `setting` (the server's, else the operator's default), as text."""
        core = self.bot.core
        loc = self.locale
        if setting in _LIMITS:
            effective: int | None
            if policy is None:
                effective = getattr(settings, setting.value)
            else:
                effective = {
                    Setting.MEMBER_JOBS: policy.member_jobs,
                    Setting.QUEUE_CAP: policy.queue_cap,
                    Setting.DAILY_VIDEOS: policy.daily_videos,
                    Setting.DAILY_IMAGES: policy.daily_images,
                }[setting]
            return t("settings_value_unlimited", loc) if effective is None else str(effective)
        if setting is Setting.VIDEO_SIZE:
            return self._choice(presets.VIDEO_SIZES[settings.video_size or presets.DEFAULT_VIDEO_SIZE].label)
        if setting is Setting.IMAGE_SIZE:
            return self._choice(presets.IMAGE_SIZES[settings.image_size or presets.DEFAULT_IMAGE_SIZE].label)
        if setting is Setting.VIDEO_SECONDS:
            return t(
                "settings_value_seconds", loc, seconds=settings.video_seconds or presets.DEFAULT_VIDEO_SECONDS
            )
        if setting is Setting.VIDEO_FPS:
            return t("settings_value_fps", loc, fps=settings.video_fps or presets.DEFAULT_FRAME_RATE)
        if setting in (Setting.VIDEO_MODEL, Setting.IMAGE_MODEL):
            kind = JobKind.VIDEO if setting is Setting.VIDEO_MODEL else JobKind.IMAGE
            chosen: str | None = getattr(settings, setting.value)
            used = core.models.default(kind)
            listed = core.models.ids(kind)
            if chosen and listed and chosen not in listed:
                # The service stopped offering the server's pick: say what jobs get instead.
                return t("settings_value_model_dropped", loc, model=as_text(chosen), used=as_text(used))
            return as_text(chosen or used)
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

    def source(self, policy: Policy, setting: Setting) -> str:
        """ "set by this server" or "operator default"."""
        key = (
            "settings_source_server"
            if policy.source(setting) is Source.SERVER
            else "settings_source_operator"
        )
        return t(key, self.locale)

    def line(self, policy: Policy, setting: Setting) -> str:
        """One line of ``show``: name, effective value, where it comes from, and the ceiling if any."""
        ceiling = getattr(policy.ceilings, setting.value, None) if setting in _LIMITS else None
        params = {
            "name": self.name(setting),
            "value": self.value(setting, policy.settings, policy),
            "source": self.source(policy, setting),
        }
        if ceiling is not None:
            return t("settings_line_ceiling", self.locale, ceiling=ceiling, **params)
        return t("settings_line", self.locale, **params)

    def key_line(self, guild_id: int, stored_last4: str | None = None) -> str:
        """The server key's state: none, set (…abcd), refused, or unavailable, and why."""
        core = self.bot.core
        state = core.vault.state
        if state is KeyVaultState.DISABLED:
            return t("settings_key_disabled", self.locale)
        if state is KeyVaultState.NO_SECRET:
            return t("settings_key_no_secret", self.locale)
        status = core.accounts.guild_key_state(guild_id) if guild_id else None
        if status is None or stored_last4 is None:
            return t("settings_key_none", self.locale)
        if status is KeyStatus.REJECTED:
            return t("settings_key_rejected", self.locale, last4=as_text(stored_last4))
        return t("settings_key_set", self.locale, last4=as_text(stored_last4))

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


class KeyModal(discord.ui.Modal):
    """One short text input for the server's API key: never prefilled, never shown again."""

    def __init__(self, cog: ServerSettings, locale: str | discord.Locale | None) -> None:
        super().__init__(
            title=t("settings_key_modal_title", locale)[:45], timeout=900, custom_id=KEY_MODAL_ID
        )
        self.cog = cog
        self.key: discord.ui.TextInput[KeyModal] = discord.ui.TextInput(
            label=t("settings_key_modal_label", locale)[:45],
            custom_id=KEY_INPUT_ID,
            style=discord.TextStyle.short,
            min_length=KEY_MIN_CHARS,
            max_length=KEY_MAX_CHARS,
            required=True,
        )
        self.add_item(self.key)

    async def on_submit(self, interaction: discord.Interaction[Any]) -> None:  # type: ignore[override]
        """Check the key with the service, then store it (or say why not)."""
        await self.cog.submit_key(interaction, self.key.value)

    async def on_error(self, interaction: discord.Interaction[Any], error: Exception) -> None:  # type: ignore[override]
        """Same replies as the commands (the tree's handler), never the key."""
        await self.cog.bot.tree.on_error(interaction, app_commands.CommandInvokeError(_MODAL, error))


class _ModalCommand:
    """What :class:`app_commands.CommandInvokeError` needs of a command (its name) for the modal."""

    name = "settings key set"
    qualified_name = "settings key set"


_MODAL: Any = _ModalCommand()


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
        #: (guild, last4) already told about a refused key in this process: one notice per key.
        self._told: set[tuple[int, str]] = set()

    async def cog_load(self) -> None:
        """Hear about server keys the service refuses."""
        self.bot.core.accounts.on_key_rejected(self._key_rejected)

    async def interaction_check(self, interaction: discord.Interaction[Any], /) -> bool:  # type: ignore[override]
        """Manage Server (or Administrator) on every use: Integrations overrides can show it to anyone."""
        if interaction.guild_id is None:
            raise app_commands.NoPrivateMessage()
        if not is_manager(interaction):
            raise NotServerManager()
        return True

    # -- helpers ---------------------------------------------------------------------------------
    async def _change(self, interaction: discord.Interaction[Any], **changes: Any) -> None:
        """Apply `changes`, then tell the admin privately what the settings are now."""
        assert interaction.guild_id is not None
        if not changes:
            await self._reply(interaction, t("settings_nothing_to_change", interaction.locale))
            return
        new = await self.bot.core.update_settings(interaction.guild_id, by=interaction.user.id, **changes)
        text = SettingsText(self.bot, interaction.locale)
        policy = self.bot.core.guild_policy(interaction.guild_id)
        items = [
            t(
                "settings_change_item",
                interaction.locale,
                name=text.name(Setting(name)),
                value=text.value(Setting(name), new, policy),
            )
            for name in changes
        ]
        await self._reply(interaction, t("settings_changed", interaction.locale, changes="\n".join(items)))

    @staticmethod
    async def _reply(interaction: discord.Interaction[Any], content: str, **kwargs: Any) -> None:
        none = discord.AllowedMentions.none()
        if interaction.response.is_done():
            await interaction.followup.send(content, ephemeral=True, allowed_mentions=none, **kwargs)
        else:
            await interaction.response.send_message(content, ephemeral=True, allowed_mentions=none, **kwargs)

    def _current(self, interaction: discord.Interaction[Any]) -> GuildSettings:
        assert interaction.guild_id is not None
        return self.bot.core.guild_settings(interaction.guild_id)

    def _check_model(self, kind: str, model: str) -> str:
        # Autocomplete values are not validated by Discord: the service's list decides, as for /video.
        model = model.strip()
        listed = self.bot.core.models.ids(kind)
        if not is_model_id(model):
            raise IntakeError(IntakeProblem.UNKNOWN_MODEL, model=model[:100])
        if listed and model not in listed:
            raise IntakeError(
                IntakeProblem.UNLISTED_MODEL, model=model, models=", ".join(listed[:LISTED_MODELS])
            )
        return model

    # -- show ------------------------------------------------------------------------------------
    @app_commands.command(name=locale_str("show"), description=locale_str("Show this server's settings"))
    async def show(self, interaction: discord.Interaction[Framecast]) -> None:
        """Every setting with its effective value and its source, privately."""
        assert interaction.guild_id is not None
        await interaction.response.defer(ephemeral=True, thinking=True)
        core = self.bot.core
        gid = interaction.guild_id
        policy = core.guild_policy(gid)
        stored = await core.store.guild_key(gid)
        await interaction.followup.send(
            embed=self.render(gid, policy, stored.last4 if stored else None, interaction.locale),
            ephemeral=True,
            allowed_mentions=discord.AllowedMentions.none(),
        )

    def render(
        self, guild_id: int, policy: Policy, key_last4: str | None, locale: str | discord.Locale | None
    ) -> discord.Embed:
        """The ``show`` embed: limits (with ceilings and the quota reset), defaults, where, content, key."""
        text = SettingsText(self.bot, locale)
        core = self.bot.core
        embed = discord.Embed(title=t("settings_show_title", locale), colour=discord.Colour.blurple())
        limits = [text.line(policy, s) for s in _LIMITS]
        if policy.daily_videos is not None or policy.daily_images is not None:
            _, reset_at = quota_window(core.clock.time(), core.settings.quota_period)
            limits.append(t("settings_quota_resets", locale, when=relative_time(reset_at)))
        embed.add_field(name=t("settings_section_limits", locale), value="\n".join(limits), inline=False)
        embed.add_field(
            name=t(
                "settings_section_defaults",
                locale,
                video=command_name("video", locale),
                image=command_name("image", locale),
            ),
            value="\n".join(text.line(policy, s) for s in _DEFAULT_SETTINGS),
            inline=False,
        )
        where = [text.line(policy, Setting.CHANNELS), text.line(policy, Setting.NSFW_ONLY)]
        embed.add_field(name=t("settings_section_where", locale), value="\n".join(where), inline=False)
        content = [text.line(policy, Setting.BLOCKLIST)]
        if policy.settings.blocklist:
            content.append(text.blocklist(policy.settings.blocklist))
        embed.add_field(name=t("settings_section_content", locale), value="\n".join(content), inline=False)
        embed.add_field(
            name=t("settings_name_api_key", locale), value=text.key_line(guild_id, key_last4), inline=False
        )
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
        changes = {
            Setting.MEMBER_JOBS.value: member_jobs,
            Setting.DAILY_VIDEOS.value: daily_videos,
            Setting.DAILY_IMAGES.value: daily_images,
            Setting.QUEUE_CAP.value: queue_cap,
        }
        await self._change(interaction, **{k: v for k, v in changes.items() if v is not None})

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
        changes: dict[str, Any] = {
            Setting.VIDEO_SIZE.value: size,
            Setting.VIDEO_SECONDS.value: length,
            Setting.VIDEO_FPS.value: fps,
            Setting.VIDEO_MODEL.value: self._check_model("video", model) if model else None,
        }
        await self._change(interaction, **{k: v for k, v in changes.items() if v is not None})

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
        changes: dict[str, Any] = {
            Setting.IMAGE_SIZE.value: size,
            Setting.IMAGE_MODEL.value: self._check_model("image", model) if model else None,
        }
        await self._change(interaction, **{k: v for k, v in changes.items() if v is not None})

    @video.autocomplete("model")
    async def _video_models(
        self, interaction: discord.Interaction[Framecast], current: str
    ) -> list[Choice[str]]:
        return [Choice(name=m, value=m) for m in self.bot.core.models.suggest("video", current)]

    @image.autocomplete("model")
    async def _image_models(
        self, interaction: discord.Interaction[Framecast], current: str
    ) -> list[Choice[str]]:
        return [Choice(name=m, value=m) for m in self.bot.core.models.suggest("image", current)]

    # -- where -----------------------------------------------------------------------------------
    @channels.command(name=locale_str("add"), description=locale_str("Allow generation in a channel"))
    @app_commands.rename(channel=locale_str("channel"))
    @app_commands.describe(channel=locale_str("The channel"))
    async def channels_add(
        self, interaction: discord.Interaction[Framecast], channel: discord.TextChannel | discord.Thread
    ) -> None:
        """Add a channel to the allowed ones (the first one limits generation to the list)."""
        current = self._current(interaction).channels
        if channel.id in current:
            await self._change(interaction)
            return
        await self._change(interaction, channels=(*current, channel.id))

    @channels.command(
        name=locale_str("remove"), description=locale_str("Stop allowing generation in a channel")
    )
    @app_commands.rename(channel=locale_str("channel"))
    @app_commands.describe(channel=locale_str("The channel"))
    async def channels_remove(
        self, interaction: discord.Interaction[Framecast], channel: discord.TextChannel | discord.Thread
    ) -> None:
        """Remove a channel from the allowed ones (an empty list allows every channel)."""
        current = self._current(interaction).channels
        await self._change(interaction, channels=tuple(c for c in current if c != channel.id))

    @channels.command(name=locale_str("clear"), description=locale_str("Allow generation in every channel"))
    async def channels_clear(self, interaction: discord.Interaction[Framecast]) -> None:
        """Allow every channel again."""
        await self._change(interaction, channels=())

    # -- content ---------------------------------------------------------------------------------
    @app_commands.command(
        name=locale_str("nsfw"), description=locale_str("Generate only in age-restricted channels")
    )
    @app_commands.rename(only=locale_str("only"))
    @app_commands.describe(only=locale_str("On: only in age-restricted channels"))
    async def nsfw(self, interaction: discord.Interaction[Framecast], only: bool) -> None:
        """Switch NSFW-only on or off."""
        await self._change(interaction, nsfw_only=only)

    @blocklist.command(name=locale_str("add"), description=locale_str("Block words or phrases in prompts"))
    @app_commands.rename(terms=locale_str("terms"))
    @app_commands.describe(terms=locale_str("Words or phrases, separated by commas"))
    async def blocklist_add(self, interaction: discord.Interaction[Framecast], terms: str) -> None:
        """Add terms (comma-separated) to the blocklist."""
        current = self._current(interaction).blocklist
        known = {term.casefold() for term in current}
        added = [term for term in dict.fromkeys(split_terms(terms)) if term.casefold() not in known]
        await self._change(interaction, **({"blocklist": (*current, *added)} if added else {}))

    @blocklist.command(name=locale_str("remove"), description=locale_str("Unblock words or phrases"))
    @app_commands.rename(terms=locale_str("terms"))
    @app_commands.describe(terms=locale_str("Words or phrases, separated by commas"))
    async def blocklist_remove(self, interaction: discord.Interaction[Framecast], terms: str) -> None:
        """Remove terms (comma-separated, any case) from the blocklist."""
        current = self._current(interaction).blocklist
        gone = {term.casefold() for term in split_terms(terms)}
        kept = tuple(term for term in current if term.casefold() not in gone)
        await self._change(interaction, **({"blocklist": kept} if kept != current else {}))

    @blocklist.command(name=locale_str("clear"), description=locale_str("Empty the blocklist"))
    async def blocklist_clear(self, interaction: discord.Interaction[Framecast]) -> None:
        """Remove every term."""
        await self._change(interaction, blocklist=())

    # -- reset -----------------------------------------------------------------------------------
    @app_commands.command(
        name=locale_str("reset"), description=locale_str("Go back to the operator's default")
    )
    @app_commands.rename(setting=locale_str("setting"))
    @app_commands.describe(setting=locale_str("The setting to reset"))
    @app_commands.choices(setting=RESET_CHOICES)
    async def reset(self, interaction: discord.Interaction[Framecast], setting: str) -> None:
        """Drop the server's value of one setting: the operator's default applies again."""
        which = Setting(setting)
        if which is Setting.API_KEY:  # not offered; /settings key remove does that
            raise IntakeError(IntakeProblem.BAD_OPTION, option="setting")
        await self._change(interaction, **{which.value: getattr(_DEFAULTS, which.value)})

    # -- the server's own key --------------------------------------------------------------------
    @key.command(name=locale_str("set"), description=locale_str("Use this server's own API key"))
    async def key_set(self, interaction: discord.Interaction[Framecast]) -> None:
        """Open the key modal, unless the operator made server keys unavailable."""
        state = self.bot.core.vault.state
        if state is not KeyVaultState.READY:
            key = "settings_key_disabled" if state is KeyVaultState.DISABLED else "settings_key_no_secret"
            await self._reply(interaction, t(key, interaction.locale))
            return
        await interaction.response.send_modal(KeyModal(self, interaction.locale))

    async def submit_key(self, interaction: discord.Interaction[Any], key: str) -> None:
        """The modal's submit: check the key with one model-list call, then store it encrypted."""
        if interaction.guild_id is None:
            raise app_commands.NoPrivateMessage()
        if not is_manager(interaction):
            raise NotServerManager()
        key = key.strip()
        add_secret(key)  # whatever logs it from here on (nothing should) shows ***
        await interaction.response.defer(ephemeral=True, thinking=True)
        accounts = self.bot.core.accounts
        if self.bot.core.vault.state is not KeyVaultState.READY:
            await self._reply(interaction, t("settings_key_no_secret", interaction.locale))
            return
        check = await accounts.check_key(key)
        if check is KeyCheck.REJECTED:
            await self._reply(interaction, t("settings_key_refused", interaction.locale))
            return
        if check is KeyCheck.UNREACHABLE:
            await self._reply(interaction, t("settings_key_unreachable", interaction.locale))
            return
        await accounts.set_guild_key(interaction.guild_id, key, by=interaction.user.id)
        self._told.discard((interaction.guild_id, last4(key)))
        await self._reply(interaction, t("settings_key_saved", interaction.locale, last4=as_text(last4(key))))

    @key.command(name=locale_str("remove"), description=locale_str("Go back to the operator's API key"))
    async def key_remove(self, interaction: discord.Interaction[Framecast]) -> None:
        """Forget the server's key: its jobs use the operator's key again."""
        assert interaction.guild_id is not None
        await interaction.response.defer(ephemeral=True, thinking=True)
        removed = await self.bot.core.accounts.remove_guild_key(interaction.guild_id, by=interaction.user.id)
        key = "settings_key_removed" if removed else "settings_key_none_to_remove"
        await self._reply(interaction, t(key, interaction.locale))

    # -- a refused key ---------------------------------------------------------------------------
    async def _key_rejected(self, guild_id: int) -> None:
        """Tell that server's admins (the member who set the key, else the system channel); nobody else."""
        try:
            await self._tell_admins(guild_id)
        except Exception:  # a listener must never break the runner that called it
            log.exception("could not tell guild %s that its API key was refused", guild_id)

    async def _tell_admins(self, guild_id: int) -> None:
        stored = await self.bot.core.store.guild_key(guild_id)
        if stored is None or stored.status is not KeyStatus.REJECTED:
            return
        if (guild_id, stored.last4) in self._told:
            return
        self._told.add((guild_id, stored.last4))
        guild = self.bot.get_guild(guild_id)
        if guild is None:
            # Another shard's server (a job taken over from a process that died): ask Discord.
            with contextlib.suppress(discord.HTTPException):
                guild = await self.bot.fetch_guild(guild_id)
        locale = str(guild.preferred_locale.value) if guild else None
        name = as_text(guild.name) if guild else str(guild_id)
        text = t("settings_key_rejected_notice", locale, guild=name, last4=as_text(stored.last4))
        none = discord.AllowedMentions.none()
        if stored.set_by and await self._dm(guild, stored.set_by, text):
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
        channel_id = getattr(guild, "_system_channel_id", None)
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
