"""The job buttons and the Remix form: custom ids, clicks reaching the handler the cog registered,
the form's fields and what a submit carries (no Discord needed)."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import discord
import pytest

from cogs.views.buttons import (
    AgainButton,
    ButtonAction,
    ButtonHost,
    CancelButton,
    JobButtons,
    RemixButton,
    RemixField,
    RetryButton,
    form_values,
    remix_form,
    remix_form_target,
)
from framecast.jobs import JobKind


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
    again, remix = AgainButton(43, 9), RemixButton(43, 9)
    assert (again.item.custom_id, remix.item.custom_id) == ("framecast:again:43:9", "framecast:remix:43:9")
    buttons = (CancelButton, RetryButton, AgainButton, RemixButton)
    for button in (cancel, retry, again, remix):
        # Each custom id is claimed by exactly one registered button class.
        custom_id = button.item.custom_id or ""
        owners = [b for b in buttons if re.fullmatch(b.__discord_ui_compiled_template__, custom_id)]
        assert owners == [type(button)]


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
    host.job_buttons.register(
        {ButtonAction.AGAIN: seen.handler("again"), ButtonAction.REMIX: seen.handler("remix")}
    )
    await AgainButton(43, 9).callback(interaction)
    await RemixButton(44, 9).callback(interaction)
    assert seen.calls[2:] == [("again", interaction, 43, 9), ("remix", interaction, 44, 9)]


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


LABELS = {name: name.value.title() for name in RemixField}


async def test_the_remix_form_is_prefilled_and_never_kept_by_discord_py() -> None:
    values = {
        RemixField.PROMPT: "a fox\nin snow",
        RemixField.SIZE: "vertical",
        RemixField.LENGTH: "3",
        RemixField.FPS: "30",
        RemixField.MODEL: None,
    }
    form = remix_form(
        12,
        JobKind.VIDEO,
        title="Remix job #12",
        values=values,
        labels=LABELS,
        placeholders={RemixField.MODEL: "Empty: the default (svc-video-v2.0)"},
        prompt_max=2000,
    )
    payload = form.to_dict()
    assert payload["custom_id"] == "framecast:remix-form:video:12"
    inputs = [row["component"] for row in payload["components"]]
    assert [c["custom_id"] for c in inputs] == ["prompt", "size", "length", "fps", "model"]
    assert [c.get("value") for c in inputs] == ["a fox\nin snow", "vertical", "3", "30", None]
    assert inputs[0]["style"] == discord.TextStyle.paragraph.value and inputs[0]["max_length"] == 2000
    assert [c["required"] for c in inputs] == [True, False, False, False, False]
    assert inputs[4]["placeholder"] == "Empty: the default (svc-video-v2.0)"
    # Stopped: discord.py does not store it, so every submit takes the one on_interaction path.
    assert form.is_finished()
    image = remix_form(3, JobKind.IMAGE, title="t", values={}, labels=LABELS, prompt_max=9000)
    image_inputs = [row["component"] for row in image.to_dict()["components"]]
    assert [c["custom_id"] for c in image_inputs] == ["prompt", "size", "model"]
    assert image_inputs[0]["max_length"] == 4000  # Discord's cap on a text input


def test_long_titles_labels_and_prompts_are_cut_to_discords_limits() -> None:
    form = remix_form(
        1,
        JobKind.IMAGE,
        title="T" * 80,
        values={RemixField.PROMPT: "p" * 5000},
        labels={name: "L" * 60 for name in RemixField},
        prompt_max=4000,
    )
    payload = form.to_dict()
    assert len(payload["title"]) == 45
    assert all(len(row["label"]) == 45 for row in payload["components"])
    assert len(payload["components"][0]["component"]["value"]) == 4000


def test_remix_form_target() -> None:
    assert remix_form_target("framecast:remix-form:video:12") == (JobKind.VIDEO, 12)
    assert remix_form_target("framecast:remix-form:image:7") == (JobKind.IMAGE, 7)
    for other in ("framecast:remix:12:3", "framecast:remix-form:audio:1", "framecast:remix-form:video:x", ""):
        assert remix_form_target(other) is None


def test_form_values_reads_labels_and_action_rows() -> None:
    data = {
        "custom_id": "framecast:remix-form:video:1",
        "components": [
            {"type": 18, "component": {"type": 4, "custom_id": "prompt", "value": "hello"}},
            {"type": 1, "components": [{"type": 4, "custom_id": "size", "value": "square"}]},
            {"type": 18, "component": {"type": 4, "custom_id": "model", "value": ""}},
            {"type": 10, "content": "text without an input"},
            "garbage",
        ],
    }
    assert form_values(data) == {"prompt": "hello", "size": "square", "model": ""}
    assert form_values(None) == {} and form_values({"components": "nope"}) == {}
