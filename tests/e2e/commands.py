"""Driving the bot as members and admins do, and reading the private answers they get.

Slash commands (``/image``, ``/video``, ``/settings ...``), the job message's buttons and the Remix
and server-key forms, for the end-to-end tests; the world itself is tests/e2e/harness.py.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.harness import World, button_ids
from tests.fakes.discord_api import FakeInteraction, FakeMessage

__all__ = [
    "EPHEMERAL",
    "FOREVER",
    "answer",
    "button",
    "image",
    "modal_values",
    "refused",
    "set_key",
    "settings",
    "text_of",
    "video",
    "with_buttons",
]

#: The message flag of a reply only its member sees.
EPHEMERAL = 64
#: Polls a task stays pending: a job that runs until the test ends.
FOREVER = 10**9


async def answer(it: FakeInteraction, timeout: float = 10) -> FakeMessage:
    """The interaction's visible private answer."""

    def shown() -> FakeMessage | None:
        return next((m for m in it.messages() if not m.loading and not m.deleted), None)

    await it._fake.wait_for(lambda: shown() is not None, timeout=timeout, what="a private answer")  # noqa: SLF001
    msg = shown()
    assert msg is not None and msg.ephemeral, msg
    return msg


async def settings(
    world: World,
    sub: str,
    options: dict[str, Any] | None = None,
    *,
    guild: int = 0,
    locale: str = "en-US",
) -> FakeMessage:
    """``/settings <sub>`` as the guild's admin; its private answer."""
    it = await world.discord.slash(
        world.guilds[guild],
        world.channels[guild],
        world.admins[guild],
        "settings",
        options or {},
        subcommand=sub,
        locale=locale,
    )
    return await answer(it)


def text_of(msg: FakeMessage) -> str:
    """Content plus every embed's text."""
    parts = [msg.content or ""]
    for embed in msg.embeds:
        parts += [embed.get("title") or "", embed.get("description") or ""]
        parts += [f"{f.get('name')}: {f.get('value')}" for f in embed.get("fields", [])]
        parts.append(str((embed.get("footer") or {}).get("text", "")))
    return "\n".join(parts)


async def refused(it: FakeInteraction) -> str:
    """The private refusal an interaction got (first answer, or a private follow-up after the defer)."""
    kind, data = await it.wait_response()
    if kind == 4:
        assert data is not None and data["flags"] & EPHEMERAL, (kind, data)
        return str(data["content"])
    assert kind == 5, (kind, data)
    msg = await it.wait_followup(lambda m: m.ephemeral and bool(m.content))
    assert not any(m.embeds for m in it.messages() if not m.deleted), "a refused request showed a job"
    return msg.content


async def image(
    world: World, prompt: str, *, member: Any = None, channel: Any = None, locale: str = "en-US"
) -> FakeInteraction:
    """/image, not waiting for a job (it may be refused)."""
    return await world.discord.slash(
        world.guild,
        channel or world.channel,
        member or world.alice,
        "image",
        {"prompt": prompt},
        locale=locale,
    )


async def video(
    world: World, prompt: str, *, member: Any = None, channel: Any = None, locale: str = "en-US"
) -> FakeInteraction:
    """/video, not waiting for a job."""
    return await world.discord.slash(
        world.guild,
        channel or world.channel,
        member or world.alice,
        "video",
        {"prompt": prompt},
        locale=locale,
    )


def button(message: FakeMessage, action: str) -> str:
    """The custom id of the job message's `action` button ("again", "remix", ...)."""
    [custom_id] = [c for c in button_ids(message) if c.split(":")[1] == action]
    return custom_id


async def with_buttons(world: World, it: FakeInteraction) -> FakeMessage:
    """The delivered job message of `it`, once it shows its Again, Remix and Delete buttons."""
    message = await world.delivered(it)
    await world.discord.wait_for(lambda: len(button_ids(message)) == 3, timeout=5, what="again/remix/delete")
    return message


def modal_values(it: FakeInteraction) -> dict[str, str]:
    """The values a form (modal) opened by `it` was filled with: custom id -> value."""
    modal = it.modal
    assert modal is not None
    found: dict[str, str] = {}
    for row in modal["components"]:
        for c in [row.get("component"), *row.get("components", [])]:
            if isinstance(c, dict) and c.get("custom_id"):
                found[c["custom_id"]] = c.get("value") or ""
    return found


async def set_key(world: World, key: str, *, guild: int = 0) -> FakeMessage:
    """``/settings key set`` as the guild's admin, typing `key` into the form; the private answer."""
    it = await world.discord.slash(
        world.guilds[guild], world.channels[guild], world.admins[guild], "settings", {}, subcommand="key set"
    )
    await it.wait_response()
    modal = it.modal
    assert modal is not None
    [custom_id] = [
        c["custom_id"]
        for row in modal["components"]
        for c in [row.get("component"), *row.get("components", [])]
        if isinstance(c, dict) and c.get("type") == 4
    ]
    submit = await world.discord.submit_modal(it, {custom_id: key})
    return await answer(submit, timeout=15)
