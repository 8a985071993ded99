"""/settings styles: a server's admins keep named prompt styles that members pick with ``style:``.

``add``, ``list`` and ``remove`` are a subgroup of /settings, attached to it when this extension
loads: hidden from members without Manage Server like the rest of /settings (Discord's
``default_permissions`` on the top-level command). Who may use it is the application's rule, asked
on every use as for the rest of /settings (:func:`cogs.interactions.admin`), and again by each use
case. The rules (who, names, templates, at most 25) are the core's (:class:`framecast.app.ServerStyles`);
a refusal (``AdminRefused``, :class:`StyleError`) is worded by the command tree's error handler. Templates and names are shown as typed: never as markdown, links or mentions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import discord
from discord import app_commands
from discord.app_commands import Choice, locale_str

from cogs.generate import style_choices
from cogs.i18n import t
from cogs.interactions import actor, admin
from cogs.literal import as_text
from cogs.tree import acknowledge_privately, answer_privately
from framecast.app import MAX_STYLES, STYLE_PLACEHOLDER, Job, ServerStyles, StyleKind, StyleList, job_style

if TYPE_CHECKING:
    from bot import Framecast

__all__ = ["KIND_CHOICES", "StylesGroup", "kind_text", "show_sent_prompt", "style_list_text"]

#: How much of a template the list shows per style (an embed holds 4096 characters, a server 25 styles).
LIST_TEMPLATE_CHARS = 130
#: An embed field's longest value.
FIELD_CHARS = 1024

KIND_CHOICES: list[Choice[str]] = [
    Choice(name=locale_str("Videos and images (default)"), value=StyleKind.BOTH.value),
    Choice(name=locale_str("Videos only"), value=StyleKind.VIDEO.value),
    Choice(name=locale_str("Images only"), value=StyleKind.IMAGE.value),
]
_KIND_KEYS = {
    StyleKind.BOTH: "style_kind_both",
    StyleKind.VIDEO: "style_kind_video",
    StyleKind.IMAGE: "style_kind_image",
}


def kind_text(kind: StyleKind, locale: str | discord.Locale | None) -> str:
    """What a style is for, in words."""
    return t(_KIND_KEYS[kind], locale)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def style_list_text(listed: StyleList, locale: str | discord.Locale | None) -> str:
    """The /settings styles list body: one line per style, templates shortened and shown literally."""
    if not listed.styles:
        return t("style_list_empty", locale)
    return "\n".join(
        t(
            "style_list_item",
            locale,
            name=as_text(style.name),
            kind=kind_text(style.kind, locale),
            template=as_text(_one_line(style.template, LIST_TEMPLATE_CHARS)),
        )
        for style in listed.styles
    )


def show_sent_prompt(embed: discord.Embed, job: Job, locale: str | discord.Locale | None) -> None:
    """/job: add the prompt as the service got it, inside the job's style (nothing without a style).

    The member's own prompt is the embed's description and the style's name a field already.
    """
    if job_style(job.params) is None or not job.service_prompt:
        return  # no style, or a prompt this viewer may not read (Discord refuses an empty field)
    # A field holds 1024 characters, a whole embed 6000.
    room = min(FIELD_CHARS, 5990 - len(embed) - len(t("style_field_sent", locale)))
    if room >= 16:
        value = as_text(job.service_prompt, limit=room)
        embed.add_field(name=t("style_field_sent", locale), value=value, inline=False)


class StylesGroup(app_commands.Group):
    """The /settings styles subgroup (attached to /settings by :func:`setup`)."""

    def __init__(self) -> None:
        super().__init__(
            name=locale_str("styles"),
            description=locale_str("Named prompt styles members pick with style:"),
        )

    @staticmethod
    def _styles(interaction: discord.Interaction[Any]) -> ServerStyles:
        """The admins' style use cases of the bot that received `interaction`."""
        return cast("Framecast", interaction.client).core.styles

    async def interaction_check(self, interaction: discord.Interaction[Any], /) -> bool:
        """The application says who may, before anything is acknowledged, as for the rest of /settings."""
        admin(interaction)
        await acknowledge_privately(interaction)  # before anything is written, as for the rest of /settings
        return True

    @staticmethod
    async def _reply(interaction: discord.Interaction[Any], content: str) -> None:
        await answer_privately(interaction, content)

    @app_commands.command(
        name=locale_str("add"), description=locale_str("Add a style: a template around the member's prompt")
    )
    @app_commands.rename(name=locale_str("name"), template=locale_str("template"), kind=locale_str("kind"))
    @app_commands.describe(
        name=locale_str("The style's name (up to 32 characters)"),
        template=locale_str("The text sent to the service: write {prompt} where the member's prompt goes"),
        kind=locale_str("What the style is for"),
    )
    @app_commands.choices(kind=KIND_CHOICES)
    async def add(
        self, interaction: discord.Interaction[Framecast], name: str, template: str, kind: str | None = None
    ) -> None:
        """Add a style."""
        added = await self._styles(interaction).add(
            actor(interaction), name, template, StyleKind(kind or StyleKind.BOTH)
        )
        loc = interaction.locale
        text = t(
            "style_added",
            loc,
            name=as_text(added.style.name),
            kind=kind_text(added.style.kind, loc),
            count=added.count,
            max=MAX_STYLES,
        )
        await self._reply(interaction, text)

    @app_commands.command(name=locale_str("list"), description=locale_str("This server's styles"))
    async def list_(self, interaction: discord.Interaction[Framecast]) -> None:
        """Show the server's styles."""
        listed = self._styles(interaction).list_styles(actor(interaction))
        loc = interaction.locale
        embed = discord.Embed(
            title=t("style_list_title", loc, count=len(listed.styles), max=listed.limit),
            description=style_list_text(listed, loc)[:4096],
            colour=discord.Colour.blurple(),
        )
        embed.set_footer(text=t("style_list_footer", loc, placeholder=STYLE_PLACEHOLDER))
        await answer_privately(interaction, embed=embed)

    @app_commands.command(name=locale_str("remove"), description=locale_str("Remove a style"))
    @app_commands.rename(name=locale_str("name"))
    @app_commands.describe(name=locale_str("The style to remove"))
    async def remove(self, interaction: discord.Interaction[Framecast], name: str) -> None:
        """Remove a style (jobs already queued with it keep it)."""
        removed = await self._styles(interaction).remove(actor(interaction), name)
        text = t("style_removed", interaction.locale, name=as_text(removed.style.name))
        await self._reply(interaction, text)

    @remove.autocomplete("name")
    async def _names(self, interaction: discord.Interaction[Framecast], current: str) -> list[Choice[str]]:
        return style_choices(self._styles(interaction).suggest(interaction.guild_id, current))


async def setup(bot: Framecast) -> None:
    """Extension entry point: attach the subgroup to /settings (loaded after ``cogs.settings``)."""
    settings = bot.get_cog("ServerSettings")
    group = getattr(settings, "app_command", None)
    if not isinstance(group, app_commands.Group):
        raise RuntimeError("cogs.styles needs cogs.settings loaded first")
    group.add_command(StylesGroup())


async def teardown(bot: Framecast) -> None:
    """Extension exit point: detach the subgroup."""
    settings = bot.get_cog("ServerSettings")
    group = getattr(settings, "app_command", None)
    if isinstance(group, app_commands.Group):
        group.remove_command("styles")
