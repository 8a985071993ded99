"""What a server admin can do: show and change the server's settings, set and remove its own API key.

One method of :class:`Admins` per thing an admin (Manage Server) does with /settings; each takes
the :class:`~framecast.app.actors.Actor` asking and typed input, and returns a typed outcome the
Discord edge words into a reply. Who may is decided here, once (:func:`~framecast.app.actors.administered`:
Manage Server in a server, never a person's own queue): anyone else gets :class:`AdminRefused`, before
anything is read, asked or written. :meth:`Admins.authorize` asks the same rule alone (no I/O), for
an edge that must refuse before it acknowledges.

* :meth:`Admins.show`: a :class:`SettingsView` (every value and where it comes from, the operator's
  ceilings, when daily quotas reset, the key's state, a default model the service stopped offering);
* the changes (:meth:`~Admins.change_limits`, :meth:`~Admins.change_video_defaults`,
  :meth:`~Admins.change_image_defaults`, the channels, NSFW-only, the blocklist, :meth:`~Admins.reset`):
  a :class:`SettingsChanged`, saved through the one writer (:class:`~framecast.app.settings_book.SettingsBook`).
  A value the server may not have raises :class:`SettingsError` (or :class:`IntakeError` for a model
  the service does not list: the same refusal /video gives), which the command tree's error handler words;
* the key: :meth:`Admins.key_availability`, :meth:`Admins.set_key` (one model-list call decides,
  then it is stored encrypted), :meth:`Admins.remove_key`;
* a key the service later refuses: :meth:`Admins.key_rejected` decides whom to tell (a
  :class:`RefusedKeyNotice`, once per key) and hands it to the chat side (:class:`AdminNotices`),
  which delivers it.

Which model a default may name is decided by :mod:`framecast.app.model_choice` only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from framecast.accounts import Accounts, KeyCheck, can_be_key
from framecast.app.actors import Actor, administered
from framecast.app.key_checks import KEY_CHECKS_PER_HOUR, KeyCheckThrottle
from framecast.app.model_choice import check_model, server_default_usable
from framecast.app.problems import IntakeError, IntakeProblem
from framecast.app.settings_book import SettingsBook
from framecast.clock import Clock
from framecast.guilds.settings import GuildSettings, KeyStatus, Policy, Setting, Source, quota_window
from framecast.keys.vault import KeyVault, KeyVaultState, last4
from framecast.logsetup import SECRET_INPUT_MARK
from framecast.service.model_list import ModelCache
from framecast.storage import Store
from framecast.values import JobKind, presets

__all__ = [
    "LIMIT_SETTINGS",
    "RESETTABLE",
    "SECRET_INPUT_MARK",
    "AdminNotices",
    "Admins",
    "ImageDefaults",
    "KeyAvailability",
    "KeyLine",
    "KeyRemoved",
    "KeySet",
    "KeySetResult",
    "KeyView",
    "LimitsChange",
    "NotAChannel",
    "RefusedKeyNotice",
    "ServerModel",
    "SettingsChanged",
    "SettingsView",
    "VideoDefaults",
    "split_terms",
]

log = logging.getLogger(__name__)

#: The limits a server sets under the operator's ceilings.
LIMIT_SETTINGS = (Setting.MEMBER_JOBS, Setting.DAILY_VIDEOS, Setting.DAILY_IMAGES, Setting.QUEUE_CAP)
#: What /settings reset may reset: every setting but the key (it has its own removal).
RESETTABLE = tuple(s for s in Setting if s is not Setting.API_KEY)
_DEFAULTS = GuildSettings()


# -- what an admin sees ----------------------------------------------------------------------------
class KeyLine(StrEnum):
    """The server key's state as /settings show reports it."""

    DISABLED = "disabled"  # the operator set GUILD_KEYS=off
    NO_SECRET = "no_secret"  # no KEY_ENCRYPTION_SECRET: nothing can be stored encrypted
    NONE = "none"  # the operator's key is used
    SET = "set"  # the server's own key is used
    REFUSED = "refused"  # the service refused the server's key
    #: A key is stored but this bot cannot decrypt it (KEY_ENCRYPTION_SECRET changed or unset): the
    #: server's jobs are refused until an admin sets it again (or removes it: the operator's key).
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class KeyView:
    """The server key's state and, when one is stored, its last four characters (never more)."""

    line: KeyLine
    last4: str | None = None


@dataclass(frozen=True)
class ServerModel:
    """A default model: the server's pick, what jobs get without a member's pick, and whether the
    service stopped offering the pick (then `used` is the operator's default)."""

    kind: JobKind
    chosen: str | None
    used: str
    dropped: bool


@dataclass(frozen=True)
class SettingsView:
    """A server's settings as an admin sees them: effective values, their sources, the ceilings."""

    guild_id: int
    #: The server's settings capped by the operator's ceilings (``policy.settings``: its own values).
    policy: Policy
    video_model: ServerModel
    image_model: ServerModel
    #: When the daily quotas start again (epoch seconds), or None when no daily quota applies.
    quota_resets_at: float | None
    key: KeyView

    @property
    def settings(self) -> GuildSettings:
        """The server's own values (unset ones are the operator's defaults)."""
        return self.policy.settings

    def source(self, setting: Setting) -> Source:
        """Whether `setting` is this server's value or the operator's default."""
        return self.policy.source(setting)

    def ceiling(self, setting: Setting) -> int | None:
        """The operator's ceiling on a limit (None: none, or not a limit)."""
        if setting not in LIMIT_SETTINGS:
            return None
        value: int | None = getattr(self.policy.ceilings, setting.value, None)
        return value

    def limit(self, setting: Setting) -> int | None:
        """The effective value of a limit (None: unlimited)."""
        p = self.policy
        return {
            Setting.MEMBER_JOBS: p.member_jobs,
            Setting.QUEUE_CAP: p.queue_cap,
            Setting.DAILY_VIDEOS: p.daily_videos,
            Setting.DAILY_IMAGES: p.daily_images,
        }[setting]

    @property
    def video_size(self) -> presets.SizePreset:
        """The frame size /video uses when a member picks none."""
        return presets.VIDEO_SIZES[self.settings.video_size or presets.DEFAULT_VIDEO_SIZE]

    @property
    def image_size(self) -> presets.SizePreset:
        """The frame size /image uses when a member picks none."""
        return presets.IMAGE_SIZES[self.settings.image_size or presets.DEFAULT_IMAGE_SIZE]

    @property
    def video_seconds(self) -> int:
        """The clip length /video uses when a member picks none."""
        return self.settings.video_seconds or presets.DEFAULT_VIDEO_SECONDS

    @property
    def video_fps(self) -> int:
        """The frame rate /video uses when a member picks none."""
        return self.settings.video_fps or presets.DEFAULT_FRAME_RATE

    def model(self, kind: JobKind) -> ServerModel:
        """The default model of `kind`."""
        return self.video_model if kind is JobKind.VIDEO else self.image_model


@dataclass(frozen=True)
class SettingsChanged:
    """The outcome of a change: the settings the admin named and the settings now."""

    #: The settings the admin named, in order (empty: there was nothing to change).
    asked: tuple[Setting, ...]
    #: Those whose value really changed (saved and logged).
    saved: tuple[Setting, ...]
    view: SettingsView


# -- typed input -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LimitsChange:
    """New limits (None: leave as is); each is capped by the operator's ceiling."""

    member_jobs: int | None = None
    daily_videos: int | None = None
    daily_images: int | None = None
    queue_cap: int | None = None


@dataclass(frozen=True)
class VideoDefaults:
    """New /video defaults (None: leave as is); `model` must be one the service lists."""

    size: str | None = None
    seconds: int | None = None
    fps: int | None = None
    model: str | None = None


@dataclass(frozen=True)
class ImageDefaults:
    """New /image defaults (None: leave as is); `model` must be one the service lists."""

    size: str | None = None
    model: str | None = None


# -- the key -----------------------------------------------------------------------------------------
class KeyAvailability(StrEnum):
    """Whether this bot lets servers store their own key."""

    READY = "ready"
    DISABLED = "disabled"  # GUILD_KEYS=off
    NO_SECRET = "no_secret"  # no KEY_ENCRYPTION_SECRET


class KeySetResult(StrEnum):
    """What became of a key an admin typed."""

    SAVED = "saved"  # the service accepted it; stored encrypted, the server's jobs use it from now on
    REFUSED = "refused"  # the service refused it
    MALFORMED = "malformed"  # it cannot be a key (a space, a line break): nothing asked, no check counted
    UNREACHABLE = "unreachable"  # the service did not answer usefully: nothing stored, try again later
    DISABLED = "disabled"  # server keys are off on this bot
    NO_SECRET = "no_secret"  # no encryption secret on this bot
    THROTTLED = "throttled"  # the server checked too many keys this hour: nothing asked, nothing stored


@dataclass(frozen=True)
class KeySet:
    """The outcome of :meth:`Admins.set_key`: the result and the key's last four characters.

    THROTTLED: `retry_at` says when the server may check a key again (epoch seconds), and
    `checks_per_hour` how many checks an hour it has.
    """

    result: KeySetResult
    last4: str
    retry_at: float | None = None
    checks_per_hour: int = KEY_CHECKS_PER_HOUR


class KeyRemoved(StrEnum):
    """The outcome of :meth:`Admins.remove_key`."""

    REMOVED = "removed"  # the server's jobs use the operator's key again
    NO_KEY = "no_key"  # there was none


@dataclass(frozen=True)
class RefusedKeyNotice:
    """Whom to tell that the service refused a server's key: DM `set_by` (the admin who set it) if
    they are still a member; when that fails, the server's system channel. Nobody else, never a ping."""

    guild_id: int
    last4: str
    set_by: int | None


class AdminNotices(Protocol):
    """What the admins' use cases need of the chat side: tell a server's admins about their key."""

    async def key_refused(self, notice: RefusedKeyNotice) -> None:
        """Tell `notice`'s server that the service refused its key, as the notice says (never raises)."""
        ...


_VAULT_TO_AVAILABILITY = {
    KeyVaultState.READY: KeyAvailability.READY,
    KeyVaultState.DISABLED: KeyAvailability.DISABLED,
    KeyVaultState.NO_SECRET: KeyAvailability.NO_SECRET,
}


class NotAChannel(Exception):
    """A channel to allow that is none the admin could pick: not one of this server's text channels
    the edge offered them (another server's, or a number that names nothing). Nothing changed."""


def split_terms(text: str) -> list[str]:
    """Comma-separated blocklist terms (also the full-width, ideographic and Arabic commas), trimmed."""
    for comma in ("，", "、", "،"):
        text = text.replace(comma, ",")
    return [term.strip() for term in text.split(",") if term.strip()]


class Admins:
    """The server admins' use cases (built by :meth:`framecast.app.core.Core.open`)."""

    def __init__(
        self,
        *,
        book: SettingsBook,
        store: Store,
        accounts: Accounts,
        vault: KeyVault,
        models: ModelCache,
        clock: Clock,
        quota_period: float,
        notices: AdminNotices,
    ) -> None:
        """`notices`: the chat side, which tells a server's admins that their key was refused."""
        self._book = book
        self._store = store
        self._accounts = accounts
        self._vault = vault
        self._models = models
        self._clock = clock
        self._quota_period = quota_period
        #: (guild, last4) whose refusal was already told in this process: one notice per key.
        self._told: set[tuple[int, str]] = set()
        self._key_checks = KeyCheckThrottle(clock)
        self._notices = notices

    def __repr__(self) -> str:
        return f"<Admins {self._book!r}>"

    # -- who may ---------------------------------------------------------------------------------------
    @staticmethod
    def authorize(actor: Actor) -> int:
        """The server `actor` may administer; :class:`AdminRefused` for anyone else (no I/O).

        Every use case below asks it first; an edge asks it alone to refuse before acknowledging.
        """
        return administered(actor)

    # -- show ------------------------------------------------------------------------------------------
    async def show(self, actor: Actor) -> SettingsView:
        """Every setting with its effective value and its source, the ceilings, the key's state."""
        guild_id = administered(actor)
        return self._view(guild_id, await self._key_view(guild_id))

    def _view(self, guild_id: int, key: KeyView) -> SettingsView:
        policy = self._book.policy(guild_id)
        resets_at: float | None = None
        if policy.daily_videos is not None or policy.daily_images is not None:
            _, resets_at = quota_window(self._clock.time(), self._quota_period)
        return SettingsView(
            guild_id=guild_id,
            policy=policy,
            video_model=self._server_model(JobKind.VIDEO, policy.settings.video_model),
            image_model=self._server_model(JobKind.IMAGE, policy.settings.image_model),
            quota_resets_at=resets_at,
            key=key,
        )

    def _server_model(self, kind: JobKind, chosen: str | None) -> ServerModel:
        listed = self._models.ids(kind.value)
        if server_default_usable(chosen, listed):
            assert chosen is not None
            return ServerModel(kind, chosen, chosen, dropped=False)
        # Unset, or the service stopped offering it: jobs get the operator's default (or its stand-in).
        return ServerModel(kind, chosen, self._models.default(kind.value), dropped=chosen is not None)

    async def _key_view(self, guild_id: int) -> KeyView:
        state = self._vault.state
        if state is KeyVaultState.DISABLED:
            return KeyView(KeyLine.DISABLED)
        stored = await self._store.guild_key(guild_id)
        if self._accounts.key_unreadable(guild_id):
            # Before NO_SECRET: with the secret removed, what matters is that its jobs are refused.
            return KeyView(KeyLine.UNREADABLE, stored.last4 if stored is not None else "")
        if state is KeyVaultState.NO_SECRET:
            return KeyView(KeyLine.NO_SECRET)
        status = self._accounts.guild_key_state(guild_id)
        if status is None or stored is None:
            return KeyView(KeyLine.NONE)
        if status is KeyStatus.REJECTED:
            return KeyView(KeyLine.REFUSED, stored.last4)
        return KeyView(KeyLine.SET, stored.last4)

    # -- changes ---------------------------------------------------------------------------------------
    async def _change(self, actor: Actor, changes: dict[str, object]) -> SettingsChanged:
        """The one path of every change: through the settings' one writer, then the view of now."""
        return await self._amend(actor, lambda _current: changes)

    async def _amend(
        self, actor: Actor, edit: Callable[[GuildSettings], dict[str, object]]
    ) -> SettingsChanged:
        """:meth:`_change` with the changes `edit` makes of the settings as the writer has them
        (a list edited by two admins at once keeps both edits)."""
        guild_id, by = administered(actor), actor.user_id
        asked: dict[str, object] = {}

        def recorded(current: GuildSettings) -> dict[str, object]:
            asked.update(edit(current))
            return asked

        _, saved = await self._book.amend(guild_id, by=by, edit=recorded)
        key = await self._key_view(guild_id)
        return SettingsChanged(tuple(Setting(name) for name in asked), saved, self._view(guild_id, key))

    async def change_limits(self, actor: Actor, change: LimitsChange) -> SettingsChanged:
        """Change the member and queue limits (each capped by the operator's ceiling)."""
        changes = {
            Setting.MEMBER_JOBS.value: change.member_jobs,
            Setting.DAILY_VIDEOS.value: change.daily_videos,
            Setting.DAILY_IMAGES.value: change.daily_images,
            Setting.QUEUE_CAP.value: change.queue_cap,
        }
        return await self._change(actor, {k: v for k, v in changes.items() if v is not None})

    async def change_video_defaults(self, actor: Actor, change: VideoDefaults) -> SettingsChanged:
        """Change what /video uses when a member picks none (a model only from the service's list)."""
        changes = {
            Setting.VIDEO_SIZE.value: change.size,
            Setting.VIDEO_SECONDS.value: change.seconds,
            Setting.VIDEO_FPS.value: change.fps,
            Setting.VIDEO_MODEL.value: self._checked_model(JobKind.VIDEO, change.model),
        }
        return await self._change(actor, {k: v for k, v in changes.items() if v is not None})

    async def change_image_defaults(self, actor: Actor, change: ImageDefaults) -> SettingsChanged:
        """Change what /image uses when a member picks none (a model only from the service's list)."""
        changes = {
            Setting.IMAGE_SIZE.value: change.size,
            Setting.IMAGE_MODEL.value: self._checked_model(JobKind.IMAGE, change.model),
        }
        return await self._change(actor, {k: v for k, v in changes.items() if v is not None})

    def _checked_model(self, kind: JobKind, model: str | None) -> str | None:
        # Autocomplete values are not validated by Discord: the one model rule decides, as for /video.
        return check_model(model, self._models.ids(kind.value)) if model else None

    async def add_channel(
        self, actor: Actor, channel_id: int, *, choices: Collection[int] | None = None
    ) -> SettingsChanged:
        """Allow generation in a channel (the first one limits generation to the list; a thread in an
        allowed channel is allowed, the intake treats a thread as its parent).

        `choices`: the server's channels the edge offered the admin (the dashboard's list); any other
        raises :class:`NotAChannel` and changes nothing, since one id that names no channel of the
        server would stop generation in all of them. None: the chat app's own picker only offers
        the server's channels (/settings channels add).
        """
        administered(actor)  # who asks comes first
        if choices is not None and channel_id not in choices:
            raise NotAChannel(channel_id)

        def added(settings: GuildSettings) -> dict[str, object]:
            current = settings.channels
            return {} if channel_id in current else {Setting.CHANNELS.value: (*current, channel_id)}

        return await self._amend(actor, added)

    async def remove_channel(self, actor: Actor, channel_id: int) -> SettingsChanged:
        """Stop allowing a channel (an empty list allows every channel)."""
        return await self._amend(
            actor,
            lambda settings: {Setting.CHANNELS.value: tuple(c for c in settings.channels if c != channel_id)},
        )

    async def clear_channels(self, actor: Actor) -> SettingsChanged:
        """Allow every channel again."""
        return await self._change(actor, {Setting.CHANNELS.value: ()})

    async def set_nsfw_only(self, actor: Actor, only: bool) -> SettingsChanged:
        """Generate only in age-restricted channels (or everywhere allowed again)."""
        return await self._change(actor, {Setting.NSFW_ONLY.value: only})

    async def block_terms(self, actor: Actor, terms: str) -> SettingsChanged:
        """Add comma-separated terms to the blocklist (terms already there, in any case, are skipped)."""
        administered(actor)  # who asks comes first: a refused actor learns nothing of the terms
        wanted = list(dict.fromkeys(split_terms(terms)))

        def blocked(settings: GuildSettings) -> dict[str, object]:
            current = settings.blocklist
            known = {term.casefold() for term in current}
            added = [term for term in wanted if term.casefold() not in known]
            return {Setting.BLOCKLIST.value: (*current, *added)} if added else {}

        return await self._amend(actor, blocked)

    async def unblock_terms(self, actor: Actor, terms: str) -> SettingsChanged:
        """Remove comma-separated terms (any case) from the blocklist."""
        administered(actor)  # who asks comes first: a refused actor learns nothing of the terms
        gone = {term.casefold() for term in split_terms(terms)}

        def unblocked(settings: GuildSettings) -> dict[str, object]:
            current = settings.blocklist
            kept = tuple(term for term in current if term.casefold() not in gone)
            return {Setting.BLOCKLIST.value: kept} if kept != current else {}

        return await self._amend(actor, unblocked)

    async def clear_blocklist(self, actor: Actor) -> SettingsChanged:
        """Remove every blocked term."""
        return await self._change(actor, {Setting.BLOCKLIST.value: ()})

    async def reset(self, actor: Actor, setting: Setting | str) -> SettingsChanged:
        """Drop the server's value of one setting: the operator's default applies again.

        `setting` as the command sent it: one that is not resettable (the key: :meth:`remove_key`
        does that), or no setting at all (a command synced by another version of the bot), is
        ``IntakeError(BAD_OPTION)``.
        """
        administered(actor)  # who asks comes first: a refused actor learns nothing of the settings
        if setting not in RESETTABLE:
            raise IntakeError(IntakeProblem.BAD_OPTION, option="setting")
        name = Setting(setting).value
        return await self._change(actor, {name: getattr(_DEFAULTS, name)})

    # -- the server's own key --------------------------------------------------------------------------
    def key_availability(self, actor: Actor) -> KeyAvailability:
        """Whether `actor`'s server may store a key here (before asking them to type one); no I/O."""
        administered(actor)
        return self._availability()

    def _availability(self) -> KeyAvailability:
        return _VAULT_TO_AVAILABILITY[self._vault.state]

    async def set_key(self, actor: Actor, key: str) -> KeySet:
        """Check `key` with one model-list call; when the service accepts it, store it encrypted.

        A server has at most :data:`KEY_CHECKS_PER_HOUR` checks an hour (THROTTLED beyond, asking
        nothing of the service).

        The check's request is charged to the key's own budget, the one its account then spends.
        Only an accepted key is masked in the logs (from when it is stored, while it is in use):
        masking whatever an admin types would let them blank any word out of the operator's logs.
        Until then nothing logs it (the service client scrubs its own key from what it says).
        """
        guild_id, by = administered(actor), actor.user_id
        key = key.strip()
        shown = last4(key)
        availability = self._availability()
        if availability is KeyAvailability.DISABLED:
            return KeySet(KeySetResult.DISABLED, shown)
        if availability is KeyAvailability.NO_SECRET:
            return KeySet(KeySetResult.NO_SECRET, shown)
        if not can_be_key(key):
            return KeySet(KeySetResult.MALFORMED, shown)  # a paste slip: no check spent on it
        retry_at = self._key_checks.take(guild_id)
        if retry_at is not None:
            return KeySet(KeySetResult.THROTTLED, shown, retry_at, self._key_checks.limit)
        check = await self._accounts.check_key(key)
        if check is KeyCheck.REJECTED:
            return KeySet(KeySetResult.REFUSED, shown)
        if check is KeyCheck.UNREACHABLE:
            return KeySet(KeySetResult.UNREACHABLE, shown)
        await self._accounts.set_guild_key(guild_id, key, by=by)
        # A new key may be refused again later: that is news again.
        self._told.discard((guild_id, shown))
        return KeySet(KeySetResult.SAVED, shown)

    async def remove_key(self, actor: Actor) -> KeyRemoved:
        """Forget the server's key: its new jobs use the operator's key (running ones keep theirs)."""
        removed = await self._accounts.remove_guild_key(administered(actor), by=actor.user_id)
        return KeyRemoved.REMOVED if removed else KeyRemoved.NO_KEY

    # -- a refused key ---------------------------------------------------------------------------------
    async def refused_key_notice(self, guild_id: int) -> RefusedKeyNotice | None:
        """Whom to tell that the server's key was refused; None when nobody needs telling (no refused
        key stored, or this key's refusal was told already in this process)."""
        stored = await self._store.guild_key(guild_id)
        if stored is None or stored.status is not KeyStatus.REJECTED:
            return None
        if (guild_id, stored.last4) in self._told:
            return None
        self._told.add((guild_id, stored.last4))
        return RefusedKeyNotice(guild_id, stored.last4, stored.set_by or None)

    async def key_rejected(self, guild_id: int) -> None:
        """The service refused server `guild_id`'s key: have the chat side tell whom the notice names
        (:meth:`refused_key_notice`; the core hears it from the keys' accounts)."""
        notice = await self.refused_key_notice(guild_id)
        if notice is not None:
            await self._notices.key_refused(notice)
