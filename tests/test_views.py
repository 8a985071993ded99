"""The job buttons: custom ids, and clicks reaching the handler the cog registered (no Discord needed)."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from cogs.utils.views import ButtonAction, ButtonHost, CancelButton, JobButtons, RetryButton


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, int, int]] = []

    def handler(self, name: str) -> Any:
        async def handle(interaction: Any, job_id: int, owner_id: int) -> None:
            self.calls.append((name, interaction, job_id, owner_id))

        return handle


class Host:
    """Stands in for the bot: a client that routes job buttons."""

    def __init__(self) -> None:
        self.job_buttons = JobButtons()


def test_custom_ids_carry_the_action_the_job_and_the_owner() -> None:
    cancel, retry = CancelButton(41, 7), RetryButton(42, 8, label="Nochmal")
    assert cancel.item.custom_id == "framecast:cancel:41:7" and cancel.item.label == "Cancel"
    assert retry.item.custom_id == "framecast:retry:42:8" and retry.item.label == "Nochmal"
    assert re.fullmatch(CancelButton.__discord_ui_compiled_template__, "framecast:cancel:41:7")
    assert not re.fullmatch(CancelButton.__discord_ui_compiled_template__, "framecast:retry:41:7")


async def test_a_click_reaches_the_registered_handler() -> None:
    host, seen = Host(), Recorder()
    host.job_buttons.register(
        {ButtonAction.CANCEL: seen.handler("cancel"), ButtonAction.RETRY: seen.handler("retry")}
    )
    assert isinstance(host, ButtonHost)
    interaction: Any = SimpleNamespace(client=host)
    await CancelButton(41, 7).callback(interaction)
    await RetryButton(42, 8).callback(interaction)
    assert seen.calls == [("cancel", interaction, 41, 7), ("retry", interaction, 42, 8)]


async def test_an_unregistered_button_fails_loudly() -> None:
    host, seen = Host(), Recorder()
    host.job_buttons.register(
        {ButtonAction.CANCEL: seen.handler("cancel"), ButtonAction.RETRY: seen.handler("retry")}
    )
    host.job_buttons.unregister([ButtonAction.RETRY])
    interaction: Any = SimpleNamespace(client=host)
    with pytest.raises(LookupError, match="retry"):
        await RetryButton(42, 8).callback(interaction)
    with pytest.raises(LookupError):
        await CancelButton(41, 7).callback(SimpleNamespace(client=object()))  # type: ignore[arg-type]
    assert seen.calls == []
