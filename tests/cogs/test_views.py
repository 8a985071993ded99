"""The job buttons and the Remix form: custom ids, a click reaching its typed handler and its errors
the one error handler, the form's fields and what a submit carries (no Discord needed)."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import discord
import pytest

from cogs.views.buttons import AgainButton, CancelButton, RemixButton, RetryButton
from cogs.views.remix import RemixSubmit, remix_form
from framecast.app import Actor, FormInput, JobAction, JobKind, JobOptions, JobRefused, Refusal, RemixPrefill
from tests.fakes.gen_service import VIDEO_MODEL


def test_custom_ids_carry_the_action_and_the_job() -> None:
    cancel, retry = CancelButton(41, 7), RetryButton(42, 8, label="Nochmal")
    assert cancel.item.custom_id == "framecast:cancel:41:7" and cancel.item.label == "Cancel"
    assert retry.item.custom_id == "framecast:retry:42:8" and retry.item.label == "Nochmal"
    assert CancelButton(41).item.custom_id == "framecast:cancel:41"
    # Messages out there carry the requester's id too: their buttons still match (it decides nothing).
    for custom_id in ("framecast:cancel:41:7", "framecast:cancel:41"):
        assert re.fullmatch(CancelButton.__discord_ui_compiled_template__, custom_id)
    assert not re.fullmatch(CancelButton.__discord_ui_compiled_template__, "framecast:retry:41:7")
    again, remix = AgainButton(43, 9), RemixButton(43, 9)
    assert (again.item.custom_id, remix.item.custom_id) == ("framecast:again:43:9", "framecast:remix:43:9")
    buttons = (CancelButton, RetryButton, AgainButton, RemixButton)
    for button in (cancel, retry, again, remix, AgainButton(43)):
        # Each custom id is claimed by exactly one registered button class.
        custom_id = button.item.custom_id or ""
        owners = [b for b in buttons if re.fullmatch(b.__discord_ui_compiled_template__, custom_id)]
        assert owners == [type(button)]


class Response:
    """An interaction's response that records what was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.deferred = False

    def is_done(self) -> bool:
        return bool(self.sent) or self.deferred

    async def send_message(self, content: str, **kwargs: Any) -> None:
        self.sent.append((content, kwargs))

    async def defer(self, **kwargs: Any) -> None:
        self.deferred = True


class RefusingMembers:
    """The members' use cases, refusing every action on a job, as the stored job would decide."""

    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal
        self.asked: list[tuple[Actor, int, JobAction]] = []

    async def authorize(self, actor: Actor, job_id: int, action: JobAction, viewer: object = None) -> None:
        self.asked.append((actor, job_id, action))
        raise JobRefused(self.refusal, job_id)


def clicked_by(user_id: int, members: Any, *, manages: bool = False) -> Any:
    """An interaction: `user_id` clicked in guild 5, channel 6, with or without Manage Server."""
    return SimpleNamespace(
        client=SimpleNamespace(core=SimpleNamespace(members=members)),
        guild_id=5,
        guild=None,
        channel_id=6,
        channel=None,
        user=SimpleNamespace(id=user_id),
        locale=discord.Locale.american_english,
        permissions=discord.Permissions(manage_guild=manages),
        app_permissions=discord.Permissions.all(),
        response=Response(),
        is_guild_integration=lambda: True,  # the server installed the app
    )


@pytest.mark.parametrize("button", [CancelButton(41, 7), RetryButton(41, 7)])
async def test_authority_is_asked_of_the_use_case_not_read_from_the_custom_id(button: Any) -> None:
    # The custom id names member 7 as the requester; member 7 clicking is still the use case's call.
    members = RefusingMembers(Refusal.NOT_ALLOWED)
    interaction = clicked_by(7, members, manages=True)
    await button.callback(interaction)
    [(actor, job_id, action)] = members.asked
    assert (actor, job_id) == (Actor(user_id=7, guild_id=5, manages_guild=True), 41)
    assert action is (JobAction.CANCEL if isinstance(button, CancelButton) else JobAction.RETRY)
    # The refusal is the one error handler's private reply, before any acknowledgement.
    [(text, kwargs)] = interaction.response.sent
    assert text.startswith("Only the member who asked") and kwargs["ephemeral"] is True
    assert not interaction.response.deferred


async def test_an_unexpected_error_in_a_click_is_logged_and_apologised_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        async def authorize(self, actor: Actor, job_id: int, action: JobAction) -> None:
            raise RuntimeError("the store fell over")

    interaction = clicked_by(7, Broken())
    await CancelButton(41).callback(interaction)
    [(text, kwargs)] = interaction.response.sent
    assert kwargs["ephemeral"] is True and "the store fell over" not in text
    assert "the cancel button of job 41 failed" in caplog.text and "RuntimeError" in caplog.text


def prefill(kind: JobKind = JobKind.VIDEO, **options: Any) -> RemixPrefill:
    return RemixPrefill(
        job_id=12,
        kind=kind,
        options=JobOptions(**{"prompt": "a fox\nin snow", **options}),
        default_model=VIDEO_MODEL,
        prompt_max=2000,
    )


async def test_the_remix_form_is_prefilled_and_never_kept_by_discord_py() -> None:
    form = remix_form(prefill(size="vertical", seconds=3, fps=30), "en-US")
    payload = form.to_dict()
    assert payload["custom_id"].startswith("framecast:remix-form:video:12:")
    # Each opening has its own id (discord.py would keep only one open form per id).
    assert remix_form(prefill(), "en-US").to_dict()["custom_id"] != payload["custom_id"]
    assert RemixSubmit.of(submitted({"custom_id": payload["custom_id"]})) is not None
    inputs = [row["component"] for row in payload["components"]]
    assert [c["custom_id"] for c in inputs] == ["prompt", "size", "length", "fps", "model"]
    assert [c.get("value") for c in inputs] == ["a fox\nin snow", "vertical", "3", "30", None]
    assert inputs[0]["style"] == discord.TextStyle.paragraph.value and inputs[0]["max_length"] == 2000
    assert [c["required"] for c in inputs] == [True, False, False, False, False]
    assert VIDEO_MODEL in inputs[4]["placeholder"]  # empty means this default
    # Stopped: discord.py does not store it, so every submit takes the one on_interaction route.
    assert form.is_finished()
    image = remix_form(
        RemixPrefill(12, JobKind.IMAGE, JobOptions("p"), default_model="svc-image-2.0", prompt_max=9000), "de"
    )
    image_inputs = [row["component"] for row in image.to_dict()["components"]]
    assert [c["custom_id"] for c in image_inputs] == ["prompt", "size", "model"]
    assert image_inputs[0]["max_length"] == 4000  # Discord's cap on a text input


async def test_long_labels_and_prompts_are_cut_to_discords_limits() -> None:
    form = remix_form(
        RemixPrefill(1, JobKind.IMAGE, JobOptions("p" * 5000), default_model="m" * 100, prompt_max=4000),
        "en-US",
    )
    payload = form.to_dict()
    assert len(payload["title"]) <= 45
    assert all(len(row["label"]) <= 45 for row in payload["components"])
    assert len(payload["components"][0]["component"]["value"]) == 4000
    assert all(len(row["component"].get("placeholder") or "") <= 100 for row in payload["components"])


def submitted(data: Any, kind: discord.InteractionType = discord.InteractionType.modal_submit) -> Any:
    return SimpleNamespace(type=kind, data=data)


def test_a_remix_submit_names_its_job_and_kind() -> None:
    for custom_id, target in (
        ("framecast:remix-form:video:12", (JobKind.VIDEO, 12)),
        ("framecast:remix-form:image:7", (JobKind.IMAGE, 7)),
    ):
        submit = RemixSubmit.of(submitted({"custom_id": custom_id, "components": []}))
        assert submit is not None and (submit.kind, submit.job_id) == target
    for other in ("framecast:remix:12:3", "framecast:remix-form:audio:1", "framecast:remix-form:video:x", ""):
        assert RemixSubmit.of(submitted({"custom_id": other})) is None
    # A button click carrying a form's id is not a submit.
    button = submitted({"custom_id": "framecast:remix-form:video:12"}, discord.InteractionType.component)
    assert RemixSubmit.of(button) is None


def test_a_remix_submit_reads_labels_and_action_rows() -> None:
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
    submit = RemixSubmit.of(submitted(data))
    assert submit is not None
    assert submit.form == FormInput(prompt="hello", size="square", model="")
    nothing = RemixSubmit.of(submitted({"custom_id": "framecast:remix-form:image:1", "components": "nope"}))
    assert nothing is not None and nothing.form == FormInput(prompt="")
