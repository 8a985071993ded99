"""A fake Discord (REST + gateway) for end-to-end tests.

The fake runs an aiohttp server on 127.0.0.1 (ephemeral port) inside the test process and is
steered through Python methods. Build the world first, then start the bot::

    fake = FakeDiscord()
    guild = fake.add_guild("Test", premium_tier=2)
    channel = fake.add_channel(guild, "general")
    alice = fake.add_member(guild, "alice")
    await fake.start()
    mark = fake.identify_count
    proc = start_bot(env={**os.environ, **fake.env()})   # DISCORD_TOKEN / _API_BASE_URL / _GATEWAY_URL
    await fake.wait_ready(after=mark)
    it = await fake.slash(guild, channel, alice, "video", {"prompt": "a cat"})
    await it.wait_response()                              # first callback (type, data)
    msg = await it.wait_original(lambda m: bool(m.attachments), timeout=30)
    assert it.ack_latency < 3 and msg.pinged_user_ids <= {alice.id}

The bot points discord.py at the fake with::

    discord.http.Route.BASE = fake.api_base                       # "http://127.0.0.1:PORT/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway_url)

Everything the bot does is recorded (``requests``, ``messages``, ``interactions``,
``files_delivered()``, ``unknown_routes``) and every state change of the fake wakes
:meth:`FakeDiscord.wait_for`; state that lives in the bot (its cache, its own events) does not.

Wire facts this fake relies on (checked against discord.py 2.7.1):

* REST answers carry ``Content-Type: application/json`` exactly (discord.py's ``json_or_text``
  compares the header verbatim; a charset suffix turns the body into a ``str``).
* Gateway frames are plain JSON text frames; discord.py only decompresses binary frames, so the
  ``compress`` query parameter is ignored.
* A 429 is retried by discord.py only when it carries a ``Via`` header and a JSON body.
* 500/502/504/524 are retried by discord.py after ``1 + 2 * try`` seconds (slow in tests; other
  5xx are raised at once). A crash of the fake itself answers 501 and lands in ``fake_errors``.
* discord.py sleeps 5 s before every non-initial IDENTIFY (``Client.before_identify_hook``): a
  refused RESUME or a second shard costs 5 s unless the bot overrides the hook. The fake
  accepts RESUME by default (``allow_resume``), replaying missed events.
* Without the GUILD_MEMBERS intent, GUILD_CREATE carries only the bot's own member (as Discord
  does); interaction payloads always carry the invoking member, with ``permissions`` in that
  channel (Discord's order: @everyone, then roles', then the member's overwrites). A member never
  acts in a channel or thread they cannot see (:class:`ChannelHidden`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import itertools
import json
import logging
import mimetypes
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.discord_oauth import FakeOAuth
from tests.fakes.openapi import SpecViolation, form_errors, spec

__all__ = [
    "ADMINISTRATOR",
    "ALL_PERMISSIONS",
    "ATTACH_FILES",
    "ChannelHidden",
    "CommandHidden",
    "DEFAULT_EVERYONE_PERMISSIONS",
    "DISCORD_EPOCH_MS",
    "EMBED_LINKS",
    "MANAGE_MESSAGES",
    "MANAGE_THREADS",
    "MENTION_EVERYONE",
    "READ_MESSAGE_HISTORY",
    "SEND_MESSAGES",
    "TEXT_PERMISSIONS",
    "USE_APPLICATION_COMMANDS",
    "VIEW_CHANNEL",
    "FakeAttachment",
    "FakeChannel",
    "FakeDiscord",
    "FakeGatewaySession",
    "FakeGuild",
    "FakeInteraction",
    "FakeMember",
    "FakeMessage",
    "FakeOverwrite",
    "FakeRequest",
    "FakeRole",
    "FakeUpload",
    "FakeUser",
    "ModalRefused",
    "SpecViolation",
    "snowflake_at",
    "snowflake_time",
]

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------

DISCORD_EPOCH_MS = 1420070400000
MiB = 1024 * 1024

CREATE_INSTANT_INVITE = 1 << 0
ADMINISTRATOR = 1 << 3
ADD_REACTIONS = 1 << 6
VIEW_CHANNEL = 1 << 10
SEND_MESSAGES = 1 << 11
SEND_TTS_MESSAGES = 1 << 12
MANAGE_MESSAGES = 1 << 13
EMBED_LINKS = 1 << 14
ATTACH_FILES = 1 << 15
READ_MESSAGE_HISTORY = 1 << 16
MENTION_EVERYONE = 1 << 17
USE_EXTERNAL_EMOJIS = 1 << 18
CONNECT = 1 << 20
SPEAK = 1 << 21
CHANGE_NICKNAME = 1 << 26
USE_APPLICATION_COMMANDS = 1 << 31
MANAGE_THREADS = 1 << 34
CREATE_PUBLIC_THREADS = 1 << 35
SEND_MESSAGES_IN_THREADS = 1 << 38
ALL_PERMISSIONS = (1 << 53) - 1

#: What Discord grants a user-installed app in DMs and group DMs (``app_permissions``): enough to
#: answer with embeds and files, nothing of a member's.
USER_INSTALL_PERMISSIONS = EMBED_LINKS | ATTACH_FILES | USE_EXTERNAL_EMOJIS
#: Follow-up messages Discord lets a user-installed app create per interaction.
USER_INSTALL_FOLLOWUPS = 5

#: ``discord.Permissions.text()`` plus VIEW_CHANNEL (the test checks the value against discord.py).
TEXT_PERMISSIONS = 8515152769449024
DEFAULT_EVERYONE_PERMISSIONS = (
    CREATE_INSTANT_INVITE
    | ADD_REACTIONS
    | VIEW_CHANNEL
    | SEND_MESSAGES
    | EMBED_LINKS
    | ATTACH_FILES
    | READ_MESSAGE_HISTORY
    | USE_EXTERNAL_EMOJIS
    | CONNECT
    | SPEAK
    | CHANGE_NICKNAME
    | USE_APPLICATION_COMMANDS
    | CREATE_PUBLIC_THREADS
    | SEND_MESSAGES_IN_THREADS
)

# Upload limit per boost tier (matches discord.py's Guild._PREMIUM_GUILD_LIMITS).
TIER_UPLOAD_LIMITS = {0: 10 * MiB, 1: 10 * MiB, 2: 50 * MiB, 3: 100 * MiB}

# Message flags
FLAG_SUPPRESS_EMBEDS = 1 << 2
FLAG_EPHEMERAL = 1 << 6
FLAG_LOADING = 1 << 7
FLAG_SUPPRESS_NOTIFICATIONS = 1 << 12
FLAG_COMPONENTS_V2 = 1 << 15
_SENDABLE_FLAGS = FLAG_SUPPRESS_EMBEDS | FLAG_SUPPRESS_NOTIFICATIONS | FLAG_COMPONENTS_V2 | (1 << 13)

# Gateway intents
INTENT_GUILDS = 1 << 0
INTENT_GUILD_MEMBERS = 1 << 1
INTENT_GUILD_PRESENCES = 1 << 8
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_DIRECT_MESSAGES = 1 << 12
INTENT_MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = INTENT_GUILD_MEMBERS | INTENT_GUILD_PRESENCES | INTENT_MESSAGE_CONTENT

# Interaction types / callback types
IT_PING, IT_COMMAND, IT_COMPONENT, IT_AUTOCOMPLETE, IT_MODAL = 1, 2, 3, 4, 5
CB_PONG, CB_MESSAGE, CB_DEFERRED_MESSAGE, CB_DEFERRED_UPDATE, CB_UPDATE, CB_AUTOCOMPLETE, CB_MODAL = (
    1,
    4,
    5,
    6,
    7,
    8,
    9,
)
_VALID_CALLBACKS = {
    IT_PING: {CB_PONG},
    IT_COMMAND: {CB_MESSAGE, CB_DEFERRED_MESSAGE, CB_MODAL},
    IT_COMPONENT: {CB_MESSAGE, CB_DEFERRED_MESSAGE, CB_DEFERRED_UPDATE, CB_UPDATE, CB_MODAL},
    IT_AUTOCOMPLETE: {CB_AUTOCOMPLETE},
    IT_MODAL: {CB_MESSAGE, CB_DEFERRED_MESSAGE, CB_DEFERRED_UPDATE, CB_UPDATE},
}

#: The locales Discord accepts in ``name_localizations`` / ``description_localizations``.
DISCORD_LOCALES = frozenset(
    "id da de en-GB en-US es-ES es-419 fr hr it lt hu nl no pl pt-BR ro fi sv-SE vi tr cs el bg ru uk "
    "hi th zh-CN ja zh-TW ko".split()
)
# Approximation of ^[-_'\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]{1,32}$ (python's re has no \p{..}).
_COMMAND_NAME_RE = re.compile(r"^[-_'\w\u0900-\u097F\u0E00-\u0E7F]{1,32}$")

_USER_MENTION_RE = re.compile(r"<@!?(\d{15,21})>")
_ROLE_MENTION_RE = re.compile(r"<@&(\d{15,21})>")
_EVERYONE_RE = re.compile(r"@(everyone|here)")

_snowflake_counter = itertools.count(1)


def snowflake_at(timestamp: float) -> int:
    """A fresh snowflake whose embedded time is ``timestamp`` (epoch seconds)."""
    ms = int(timestamp * 1000) - DISCORD_EPOCH_MS
    return (ms << 22) | (1 << 17) | (next(_snowflake_counter) & 0xFFF)


def snowflake_time(snowflake: int) -> float:
    """Epoch seconds encoded in a snowflake."""
    return ((int(snowflake) >> 22) + DISCORD_EPOCH_MS) / 1000


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat()


def _describe(predicate: Callable[..., Any]) -> str:
    try:
        src = inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        src = getattr(predicate, "__qualname__", repr(predicate))
    return src if len(src) <= 300 else src[:300] + "..."


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class CommandHidden(Exception):
    """A slash command Discord would not show to this member, so they cannot invoke it."""


class ChannelHidden(Exception):
    """Discord does not show this channel to this member (no View Channel there): they cannot use
    a command or click a button in it."""


class ModalRefused(ValueError):
    """A modal submission Discord's client would not send (a text input's length or required rule)."""


def _text_inputs(components: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for comp in _walk_components(components):
        if comp.get("type") == 4 and comp.get("custom_id"):
            yield comp


def _check_modal_values(modal: Mapping[str, Any], values: Mapping[str, str]) -> None:
    """Refuse what Discord refuses on submit: a required input left empty, a value too short or long."""
    inputs = {str(c["custom_id"]): c for c in _text_inputs(modal.get("components") or [])}
    unknown = set(values) - set(inputs)
    if unknown:
        raise ModalRefused(f"the modal has no text input {sorted(unknown)}")
    for custom_id, comp in inputs.items():
        value = values.get(custom_id, "")
        if not value:
            if comp.get("required", True):
                raise ModalRefused(f"text input {custom_id!r} is required")
            continue
        low, high = int(comp.get("min_length") or 0), int(comp.get("max_length") or 4000)
        if not low <= len(value) <= high:
            raise ModalRefused(f"text input {custom_id!r} takes {low}-{high} characters, got {len(value)}")


class _Reset(Exception):
    """An injected connection drop: the request gets no answer at all."""


class ApiError(Exception):
    """An error answer of the fake (status, Discord JSON error code, message)."""

    def __init__(
        self,
        status: int,
        code: int,
        message: str,
        *,
        errors: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {code} {message}")
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors
        self.headers = dict(headers or {})
        self._body = body

    def body(self) -> dict[str, Any]:
        if self._body is not None:
            return self._body
        out: dict[str, Any] = {"message": self.message, "code": self.code}
        if self.errors:
            out["errors"] = self.errors
        return out


def _form_error(path: Sequence[str | int], code: str, message: str) -> ApiError:
    errors: dict[str, Any] = {"_errors": [{"code": code, "message": message}]}
    for part in reversed(list(path)):
        errors = {str(part): errors}
    return ApiError(400, 50035, "Invalid Form Body", errors=errors)


def _unknown(what: str, code: int) -> ApiError:
    return ApiError(404, code, f"Unknown {what}")


UNAUTHORIZED = (401, 0, "401: Unauthorized")


# --------------------------------------------------------------------------------------------
# World model
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class FakeUser:
    """A Discord user."""

    id: int
    name: str
    bot: bool = False
    global_name: str | None = None
    #: False makes DMs to this user fail with 403 / 50007.
    accepts_dms: bool = True
    #: True makes even opening a DM with this user (POST /users/@me/channels) fail with 403 / 50007.
    refuses_dm_channel: bool = False

    def to_payload(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "username": self.name,
            "discriminator": "0",
            "global_name": self.global_name,
            "avatar": None,
            "bot": self.bot,
            "public_flags": 0,
        }

    @property
    def mention(self) -> str:
        return f"<@{self.id}>"


@dataclass(eq=False)
class FakeRole:
    """A guild role."""

    id: int
    guild_id: int
    name: str
    permissions: int
    position: int = 0
    managed: bool = False
    bot_id: int | None = None

    def to_payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(self.id),
            "name": self.name,
            "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False,
            "icon": None,
            "unicode_emoji": None,
            "position": self.position,
            "permissions": str(self.permissions),
            "managed": self.managed,
            "mentionable": False,
            "flags": 0,
        }
        if self.bot_id is not None:
            data["tags"] = {"bot_id": str(self.bot_id)}
        return data


@dataclass(eq=False, repr=False)
class FakeMember:
    """A guild member (wraps a :class:`FakeUser`)."""

    user: FakeUser
    guild: FakeGuild
    roles: list[FakeRole] = field(default_factory=list)
    #: Explicit guild-level permissions; None means computed from @everyone + roles (+ owner).
    explicit_permissions: int | None = None
    joined_at: float = field(default_factory=time.time)
    nick: str | None = None

    @property
    def id(self) -> int:
        return self.user.id

    @property
    def name(self) -> str:
        return self.user.name

    @property
    def mention(self) -> str:
        return self.user.mention

    @property
    def permissions(self) -> int:
        if self.explicit_permissions is not None:
            return self.explicit_permissions
        if self.guild.owner_id == self.user.id:
            return ALL_PERMISSIONS
        perms = self.guild.everyone.permissions
        for role in self.roles:
            perms |= role.permissions
        if perms & ADMINISTRATOR:
            return ALL_PERMISSIONS
        return perms

    @permissions.setter
    def permissions(self, value: int | None) -> None:
        self.explicit_permissions = value

    def __repr__(self) -> str:
        return f"<FakeMember {self.name!r} id={self.id} guild={self.guild.name!r}>"

    def to_payload(self, *, with_user: bool = True, with_permissions: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "roles": [str(r.id) for r in self.roles],
            "nick": self.nick,
            "avatar": None,
            "banner": None,
            "joined_at": _iso(self.joined_at),
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "pending": False,
            "flags": 0,
            "communication_disabled_until": None,
        }
        if with_user:
            data["user"] = self.user.to_payload()
        if with_permissions:
            data["permissions"] = str(self.permissions)
        return data


@dataclass(frozen=True)
class FakeOverwrite:
    """A channel's permission overwrite for a role (type 0) or a member (type 1), as Discord sends it."""

    id: int
    type: int
    allow: int = 0
    deny: int = 0

    @classmethod
    def of(cls, target: FakeRole | FakeMember, *, allow: int = 0, deny: int = 0) -> FakeOverwrite:
        """An overwrite for `target`: a role (``guild.everyone`` for @everyone) or a member."""
        return cls(target.id, 0 if isinstance(target, FakeRole) else 1, allow, deny)

    def to_payload(self) -> dict[str, Any]:
        return {"id": str(self.id), "type": self.type, "allow": str(self.allow), "deny": str(self.deny)}


@dataclass(eq=False, repr=False)
class FakeChannel:
    """A text channel (type 0), a DM channel (type 1), or a thread of a text channel (11 public,
    12 private; its `parent` is the channel, and it has no overwrites of its own)."""

    id: int
    name: str
    guild: FakeGuild | None
    #: The bot's effective permissions in this channel (enforced by the fake; mirrored to the
    #: bot's cache through a member overwrite). Mutate with ``fake.set_bot_permissions`` to also
    #: send CHANNEL_UPDATE, or assign directly to change enforcement only.
    bot_permissions: int = TEXT_PERMISSIONS
    type: int = 0
    position: int = 0
    recipient: FakeUser | None = None
    #: Age-restricted ("NSFW") channel, as Server Settings sets it.
    nsfw: bool = False
    #: The channel's overwrites for roles and members (the bot's own comes from ``bot_permissions``).
    overwrites: list[FakeOverwrite] = field(default_factory=list)
    #: A thread's channel, who started it, and (private threads) who was added to it.
    parent: FakeChannel | None = None
    owner_id: int | None = None
    thread_members: set[int] = field(default_factory=set)
    #: A thread closed by a moderator (or by inactivity), and `locked` too: see ``fake.archive_thread``.
    archived: bool = False
    locked: bool = False
    _bot_user_id: int = 0

    @property
    def guild_id(self) -> int | None:
        return self.guild.id if self.guild else None

    @property
    def mention(self) -> str:
        return f"<#{self.id}>"

    def __repr__(self) -> str:
        return (
            f"<FakeChannel #{self.name} id={self.id} type={self.type} bot_permissions={self.bot_permissions}>"
        )

    def permissions_for(self, member: FakeMember) -> int:
        """`member`'s permissions in this channel, by Discord's rules: the guild-level permissions
        (all for the owner and administrators), then the @everyone overwrite, then the member's
        roles' overwrites together, then the member's own; no View Channel means no permission.
        A thread has its parent's permissions; a private one only for its owner, the members added
        to it and Manage Threads."""
        if self.parent is not None:
            perms = self.parent.permissions_for(member)
            if self.type == 12 and not (
                perms & MANAGE_THREADS or member.id == self.owner_id or member.id in self.thread_members
            ):
                return 0
            return perms
        base = member.permissions
        if base & ADMINISTRATOR or (self.guild is not None and self.guild.owner_id == member.id):
            return ALL_PERMISSIONS
        if self.guild is None:
            return base
        by_id = {(o.type, o.id): o for o in self.overwrites}
        everyone = by_id.get((0, self.guild.id))
        if everyone is not None:
            base = (base & ~everyone.deny) | everyone.allow
        allow = deny = 0
        for role in member.roles:
            found = by_id.get((0, role.id))
            if found is not None:
                allow, deny = allow | found.allow, deny | found.deny
        base = (base & ~deny) | allow
        own = by_id.get((1, member.id))
        if own is not None:
            base = (base & ~own.deny) | own.allow
        return base if base & VIEW_CHANNEL else 0

    def to_payload(self) -> dict[str, Any]:
        if self.type == 1:
            return {
                "id": str(self.id),
                "type": 1,
                "last_message_id": None,
                "flags": 0,
                "recipients": [self.recipient.to_payload()] if self.recipient else [],
            }
        if self.type == 3:  # a group DM (Discord's PrivateGroupChannelResponse)
            return {
                "id": str(self.id),
                "type": 3,
                "name": self.name,
                "icon": None,
                "owner_id": str(self.owner_id or 0),
                "last_message_id": None,
                "flags": 0,
                "recipients": [],
            }
        assert self.guild is not None
        if self.parent is not None:
            return {
                "id": str(self.id),
                "type": self.type,
                "guild_id": str(self.guild.id),
                "parent_id": str(self.parent.id),
                "owner_id": str(self.owner_id or self._bot_user_id),
                "name": self.name,
                "last_message_id": None,
                "rate_limit_per_user": 0,
                "flags": 0,
                "message_count": 0,
                "member_count": len(self.thread_members) + 1,
                "total_message_sent": 0,
                "thread_metadata": {
                    "archived": self.archived,
                    "archive_timestamp": _iso(snowflake_time(self.id)),
                    "auto_archive_duration": 1440,
                    "locked": self.locked,
                    **({"invitable": True} if self.type == 12 else {}),
                },
            }
        return {
            "id": str(self.id),
            "type": self.type,
            "guild_id": str(self.guild.id),
            "name": self.name,
            "position": self.position,
            "permission_overwrites": [
                {
                    "id": str(self._bot_user_id),
                    "type": 1,
                    "allow": str(self.bot_permissions),
                    "deny": str(ALL_PERMISSIONS & ~self.bot_permissions),
                },
                *(o.to_payload() for o in self.overwrites if (o.type, o.id) != (1, self._bot_user_id)),
            ],
            "parent_id": None,
            "topic": None,
            "nsfw": self.nsfw,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }


@dataclass(eq=False, repr=False)
class FakeGuild:
    """A guild. ``upload_limit`` is mutable at runtime (None = the boost tier's default)."""

    id: int
    name: str
    premium_tier: int = 0
    owner_id: int | None = None
    preferred_locale: str = "en-US"
    channels: list[FakeChannel] = field(default_factory=list)
    #: Active threads (sent in GUILD_CREATE's ``threads``).
    threads: list[FakeChannel] = field(default_factory=list)
    members: dict[int, FakeMember] = field(default_factory=dict)
    roles: list[FakeRole] = field(default_factory=list)
    joined_at: float = field(default_factory=time.time)
    #: Where Discord posts join messages; bots may post server notices there (None: not set).
    system_channel_id: int | None = None
    _upload_limit: int | None = None

    @property
    def upload_limit(self) -> int:
        """Bytes per file accepted by the fake for this guild."""
        if self._upload_limit is not None:
            return self._upload_limit
        return TIER_UPLOAD_LIMITS.get(self.premium_tier, 10 * MiB)

    @upload_limit.setter
    def upload_limit(self, value: int | None) -> None:
        self._upload_limit = value

    @property
    def everyone(self) -> FakeRole:
        return self.roles[0]

    def __repr__(self) -> str:
        return f"<FakeGuild {self.name!r} id={self.id} tier={self.premium_tier} upload_limit={self.upload_limit}>"

    def to_payload(
        self, *, full: bool, bot_member: FakeMember | None = None, all_members: bool = True
    ) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(self.id),
            "name": self.name,
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": str(self.owner_id) if self.owner_id else None,
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": [r.to_payload() for r in self.roles],
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "application_id": None,
            "system_channel_id": str(self.system_channel_id) if self.system_channel_id else None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "safety_alerts_channel_id": None,
            "max_members": 500000,
            "vanity_url_code": None,
            "premium_tier": self.premium_tier,
            "premium_subscription_count": {0: 0, 1: 2, 2: 7, 3: 14}.get(self.premium_tier, 0),
            "preferred_locale": self.preferred_locale,
            "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
        }
        if full:
            members = list(self.members.values()) if all_members else ([bot_member] if bot_member else [])
            data.update(
                {
                    "joined_at": _iso(self.joined_at),
                    "large": False,
                    "unavailable": False,
                    "member_count": len(self.members),
                    "voice_states": [],
                    "members": [m.to_payload() for m in members],
                    "channels": [c.to_payload() for c in self.channels],
                    "threads": [t.to_payload() for t in self.threads],
                    "presences": [],
                    "stage_instances": [],
                    "guild_scheduled_events": [],
                    "soundboard_sounds": [],
                }
            )
        return data


@dataclass(eq=False, repr=False)
class FakeAttachment:
    """A stored attachment (``data`` holds the uploaded bytes)."""

    id: int
    filename: str
    size: int
    content_type: str | None
    data: bytes
    url: str
    channel_id: int
    message_id: int | None = None
    description: str | None = None
    ephemeral: bool = False

    def __repr__(self) -> str:
        return f"<FakeAttachment {self.filename!r} size={self.size} message={self.message_id}>"

    def to_payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(self.id),
            "filename": self.filename,
            "size": self.size,
            "url": self.url,
            "proxy_url": self.url,
            "content_type": self.content_type,
        }
        if self.description is not None:
            data["description"] = self.description
        if self.ephemeral:
            data["ephemeral"] = True
        return data


@dataclass
class FakeUpload:
    """A file a test attaches to an interaction option (slash option of type 11)."""

    filename: str
    data: bytes
    content_type: str | None = None


@dataclass(eq=False, repr=False)
class FakeMessage:
    """A stored message (bot or user authored, channel or interaction message)."""

    id: int
    channel_id: int
    guild_id: int | None
    author: FakeUser
    content: str = ""
    embeds: list[dict[str, Any]] = field(default_factory=list)
    components: list[dict[str, Any]] = field(default_factory=list)
    attachments: list[FakeAttachment] = field(default_factory=list)
    flags: int = 0
    type: int = 0
    #: ``allowed_mentions`` exactly as last sent (None if the request had none).
    allowed_mentions: dict[str, Any] | None = None
    created_at: float = 0.0
    edited_at: float | None = None
    edit_count: int = 0
    deleted: bool = False
    webhook_id: int | None = None
    application_id: int | None = None
    interaction: FakeInteraction | None = None
    interaction_metadata: dict[str, Any] | None = None
    #: users currently in the ``mentions`` array (mentioned AND allowed)
    mentioned_user_ids: list[int] = field(default_factory=list)
    mentioned_role_ids: list[int] = field(default_factory=list)
    mention_everyone: bool = False
    #: users that received a notification (at creation, or when a loading message was completed)
    pinged_user_ids: set[int] = field(default_factory=set)
    pinged_role_ids: set[int] = field(default_factory=set)
    pinged_everyone: bool = False
    #: every request that shaped this message: {"action", "via", "payload", "files", "time"}
    history: list[dict[str, Any]] = field(default_factory=list)
    #: Seconds to subtract from ``created_at`` for the "edit of an old message" check only.
    backdated: float = 0.0
    #: The ``nonce`` it was created with (echoed in the create's answer, as Discord does).
    nonce: str | None = None
    _mention_payloads: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & FLAG_EPHEMERAL)

    @property
    def loading(self) -> bool:
        return bool(self.flags & FLAG_LOADING)

    @property
    def age(self) -> float:
        return time.time() - self.created_at + self.backdated

    def backdate(self, seconds: float) -> None:
        """Make the fake treat this message as ``seconds`` older (its id keeps the real time)."""
        self.backdated += seconds

    def __repr__(self) -> str:
        state = " deleted" if self.deleted else ""
        return (
            f"<FakeMessage id={self.id} channel={self.channel_id} flags={self.flags} edits={self.edit_count}"
            f" files={[a.filename for a in self.attachments]} content={self.content[:60]!r}{state}>"
        )

    def custom_ids(self) -> list[str]:
        return [str(c["custom_id"]) for c in _walk_components(self.components) if c.get("custom_id")]

    def to_payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(self.id),
            "channel_id": str(self.channel_id),
            "type": self.type,
            "content": self.content,
            "author": self.author.to_payload(),
            "mentions": [dict(u) for u in self._mention_payloads],
            "mention_roles": [str(r) for r in self.mentioned_role_ids],
            "mention_everyone": self.mention_everyone,
            "attachments": [a.to_payload() for a in self.attachments],
            "embeds": [dict(e) for e in self.embeds],
            "components": self.components,
            "flags": self.flags,
            "tts": False,
            "pinned": False,
            "timestamp": _iso(self.created_at),
            "edited_timestamp": _iso(self.edited_at),
        }
        if self.guild_id is not None:
            data["guild_id"] = str(self.guild_id)
        if self.webhook_id is not None:
            data["webhook_id"] = str(self.webhook_id)
        if self.application_id is not None:
            data["application_id"] = str(self.application_id)
        if self.interaction_metadata is not None:
            data["interaction_metadata"] = self.interaction_metadata
            data["interaction"] = {
                "id": self.interaction_metadata["id"],
                "type": self.interaction_metadata["type"],
                "name": self.interaction_metadata.get("name", ""),
                "user": self.interaction_metadata["user"],
            }
        return data


def _walk_components(components: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for comp in components or ():
        yield comp
        yield from _walk_components(comp.get("components") or ())
        for key in ("component", "accessory"):
            if isinstance(comp.get(key), dict):
                yield from _walk_components([comp[key]])


def _with_custom_id(components: list[dict[str, Any]], custom_id: str, type_: int) -> list[dict[str, Any]]:
    """A copy of `components` whose first component of type `type_` has `custom_id` (else one more row)."""
    out = copy.deepcopy(components)
    target = next((c for c in _walk_components(out) if c.get("type") == type_ and c.get("custom_id")), None)
    if target is not None:
        target["custom_id"] = custom_id
    else:
        out.append(
            {"type": 1, "components": [{"type": type_, "style": 2, "label": "?", "custom_id": custom_id}]}
        )
    return out


@dataclass
class FakeRequest:
    """One HTTP request the fake received."""

    method: str
    path: str
    query: dict[str, str]
    #: JSON body (dict or list) for JSON requests
    json: Any = None
    #: the parsed ``payload_json`` part of a multipart request
    payload_json: Any = None
    #: [{"field", "filename", "size", "content_type"}]
    files: list[dict[str, Any]] = field(default_factory=list)
    status: int = 0
    #: Discord JSON error code of the answer (0 for success)
    code: int = 0
    response: Any = None
    route: str | None = None
    time: float = 0.0
    monotonic: float = 0.0
    authorized: bool = False

    @property
    def body(self) -> Any:
        """The JSON payload, whichever way it was sent."""
        return self.payload_json if self.payload_json is not None else self.json

    def __repr__(self) -> str:
        return f"<FakeRequest {self.method} {self.path} -> {self.status}{f' code={self.code}' if self.code else ''}>"


@dataclass(eq=False)
class FakeGatewaySession:
    """One IDENTIFYed gateway session (it may be resumed on a later socket)."""

    ordinal: int
    session_id: str
    identify: dict[str, Any]
    shard: tuple[int, int] | None
    intents: int
    seq: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    ready: bool = False
    resumes: int = 0
    _conn: _GatewayConnection | None = None

    @property
    def live(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def handles_guild(self, guild_id: int) -> bool:
        if self.shard is None:
            return True
        shard_id, count = self.shard
        return (guild_id >> 22) % max(count, 1) == shard_id


class _GatewayConnection:
    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.lock = asyncio.Lock()
        self.session: FakeGatewaySession | None = None
        self.closed = False

    async def send(self, payload: dict[str, Any]) -> None:
        async with self.lock:
            if self.ws.closed:
                return
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_str(json.dumps(payload))


# --------------------------------------------------------------------------------------------
# Interactions
# --------------------------------------------------------------------------------------------


class FakeInteraction:
    """An interaction the test sent to the bot, and everything the bot answered to it."""

    def __init__(
        self,
        fake: FakeDiscord,
        *,
        id: int,
        token: str,
        type: int,
        guild: FakeGuild | None,
        channel: FakeChannel,
        user: FakeMember | FakeUser,
        name: str | None,
        custom_id: str | None,
        message: FakeMessage | None,
        locale: str,
        app_permissions: int,
        attachment_size_limit: int,
    ) -> None:
        self._fake = fake
        self.id = id
        self.token = token
        self.type = type
        self.guild = guild
        self.channel = channel
        self.user = user
        self.name = name
        self.custom_id = custom_id
        self.message = message
        self.locale = locale
        self.app_permissions = app_permissions
        #: Per-file limit the fake enforces on this interaction's responses (mutable).
        self.attachment_size_limit = attachment_size_limit
        #: The INTERACTION_CREATE ``d`` payload as sent.
        self.payload: dict[str, Any] = {}
        #: Epoch seconds encoded in the id (what discord.py's ``created_at`` reports).
        self.created_at = snowflake_time(id)
        #: Monotonic time the INTERACTION_CREATE was written to the socket.
        self.dispatched_at: float | None = None
        #: Accepted initial responses: [(callback type, data)] (at most one).
        self.callbacks: list[tuple[int, dict[str, Any] | None]] = []
        #: Seconds from dispatch to the accepted initial response.
        self.ack_latency: float | None = None
        self.original: FakeMessage | None = None
        self.followups: list[FakeMessage] = []
        #: Rejected requests made with this interaction's id/token.
        self.errors: list[FakeRequest] = []
        self._extra_age = 0.0

    # -- state ---------------------------------------------------------------------------
    @property
    def acknowledged(self) -> bool:
        return bool(self.callbacks)

    @property
    def response_type(self) -> int | None:
        return self.callbacks[0][0] if self.callbacks else None

    @property
    def response_data(self) -> dict[str, Any] | None:
        return self.callbacks[0][1] if self.callbacks else None

    @property
    def choices(self) -> list[dict[str, Any]] | None:
        """Autocomplete choices returned by the bot (callback type 8)."""
        if self.response_type == CB_AUTOCOMPLETE:
            return list((self.response_data or {}).get("choices", []))
        return None

    @property
    def modal(self) -> dict[str, Any] | None:
        if self.response_type == CB_MODAL:
            return self.response_data
        return None

    @property
    def token_age(self) -> float:
        return time.time() - self.created_at + self._extra_age

    @property
    def token_expired(self) -> bool:
        return self.token_age > self._fake.token_ttl

    def expire(self) -> None:
        """Make the token expired now (the bot's own ``expires_at`` will NOT agree)."""
        self._extra_age = self._fake.token_ttl + 1 - (time.time() - self.created_at)

    def messages(self) -> list[FakeMessage]:
        out = [self.original] if self.original is not None else []
        return out + [m for m in self.followups if m is not self.original]

    # -- waiting -------------------------------------------------------------------------
    async def wait_response(self, timeout: float = 5.0) -> tuple[int, dict[str, Any] | None]:  # noqa: ASYNC109 (the API takes a timeout)
        """Wait for the initial response; returns (callback type, data)."""
        await self._fake.wait_for(
            lambda: self.callbacks or self.errors,
            timeout=timeout,
            what=f"an initial response to interaction {self.name or self.custom_id!r}",
        )
        if not self.callbacks:
            raise AssertionError(f"interaction {self.id} was answered only with errors: {self.errors}")
        return self.callbacks[0]

    async def wait_original(
        self,
        predicate: Callable[[FakeMessage], bool] | None = None,
        timeout: float = 10.0,  # noqa: ASYNC109 (the API takes a timeout)
    ) -> FakeMessage:
        """Wait until the original response exists (and satisfies ``predicate``)."""

        def check() -> bool:
            msg = self.original
            return msg is not None and (predicate is None or bool(predicate(msg)))

        what = f"the original response of {self.name or self.custom_id!r}"
        if predicate is not None:
            what += f" to satisfy {_describe(predicate)}"
        await self._fake.wait_for(check, timeout=timeout, what=what)
        assert self.original is not None
        return self.original

    async def wait_followup(
        self,
        predicate: Callable[[FakeMessage], bool] | None = None,
        timeout: float = 10.0,  # noqa: ASYNC109 (the API takes a timeout)
    ) -> FakeMessage:
        def find() -> FakeMessage | None:
            for msg in self.followups:
                if predicate is None or predicate(msg):
                    return msg
            return None

        await self._fake.wait_for(lambda: find() is not None, timeout=timeout, what="a follow-up message")
        msg = find()
        assert msg is not None
        return msg

    def __repr__(self) -> str:
        what = self.name or self.custom_id
        return f"<FakeInteraction id={self.id} type={self.type} {what!r} response={self.response_type}>"


# --------------------------------------------------------------------------------------------
# Request parsing helpers
# --------------------------------------------------------------------------------------------


@dataclass
class _Upload:
    field: str
    index: int
    filename: str
    content_type: str | None
    data: bytes


@dataclass
class _Call:
    request: web.Request
    method: str
    path: str
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    uploads: list[_Upload]
    record: FakeRequest


async def _read_body(request: web.Request) -> tuple[Any, Any, list[_Upload]]:
    """Returns (json, payload_json, uploads)."""
    ctype = request.content_type or ""
    if ctype.startswith("multipart/"):
        reader = await request.multipart()
        payload: Any = None
        uploads: list[_Upload] = []
        position = 0
        while True:
            part = await reader.next()
            if part is None:
                break
            if not isinstance(part, aiohttp.BodyPartReader):
                continue
            name = part.name or ""
            if name == "payload_json":
                text = await part.text()
                try:
                    payload = json.loads(text)
                except ValueError as exc:
                    raise ApiError(400, 50109, "The request body contains invalid JSON.") from exc
                continue
            data = bytes(await part.read(decode=False))
            m = re.fullmatch(r"files\[(\d+)\]", name)
            index = int(m.group(1)) if m else position
            position += 1
            uploads.append(
                _Upload(
                    field=name,
                    index=index,
                    filename=part.filename or f"file{index}",
                    content_type=part.headers.get(aiohttp.hdrs.CONTENT_TYPE),
                    data=data,
                )
            )
        return None, payload, uploads
    raw = await request.read()
    if not raw:
        return None, None, []
    try:
        return json.loads(raw), None, []
    except ValueError as exc:
        raise ApiError(400, 50109, "The request body contains invalid JSON.") from exc


def _json_response(status: int, body: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    if status == 204:
        hdrs.pop("Content-Type")
        return web.Response(status=204, headers=hdrs)
    return web.Response(status=status, body=json.dumps(body).encode(), headers=hdrs)


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in {"1", "true", "yes"}


# --------------------------------------------------------------------------------------------
# The fake
# --------------------------------------------------------------------------------------------


class FakeDiscord:
    """Fake Discord REST API + gateway on 127.0.0.1.

    Knobs (plain attributes, mutable at runtime): ``token_ttl`` (900 s), ``ack_deadline`` (3 s),
    ``message_edit_max_age`` (3600 s), ``allow_resume`` (True), ``privileged_intents`` (None =
    any intent is accepted; an int = the enabled privileged intents, others close with 4014),
    ``heartbeat_interval`` (ms), ``recommended_shards`` (GET /gateway/bot), ``nonce_window`` (300 s:
    how long a channel message's ``nonce`` with ``enforce_nonce`` deduplicates a create),
    ``gateway_failures`` (answer the next N gateway connections with HTTP ``gateway_failure_status``
    instead of upgrading them), plus ``FakeGuild.upload_limit``, ``FakeChannel.bot_permissions``,
    ``FakeInteraction.attachment_size_limit``. ``stop()`` then ``start()`` is Discord going away and
    coming back: the fake listens on the same port again.

    ``validate_requests`` (default True): every REST request's JSON body (or ``payload_json``) and query
    string is checked against Discord's OpenAPI spec (:mod:`tests.fakes.openapi`) before its handler
    runs; one the spec refuses is answered 400 code 50035 "Invalid Form Body" with Discord's nested
    ``errors``, as Discord would. Each refusal, and each route the fake serves that the spec does not
    describe (reported, not refused), lands in ``spec_violations``.
    """

    def __init__(
        self,
        *,
        bot_token: str = "test-bot-token",
        application_id: int | None = None,
        bot_user_id: int | None = None,
        bot_name: str = "Framecast",
        token_ttl: float = 900.0,
        ack_deadline: float = 3.0,
        message_edit_max_age: float = 3600.0,
        validate_requests: bool = True,
    ) -> None:
        now = time.time()
        self.bot_token = bot_token
        self.application_id = application_id or snowflake_at(now - 86400 * 400)
        self.bot_user = FakeUser(id=bot_user_id or self.application_id, name=bot_name, bot=True)
        self.app_owner = FakeUser(id=snowflake_at(now - 86400 * 800), name="app-owner")

        # knobs
        self.token_ttl = token_ttl
        self.ack_deadline = ack_deadline
        self.message_edit_max_age = message_edit_max_age
        self.allow_resume = True
        self.privileged_intents: int | None = None
        self.heartbeat_interval = 41250
        self.recommended_shards = 1
        self.gateway_failures = 0
        self.gateway_failure_status = 503
        #: gateway connection attempts answered with gateway_failure_status
        self.gateway_refused = 0
        self.validate_requests = validate_requests
        #: Seconds a message created with ``nonce`` and ``enforce_nonce`` answers a create with the
        #: same nonce (Discord: "the past few minutes").
        self.nonce_window = 300.0

        # world
        self.guilds: list[FakeGuild] = []
        # get_guild by id: a scan of 25,000 guilds per request would be the fake's cost, not the bot's.
        self._guilds_by_id: dict[int, FakeGuild] = {}
        self.users: dict[int, FakeUser] = {self.bot_user.id: self.bot_user, self.app_owner.id: self.app_owner}
        self.channels: dict[int, FakeChannel] = {}
        self._dm_channels: dict[int, FakeChannel] = {}
        #: Channels that exist on Discord but that the bot is not in (group DMs, servers without the
        #: bot): every channel request there is refused 403 Missing Access (50001), as Discord does.
        self._elsewhere: dict[int, FakeChannel] = {}

        # records
        self.requests: list[FakeRequest] = []
        self.messages: dict[int, FakeMessage] = {}
        #: (channel id, author id, nonce) -> the message created with that enforced nonce
        self._by_nonce: dict[tuple[int, int, str], FakeMessage] = {}
        self.attachments: dict[int, FakeAttachment] = {}
        self.interactions: list[FakeInteraction] = []
        self._by_token: dict[str, FakeInteraction] = {}
        self._by_id: dict[int, FakeInteraction] = {}
        self.global_commands: list[dict[str, Any]] = []
        self.guild_commands: dict[int, list[dict[str, Any]]] = {}
        #: Integrations overrides per (guild id, command name, user id): True allows, False forbids.
        self.command_overrides: dict[tuple[int, str, int], bool] = {}
        self._command_ids: dict[tuple[int | None, str, int], int] = {}
        self.command_syncs = 0
        self.sessions: list[FakeGatewaySession] = []
        #: client->server gateway payloads (tokens redacted)
        self.gateway_received: list[dict[str, Any]] = []
        self._connections: list[_GatewayConnection] = []
        #: crashes of the fake's own handlers (answered 501); should stay empty
        self.fake_errors: list[str] = []
        #: requests Discord's OpenAPI spec refuses (answered 400) or does not describe; should stay empty
        self.spec_violations: list[SpecViolation] = []

        # injected failures: [route_contains, remaining, kind, args]
        self._injections: list[list[Any]] = []
        # answers lost after the request was done: [route_contains, remaining, status, when]
        self._losses: list[list[Any]] = []
        #: requests done whose answer a ``lose_answer_next`` lost
        self.lost_answers: list[FakeRequest] = []

        self._cond = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._routes = self._build_routes()
        #: Login with Discord (OAuth2): its own block, tests/fakes/discord_oauth.py.
        self.oauth = FakeOAuth(self)

    # ------------------------------------------------------------------ lifecycle ---------
    async def start(self) -> None:
        if self.validate_requests:
            spec()  # load the spec now (once per process), not while the first request waits
        app = web.Application(client_max_size=1024 * MiB)
        app.router.add_get("/gateway", self._gateway_handler)
        app.router.add_get("/attachments/{channel_id}/{attachment_id}/{filename}", self._attachment_handler)
        self.oauth.add_routes(app)
        app.router.add_route("*", "/{tail:.*}", self._api_handler)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        # A restart listens where the bot already looks (the first start picks a free port).
        site = web.TCPSite(self._runner, "127.0.0.1", self._port or 0)
        await site.start()
        sockets = getattr(site._server, "sockets", None)  # the only way to learn the ephemeral port
        assert sockets
        self._port = int(sockets[0].getsockname()[1])
        log.debug("fake discord listening on %s", self.base_url)

    async def stop(self) -> None:
        await self.disconnect(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("FakeDiscord is not started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def env(self) -> dict[str, str]:
        """Environment variables that point the bot at this fake."""
        return {
            "DISCORD_TOKEN": self.bot_token,
            "DISCORD_API_BASE_URL": self.api_base,
            "DISCORD_GATEWAY_URL": self.gateway_url,
        }

    # ------------------------------------------------------------------ world model -------
    def add_guild(
        self,
        name: str,
        *,
        premium_tier: int = 0,
        owner_id: int | None = None,
        upload_limit: int | None = None,
        preferred_locale: str = "en-US",
        guild_id: int | None = None,
    ) -> FakeGuild:
        """Add a guild (with @everyone, the bot's managed role and the bot member).

        ``guild_id`` lets sharding tests pick the shard: ``(guild_id >> 22) % shard_count``."""
        now = time.time()
        gid = guild_id or snowflake_at(now - 86400 * 30)
        guild = FakeGuild(
            id=gid,
            name=name,
            premium_tier=premium_tier,
            owner_id=owner_id or self.app_owner.id,
            preferred_locale=preferred_locale,
            joined_at=now - 86400,
        )
        guild.upload_limit = upload_limit
        guild.roles.append(
            FakeRole(id=gid, guild_id=gid, name="@everyone", permissions=DEFAULT_EVERYONE_PERMISSIONS)
        )
        bot_role = FakeRole(
            id=snowflake_at(now - 86400),
            guild_id=gid,
            name=self.bot_user.name,
            permissions=TEXT_PERMISSIONS,
            position=1,
            managed=True,
            bot_id=self.bot_user.id,
        )
        guild.roles.append(bot_role)
        guild.members[self.bot_user.id] = FakeMember(
            user=self.bot_user, guild=guild, roles=[bot_role], joined_at=now - 86400
        )
        self.guilds.append(guild)
        self._guilds_by_id.setdefault(gid, guild)
        return guild

    def add_role(self, guild: FakeGuild, name: str, *, permissions: int = 0) -> FakeRole:
        role = FakeRole(
            id=snowflake_at(time.time()),
            guild_id=guild.id,
            name=name,
            permissions=permissions,
            position=len(guild.roles),
        )
        guild.roles.append(role)
        return role

    def add_channel(
        self,
        guild: FakeGuild,
        name: str,
        *,
        bot_permissions: int = TEXT_PERMISSIONS,
        nsfw: bool = False,
        system: bool = False,
        overwrites: Sequence[FakeOverwrite] = (),
    ) -> FakeChannel:
        """Add a text channel; ``nsfw`` makes it age-restricted, ``system`` the guild's system channel,
        ``overwrites`` who else may see it (``FakeOverwrite.of(guild.everyone, deny=VIEW_CHANNEL)``
        and ``FakeOverwrite.of(staff, allow=VIEW_CHANNEL)``: a private staff channel)."""
        channel = FakeChannel(
            id=snowflake_at(time.time()),
            name=name,
            guild=guild,
            bot_permissions=bot_permissions,
            position=len(guild.channels),
            nsfw=nsfw,
            overwrites=list(overwrites),
            _bot_user_id=self.bot_user.id,
        )
        guild.channels.append(channel)
        self.channels[channel.id] = channel
        if system:
            guild.system_channel_id = channel.id
        return channel

    def add_thread(
        self, parent: FakeChannel, name: str, *, private: bool = False, owner: FakeMember | None = None
    ) -> FakeChannel:
        """Add an active thread of `parent` (public, or ``private``: seen by `owner`, the members
        in its ``thread_members`` and Manage Threads), known to the bot from GUILD_CREATE on."""
        assert parent.guild is not None and parent.parent is None, "a thread of a guild text channel"
        thread = FakeChannel(
            id=snowflake_at(time.time()),
            name=name,
            guild=parent.guild,
            bot_permissions=parent.bot_permissions,
            type=12 if private else 11,
            parent=parent,
            owner_id=owner.id if owner is not None else None,
            _bot_user_id=self.bot_user.id,
        )
        parent.guild.threads.append(thread)
        self.channels[thread.id] = thread
        return thread

    async def update_channel(self, channel: FakeChannel, *, nsfw: bool | None = None) -> None:
        """Change a channel (its age restriction) and tell the bot (CHANNEL_UPDATE)."""
        if nsfw is not None:
            channel.nsfw = nsfw
        if channel.guild is not None:
            await self._dispatch_guild_event(
                channel.guild.id, "CHANNEL_UPDATE", channel.to_payload(), INTENT_GUILDS
            )
        await self._notify()

    def override_command(
        self, guild: FakeGuild, name: str, member: FakeMember | FakeUser, *, allow: bool | None = True
    ) -> None:
        """Server Settings -> Integrations: let (or forbid) `member` use command `name` in `guild`,
        whatever the command's ``default_member_permissions``; ``allow=None`` removes the override."""
        key = (guild.id, name, member.id)
        if allow is None:
            self.command_overrides.pop(key, None)
        else:
            self.command_overrides[key] = allow

    def add_user(self, name: str, *, bot: bool = False) -> FakeUser:
        user = FakeUser(id=snowflake_at(time.time() - 86400 * 100), name=name, bot=bot)
        self.users[user.id] = user
        return user

    def add_member(
        self,
        guild: FakeGuild,
        name: str | FakeUser,
        *,
        permissions: int | None = None,
        roles: Sequence[FakeRole] = (),
    ) -> FakeMember:
        """Add a member; ``permissions`` (guild-level, sent in interactions) defaults to
        @everyone | roles (everything for the guild owner)."""
        user = name if isinstance(name, FakeUser) else self.add_user(name)
        member = FakeMember(user=user, guild=guild, roles=list(roles), explicit_permissions=permissions)
        guild.members[user.id] = member
        return member

    def dm_channel(self, user: FakeUser | FakeMember) -> FakeChannel:
        """The DM channel between the bot and ``user`` (type 1), created on first use."""
        u = user.user if isinstance(user, FakeMember) else user
        channel = self._dm_channels.get(u.id)
        if channel is None:
            channel = FakeChannel(id=snowflake_at(time.time()), name=u.name, guild=None, type=1, recipient=u)
            self._dm_channels[u.id] = channel
            self._dm_channels[channel.id] = channel
        return channel

    def foreign_guild(self, name: str, member: FakeUser) -> tuple[FakeGuild, FakeChannel]:
        """A server the bot is not in (never sent to it), with one text channel and `member` in it.

        Only a person's own install reaches it (:meth:`slash_personal` with its channel); any
        channel request the bot makes there is refused (403, 50001 Missing Access), as Discord does
        for a channel that exists but that the bot is not in.
        """
        now = time.time()
        gid = snowflake_at(now - 86400 * 30)
        guild = FakeGuild(id=gid, name=name, owner_id=member.id)
        guild.roles.append(
            FakeRole(id=gid, guild_id=gid, name="@everyone", permissions=DEFAULT_EVERYONE_PERMISSIONS)
        )
        channel = FakeChannel(id=snowflake_at(now), name="general", guild=guild)
        guild.channels.append(channel)
        guild.members[member.id] = FakeMember(user=member, guild=guild, roles=[], joined_at=now - 3600)
        self._elsewhere[channel.id] = channel
        return guild, channel

    def group_dm(self, name: str = "group") -> FakeChannel:
        """A group DM (type 3). The bot is never in one: every channel request there is refused
        (403, 50001 Missing Access), so only an interaction's responses and follow-ups (and a
        click's own token) can post in it or delete there."""
        channel = FakeChannel(id=snowflake_at(time.time()), name=name, guild=None, type=3)
        self._elsewhere[channel.id] = channel
        return channel

    async def slash_personal(
        self,
        channel: FakeChannel,
        user: FakeUser | FakeMember,
        name: str,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        locale: str = "en-US",
        age: float = 0.0,
        attachment_size_limit: int | None = None,
        subcommand: str | None = None,
    ) -> FakeInteraction:
        """A slash command from a person's own install of the app, as Discord sends it in `channel`:
        the DM with the bot (type 1: ``context`` 1), a group DM (type 3: ``context`` 2), or a channel of
        a server the bot is not in (:meth:`foreign_guild`: ``context`` 0, with ``guild_id`` and the
        person's ``member``). In DMs no ``member`` and no ``guild_id``. Always
        ``authorizing_integration_owners`` {"1": the user's id} and the ``app_permissions`` Discord
        grants a user install.

        Raises :class:`CommandHidden` when Discord would not offer the command there: the synced
        command lacks user installs (``integration_types`` 1) or that ``contexts`` value.
        """
        u = user.user if isinstance(user, FakeMember) else user
        guild = channel.guild
        context = 0 if guild is not None else (1 if channel.type == 1 else 2)
        cmd = self.synced_command(None, name)
        if cmd is None:
            raise CommandHidden(f"/{name} is not a global command: Discord offers it in no DM")
        if 1 not in (cmd.get("integration_types") or [0]):
            raise CommandHidden(
                f"/{name} cannot be installed to a user (integration_types {cmd.get('integration_types')})"
            )
        contexts = cmd.get("contexts")
        if contexts is not None and context not in contexts:
            raise CommandHidden(f"/{name} is not offered in context {context} (contexts {contexts})")
        perms = USER_INSTALL_PERMISSIONS
        it = self._base_interaction(
            type_=IT_COMMAND,
            guild=None,
            channel=channel,
            user=u,
            locale=locale,
            age=age,
            attachment_size_limit=attachment_size_limit,
            app_permissions=perms,
            name=name,
        )
        it.payload["context"] = context
        it.payload["authorizing_integration_owners"] = {"1": str(u.id)}
        if guild is not None:
            member = guild.members[u.id]
            payload = member.to_payload(with_permissions=True)
            payload["permissions"] = str(channel.permissions_for(member))
            del it.payload["user"]
            it.payload.update(
                {
                    "guild_id": str(guild.id),
                    "guild": {"id": str(guild.id), "locale": guild.preferred_locale, "features": []},
                    "guild_locale": guild.preferred_locale,
                    "member": payload,
                }
            )
            it.guild = guild
        it.payload["data"] = self._command_data(None, channel, name, options, subcommand)
        return await self._send_interaction(it)

    def get_guild(self, guild_id: int) -> FakeGuild | None:
        found = self._guilds_by_id.get(int(guild_id))
        return found if found is not None else next((g for g in self.guilds if g.id == int(guild_id)), None)

    async def set_bot_permissions(self, channel: FakeChannel, permissions: int) -> None:
        """Change the bot's permissions in a channel and tell the bot (CHANNEL_UPDATE)."""
        channel.bot_permissions = permissions
        if channel.guild is not None:
            await self._dispatch_guild_event(
                channel.guild.id, "CHANNEL_UPDATE", channel.to_payload(), INTENT_GUILDS
            )
        await self._notify()

    async def delete_message(self, msg: FakeMessage) -> None:
        """A moderator deletes `msg` (any message, the bot's too) and the bot is told
        (MESSAGE_DELETE); from then on every edit of it answers 404 Unknown Message (10008), through
        an interaction token as through the channel."""
        await self._delete_message(msg, via="moderator")
        await self._notify()

    async def delete_channel(self, channel: FakeChannel) -> None:
        """An admin deletes a channel or a thread (a channel's threads go with it), and the bot is told
        (CHANNEL_DELETE, THREAD_DELETE). Its messages go too, without a MESSAGE_DELETE each (as on
        Discord); from then on every request naming it answers 404 Unknown Channel (10003), and an
        edit of an interaction's answer there 404 Unknown Message (10008)."""
        guild = channel.guild
        assert guild is not None, "a guild's channel or thread"
        gone = [channel, *(t for t in guild.threads if t.parent is channel)]
        for place in gone:
            self.channels.pop(place.id, None)
            for msg in self.messages.values():
                if msg.channel_id == place.id:
                    msg.deleted = True
        guild.channels = [c for c in guild.channels if c not in gone]
        guild.threads = [t for t in guild.threads if t not in gone]
        for place in reversed(gone):
            event = "THREAD_DELETE" if place.parent is not None else "CHANNEL_DELETE"
            await self._dispatch_guild_event(guild.id, event, place.to_payload(), INTENT_GUILDS)
        await self._notify()

    async def archive_thread(self, thread: FakeChannel, *, locked: bool = False) -> None:
        """A moderator closes a thread (`locked`: and locks it), and the bot is told (THREAD_UPDATE).
        As on Discord, no message in it can be edited any more (400 Thread is archived, 50083), and a
        new message reopens it, unless it is locked (then 50083 too: the bot has no Manage Threads)."""
        assert thread.guild is not None and thread.parent is not None, "a guild's thread"
        thread.archived, thread.locked = True, locked
        await self._thread_changed(thread)

    async def reopen_thread(self, thread: FakeChannel) -> None:
        """A member posts in a closed thread (or a moderator opens it again): it is open, unlocked,
        and the bot is told (THREAD_UPDATE)."""
        assert thread.guild is not None and thread.parent is not None, "a guild's thread"
        thread.archived = thread.locked = False
        await self._thread_changed(thread)

    async def _thread_changed(self, thread: FakeChannel) -> None:
        assert thread.guild is not None
        await self._dispatch_guild_event(thread.guild.id, "THREAD_UPDATE", thread.to_payload(), INTENT_GUILDS)
        await self._notify()

    async def remove_guild(self, guild: FakeGuild) -> None:
        """The bot is removed from `guild` (kicked), and told (GUILD_DELETE without ``unavailable``).
        Its channels stay on Discord, where the bot may not go any more (403 Missing Access, 50001);
        the guild itself answers 404 Unknown Guild (10004)."""
        sessions = self._sessions_for_guild(guild.id)
        self.guilds.remove(guild)
        self._guilds_by_id.pop(guild.id, None)
        for place in [*guild.channels, *guild.threads]:
            self.channels.pop(place.id, None)
            self._elsewhere[place.id] = place
        for session in sessions:
            await self._dispatch(session, "GUILD_DELETE", {"id": str(guild.id)})
        await self._notify()

    async def update_guild(
        self, guild: FakeGuild, *, premium_tier: int | None = None, name: str | None = None
    ) -> None:
        """Change a guild and send GUILD_UPDATE (e.g. boost tier -> ``guild.filesize_limit``)."""
        if premium_tier is not None:
            guild.premium_tier = premium_tier
        if name is not None:
            guild.name = name
        await self._dispatch_guild_event(
            guild.id, "GUILD_UPDATE", guild.to_payload(full=False), INTENT_GUILDS
        )
        await self._notify()

    # ------------------------------------------------------------------ knobs -------------
    def rate_limit_next(
        self,
        route_contains: str,
        count: int = 1,
        retry_after: float = 0.05,
        *,
        is_global: bool = False,
        via: bool = True,
        uploads_only: bool = False,
    ) -> None:
        """Answer the next ``count`` requests whose "METHOD /path" contains ``route_contains``
        with 429. ``via=False`` drops the ``Via`` header (discord.py then raises instead of retrying).
        ``uploads_only``: only requests that carry files (a delivery, not a progress edit)."""
        self._injections.append([route_contains, count, "429", (retry_after, is_global, via), uploads_only])

    def fail_next(
        self,
        route_contains: str,
        status: int = 500,
        code: int = 0,
        count: int = 1,
        message: str | None = None,
        *,
        uploads_only: bool = False,
    ) -> None:
        """Answer the next ``count`` matching requests with ``status`` / JSON ``code``.
        Note: discord.py retries 500/502/504/524 itself after 1 s, 3 s, ...
        ``uploads_only``: only requests that carry files (a delivery, not a progress edit)."""
        self._injections.append([route_contains, count, "fail", (status, code, message), uploads_only])

    def reset_next(self, route_contains: str, count: int = 1) -> None:
        """Drop the connection of the next ``count`` matching requests without an answer (Discord
        unreachable half-way: the bot's HTTP client sees the server disconnect)."""
        self._injections.append([route_contains, count, "reset", None, False])

    def lose_answer_next(
        self,
        route_contains: str,
        count: int = 1,
        *,
        status: int | None = None,
        when: Callable[[FakeRequest], bool] | None = None,
    ) -> None:
        """Do the next ``count`` matching requests (what they create or change is stored), then lose
        their answer: drop the connection (``status`` None) or answer ``status`` (e.g. a 503 from a
        proxy after Discord did it). ``when(request)`` picks the requests (default: any that
        succeeded). Each one whose answer was lost lands in ``lost_answers``."""
        self._losses.append([route_contains, count, status, when])

    def clear_injections(self) -> None:
        self._injections.clear()
        self._losses.clear()

    # ------------------------------------------------------------------ records -----------
    def messages_in(
        self, channel: FakeChannel | int, *, include_ephemeral: bool = False, include_deleted: bool = False
    ) -> list[FakeMessage]:
        cid = channel.id if isinstance(channel, FakeChannel) else int(channel)
        return [
            m
            for m in self.messages.values()
            if m.channel_id == cid
            and (include_ephemeral or not m.ephemeral)
            and (include_deleted or not m.deleted)
        ]

    def files_delivered(self) -> list[FakeAttachment]:
        """Every attachment ever uploaded (``message_id`` tells where it went)."""
        return list(self.attachments.values())

    @property
    def unknown_routes(self) -> list[FakeRequest]:
        return [r for r in self.requests if r.route is None]

    def rejected(self, code: int | None = None) -> list[FakeRequest]:
        """Requests answered with an error (optionally only those with a JSON ``code``)."""
        return [r for r in self.requests if r.status >= 400 and (code is None or r.code == code)]

    def requests_to(self, method: str | None = None, contains: str = "") -> list[FakeRequest]:
        return [
            r for r in self.requests if (method is None or r.method == method.upper()) and contains in r.path
        ]

    def commands_for(self, guild: FakeGuild | None = None) -> list[dict[str, Any]]:
        return list(self.global_commands if guild is None else self.guild_commands.get(guild.id, []))

    async def wait_for(
        self,
        predicate: Callable[[], Any],
        timeout: float = 10.0,  # noqa: ASYNC109 (the API takes a timeout)
        *,
        what: str | None = None,
    ) -> Any:
        """Wait until ``predicate()`` is truthy, re-checking on every state change of the fake.

        Returns the truthy value. Raises TimeoutError naming what was awaited."""
        result: Any = None

        def check() -> bool:
            nonlocal result
            result = predicate()
            return bool(result)

        try:
            async with asyncio.timeout(timeout):
                async with self._cond:
                    await self._cond.wait_for(check)
        except TimeoutError:
            recent = ", ".join(repr(r) for r in self.requests[-8:]) or "none"
            raise TimeoutError(
                f"FakeDiscord.wait_for timed out after {timeout}s waiting for {what or _describe(predicate)}; "
                f"last requests: {recent}"
            ) from None
        return result

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------------ gateway -----------
    @property
    def connected(self) -> bool:
        """True while at least one gateway socket carries a READY (or RESUMED) session."""
        return any(s.live and s.ready for s in self.sessions)

    @property
    def identify_count(self) -> int:
        return len(self.sessions)

    async def wait_ready(
        self,
        timeout: float = 10.0,  # noqa: ASYNC109 (the API takes a timeout)
        *,
        after: int | None = None,
        count: int = 1,
    ) -> FakeGatewaySession:
        """Wait for a live session that got READY + its GUILD_CREATEs; returns the newest one.

        ``after``: only sessions IDENTIFYed after this ``identify_count`` value count (use it
        across bot restarts: ``mark = fake.identify_count; restart(); await fake.wait_ready(after=mark)``).
        ``count``: how many such sessions must be live (one per shard for sharded bots).
        """
        floor = after or 0

        def found() -> list[FakeGatewaySession]:
            return [s for s in self.sessions if s.ordinal > floor and s.live and s.ready]

        await self.wait_for(
            lambda: len(found()) >= count, timeout=timeout, what=f"{count} bot gateway session(s) to be READY"
        )
        return found()[-1]

    async def wait_disconnected(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109 (the API takes a timeout)
        await self.wait_for(
            lambda: not any(not c.closed for c in self._connections),
            timeout=timeout,
            what="all gateway sockets to close",
        )

    async def disconnect(self, code: int = 4000) -> None:
        """Close every open gateway socket (4000 = resumable, as Discord does on a hiccup)."""
        for conn in list(self._connections):
            if not conn.ws.closed:
                with contextlib.suppress(Exception):
                    await conn.ws.close(code=code, message=b"fake disconnect")
        await self._notify()

    async def request_reconnect(self) -> None:
        """Send op 7 RECONNECT on every open socket."""
        for conn in list(self._connections):
            if not conn.closed:
                await conn.send({"op": 7, "d": None})

    async def _gateway_handler(self, request: web.Request) -> web.StreamResponse:
        if self.gateway_failures > 0:
            self.gateway_failures -= 1
            self.gateway_refused += 1
            await self._notify()
            return _json_response(self.gateway_failure_status, {"message": "gateway unavailable", "code": 0})
        ws = web.WebSocketResponse(autoping=True, timeout=2.0, max_msg_size=16 * MiB)
        await ws.prepare(request)
        conn = _GatewayConnection(ws)
        self._connections.append(conn)
        try:
            if request.query.get("v", "10") not in ("9", "10"):
                await ws.close(code=4012, message=b"Invalid API version")
                return ws
            if request.query.get("encoding", "json") != "json":
                await ws.close(code=4002, message=b"Decode error (fake speaks json only)")
                return ws
            await conn.send(
                {"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval}, "s": None, "t": None}
            )
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    await ws.close(code=4002, message=b"Decode error")
                    break
                try:
                    payload = json.loads(msg.data)
                except ValueError:
                    await ws.close(code=4002, message=b"Decode error")
                    break
                await self._gateway_message(conn, payload)
        finally:
            conn.closed = True
            if conn.session is not None and conn.session._conn is conn:
                conn.session._conn = None
            await self._notify()
        return ws

    async def _gateway_message(self, conn: _GatewayConnection, payload: dict[str, Any]) -> None:
        op = payload.get("op")
        data: Any = payload.get("d")
        redacted = json.loads(json.dumps(payload))
        if isinstance(redacted.get("d"), dict) and "token" in redacted["d"]:
            redacted["d"]["token"] = "***"
        self.gateway_received.append(redacted)

        if op == 1:  # heartbeat
            await conn.send({"op": 11, "d": None, "s": None, "t": None})
            return
        if op == 2:  # identify
            if conn.session is not None:
                await conn.ws.close(code=4005, message=b"Already authenticated")
                return
            if not isinstance(data, dict) or data.get("token") != self.bot_token:
                await conn.ws.close(code=4004, message=b"Authentication failed")
                return
            intents = int(data.get("intents", 0) or 0)
            if (
                self.privileged_intents is not None
                and intents & PRIVILEGED_INTENTS & ~self.privileged_intents
            ):
                await conn.ws.close(code=4014, message=b"Disallowed intent(s)")
                return
            shard = data.get("shard")
            session = FakeGatewaySession(
                ordinal=len(self.sessions) + 1,
                session_id=secrets.token_hex(16),
                identify={k: v for k, v in data.items() if k != "token"},
                shard=(int(shard[0]), int(shard[1])) if shard else None,
                intents=intents,
            )
            self.sessions.append(session)
            conn.session = session
            session._conn = conn
            guilds = [g for g in self.guilds if session.handles_guild(g.id)]
            ready = {
                "v": 10,
                "user": {
                    **self.bot_user.to_payload(),
                    "verified": True,
                    "mfa_enabled": False,
                    "flags": 0,
                    "email": None,
                },
                "guilds": [{"id": str(g.id), "unavailable": True} for g in guilds],
                "session_id": session.session_id,
                "session_type": "normal",
                "resume_gateway_url": self.gateway_url,
                "application": {"id": str(self.application_id), "flags": 0},
                "private_channels": [],
                "relationships": [],
                "presences": [],
                "user_settings": {},
                "geo_ordered_rtc_regions": ["local"],
                "auth": {},
                "_trace": ["fake-discord"],
            }
            if session.shard is not None:
                ready["shard"] = list(session.shard)
            await self._dispatch(session, "READY", ready)
            if intents & INTENT_GUILDS or "intents" not in data:
                all_members = bool(intents & INTENT_GUILD_MEMBERS)
                for guild in guilds:
                    bot_member = guild.members.get(self.bot_user.id)
                    await self._dispatch(
                        session,
                        "GUILD_CREATE",
                        guild.to_payload(full=True, bot_member=bot_member, all_members=all_members),
                    )
            session.ready = True
            await self._notify()
            return
        if op == 6:  # resume
            sid = (data or {}).get("session_id")
            resumed = next((s for s in self.sessions if s.session_id == sid), None)
            if (
                not self.allow_resume
                or resumed is None
                or (data or {}).get("token") != self.bot_token
                or resumed.live
            ):
                await conn.send({"op": 9, "d": False, "s": None, "t": None})
                return
            conn.session = resumed
            resumed._conn = conn
            resumed.resumes += 1
            seq = int((data or {}).get("seq") or 0)
            for event in resumed.events:
                if event["s"] > seq:
                    await conn.send(event)
            await self._dispatch(resumed, "RESUMED", {"_trace": ["fake-discord"]})
            resumed.ready = True
            await self._notify()
            return
        if conn.session is None:
            await conn.ws.close(code=4003, message=b"Not authenticated")
            return
        if op == 8:  # request guild members
            target = self.get_guild(int(data.get("guild_id") or 0))
            if target is None:
                return
            members = list(target.members.values())
            user_ids = data.get("user_ids")
            if user_ids:
                wanted = {int(u) for u in (user_ids if isinstance(user_ids, list) else [user_ids])}
                members = [m for m in members if m.id in wanted]
            elif data.get("query"):
                members = [m for m in members if m.name.lower().startswith(str(data["query"]).lower())]
            limit = int(data.get("limit") or 0)
            if limit:
                members = members[:limit]
            chunk = {
                "guild_id": str(target.id),
                "members": [m.to_payload() for m in members],
                "chunk_index": 0,
                "chunk_count": 1,
                "not_found": [],
            }
            if data.get("nonce") is not None:
                chunk["nonce"] = data["nonce"]
            await self._dispatch(conn.session, "GUILD_MEMBERS_CHUNK", chunk)
            return
        # op 3 presence, op 4 voice state, ...: recorded only

    async def _dispatch(self, session: FakeGatewaySession, event: str, data: dict[str, Any]) -> None:
        session.seq += 1
        frame = {"op": 0, "t": event, "s": session.seq, "d": data}
        session.events.append(frame)
        conn = session._conn
        if conn is not None and not conn.closed:
            await conn.send(frame)

    def _sessions_for_guild(self, guild_id: int | None) -> list[FakeGatewaySession]:
        return [
            s for s in self.sessions if s.ready and s.live and (guild_id is None or s.handles_guild(guild_id))
        ]

    async def _dispatch_guild_event(
        self, guild_id: int | None, event: str, data: dict[str, Any], intent: int
    ) -> None:
        for session in self._sessions_for_guild(guild_id):
            if session.intents & intent or "intents" not in session.identify:
                await self._dispatch(session, event, data)

    # ------------------------------------------------------------------ test driving ------
    def _resolve_member(self, guild: FakeGuild | None, user: FakeMember | FakeUser) -> FakeMember | FakeUser:
        if isinstance(user, FakeMember) or guild is None:
            return user
        member = guild.members.get(user.id)
        if member is None:
            raise ValueError(f"user {user.name!r} is not a member of guild {guild.name!r}")
        return member

    def synced_command(self, guild: FakeGuild | None, name: str, type_: int = 1) -> dict[str, Any] | None:
        """The synced definition of command `name` a member of `guild` sees (guild first), if any."""
        for cmd in (
            self.guild_commands.get(guild.id, []) if guild is not None else []
        ) + self.global_commands:
            if cmd["name"] == name and cmd.get("type", 1) == type_:
                return cmd
        return None

    def _check_command_visible(self, guild: FakeGuild | None, user: FakeMember | FakeUser, name: str) -> None:
        # Discord hides a command whose default_member_permissions the member lacks (the owner and
        # administrators see everything); Server Settings -> Integrations can override per member.
        cmd = self.synced_command(guild, name)
        if guild is None or cmd is None or cmd.get("default_member_permissions") is None:
            return
        member = self._resolve_member(guild, user)
        assert isinstance(member, FakeMember)
        override = self.command_overrides.get((guild.id, name, member.id))
        if override is not None:
            if override:
                return
            raise CommandHidden(f"/{name} is disabled for {member.name!r} by an Integrations override")
        required = int(cmd["default_member_permissions"])
        perms = member.permissions
        if guild.owner_id == member.id or perms & ADMINISTRATOR:
            return
        # "0" hides the command from everyone but administrators.
        if required and perms & required == required:
            return
        raise CommandHidden(
            f"/{name} needs permissions {required:#x} (default_member_permissions); {member.name!r} has "
            f"{perms:#x}: Discord does not show it to them"
        )

    def _command_id(self, guild: FakeGuild | None, name: str, type_: int = 1) -> tuple[int, int | None]:
        """(command id, guild id of the command if it is a guild command)."""
        if guild is not None:
            for cmd in self.guild_commands.get(guild.id, []):
                if cmd["name"] == name and cmd.get("type", 1) == type_:
                    return int(cmd["id"]), guild.id
        for cmd in self.global_commands:
            if cmd["name"] == name and cmd.get("type", 1) == type_:
                return int(cmd["id"]), None
        key = (None, name, type_)
        if key not in self._command_ids:
            self._command_ids[key] = snowflake_at(time.time() - 3600)
        return self._command_ids[key], None

    def _build_options(
        self,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
        guild: FakeGuild | None,
        channel: FakeChannel,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        resolved: dict[str, dict[str, Any]] = {}
        out: list[dict[str, Any]] = []
        if options is None:
            return out, resolved
        if isinstance(options, Mapping):
            items = [{"name": k, "value": v} for k, v in options.items()]
        else:
            items = [dict(o) for o in options]
        for item in items:
            value = item.get("value")
            if isinstance(value, Mapping) and "value" in value:  # {"name": {"type": 4, "value": 3}}
                item = {**item, **value}
                value = item["value"]
            opt: dict[str, Any] = {"name": item["name"]}
            explicit = item.get("type")
            if isinstance(value, bool):
                opt.update(type=explicit or 5, value=value)
            elif isinstance(value, int):
                opt.update(type=explicit or 4, value=value)
            elif isinstance(value, float):
                opt.update(type=explicit or 10, value=value)
            elif isinstance(value, (FakeMember, FakeUser)):
                opt.update(type=explicit or 6, value=str(value.id))
                user = value.user if isinstance(value, FakeMember) else value
                resolved.setdefault("users", {})[str(user.id)] = user.to_payload()
                member = (
                    value
                    if isinstance(value, FakeMember)
                    else (guild.members.get(user.id) if guild else None)
                )
                if member is not None:
                    resolved.setdefault("members", {})[str(user.id)] = member.to_payload(
                        with_user=False, with_permissions=True
                    )
            elif isinstance(value, FakeChannel):
                opt.update(type=explicit or 7, value=str(value.id))
                payload = value.to_payload()
                payload["permissions"] = str(value.bot_permissions)
                resolved.setdefault("channels", {})[str(value.id)] = payload
            elif isinstance(value, FakeRole):
                opt.update(type=explicit or 8, value=str(value.id))
                resolved.setdefault("roles", {})[str(value.id)] = value.to_payload()
            elif isinstance(value, FakeUpload):
                att = self._store_attachment(value.filename, value.data, value.content_type, channel.id, None)
                opt.update(type=explicit or 11, value=str(att.id))
                payload = att.to_payload()
                payload["ephemeral"] = True
                resolved.setdefault("attachments", {})[str(att.id)] = payload
            else:
                opt.update(
                    type=explicit or 3,
                    value=str(value) if explicit in (None, 3) and value is not None else value,
                )
            if item.get("focused"):
                opt["focused"] = True
            if "options" in item:
                opt["options"] = item["options"]
            out.append(opt)
        return out, resolved

    def _base_interaction(
        self,
        *,
        type_: int,
        guild: FakeGuild | None,
        channel: FakeChannel,
        user: FakeMember | FakeUser,
        locale: str,
        age: float,
        attachment_size_limit: int | None,
        app_permissions: int | None,
        name: str | None = None,
        custom_id: str | None = None,
        message: FakeMessage | None = None,
    ) -> FakeInteraction:
        if not self._sessions_for_guild(guild.id if guild else None):
            raise RuntimeError("no bot is connected and READY on the fake gateway (await fake.wait_ready())")
        user = self._resolve_member(guild, user)
        iid = snowflake_at(time.time() - age)
        token = "aW50ZXJhY3Rpb246" + secrets.token_urlsafe(96)
        limit = (
            attachment_size_limit
            if attachment_size_limit is not None
            else (guild.upload_limit if guild else 10 * MiB)
        )
        perms = app_permissions if app_permissions is not None else channel.bot_permissions
        it = FakeInteraction(
            self,
            id=iid,
            token=token,
            type=type_,
            guild=guild,
            channel=channel,
            user=user,
            name=name,
            custom_id=custom_id,
            message=message,
            locale=locale,
            app_permissions=perms,
            attachment_size_limit=limit,
        )
        payload: dict[str, Any] = {
            "id": str(iid),
            "application_id": str(self.application_id),
            "type": type_,
            "token": token,
            "version": 1,
            "channel_id": str(channel.id),
            "channel": {**channel.to_payload(), "permissions": str(perms)},
            "app_permissions": str(perms),
            "locale": locale,
            "entitlements": [],
            "entitlement_sku_ids": [],
            "attachment_size_limit": limit,
            "context": 0 if guild else 1,
        }
        if guild is not None:
            assert isinstance(user, FakeMember)
            in_channel = channel.permissions_for(user)
            if not in_channel & VIEW_CHANNEL:
                raise ChannelHidden(
                    f"{user.name!r} cannot see #{channel.name}: Discord does not show it to them"
                )
            member = user.to_payload(with_permissions=True)
            # Discord: "total permissions of the member in the channel, including overwrites".
            member["permissions"] = str(in_channel)
            payload.update(
                {
                    "guild_id": str(guild.id),
                    "guild": {"id": str(guild.id), "locale": guild.preferred_locale, "features": []},
                    "guild_locale": guild.preferred_locale,
                    "member": member,
                    "authorizing_integration_owners": {"0": str(guild.id)},
                }
            )
        else:
            u = user.user if isinstance(user, FakeMember) else user
            payload["user"] = u.to_payload()
            payload["authorizing_integration_owners"] = {"0": str(u.id)}
        it.payload = payload
        return it

    async def _send_interaction(self, it: FakeInteraction) -> FakeInteraction:
        self.interactions.append(it)
        self._by_token[it.token] = it
        self._by_id[it.id] = it
        guild_id = it.guild.id if it.guild else None
        sessions = self._sessions_for_guild(guild_id)
        it.dispatched_at = time.monotonic()
        await self._dispatch(sessions[0], "INTERACTION_CREATE", it.payload)
        await self._notify()
        return it

    async def slash(
        self,
        guild: FakeGuild | None,
        channel: FakeChannel,
        user: FakeMember | FakeUser,
        name: str,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        locale: str = "en-US",
        age: float = 0.0,
        attachment_size_limit: int | None = None,
        app_permissions: int | None = None,
        subcommand: str | None = None,
    ) -> FakeInteraction:
        """Send a slash command (INTERACTION_CREATE type 2). ``subcommand``: "sub" or "group sub".

        Raises :class:`CommandHidden` when Discord would not even show the command to `user`: its
        synced ``default_member_permissions`` are more than the member has (and no Integrations
        override, see :meth:`override_command`, lets them)."""
        self._check_command_visible(guild, user, name)
        it = self._base_interaction(
            type_=IT_COMMAND,
            guild=guild,
            channel=channel,
            user=user,
            locale=locale,
            age=age,
            attachment_size_limit=attachment_size_limit,
            app_permissions=app_permissions,
            name=name,
        )
        it.payload["data"] = self._command_data(guild, channel, name, options, subcommand)
        return await self._send_interaction(it)

    def _command_data(
        self,
        guild: FakeGuild | None,
        channel: FakeChannel,
        name: str,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
        subcommand: str | None,
    ) -> dict[str, Any]:
        opts, resolved = self._build_options(options, guild, channel)
        if subcommand:
            parts = subcommand.split()
            if len(parts) == 1:
                opts = [{"name": parts[0], "type": 1, "options": opts}]
            elif len(parts) == 2:
                opts = [
                    {"name": parts[0], "type": 2, "options": [{"name": parts[1], "type": 1, "options": opts}]}
                ]
            else:
                raise ValueError("subcommand is 'sub' or 'group sub'")
        cmd_id, cmd_guild = self._command_id(guild, name)
        data: dict[str, Any] = {"id": str(cmd_id), "name": name, "type": 1, "options": opts}
        if cmd_guild is not None:
            data["guild_id"] = str(cmd_guild)
        if resolved:
            data["resolved"] = resolved
        return data

    async def autocomplete(
        self,
        guild: FakeGuild | None,
        channel: FakeChannel,
        user: FakeMember | FakeUser,
        name: str,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
        focused: str,
        *,
        locale: str = "en-US",
        subcommand: str | None = None,
    ) -> FakeInteraction:
        """Send an autocomplete interaction (type 4); the bot's choices land in ``it.choices``."""
        self._check_command_visible(guild, user, name)
        it = self._base_interaction(
            type_=IT_AUTOCOMPLETE,
            guild=guild,
            channel=channel,
            user=user,
            locale=locale,
            age=0.0,
            attachment_size_limit=None,
            app_permissions=None,
            name=name,
        )
        data = self._command_data(guild, channel, name, options, subcommand)
        leaf = data["options"]
        while leaf and leaf[0].get("type") in (1, 2):
            leaf = leaf[0]["options"]
        found = False
        for opt in leaf:
            if opt["name"] == focused:
                opt["focused"] = True
                if not isinstance(opt.get("value"), str):
                    opt["value"] = str(opt.get("value"))
                found = True
        if not found:
            leaf.append({"name": focused, "type": 3, "value": "", "focused": True})
        it.payload["data"] = data
        return await self._send_interaction(it)

    async def click(
        self,
        message: FakeMessage,
        custom_id: str,
        user: FakeMember | FakeUser,
        *,
        locale: str = "en-US",
        component_type: int = 2,
        values: Sequence[str] | None = None,
        age: float = 0.0,
        app_permissions: int | None = None,
        attachment_size_limit: int | None = None,
        crafted: bool = False,
    ) -> FakeInteraction:
        """Click a component of a stored message (INTERACTION_CREATE type 3).

        ``crafted``: send `custom_id` whatever the message's components are, as a forged request
        would (a bot must not trust what a custom id says). discord.py only runs a click whose
        custom id is on the message that comes with it, so the message sent along carries the
        crafted id in place of the first component of that type: the most a forger could show."""
        if message.deleted:
            raise ValueError(f"message {message.id} was deleted")
        comp = next(
            (c for c in _walk_components(message.components) if c.get("custom_id") == custom_id), None
        )
        if comp is None and not crafted:
            raise ValueError(
                f"message {message.id} has no component {custom_id!r} (has {message.custom_ids()})"
            )
        if comp is not None and comp.get("disabled") and not crafted:
            raise ValueError(f"component {custom_id!r} is disabled")
        channel = self.channels.get(message.channel_id) or self._dm_channels.get(message.channel_id)
        elsewhere = channel is None and message.channel_id in self._elsewhere
        if elsewhere:
            # A message a person's own install posted where the bot is not (a group DM): only that
            # install's interactions reach it, with the permissions Discord grants it there.
            channel = self._elsewhere[message.channel_id]
            app_permissions = USER_INSTALL_PERMISSIONS if app_permissions is None else app_permissions
        if channel is None:
            raise ValueError(f"unknown channel {message.channel_id}")
        guild = None if elsewhere else channel.guild
        it = self._base_interaction(
            type_=IT_COMPONENT,
            guild=guild,
            channel=channel,
            user=user,
            locale=locale,
            age=age,
            attachment_size_limit=attachment_size_limit,
            app_permissions=app_permissions,
            custom_id=custom_id,
            message=message,
        )
        data: dict[str, Any] = {"custom_id": custom_id, "component_type": component_type}
        if values is not None:
            data["values"] = list(values)
        it.payload["data"] = data
        it.payload["message"] = message.to_payload()
        if elsewhere:
            if channel.guild is not None:
                raise ValueError("clicks in a server without the bot are not modelled")
            u = user.user if isinstance(user, FakeMember) else user
            owners = (message.interaction_metadata or {}).get("authorizing_integration_owners")
            it.payload["context"] = 2
            it.payload["authorizing_integration_owners"] = dict(owners or {"1": str(u.id)})
        if comp is None:  # crafted
            it.payload["message"]["components"] = _with_custom_id(
                message.components, custom_id, component_type
            )
        return await self._send_interaction(it)

    async def submit_modal(
        self, source: FakeInteraction, values: Mapping[str, str], *, user: FakeMember | FakeUser | None = None
    ) -> FakeInteraction:
        """Submit the modal the bot answered ``source`` with (type 5 MODAL_SUBMIT)."""
        modal = source.modal
        if modal is None:
            raise ValueError(f"{source!r} was not answered with a modal")
        _check_modal_values(modal, values)

        def convert(comps: list[dict[str, Any]]) -> list[dict[str, Any]]:
            out = []
            for c in comps:
                if c.get("type") == 1:
                    out.append({"type": 1, "components": convert(c.get("components", []))})
                elif c.get("type") == 18 and isinstance(c.get("component"), dict):
                    out.append({"type": 18, "component": convert([c["component"]])[0]})
                elif c.get("custom_id"):
                    out.append(
                        {
                            "type": c.get("type", 4),
                            "custom_id": c["custom_id"],
                            "value": values.get(c["custom_id"], ""),
                        }
                    )
            return out

        it = self._base_interaction(
            type_=IT_MODAL,
            guild=source.guild,
            channel=source.channel,
            user=user or source.user,
            locale=source.locale,
            age=0.0,
            attachment_size_limit=None,
            app_permissions=None,
            custom_id=modal.get("custom_id"),
            message=source.message,
        )
        it.payload["data"] = {
            "custom_id": modal.get("custom_id"),
            "components": convert(modal.get("components", [])),
        }
        if source.message is not None:
            it.payload["message"] = source.message.to_payload()
        return await self._send_interaction(it)

    async def post_message(
        self, channel: FakeChannel, author: FakeMember | FakeUser, content: str, *, age: float = 0.0
    ) -> FakeMessage:
        """A user posts a message (stored, and MESSAGE_CREATE if the bot's intents want it)."""
        user = author.user if isinstance(author, FakeMember) else author
        msg = FakeMessage(
            id=snowflake_at(time.time() - age),
            channel_id=channel.id,
            guild_id=channel.guild_id,
            author=user,
            content=content,
            created_at=time.time() - age,
        )
        self._apply_mentions(msg, content, None, notify=True)
        self.messages[msg.id] = msg
        msg.history.append(
            {
                "action": "create",
                "via": "user",
                "payload": {"content": content},
                "files": [],
                "time": time.time(),
            }
        )
        await self._emit_message_event("MESSAGE_CREATE", msg)
        await self._notify()
        return msg

    # ------------------------------------------------------------------ HTTP plumbing -----
    def _build_routes(self) -> list[tuple[str, re.Pattern[str], Callable[[_Call], Any], bool, str]]:
        table: list[tuple[str, str, Callable[[_Call], Any], bool]] = [
            ("GET", "/users/@me", self._r_me, True),
            ("GET", "/users/{user_id}", self._r_user, True),
            ("POST", "/users/@me/channels", self._r_create_dm, True),
            ("GET", "/oauth2/applications/@me", self._r_app_info, True),
            ("GET", "/applications/@me", self._r_app_info, True),
            ("GET", "/gateway", self._r_gateway, False),
            ("GET", "/gateway/bot", self._r_gateway_bot, True),
            ("GET", "/applications/{app_id}/commands", self._r_get_commands, True),
            ("PUT", "/applications/{app_id}/commands", self._r_put_commands, True),
            ("GET", "/applications/{app_id}/guilds/{guild_id}/commands", self._r_get_commands, True),
            ("PUT", "/applications/{app_id}/guilds/{guild_id}/commands", self._r_put_commands, True),
            ("POST", "/interactions/{interaction_id}/{token}/callback", self._r_callback, False),
            ("GET", "/webhooks/{app_id}/{token}/messages/{message_id}", self._r_webhook_get, False),
            ("PATCH", "/webhooks/{app_id}/{token}/messages/{message_id}", self._r_webhook_edit, False),
            ("DELETE", "/webhooks/{app_id}/{token}/messages/{message_id}", self._r_webhook_delete, False),
            ("POST", "/webhooks/{app_id}/{token}", self._r_webhook_execute, False),
            ("GET", "/channels/{channel_id}", self._r_get_channel, True),
            ("POST", "/channels/{channel_id}/messages", self._r_channel_send, True),
            ("GET", "/channels/{channel_id}/messages", self._r_channel_history, True),
            ("GET", "/channels/{channel_id}/messages/{message_id}", self._r_channel_get_message, True),
            ("PATCH", "/channels/{channel_id}/messages/{message_id}", self._r_channel_edit, True),
            ("DELETE", "/channels/{channel_id}/messages/{message_id}", self._r_channel_delete, True),
            ("POST", "/channels/{channel_id}/typing", self._r_typing, True),
            ("GET", "/guilds/{guild_id}", self._r_get_guild, True),
            ("GET", "/guilds/{guild_id}/channels", self._r_get_guild_channels, True),
            ("GET", "/guilds/{guild_id}/members/{user_id}", self._r_get_member, True),
        ]
        routes = []
        for method, template, handler, auth in table:
            pattern = "^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$"
            routes.append((method, re.compile(pattern), handler, auth, template))
        return routes

    async def _attachment_handler(self, request: web.Request) -> web.StreamResponse:
        try:
            att = self.attachments[int(request.match_info["attachment_id"])]
        except (KeyError, ValueError):
            return web.Response(status=404, text="Not Found")
        return web.Response(
            body=att.data, headers={"Content-Type": att.content_type or "application/octet-stream"}
        )

    async def _api_handler(self, request: web.Request) -> web.StreamResponse:
        full_path = request.path
        record = FakeRequest(
            method=request.method,
            path=full_path,
            query=dict(request.query),
            time=time.time(),
            monotonic=time.monotonic(),
        )
        self.requests.append(record)
        extra_headers: dict[str, str] = {}
        uploads: list[_Upload] = []
        try:
            record.json, record.payload_json, uploads = await _read_body(request)
            record.files = [
                {
                    "field": u.field,
                    "filename": u.filename,
                    "size": len(u.data),
                    "content_type": u.content_type,
                }
                for u in uploads
            ]
            m = re.match(r"^/api/v(\d+)(/.*)$", full_path)
            route = None
            if m and m.group(1) in ("9", "10"):
                sub = m.group(2).rstrip("/") or "/"
                for method, pattern, handler, auth, template in self._routes:
                    if method != request.method:
                        continue
                    mm = pattern.match(sub)
                    if mm:
                        route = (handler, auth, template, mm.groupdict(), sub)
                        break
            if route is None:
                log.warning("fake discord: unknown route %s %s", request.method, full_path)
                raise ApiError(404, 0, "Unknown route")
            handler, auth, template, params, sub = route
            record.route = f"{request.method} {template}"
            record.authorized = request.headers.get("Authorization") == f"Bot {self.bot_token}"
            if auth and not record.authorized:
                raise ApiError(*UNAUTHORIZED)
            self._apply_injection(request.method, sub, uploads=bool(uploads))
            if self.validate_requests:
                self._check_spec(request.method, sub, record)
            call = _Call(
                request=request,
                method=request.method,
                path=sub,
                params=params,
                query=dict(request.query),
                body=record.body,
                uploads=uploads,
                record=record,
            )
            status, body = await handler(call)
            if status < 400:
                self._lose_answer(request.method, sub, record)
        except _Reset:
            record.status = 0
            if request.transport is not None:
                request.transport.abort()
            await self._notify()
            return web.Response(status=500)
        except ApiError as err:
            status, body = err.status, err.body()
            extra_headers = err.headers
            record.code = err.code
        except Exception as exc:  # a bug in the fake: 501 (discord.py does not retry it), and keep it
            log.exception("fake discord handler crashed on %s %s", request.method, full_path)
            self.fake_errors.append(f"{request.method} {full_path}: {exc!r}")
            status, body = 501, {"message": f"fake discord crashed: {exc!r}", "code": 0}
        record.status = status
        record.response = body
        if status >= 400:
            self._attach_error_to_interaction(record)
        await self._notify()
        return _json_response(status, body, extra_headers)

    def _check_spec(self, method: str, path: str, record: FakeRequest) -> None:
        """Refuse, as Discord does, a request whose body or query the spec refuses."""
        check = spec().check(method, path, query=record.query, body=record.body)
        if not check.in_spec:
            # A route the fake serves but the spec lacks: worth knowing, not worth failing the request.
            violation = SpecViolation(method, path, check.template, [], refused=False)
            log.warning("fake discord: %s", violation)
            self.spec_violations.append(violation)
            return
        if check.problems:
            violation = SpecViolation(method, path, check.template, check.problems, refused=True)
            log.warning("fake discord: the spec refuses %s", violation)
            self.spec_violations.append(violation)
            raise ApiError(400, 50035, "Invalid Form Body", errors=form_errors(check.problems))

    def _attach_error_to_interaction(self, record: FakeRequest) -> None:
        m = re.search(r"/(?:interactions/(\d+)|webhooks/\d+)/([^/]+)", record.path)
        if not m:
            return
        it = self._by_token.get(m.group(2))
        if it is None and m.group(1):
            it = self._by_id.get(int(m.group(1)))
        if it is not None:
            it.errors.append(record)

    def _apply_injection(self, method: str, path: str, *, uploads: bool = False) -> None:
        key = f"{method} {path}"
        for inj in self._injections:
            needle, remaining, kind, args, uploads_only = inj
            if remaining <= 0 or needle not in key and needle not in f"{method} /api/v10{path}":
                continue
            if uploads_only and not uploads:
                continue
            inj[1] -= 1
            if kind == "429":
                retry_after, is_global, via = args
                headers = {
                    "X-RateLimit-Limit": "5",
                    "X-RateLimit-Remaining": "0",
                    "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
                    "X-RateLimit-Reset-After": f"{retry_after:.3f}",
                    "X-RateLimit-Bucket": "fake" + str(abs(hash(path)) % 10**8),
                    "X-RateLimit-Scope": "global" if is_global else "user",
                    "Retry-After": str(max(1, int(retry_after + 0.999))),
                }
                if is_global:
                    headers["X-RateLimit-Global"] = "true"
                if via:
                    headers["Via"] = "1.1 google"
                raise ApiError(
                    429,
                    0,
                    "You are being rate limited.",
                    headers=headers,
                    body={
                        "message": "You are being rate limited.",
                        "retry_after": retry_after,
                        "global": is_global,
                    },
                )
            if kind == "reset":
                raise _Reset()
            status, code, message = args
            raise ApiError(status, code, message or f"{status}: injected failure")
        self._injections[:] = [i for i in self._injections if i[1] > 0]

    def _lose_answer(self, method: str, path: str, record: FakeRequest) -> None:
        """Raise the lost answer of the first ``lose_answer_next`` that matches a done request."""
        key = f"{method} {path}"
        for loss in self._losses:
            needle, remaining, status, when = loss
            if remaining <= 0 or needle not in key and needle not in f"{method} /api/v10{path}":
                continue
            if when is not None and not when(record):
                continue
            loss[1] -= 1
            self._losses[:] = [x for x in self._losses if x[1] > 0]
            self.lost_answers.append(record)
            if status is None:
                raise _Reset()
            raise ApiError(status, 0, f"{status}: the answer was lost after the request was done")

    # ------------------------------------------------------------------ REST: identity ----
    async def _r_me(self, call: _Call) -> tuple[int, Any]:
        return 200, {
            **self.bot_user.to_payload(),
            "verified": True,
            "mfa_enabled": False,
            "flags": 0,
            "email": None,
        }

    async def _r_user(self, call: _Call) -> tuple[int, Any]:
        user = self.users.get(int(call.params["user_id"])) if call.params["user_id"].isdigit() else None
        if user is None:
            raise _unknown("User", 10013)
        return 200, user.to_payload()

    async def _r_app_info(self, call: _Call) -> tuple[int, Any]:
        return 200, {
            "id": str(self.application_id),
            "name": self.bot_user.name,
            "icon": None,
            "description": "Fake application",
            "summary": "",
            "type": None,
            "bot_public": True,
            "bot_require_code_grant": False,
            "verify_key": "0" * 64,
            "flags": 0,
            "owner": self.app_owner.to_payload(),
            "team": None,
            "bot": self.bot_user.to_payload(),
            "interactions_endpoint_url": None,
            "redirect_uris": [],
            "tags": [],
            "approximate_guild_count": len(self.guilds),
            "integration_types_config": {"0": {}},
        }

    async def _r_gateway(self, call: _Call) -> tuple[int, Any]:
        return 200, {"url": self.gateway_url}

    async def _r_gateway_bot(self, call: _Call) -> tuple[int, Any]:
        return 200, {
            "url": self.gateway_url,
            "shards": self.recommended_shards,
            "session_start_limit": {
                "total": 1000,
                "remaining": 999,
                "reset_after": 86400000,
                "max_concurrency": 1,
            },
        }

    # ------------------------------------------------------------------ REST: commands ----
    def _check_app(self, call: _Call) -> FakeGuild | None:
        if call.params["app_id"] != str(self.application_id):
            raise ApiError(403, 50001, "Missing Access")
        gid = call.params.get("guild_id")
        if gid is None:
            return None
        guild = self.get_guild(int(gid)) if gid.isdigit() else None
        if guild is None:
            raise ApiError(403, 50001, "Missing Access")
        return guild

    async def _r_get_commands(self, call: _Call) -> tuple[int, Any]:
        guild = self._check_app(call)
        return 200, self.commands_for(guild)

    async def _r_put_commands(self, call: _Call) -> tuple[int, Any]:
        guild = self._check_app(call)
        body = call.body
        if not isinstance(body, list):
            raise _form_error([], "LIST_TYPE_CONVERT", "Only iterables may be used in a ListType")
        if len(body) > 100:
            raise _form_error([], "BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.")
        stored = []
        seen: set[tuple[str, int]] = set()
        for i, cmd in enumerate(body):
            _validate_command(cmd, [i])
            type_ = int(cmd.get("type", 1))
            if (cmd["name"], type_) in seen:
                raise _form_error(
                    [i, "name"],
                    "APPLICATION_COMMANDS_DUPLICATE_NAME",
                    "Application command names must be unique",
                )
            seen.add((cmd["name"], type_))
            key = (guild.id if guild else None, cmd["name"], type_)
            if key not in self._command_ids:
                self._command_ids[key] = snowflake_at(time.time())
            out = {
                "id": str(self._command_ids[key]),
                "application_id": str(self.application_id),
                "version": str(snowflake_at(time.time())),
                "default_member_permissions": None,
                "type": type_,
                "description": "",
                "name_localizations": None,
                "description_localizations": None,
                "dm_permission": True,
                "contexts": None,
                "integration_types": [0],
                "nsfw": False,
                "options": [],
                **cmd,
            }
            out["type"] = type_
            # Discord answers with the permission bits as a string (or null: everyone may use it).
            perms = cmd.get("default_member_permissions")
            out["default_member_permissions"] = None if perms is None else str(int(perms))
            if guild is not None:
                out["guild_id"] = str(guild.id)
            stored.append(out)
        if guild is None:
            self.global_commands = stored
        else:
            self.guild_commands[guild.id] = stored
        self.command_syncs += 1
        return 200, stored

    # ------------------------------------------------------------------ REST: guilds ------
    def _guild(self, call: _Call) -> FakeGuild:
        gid = call.params["guild_id"]
        guild = self.get_guild(int(gid)) if gid.isdigit() else None
        if guild is None:
            raise _unknown("Guild", 10004)
        return guild

    async def _r_get_guild(self, call: _Call) -> tuple[int, Any]:
        guild = self._guild(call)
        data = guild.to_payload(full=False)
        if _truthy(call.query.get("with_counts")):
            data["approximate_member_count"] = len(guild.members)
            data["approximate_presence_count"] = len(guild.members)
        return 200, data

    async def _r_get_guild_channels(self, call: _Call) -> tuple[int, Any]:
        return 200, [c.to_payload() for c in self._guild(call).channels]

    async def _r_get_member(self, call: _Call) -> tuple[int, Any]:
        guild = self._guild(call)
        uid = call.params["user_id"]
        member = guild.members.get(int(uid)) if uid.isdigit() else None
        if member is None:
            raise _unknown("Member", 10007)
        return 200, member.to_payload()

    # ------------------------------------------------------------------ REST: channels ----
    def _channel(self, call: _Call) -> FakeChannel:
        cid = call.params["channel_id"]
        channel = None
        if cid.isdigit():
            channel = self.channels.get(int(cid)) or self._dm_channels.get(int(cid))
        if channel is None:
            if cid.isdigit() and int(cid) in self._elsewhere:
                raise ApiError(403, 50001, "Missing Access")  # it exists; the bot is not in it
            raise _unknown("Channel", 10003)
        if channel.guild is not None and not channel.bot_permissions & VIEW_CHANNEL:
            raise ApiError(403, 50001, "Missing Access")
        return channel

    def _channel_message(self, call: _Call, channel: FakeChannel) -> FakeMessage:
        mid = call.params["message_id"]
        msg = self.messages.get(int(mid)) if mid.isdigit() else None
        if msg is None or msg.channel_id != channel.id or msg.deleted or msg.ephemeral:
            raise _unknown("Message", 10008)
        return msg

    async def _r_get_channel(self, call: _Call) -> tuple[int, Any]:
        return 200, self._channel(call).to_payload()

    async def _r_typing(self, call: _Call) -> tuple[int, Any]:
        self._channel(call)
        return 204, None

    async def _r_create_dm(self, call: _Call) -> tuple[int, Any]:
        rid = str((call.body or {}).get("recipient_id", ""))
        user = self.users.get(int(rid)) if rid.isdigit() else None
        if user is None:
            raise _form_error(["recipient_id"], "NUMBER_TYPE_COERCE", f'Value "{rid}" is not snowflake.')
        if user.refuses_dm_channel:
            raise ApiError(403, 50007, "Cannot send messages to this user")
        return 200, self.dm_channel(user).to_payload()

    async def _r_channel_history(self, call: _Call) -> tuple[int, Any]:
        channel = self._channel(call)
        msgs = sorted(self.messages_in(channel), key=lambda m: m.id, reverse=True)
        before, after = call.query.get("before"), call.query.get("after")
        if before and before.isdigit():
            msgs = [m for m in msgs if m.id < int(before)]
        if after and after.isdigit():
            msgs = [m for m in msgs if m.id > int(after)]
        limit = int(call.query.get("limit", "50") or 50)
        return 200, [m.to_payload() for m in msgs[:limit]]

    async def _r_channel_get_message(self, call: _Call) -> tuple[int, Any]:
        channel = self._channel(call)
        return 200, self._channel_message(call, channel).to_payload()

    def _check_send(self, channel: FakeChannel, call: _Call) -> None:
        if channel.type == 1:
            assert channel.recipient is not None
            if not channel.recipient.accepts_dms or channel.recipient.bot:
                raise ApiError(403, 50007, "Cannot send messages to this user")
            return
        perms = channel.bot_permissions
        # Send Messages does not cover threads: Send Messages in Threads does (Discord's permissions).
        if not perms & (SEND_MESSAGES if channel.parent is None else SEND_MESSAGES_IN_THREADS):
            raise ApiError(403, 50013, "Missing Permissions")
        if call.uploads and not perms & ATTACH_FILES:
            raise ApiError(403, 50013, "Missing Permissions")
        if channel.archived and channel.locked and not perms & MANAGE_THREADS:
            raise ApiError(400, 50083, "Thread is archived")

    def _channel_upload_limit(self, channel: FakeChannel) -> int:
        return channel.guild.upload_limit if channel.guild else 10 * MiB

    async def _r_channel_send(self, call: _Call) -> tuple[int, Any]:
        channel = self._channel(call)
        self._check_upload_sizes(call.uploads, self._channel_upload_limit(channel))
        self._check_send(channel, call)
        body = call.body or {}
        nonce = body.get("nonce")
        enforced = nonce is not None and body.get("enforce_nonce") is True
        key = (channel.id, self.bot_user.id, str(nonce))
        earlier = self._by_nonce.get(key) if enforced else None
        if earlier is not None and time.time() - earlier.created_at <= self.nonce_window:
            # Discord: "If another message was created by the same author with the same nonce,
            # that message will be returned and no new message will be created" (the docs say
            # nothing of a deleted one: it is returned too, as it was).
            return 200, earlier.to_payload() | {"nonce": earlier.nonce}
        if channel.archived:  # a message reopens a closed thread
            channel.archived = channel.locked = False
            await self._thread_changed(channel)
        msg = FakeMessage(
            id=snowflake_at(time.time()),
            channel_id=channel.id,
            guild_id=channel.guild_id,
            author=self.bot_user,
            created_at=time.time(),
            nonce=None if nonce is None else str(nonce),
        )
        self._apply_payload(msg, body, call.uploads, creating=True, via="channel")
        msg.flags = int(body.get("flags") or 0) & _SENDABLE_FLAGS
        self.messages[msg.id] = msg
        if enforced:
            self._by_nonce[key] = msg
        await self._emit_message_event("MESSAGE_CREATE", msg)
        return 200, msg.to_payload() | ({"nonce": msg.nonce} if msg.nonce is not None else {})

    async def _r_channel_edit(self, call: _Call) -> tuple[int, Any]:
        channel = self._channel(call)
        msg = self._channel_message(call, channel)
        if msg.author.id != self.bot_user.id:
            raise ApiError(403, 50005, "Cannot edit a message authored by another user")
        self._check_open(channel)
        self._check_upload_sizes(call.uploads, self._channel_upload_limit(channel))
        if call.uploads and channel.guild is not None and not channel.bot_permissions & ATTACH_FILES:
            raise ApiError(403, 50013, "Missing Permissions")
        self._check_edit_age(msg)
        self._apply_payload(msg, call.body or {}, call.uploads, creating=False, via="channel")
        await self._emit_message_event("MESSAGE_UPDATE", msg)
        return 200, msg.to_payload()

    async def _r_channel_delete(self, call: _Call) -> tuple[int, Any]:
        channel = self._channel(call)
        msg = self._channel_message(call, channel)
        if msg.author.id != self.bot_user.id and not channel.bot_permissions & MANAGE_MESSAGES:
            raise ApiError(403, 50013, "Missing Permissions")
        await self._delete_message(msg, via="channel")
        return 204, None

    # ------------------------------------------------------------------ REST: interactions -
    def _interaction_for_token(self, call: _Call) -> FakeInteraction:
        """Validate /webhooks/{app}/{token} access."""
        it = self._by_token.get(call.params["token"])
        if it is None or call.params["app_id"] != str(self.application_id):
            raise _unknown("Webhook", 10015)
        if it.token_expired:
            raise ApiError(401, 50027, "Invalid Webhook Token")
        if not it.acknowledged:
            raise _unknown("Webhook", 10015)
        return it

    async def _r_callback(self, call: _Call) -> tuple[int, Any]:
        iid = call.params["interaction_id"]
        it = self._by_id.get(int(iid)) if iid.isdigit() else None
        if it is None:
            raise _unknown("interaction", 10062)
        if call.params["token"] != it.token or it.token_expired:
            raise ApiError(401, 50027, "Invalid Webhook Token")
        if it.acknowledged:
            raise ApiError(400, 40060, "Interaction has already been acknowledged.")
        assert it.dispatched_at is not None
        latency = time.monotonic() - it.dispatched_at
        if latency > self.ack_deadline:
            raise _unknown("interaction", 10062)
        body = call.body or {}
        cb_type = body.get("type")
        data = body.get("data")
        if cb_type not in _VALID_CALLBACKS.get(it.type, set()):
            raise _form_error(
                ["type"], "INTERACTION_RESPONSE_TYPE_INVALID", f"Invalid interaction response type {cb_type}"
            )
        if call.uploads:
            self._check_upload_sizes(call.uploads, it.attachment_size_limit)
        if cb_type == CB_AUTOCOMPLETE:
            choices = (data or {}).get("choices", [])
            if len(choices) > 25:
                raise _form_error(
                    ["data", "choices"], "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length."
                )
            for i, ch in enumerate(choices):
                if not 1 <= len(str(ch.get("name", ""))) <= 100:
                    raise _form_error(
                        ["data", "choices", i, "name"],
                        "BASE_TYPE_BAD_LENGTH",
                        "Must be between 1 and 100 in length.",
                    )

        resource_message: FakeMessage | None = None
        now = time.time()
        if cb_type in (CB_MESSAGE, CB_DEFERRED_MESSAGE):
            msg = self._new_interaction_message(it, followup=False)
            flags = int((data or {}).get("flags") or 0)
            if cb_type == CB_MESSAGE:
                self._apply_payload(msg, data or {}, call.uploads, creating=True, via="callback")
                msg.flags = flags & (_SENDABLE_FLAGS | FLAG_EPHEMERAL)
            else:
                msg.flags = (flags & FLAG_EPHEMERAL) | FLAG_LOADING
                msg.history.append(
                    {"action": "create", "via": "callback", "payload": data, "files": [], "time": now}
                )
            for a in msg.attachments:
                a.ephemeral = msg.ephemeral
            it.original = msg
            self.messages[msg.id] = msg
            resource_message = msg
            await self._emit_message_event("MESSAGE_CREATE", msg)
        elif cb_type == CB_UPDATE:
            target = self._component_message(it)
            self._check_edit_age(target)
            self._apply_payload(target, data or {}, call.uploads, creating=False, via="callback")
            it.original = target
            resource_message = target
            await self._emit_message_event("MESSAGE_UPDATE", target)
        elif cb_type == CB_DEFERRED_UPDATE:
            it.original = self._component_message(it)

        it.callbacks.append((cb_type, data))
        it.ack_latency = latency
        interaction_info: dict[str, Any] = {
            "id": str(it.id),
            "type": it.type,
            "response_message_loading": cb_type == CB_DEFERRED_MESSAGE,
            "response_message_ephemeral": bool(resource_message is not None and resource_message.ephemeral),
        }
        if resource_message is not None:
            interaction_info["response_message_id"] = str(resource_message.id)
        response: dict[str, Any] = {"interaction": interaction_info}
        if cb_type in (CB_MESSAGE, CB_DEFERRED_MESSAGE, CB_UPDATE) and resource_message is not None:
            response["resource"] = {"type": cb_type, "message": resource_message.to_payload()}
        if _truthy(call.query.get("with_response")):
            return 200, response
        return 204, None

    def _component_message(self, it: FakeInteraction) -> FakeMessage:
        if it.message is None or it.message.deleted:
            raise _unknown("Message", 10008)
        return it.message

    def _new_interaction_message(self, it: FakeInteraction, *, followup: bool) -> FakeMessage:
        user = it.user.user if isinstance(it.user, FakeMember) else it.user
        meta: dict[str, Any] = {
            "id": str(it.id),
            "type": it.type,
            "user": user.to_payload(),
            "authorizing_integration_owners": dict(it.payload.get("authorizing_integration_owners", {})),
        }
        if it.type == IT_COMMAND and it.name:
            meta["name"] = it.name
            meta["command_type"] = 1
        if it.type == IT_COMPONENT and it.message is not None:
            meta["interacted_message_id"] = str(it.message.id)
        if followup and it.original is not None:
            meta["original_response_message_id"] = str(it.original.id)
        return FakeMessage(
            id=snowflake_at(time.time()),
            channel_id=it.channel.id,
            guild_id=it.guild.id if it.guild else None,
            author=self.bot_user,
            type=20 if it.type == IT_COMMAND else (19 if it.type == IT_COMPONENT else 0),
            created_at=time.time(),
            webhook_id=self.application_id,
            application_id=self.application_id,
            interaction=it,
            interaction_metadata=meta,
        )

    def _webhook_message(self, it: FakeInteraction, message_id: str) -> FakeMessage:
        if message_id == "@original":
            msg = it.original
        else:
            mid = int(message_id) if message_id.isdigit() else -1
            msg = next((m for m in it.messages() if m.id == mid), None)
        if msg is None or msg.deleted:
            raise _unknown("Message", 10008)
        return msg

    async def _r_webhook_get(self, call: _Call) -> tuple[int, Any]:
        it = self._interaction_for_token(call)
        return 200, self._webhook_message(it, call.params["message_id"]).to_payload()

    def _check_open(self, channel: FakeChannel | None) -> None:
        """A closed (archived) thread's messages cannot be edited (400 Thread is archived, 50083)."""
        if channel is not None and channel.archived:
            raise ApiError(400, 50083, "Thread is archived")

    async def _r_webhook_edit(self, call: _Call) -> tuple[int, Any]:
        it = self._interaction_for_token(call)
        msg = self._webhook_message(it, call.params["message_id"])
        self._check_open(self.channels.get(msg.channel_id))
        self._check_upload_sizes(call.uploads, it.attachment_size_limit)
        self._check_edit_age(msg)
        self._apply_payload(msg, call.body or {}, call.uploads, creating=False, via="webhook")
        await self._emit_message_event("MESSAGE_UPDATE", msg)
        return 200, msg.to_payload()

    async def _r_webhook_delete(self, call: _Call) -> tuple[int, Any]:
        it = self._interaction_for_token(call)
        msg = self._webhook_message(it, call.params["message_id"])
        await self._delete_message(msg, via="webhook")
        return 204, None

    async def _r_webhook_execute(self, call: _Call) -> tuple[int, Any]:
        it = self._interaction_for_token(call)
        self._check_upload_sizes(call.uploads, it.attachment_size_limit)
        owners = it.payload.get("authorizing_integration_owners", {})
        created = [m for m in it.followups if m is not it.original]
        if "0" not in owners and len(created) >= USER_INSTALL_FOLLOWUPS:
            # Discord (2024-06-27): a user-installed app may create 5 follow-ups per interaction.
            raise ApiError(400, 40094, "This interaction has hit the maximum number of follow up messages")
        body = call.body or {}
        original = it.original
        if original is not None and original.loading and not original.deleted:
            # A follow-up right after a deferred "thinking" response completes the loading message.
            self._apply_payload(original, body, call.uploads, creating=False, via="followup")
            msg = original
            it.followups.append(msg)
            await self._emit_message_event("MESSAGE_UPDATE", msg)
        else:
            msg = self._new_interaction_message(it, followup=True)
            self._apply_payload(msg, body, call.uploads, creating=True, via="followup")
            msg.flags = int(body.get("flags") or 0) & (_SENDABLE_FLAGS | FLAG_EPHEMERAL)
            for a in msg.attachments:
                a.ephemeral = msg.ephemeral
            self.messages[msg.id] = msg
            it.followups.append(msg)
            await self._emit_message_event("MESSAGE_CREATE", msg)
        if _truthy(call.query.get("wait")):
            return 200, msg.to_payload()
        return 204, None

    # ------------------------------------------------------------------ messages ----------
    def _check_edit_age(self, msg: FakeMessage) -> None:
        if msg.age > self.message_edit_max_age:
            raise ApiError(
                400, 30046, "Maximum number of edits to messages older than 1 hour reached. Try again later"
            )

    def _check_upload_sizes(self, uploads: list[_Upload], limit: int) -> None:
        if len(uploads) > 10:
            raise _form_error(["files"], "BASE_TYPE_MAX_LENGTH", "Must be 10 or fewer in length.")
        for up in uploads:
            if len(up.data) > limit:
                raise ApiError(413, 40005, "Request entity too large")

    def _store_attachment(
        self, filename: str, data: bytes, content_type: str | None, channel_id: int, message_id: int | None
    ) -> FakeAttachment:
        aid = snowflake_at(time.time())
        guessed = mimetypes.guess_type(filename)[0]
        if content_type in (None, "", "application/octet-stream") and guessed:
            content_type = guessed
        att = FakeAttachment(
            id=aid,
            filename=filename,
            size=len(data),
            content_type=content_type,
            data=data,
            url=f"{self.base_url}/attachments/{channel_id}/{aid}/{filename}",
            channel_id=channel_id,
            message_id=message_id,
        )
        self.attachments[aid] = att
        return att

    def _apply_payload(
        self, msg: FakeMessage, body: Mapping[str, Any], uploads: list[_Upload], *, creating: bool, via: str
    ) -> None:
        """Validate and apply a create/edit payload to ``msg`` (mutates only if valid)."""
        _validate_message_body(body)
        was_loading = msg.loading
        content = msg.content
        if "content" in body:
            content = body["content"] or ""
        embeds = (
            [dict(e, type=e.get("type", "rich")) for e in body["embeds"]]
            if body.get("embeds") is not None
            else ([] if "embeds" in body else msg.embeds)
        )
        components = (
            _number_components(body["components"])
            if body.get("components") is not None
            else ([] if "components" in body else msg.components)
        )

        # attachments
        by_index = {u.index: u for u in uploads}
        used: set[int] = set()
        new_attachments: list[FakeAttachment] = []
        pending: list[tuple[_Upload, Mapping[str, Any]]] = []
        if body.get("attachments") is not None:
            existing = {str(a.id): a for a in msg.attachments}
            for i, entry in enumerate(body["attachments"]):
                eid = str(entry.get("id"))
                if eid in existing:
                    new_attachments.append(existing[eid])
                elif eid.isdigit() and int(eid) in by_index and int(eid) not in used:
                    used.add(int(eid))
                    pending.append((by_index[int(eid)], entry))
                else:
                    raise _form_error(["attachments", i, "id"], "ATTACHMENT_NOT_FOUND", "Unknown attachment")
            for up in uploads:
                if up.index not in used:
                    pending.append((up, {}))
        else:
            new_attachments = [] if creating else list(msg.attachments)
            pending = [(u, {}) for u in uploads]

        if not (
            content
            or embeds
            or components
            or new_attachments
            or pending
            or body.get("sticker_ids")
            or body.get("poll")
        ):
            raise ApiError(400, 50006, "Cannot send an empty message")

        # all checks passed: mutate
        for up, entry in pending:
            att = self._store_attachment(
                entry.get("filename") or up.filename, up.data, up.content_type, msg.channel_id, msg.id
            )
            att.description = entry.get("description")
            att.ephemeral = msg.ephemeral
            new_attachments.append(att)
        allowed = body.get("allowed_mentions") if "allowed_mentions" in body else None
        if "allowed_mentions" in body:
            msg.allowed_mentions = body.get("allowed_mentions")
        msg.content = content
        msg.embeds = embeds
        msg.components = components
        msg.attachments = new_attachments
        if "flags" in body and body["flags"] is not None and not creating:
            keep = msg.flags & (FLAG_EPHEMERAL)
            msg.flags = keep | (int(body["flags"]) & _SENDABLE_FLAGS)
        notify = creating or was_loading
        if was_loading:
            msg.flags &= ~FLAG_LOADING
        self._apply_mentions(
            msg, content, allowed if "allowed_mentions" in body else msg.allowed_mentions, notify=notify
        )
        now = time.time()
        if creating:
            action = "create"
        else:
            action = "complete" if was_loading else "edit"
            if not was_loading:
                msg.edit_count += 1
                msg.edited_at = now
        msg.history.append(
            {
                "action": action,
                "via": via,
                "payload": json.loads(json.dumps(body)),
                "files": [{"filename": u.filename, "size": len(u.data)} for u in uploads],
                "time": now,
            }
        )

    def _apply_mentions(
        self, msg: FakeMessage, content: str, allowed: Mapping[str, Any] | None, *, notify: bool
    ) -> None:
        users = [int(u) for u in _USER_MENTION_RE.findall(content or "")]
        roles = [int(r) for r in _ROLE_MENTION_RE.findall(content or "")]
        everyone = bool(_EVERYONE_RE.search(content or ""))
        if allowed is None:
            parse = {"users", "roles", "everyone"}
            allowed_users: set[int] = set()
            allowed_roles: set[int] = set()
        else:
            parse = set(allowed.get("parse") or [])
            allowed_users = {int(u) for u in allowed.get("users") or []}
            allowed_roles = {int(r) for r in allowed.get("roles") or []}
        pinged_users = list(dict.fromkeys(u for u in users if "users" in parse or u in allowed_users))
        pinged_roles = list(dict.fromkeys(r for r in roles if "roles" in parse or r in allowed_roles))
        pinged_everyone = everyone and "everyone" in parse
        if msg.author.id == self.bot_user.id and msg.guild_id is not None:
            channel = self.channels.get(msg.channel_id)
            if (
                pinged_everyone
                and channel is not None
                and msg.webhook_id is None
                and not channel.bot_permissions & MENTION_EVERYONE
            ):
                pinged_everyone = False
        msg.mentioned_user_ids = pinged_users
        msg._mention_payloads = [
            (self.users.get(u) or FakeUser(id=u, name=f"user{u}")).to_payload() for u in pinged_users
        ]
        msg.mentioned_role_ids = pinged_roles
        msg.mention_everyone = pinged_everyone
        if notify:
            msg.pinged_user_ids.update(pinged_users)
            msg.pinged_role_ids.update(pinged_roles)
            msg.pinged_everyone = msg.pinged_everyone or pinged_everyone

    async def _delete_message(self, msg: FakeMessage, *, via: str) -> None:
        msg.deleted = True
        msg.history.append(
            {"action": "delete", "via": via, "payload": None, "files": [], "time": time.time()}
        )
        if not msg.ephemeral:
            data = {"id": str(msg.id), "channel_id": str(msg.channel_id)}
            if msg.guild_id is not None:
                data["guild_id"] = str(msg.guild_id)
            await self._dispatch_guild_event(
                msg.guild_id,
                "MESSAGE_DELETE",
                data,
                INTENT_GUILD_MESSAGES if msg.guild_id else INTENT_DIRECT_MESSAGES,
            )

    async def _emit_message_event(self, event: str, msg: FakeMessage) -> None:
        if msg.ephemeral:
            return
        intent = INTENT_GUILD_MESSAGES if msg.guild_id is not None else INTENT_DIRECT_MESSAGES
        data = msg.to_payload()
        if msg.guild_id is not None:
            guild = self.get_guild(msg.guild_id)
            member = guild.members.get(msg.author.id) if guild else None
            if member is not None:
                data["member"] = member.to_payload(with_user=False)
        for session in self._sessions_for_guild(msg.guild_id):
            if "intents" in session.identify and not session.intents & intent:
                continue
            payload = data
            if (
                msg.author.id != self.bot_user.id
                and "intents" in session.identify
                and not session.intents & INTENT_MESSAGE_CONTENT
                and self.bot_user.id not in msg.mentioned_user_ids
                and msg.guild_id is not None
            ):
                payload = {**data, "content": "", "embeds": [], "attachments": [], "components": []}
            await self._dispatch(session, event, payload)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _number_components(components: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copy components and give every one a numeric ``id`` as Discord does."""
    copied = json.loads(json.dumps(components))
    counter = itertools.count(1)
    for comp in _walk_components(copied):
        if "id" not in comp:
            comp["id"] = next(counter)
    return copied


def _validate_message_body(body: Mapping[str, Any]) -> None:
    content = body.get("content")
    if content is not None and len(str(content)) > 2000:
        raise _form_error(["content"], "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")
    embeds = body.get("embeds") or []
    if len(embeds) > 10:
        raise _form_error(["embeds"], "BASE_TYPE_MAX_LENGTH", "Must be 10 or fewer in length.")
    total = 0
    limits = {"title": 256, "description": 4096}
    for i, emb in enumerate(embeds):
        for key, limit in limits.items():
            value = emb.get(key) or ""
            total += len(value)
            if len(value) > limit:
                raise _form_error(
                    ["embeds", i, key], "BASE_TYPE_MAX_LENGTH", f"Must be {limit} or fewer in length."
                )
        fields = emb.get("fields") or []
        if len(fields) > 25:
            raise _form_error(
                ["embeds", i, "fields"], "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length."
            )
        for j, fld in enumerate(fields):
            name, value = str(fld.get("name", "")), str(fld.get("value", ""))
            if not 1 <= len(name) <= 256:
                raise _form_error(
                    ["embeds", i, "fields", j, "name"],
                    "BASE_TYPE_BAD_LENGTH",
                    "Must be between 1 and 256 in length.",
                )
            if not 1 <= len(value) <= 1024:
                raise _form_error(
                    ["embeds", i, "fields", j, "value"],
                    "BASE_TYPE_BAD_LENGTH",
                    "Must be between 1 and 1024 in length.",
                )
            total += len(name) + len(value)
        footer = (emb.get("footer") or {}).get("text") or ""
        author = (emb.get("author") or {}).get("name") or ""
        if len(footer) > 2048:
            raise _form_error(
                ["embeds", i, "footer", "text"], "BASE_TYPE_MAX_LENGTH", "Must be 2048 or fewer in length."
            )
        if len(author) > 256:
            raise _form_error(
                ["embeds", i, "author", "name"], "BASE_TYPE_MAX_LENGTH", "Must be 256 or fewer in length."
            )
        total += len(footer) + len(author)
    if total > 6000:
        raise _form_error(["embeds"], "MAX_EMBED_SIZE_EXCEEDED", "Embed size exceeds maximum size of 6000")
    flags = int(body.get("flags") or 0)
    components = body.get("components") or []
    if not flags & FLAG_COMPONENTS_V2:
        if len(components) > 5:
            raise _form_error(["components"], "BASE_TYPE_MAX_LENGTH", "Must be 5 or fewer in length.")
        for i, row in enumerate(components):
            if len(row.get("components") or []) > 5:
                raise _form_error(
                    ["components", i, "components"], "BASE_TYPE_MAX_LENGTH", "Must be 5 or fewer in length."
                )
    for comp in _walk_components(components):
        cid = comp.get("custom_id")
        if cid is not None and not 1 <= len(cid) <= 100:
            raise _form_error(
                ["components", "custom_id"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
            )
        label = comp.get("label")
        if comp.get("type") == 2 and label is not None and len(label) > 80:
            raise _form_error(
                ["components", "label"], "BASE_TYPE_MAX_LENGTH", "Must be 80 or fewer in length."
            )
    allowed = body.get("allowed_mentions")
    if allowed:
        parse = allowed.get("parse") or []
        if "users" in parse and allowed.get("users"):
            raise _form_error(
                ["allowed_mentions"],
                "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE",
                'parse:["users"] and users: [ids] are mutually exclusive.',
            )
        if "roles" in parse and allowed.get("roles"):
            raise _form_error(
                ["allowed_mentions"],
                "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE",
                'parse:["roles"] and roles: [ids] are mutually exclusive.',
            )
        if len(allowed.get("users") or []) > 100:
            raise _form_error(
                ["allowed_mentions", "users"], "BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length."
            )


def _check_localizations(value: Any, path: list[Any], *, name: bool, max_len: int) -> None:
    if value is None:
        return
    for locale, text in value.items():
        if locale not in DISCORD_LOCALES:
            raise _form_error(
                path + [locale], "ENUM_TYPE_COERCE", f'Value "{locale}" is not a valid enum value.'
            )
        _check_text(text, path + [locale], name=name, max_len=max_len)


def _check_text(text: Any, path: list[Any], *, name: bool, max_len: int) -> None:
    if not isinstance(text, str) or not 1 <= len(text) <= max_len:
        raise _form_error(path, "BASE_TYPE_BAD_LENGTH", f"Must be between 1 and {max_len} in length.")
    if name and (not _COMMAND_NAME_RE.match(text) or text != text.lower()):
        raise _form_error(path, "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid")


def _validate_command(cmd: Mapping[str, Any], path: list[Any]) -> None:
    type_ = int(cmd.get("type", 1))
    if type_ == 1:
        _check_text(cmd.get("name"), path + ["name"], name=True, max_len=32)
        _check_text(cmd.get("description"), path + ["description"], name=False, max_len=100)
        _check_localizations(
            cmd.get("name_localizations"), path + ["name_localizations"], name=True, max_len=32
        )
        _check_localizations(
            cmd.get("description_localizations"),
            path + ["description_localizations"],
            name=False,
            max_len=100,
        )
        _validate_options(cmd.get("options") or [], path + ["options"])
    else:
        name = cmd.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 32:
            raise _form_error(path + ["name"], "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 32 in length.")


def _validate_options(options: list[Mapping[str, Any]], path: list[Any]) -> None:
    if len(options) > 25:
        raise _form_error(path, "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
    seen_optional = False
    for i, opt in enumerate(options):
        p = path + [i]
        _check_text(opt.get("name"), p + ["name"], name=True, max_len=32)
        _check_text(opt.get("description"), p + ["description"], name=False, max_len=100)
        _check_localizations(opt.get("name_localizations"), p + ["name_localizations"], name=True, max_len=32)
        _check_localizations(
            opt.get("description_localizations"), p + ["description_localizations"], name=False, max_len=100
        )
        otype = int(opt.get("type", 3))
        if otype in (1, 2):
            _validate_options(opt.get("options") or [], p + ["options"])
            continue
        if opt.get("required"):
            if seen_optional:
                raise _form_error(
                    p + ["required"],
                    "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID",
                    "Required options must be placed before non-required options",
                )
        else:
            seen_optional = True
        choices = opt.get("choices") or []
        if len(choices) > 25:
            raise _form_error(p + ["choices"], "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
        if choices and opt.get("autocomplete"):
            raise _form_error(
                p + ["autocomplete"],
                "APPLICATION_COMMAND_OPTION_CHOICES_AUTOCOMPLETE",
                "Autocomplete cannot be set if choices are present.",
            )
        for j, ch in enumerate(choices):
            _check_text(ch.get("name"), p + ["choices", j, "name"], name=False, max_len=100)
            _check_localizations(
                ch.get("name_localizations"),
                p + ["choices", j, "name_localizations"],
                name=False,
                max_len=100,
            )
