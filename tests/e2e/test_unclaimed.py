"""Clicks and form submits whose custom id no handler of Framecast's claims (a tampered client, or a
message of an older version): answered privately in the member's language, nothing done, never
"This interaction failed"."""

from __future__ import annotations

from tests.e2e.harness import World, answer_to, button_ids, job_rows, service_creates

UNKNOWN_EN = (
    "Framecast doesn't know this button or form (it may belong to an older message). "
    "Nothing was done: use the command again."
)


async def test_clicks_with_custom_ids_no_button_claims_are_answered_privately(world: World) -> None:
    done = await world.image("a kite")
    message = await world.delivered(done)
    for custom_id in (
        "framecast:delete:-1",
        "framecast:retry:1:2:3",
        "framecast:bogus:1",
        "framecast:" + "x" * 90,
        f"framecast:again:{'9' * 21}",
        "framecast:history:1:sideways:1",
        "not-ours",
    ):
        click = await world.discord.click(message, custom_id, world.bob, crafted=True)
        assert await answer_to(world, click) == (UNKNOWN_EN, True), custom_id
    assert len(service_creates(world)) == 1 and len(job_rows(world)) == 1
    assert button_ids(message), "the message kept its buttons"


async def test_a_forged_form_submit_is_answered_in_the_members_language(world: World) -> None:
    done = await world.image("a kite")
    message = await world.delivered(done)
    job_id = await world.job_id(done)
    [remix] = [c for c in button_ids(message) if c.startswith("framecast:remix:")]
    click = await world.discord.click(message, remix, world.bob, locale="de")
    await click.wait_response()
    form = click.modal
    assert form is not None, "the Remix form opened"
    form["custom_id"] = f"framecast:remix-form:video:{job_id}:NOTHEX"
    submit = await world.discord.submit_modal(click, {"prompt": "forged"})
    content, ephemeral = await answer_to(world, submit)
    assert ephemeral and content.startswith("Framecast kennt diese Schaltfläche"), content
    assert len(service_creates(world)) == 1 and len(job_rows(world)) == 1
