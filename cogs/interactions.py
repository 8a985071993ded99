"""Reading an interaction: who asks and where, what they may manage, whether the bot can post here,
and the bookkeeping a new job keeps of the interaction that started it. Discord-side only, no I/O.

What a person may do with what they are is the application's to decide (``Members.authorize`` for a
job, ``Admins.authorize`` for a server's settings): here an interaction only becomes a
:class:`~framecast.app.Requester` or an :class:`~framecast.app.Actor`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

import discord

from cogs.error_text import MissingChannelPermissions, RefusedInCheck, ServerOnly, ServerRulesApply
from cogs.places import Where, where
from framecast.app import Actor, AdminRefused, Admins, Members, QueueViewer, Requester

if TYPE_CHECKING:
    from bot import Framecast

# What the bot needs in the channel to show progress and deliver the file there, also after the
# interaction token expires (then it posts with the bot token).
REQUIRED_PERMISSIONS = (
    "view_channel",
    "send_messages",
    "embed_links",
    "attach_files",
    "read_message_history",
)


#: In a thread, Send Messages in Threads stands for Send Messages (which does not cover threads).
THREAD_PERMISSIONS = tuple(
    "send_messages_in_threads" if p == "send_messages" else p for p in REQUIRED_PERMISSIONS
)


#: What the bot's messages need where only the interaction can post (DMs, group DMs, servers without
#: the bot): Discord grants these to user-installed apps there; the rest is not the bot's to have.
PERSONAL_PERMISSIONS = ("embed_links", "attach_files")


def _user_install(interaction: discord.Interaction[Any]) -> bool:
    return bool(cast("Framecast", interaction.client).settings.user_install)


def server_only(interaction: discord.Interaction[Any]) -> discord.app_commands.NoPrivateMessage:
    """The refusal of a server command outside a server that installed the app (raise it).

    With user installs on, it names what a person can use there instead.
    """
    return ServerOnly() if _user_install(interaction) else discord.app_commands.NoPrivateMessage()


def members(interaction: discord.Interaction[Any]) -> Members:
    """The members' use cases of the bot that received `interaction`."""
    return cast("Framecast", interaction.client).core.members


def admins(interaction: discord.Interaction[Any]) -> Admins:
    """The admins' use cases of the bot that received `interaction`."""
    return cast("Framecast", interaction.client).core.admins


def requester(interaction: discord.Interaction[Any]) -> Requester:
    """Who is asking, where, from the interaction (no I/O).

    In a thread, ``parent_id`` is the thread's channel (a server's allowed channels name channels,
    and a thread belongs to its parent's). ``nsfw``: the channel, or a thread's parent, is
    age-restricted; unknown counts as not (a server's NSFW-only rule then refuses).
    """
    place = where(interaction)
    if place is Where.BOT_GUILD_USER_INSTALL:
        raise ServerRulesApply()
    if place.personal:
        if not _user_install(interaction) or interaction.channel_id is None:
            raise discord.app_commands.NoPrivateMessage()
        return Requester.personal_queue(
            user_id=interaction.user.id,
            channel_id=interaction.channel_id,
            locale=str(interaction.locale.value),
        )
    if interaction.guild_id is None or interaction.channel_id is None:
        raise discord.app_commands.NoPrivateMessage()
    channel = interaction.channel
    parent_id = channel.parent_id if isinstance(channel, discord.Thread) else None
    # Thread.is_nsfw() asks the parent (from the guild cache); a text channel answers itself.
    is_nsfw = getattr(channel, "is_nsfw", None)
    return Requester(
        guild_id=interaction.guild_id,
        channel_id=interaction.channel_id,
        user_id=interaction.user.id,
        locale=str(interaction.locale.value),
        parent_id=parent_id,
        nsfw=bool(is_nsfw()) if callable(is_nsfw) else False,
    )


# What reading a channel takes, for /queue: seeing it, and reading what was posted there before
# (a job's prompt is in a message posted when the job was asked for).
READ_PERMISSIONS = ("view_channel", "read_message_history")


def queue_viewer(interaction: discord.Interaction[Any]) -> QueueViewer:
    """Who asks for /queue, with the server's channels they can read, from the cache (no I/O).

    Readability is discord.py's own permission resolution (roles, then channel overwrites) of the
    member in each cached channel and thread; a thread is read through its parent. A channel
    the cache does not hold is not in the set, so it counts as unreadable, except the one the
    interaction comes from. Whether the prompts of
    an age-restricted channel may be shown depends on where /queue is used (``requester().nsfw``).
    """
    where = requester(interaction)
    guild, member = interaction.guild, interaction.user
    if guild is None or not isinstance(member, discord.Member):
        viewer = QueueViewer(member.id, in_age_restricted=where.nsfw)
    else:
        viewer = member_viewer(guild, member, in_age_restricted=where.nsfw)
    here = interaction.channel_id
    if here is None or here in viewer.readable_channels:
        return viewer
    # Where they act is readable to them, though the cache may not tell (a private thread they were
    # added to, a thread not cached): a click on a result there is theirs to see.
    restricted = viewer.age_restricted_channels | ({here} if where.nsfw else set())
    return dataclasses.replace(
        viewer, readable_channels=viewer.readable_channels | {here}, age_restricted_channels=restricted
    )


def member_viewer(guild: discord.Guild, member: discord.Member, *, in_age_restricted: bool) -> QueueViewer:
    """`member` of `guild` with the channels and threads they can read, from the cache (no I/O):
    /queue's viewer, and the web pages' (the member fetched with the bot token)."""
    readable: set[int] = set()
    age_restricted: set[int] = set()
    channels: list[discord.abc.GuildChannel | discord.Thread] = [*guild.channels, *guild.threads]
    for channel in channels:
        if _can_read(channel, member):
            readable.add(channel.id)
            is_nsfw = getattr(channel, "is_nsfw", None)
            if callable(is_nsfw) and is_nsfw():
                age_restricted.add(channel.id)
    return QueueViewer(member.id, frozenset(readable), frozenset(age_restricted), in_age_restricted)


def _can_read(channel: discord.abc.GuildChannel | discord.Thread, member: discord.Member) -> bool:
    if isinstance(channel, discord.Thread):
        if channel.parent is None:
            return False  # Thread.permissions_for needs the parent: not cached, not readable
        perms = channel.permissions_for(member)
        # A private thread shows to its members and to Manage Threads; the cache does not know its
        # members (no GUILD_MEMBERS intent), so only its owner and Manage Threads count.
        if channel.is_private() and not (perms.manage_threads or channel.owner_id == member.id):
            return False
    else:
        perms = channel.permissions_for(member)
    return all(getattr(perms, name) for name in READ_PERMISSIONS)


def actor(interaction: discord.Interaction[Any]) -> Actor:
    """The person acting, with whether they may manage this server (no I/O): on a job, or on the
    server's settings.

    Whether they may act on a given job, or change the settings, is the use case's call (from the
    stored job; from :func:`framecast.app.administered`). Outside a server that installed the app, a
    person acts on their own queue (user installs), which has no settings of its own.
    """
    if where(interaction) is Where.BOT_GUILD_USER_INSTALL:
        raise ServerRulesApply()
    if where(interaction).personal and _user_install(interaction):
        # Outside a server that installed the app a person acts on their own queue's jobs.
        return Actor(user_id=interaction.user.id, guild_id=interaction.user.id)
    if interaction.guild_id is None or where(interaction) is not Where.GUILD:
        raise server_only(interaction)
    perms = getattr(interaction, "permissions", None)
    return Actor(
        user_id=interaction.user.id,
        guild_id=interaction.guild_id,
        manages_guild=bool(perms and (perms.manage_guild or perms.administrator)),
    )


def admin(interaction: discord.Interaction[Any]) -> Actor:
    """The person using /settings (its styles and key form too), once the application let them in.

    :func:`actor` read off the interaction, then ``Admins.authorize`` (no I/O: Manage Server in a
    server, never a person's own queue), so that a refusal is the interaction's first answer, before
    anything is acknowledged. Each admin use case asks again. Raises :class:`RefusedInCheck` with the
    application's ``AdminRefused`` as its cause (this runs in checks, where discord.py passes on only
    its own errors).
    """
    who = actor(interaction)
    try:
        admins(interaction).authorize(who)
    except AdminRefused as refused:
        raise RefusedInCheck(refused.refusal.value) from refused
    return who


def check_channel(interaction: discord.Interaction[Any]) -> None:
    """Refuse now, not at delivery time, when the bot cannot post or attach files here."""
    perms = interaction.app_permissions
    needed: tuple[str, ...]
    if where(interaction).personal:
        needed = PERSONAL_PERMISSIONS
    elif isinstance(interaction.channel, discord.Thread):
        needed = THREAD_PERMISSIONS
    else:
        needed = REQUIRED_PERMISSIONS
    missing = [name for name in needed if not getattr(perms, name)]
    if missing:
        raise MissingChannelPermissions(missing)


def job_bookkeeping(interaction: discord.Interaction[Any]) -> dict[str, Any]:
    """What a new job keeps of the interaction that started it: the one place this is built.

    The application id and token let the chat side (and a restarted bot) edit the job's message
    (the interaction's original response) until the token expires, then post with the bot token.
    """
    # Imported here: the delivery package draws job messages with the buttons that call this.
    from cogs.delivery.record import record_for

    return record_for(interaction, context=where(interaction).value).to_dict()
