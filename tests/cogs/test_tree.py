"""The command tree's one error handler and its install scopes (no Discord needed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import discord
import pytest
from discord import app_commands

from cogs.error_text import (
    error_message,
)
from cogs.i18n import t
from cogs.tree import answer_error
from framecast.app import (
    JobRefused,
    Refusal,
)


class Response:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def is_done(self) -> bool:
        return bool(self.sent)

    async def send_message(self, content: str, **kwargs: Any) -> None:
        self.sent.append((content, kwargs))


async def test_the_one_handler_answers_privately_and_logs_only_bugs(caplog: pytest.LogCaptureFixture) -> None:
    expected: Any = SimpleNamespace(locale="de", response=Response())
    await answer_error(expected, JobRefused(Refusal.NOT_ALLOWED, 3), what="the cancel button of job 3")
    [(text, kwargs)] = expected.response.sent
    assert text == t("error_not_allowed", "de") and kwargs["ephemeral"] is True
    assert "failed" not in caplog.text
    bug: Any = SimpleNamespace(locale="en-US", response=Response())
    await answer_error(bug, RuntimeError("boom"), what="the remix of job 3")
    [(text, kwargs)] = bug.response.sent
    assert text == t("error_generic", "en-US") and kwargs["ephemeral"] is True
    assert "the remix of job 3 failed" in caplog.text and "RuntimeError: boom" in caplog.text


def _command(name: str) -> app_commands.Command[Any, ..., None]:
    async def callback(interaction: Any) -> None:
        """A command."""

    return app_commands.guild_only(app_commands.Command(name=name, description="x", callback=callback))


def test_user_installs_open_only_the_personal_commands() -> None:
    from cogs.tree import PERSONAL_COMMANDS, set_install_scope

    names = [*sorted(PERSONAL_COMMANDS), "settings", "queue"]
    off = app_commands.CommandTree(discord.Client(intents=discord.Intents.none()))
    on = app_commands.CommandTree(discord.Client(intents=discord.Intents.none()))
    for tree in (off, on):
        for name in names:
            tree.add_command(_command(name))
    set_install_scope(off, user_install=False)
    set_install_scope(on, user_install=True)
    for name in names:
        before = off.get_command(name).to_dict(off)  # type: ignore[union-attr]
        assert before["contexts"] == [0] and before["integration_types"] is None  # as before
        after = on.get_command(name).to_dict(on)  # type: ignore[union-attr]
        if name in PERSONAL_COMMANDS:
            assert (after["integration_types"], after["contexts"]) == ([0, 1], [0, 1, 2])
        else:
            assert (after["integration_types"], after["contexts"]) == ([0], [0])


def test_server_commands_outside_servers_name_what_works_there() -> None:
    from cogs.error_text import ServerOnly

    for locale in ("en-US", "de", "ja"):
        assert error_message(ServerOnly(), locale) == t("userinstall_server_only", locale)
        assert error_message(app_commands.NoPrivateMessage(), locale) == t("error_guild_only", locale)
