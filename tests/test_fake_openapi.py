"""Tests of tests/fakes/openapi.py: Discord's OpenAPI spec as the fake Discord applies it.

The accepted payloads are built by discord.py's own payload builders (the functions its HTTP client
calls for a send, an edit, a callback, a sync), the refused ones are those payloads broken in one
place; the fake is then driven over HTTP, raw and through discord.py's REST client.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import discord
import pytest
from discord import app_commands
from discord.http import handle_message_parameters
from discord.webhook.async_ import interaction_message_response_params, interaction_response_params

from tests.fakes.discord_api import FakeDiscord
from tests.fakes.gen_service import VIDEO_MODEL
from tests.fakes.openapi import Problem, form_errors, spec

# --------------------------------------------------------------------------------------------
# Payloads as discord.py builds them
# --------------------------------------------------------------------------------------------

USER_ID = 302050872383242240
CALLBACK = "/interactions/1234567890123456789/aW50ZXJhY3Rpb24tdG9rZW4/callback"
ORIGINAL = "/webhooks/1234567890123456789/aW50ZXJhY3Rpb24tdG9rZW4/messages/@original"
FOLLOWUP = "/webhooks/1234567890123456789/aW50ZXJhY3Rpb24tdG9rZW4"
CHANNEL_MESSAGES = "/channels/1234567890123456789/messages"
GUILD_COMMANDS = "/applications/1234567890123456789/guilds/987654321098765432/commands"


def _file(name: str = "clip.mp4") -> discord.File:
    return discord.File(io.BytesIO(b"\x00" * 64), filename=name)


def _wire_body(params: Any) -> Any:
    """The JSON discord.py puts on the wire: the body, or a multipart request's ``payload_json``."""
    if params.multipart:
        part = next(p for p in params.multipart if p["name"] == "payload_json")
        return json.loads(part["value"])
    return json.loads(discord.utils._to_json(params.payload))  # noqa: SLF001 - discord.py's own encoder


def _embed(title: str = "a cat on a skateboard") -> discord.Embed:
    embed = discord.Embed(title=title, description="1280x720, 5 s", colour=0x5865F2)
    embed.add_field(name="Model", value=VIDEO_MODEL).set_footer(text="job 17")
    return embed


def _view() -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    view.add_item(
        discord.ui.Button(label="Cancel", style=discord.ButtonStyle.danger, custom_id="job:17:cancel")
    )
    view.add_item(discord.ui.Button(label="Open", url="https://example.com/result/17"))
    return view


def channel_send() -> dict[str, Any]:
    """``channel.send`` of a result: mention, embed, view, reply reference, one file (multipart)."""
    reference = discord.MessageReference(message_id=1111111111111111111, channel_id=1234567890123456789)
    params = handle_message_parameters(
        content=f"<@{USER_ID}> your video is ready",
        embed=_embed(),
        view=_view(),
        file=_file(),
        allowed_mentions=discord.AllowedMentions(
            everyone=False, roles=False, users=[discord.Object(USER_ID)]
        ),
        message_reference=reference.to_message_reference_dict(),
        previous_allowed_mentions=discord.AllowedMentions.none(),
    )
    assert params.multipart  # the file makes it multipart: payload_json + files[0]
    return _wire_body(params)


def edit_with_attachments() -> dict[str, Any]:
    """``edit_original_response(attachments=[File])``: multipart, attachment placeholders with int ids."""
    params = handle_message_parameters(
        content="done",
        attachments=[_file("clip.mp4"), _file("poster.png")],
        embed=_embed(),
        view=None,
        previous_allowed_mentions=discord.AllowedMentions.none(),
    )
    body = _wire_body(params)
    assert params.multipart and isinstance(body["attachments"][0]["id"], int)
    return body


def callback_message() -> dict[str, Any]:
    """``response.send_message(..., ephemeral=True, embed=..., view=...)``: type 4."""
    params = interaction_message_response_params(
        type=4,
        content="Your job is queued",
        embed=_embed(),
        view=_view(),
        flags=discord.MessageFlags(ephemeral=True),
        previous_allowed_mentions=discord.AllowedMentions.none(),
    )
    return _wire_body(params)


def callback_defer() -> dict[str, Any]:
    """``response.defer(ephemeral=True)`` of a slash command: type 5 with flags."""
    return _wire_body(interaction_response_params(5, {"flags": 64}))


def callback_deferred_update() -> dict[str, Any]:
    """``response.defer()`` of a button click: type 6, no data."""
    return _wire_body(interaction_response_params(6))


class Settings(discord.ui.Modal, title="Server settings"):
    quota: discord.ui.TextInput[Any] = discord.ui.TextInput(label="Daily videos", custom_id="settings:quota")
    note: discord.ui.TextInput[Any] = discord.ui.TextInput(
        label="Blocklist", style=discord.TextStyle.paragraph, required=False, max_length=1000
    )


def callback_modal() -> dict[str, Any]:
    """``response.send_modal(Settings())``: type 9."""
    return _wire_body(interaction_response_params(9, Settings().to_dict()))


def followup() -> dict[str, Any]:
    """``followup.send(..., ephemeral=True, file=...)``: a webhook execute, multipart."""
    params = handle_message_parameters(
        content="the result is bigger than 10 MiB: here is a link",
        file=_file(),
        flags=discord.MessageFlags(ephemeral=True),
        previous_allowed_mentions=discord.AllowedMentions.none(),
    )
    return _wire_body(params)


class Translator(app_commands.Translator):
    """Localises two names and one description, like the bot's translator does."""

    async def translate(
        self,
        string: app_commands.locale_str,
        locale: discord.Locale,
        context: app_commands.TranslationContext,
    ) -> str | None:
        table = {
            ("video", discord.Locale.german): "video",
            ("video", discord.Locale.japanese): "動画",
            ("video", discord.Locale.hindi): "वीडियो",
            ("prompt", discord.Locale.french): "invite",
            ("Generate a video", discord.Locale.german): "Ein Video erzeugen",
        }
        return table.get((string.message, locale))


def command_tree(client: discord.Client) -> app_commands.CommandTree[Any]:
    """A tree like the bot's: localised names, a ranged option, a gated command, a context menu."""
    tree: app_commands.CommandTree[Any] = app_commands.CommandTree(client)

    @tree.command(
        name=app_commands.locale_str("video"), description=app_commands.locale_str("Generate a video")
    )
    @app_commands.describe(prompt=app_commands.locale_str("What to show"))
    @app_commands.rename(prompt=app_commands.locale_str("prompt"))
    async def video(
        interaction: discord.Interaction, prompt: str, seconds: app_commands.Range[int, 1, 10] = 5
    ) -> None:
        """Never called."""

    @tree.command(name="settings", description="Server settings")
    @app_commands.default_permissions(manage_guild=True)
    @app_commands.guild_only()
    async def settings(interaction: discord.Interaction) -> None:
        """Never called."""

    @tree.context_menu(name="Remix This")
    async def remix(interaction: discord.Interaction, message: discord.Message) -> None:
        """Never called (a message command: spaces and capitals are fine)."""

    return tree


async def bulk_overwrite() -> list[dict[str, Any]]:
    """What ``tree.sync()`` sends: commands with localisations, options, default_member_permissions."""
    tree = command_tree(discord.Client(intents=discord.Intents.none()))
    translator = Translator()
    commands = [*tree.get_commands(), *tree.get_commands(type=discord.AppCommandType.message)]
    payload = [await cmd.get_translated_payload(tree, translator) for cmd in commands]
    return json.loads(json.dumps(payload))


def _check(method: str, path: str, body: Any, query: dict[str, str] | None = None) -> list[str]:
    return [str(p) for p in spec().check(method, path, query=query, body=body).problems]


# --------------------------------------------------------------------------------------------
# Matching and accepting
# --------------------------------------------------------------------------------------------


def test_templates_match_like_discord_routes() -> None:
    s = spec()
    assert s.match("PATCH", ORIGINAL).template == "/webhooks/{webhook_id}/{webhook_token}/messages/@original"
    assert s.match("PATCH", ORIGINAL.replace("@original", "42")).template == (
        "/webhooks/{webhook_id}/{webhook_token}/messages/{message_id}"
    )
    assert s.match("POST", CALLBACK).template == "/interactions/{interaction_id}/{interaction_token}/callback"
    assert s.match("GET", "/users/@me").template == "/users/@me"
    assert s.match("GET", "/users/42").template == "/users/{user_id}"
    unknown = s.match("GET", "/no/such/route")
    assert unknown.template is None and not unknown.in_spec
    wrong_method = s.match("PUT", "/users/@me")
    assert wrong_method.template == "/users/@me" and not wrong_method.method_known


def test_every_route_of_the_fake_is_in_the_spec() -> None:
    fake = FakeDiscord()
    for method, _pattern, _handler, _auth, template in fake._routes:  # noqa: SLF001 - the fake's route table
        path = re.sub(r"\{\w+\}", "1234567890", template)
        assert spec().match(method, path).in_spec, f"{method} {template}"


@pytest.mark.parametrize(
    ("method", "path", "build"),
    [
        ("POST", CHANNEL_MESSAGES, channel_send),
        ("PATCH", ORIGINAL, edit_with_attachments),
        ("PATCH", CHANNEL_MESSAGES + "/42", edit_with_attachments),
        ("POST", CALLBACK, callback_message),
        ("POST", CALLBACK, callback_defer),
        ("POST", CALLBACK, callback_deferred_update),
        ("POST", CALLBACK, callback_modal),
        ("POST", FOLLOWUP, followup),
    ],
)
def test_discordpy_payloads_are_accepted(method: str, path: str, build: Any) -> None:
    assert _check(method, path, build(), {"with_response": "1", "wait": "1"}) == []


async def test_discordpy_bulk_overwrite_is_accepted() -> None:
    payload = await bulk_overwrite()
    video = next(c for c in payload if c["name"] == "video")
    assert video["name_localizations"]["ja"] == "動画" and payload[1]["default_member_permissions"] == 32
    assert _check("PUT", GUILD_COMMANDS, payload) == []


def test_snowflakes_may_be_integers_but_not_words() -> None:
    body: dict[str, Any] = {"content": "hi", "allowed_mentions": {"users": [USER_ID, str(USER_ID)]}}
    assert _check("POST", CHANNEL_MESSAGES, body) == []
    body["allowed_mentions"] = {"users": ["alice"]}
    assert _check("POST", CHANNEL_MESSAGES, body) == [
        "body.allowed_mentions.users.0: 'alice' does not match ^(0|[1-9][0-9]*)$"
    ]


def test_query_strings_are_read_as_discord_reads_them() -> None:
    assert _check("GET", CHANNEL_MESSAGES, None, {"limit": "50", "before": "123"}) == []
    assert _check("GET", CHANNEL_MESSAGES, None, {"limit": "500"}) == [
        "query.limit: 500 is above the maximum 100"
    ]
    assert _check("GET", CHANNEL_MESSAGES, None, {"limit": "lots"}) == [
        "query.limit: must be integer, got string 'lots'"
    ]
    assert _check("POST", CALLBACK, callback_defer(), {"with_response": "maybe"}) == [
        "query.with_response: must be boolean, got string 'maybe'"
    ]


# --------------------------------------------------------------------------------------------
# Refusing, with a readable problem
# --------------------------------------------------------------------------------------------


def _long_content() -> tuple[str, str, Any]:
    body = channel_send()
    body["content"] = "x" * 2001
    return "POST", CHANNEL_MESSAGES, body


def _long_embed_title() -> tuple[str, str, Any]:
    body = callback_message()
    body["data"]["embeds"][0]["title"] = "t" * 257
    return "POST", CALLBACK, body


def _six_modal_rows() -> tuple[str, str, Any]:
    body = callback_modal()
    row = body["data"]["components"][0]
    body["data"]["components"] = [row] * 6
    return "POST", CALLBACK, body


async def _spaced_command_name() -> tuple[str, str, Any]:
    payload = await bulk_overwrite()
    payload[0]["name"] = "make video"
    return "PUT", GUILD_COMMANDS, payload


def _unknown_callback_type() -> tuple[str, str, Any]:
    body = callback_defer()
    body["type"] = 42
    return "POST", CALLBACK, body


def _bad_button_style() -> tuple[str, str, Any]:
    body = edit_with_attachments()
    body["components"] = [
        {"type": 1, "components": [{"type": 2, "style": 9, "label": "x", "custom_id": "x"}]}
    ]
    return "PATCH", ORIGINAL, body


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (_long_content, "body.content: must be 2000 or fewer in length (got 2001)"),
        (_long_embed_title, "body.data.embeds.0.title: must be 256 or fewer in length (got 257)"),
        (_six_modal_rows, "body.data.components: must be 5 or fewer in length (got 6)"),
        (_spaced_command_name, "body.0.name: 'make video' does not match"),
        (_unknown_callback_type, "body.type: value 42 must be one of [1, 4, 5, 6, 7, 8, 9, 12, 13]"),
        (
            _bad_button_style,
            "body.components.0.components.0.style: value 9 must be one of [1, 2, 3, 4, 5, 6]",
        ),
    ],
)
async def test_broken_payloads_are_refused_readably(build: Any, expected: str) -> None:
    built = build()
    method, path, body = await built if hasattr(built, "__await__") else built
    problems = _check(method, path, body, {"with_response": "1"})
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_form_errors_nest_like_discord() -> None:
    problems = [
        Problem(
            "body", ("embeds", 0, "title"), "must be 256 or fewer in length (got 300)", "BASE_TYPE_MAX_LENGTH"
        ),
        Problem("body", ("content",), "must be 2000 or fewer in length (got 2001)", "BASE_TYPE_MAX_LENGTH"),
    ]
    assert form_errors(problems) == {
        "embeds": {
            "0": {"title": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": problems[0].message}]}}
        },
        "content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": problems[1].message}]},
    }


# --------------------------------------------------------------------------------------------
# The fake answers like Discord
# --------------------------------------------------------------------------------------------


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    f = FakeDiscord()
    await f.start()
    monkeypatch.setattr(discord.http.Route, "BASE", f.api_base)
    try:
        yield f
    finally:
        await f.stop()


async def test_the_fake_refuses_what_the_spec_refuses(fake: FakeDiscord) -> None:
    guild = fake.add_guild("Spec")
    channel = fake.add_channel(guild, "general")
    auth = {"Authorization": f"Bot {fake.bot_token}"}
    url = f"{fake.api_base}/channels/{channel.id}/messages"
    # A colour above 0xFFFFFF: only the spec knows that rule, the fake's own checks do not.
    bad = {"content": "hi", "embeds": [{"title": "t", "color": 1 << 24}]}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=bad, headers=auth) as resp:
            assert resp.status == 400
            answer = await resp.json()
        form = aiohttp.FormData()
        form.add_field("payload_json", json.dumps({"content": "y" * 2001}), content_type="application/json")
        form.add_field("files[0]", b"data", filename="a.png", content_type="image/png")
        async with http.post(url, data=form, headers=auth) as resp:
            assert resp.status == 400
        async with http.get(url, params={"limit": "0"}, headers=auth) as resp:
            assert resp.status == 400
    assert answer["code"] == 50035 and answer["message"] == "Invalid Form Body"
    assert answer["errors"]["embeds"]["0"]["color"]["_errors"][0]["code"] == "NUMBER_TYPE_MAX"
    assert [str(v) for v in fake.spec_violations] == [
        "POST /channels/{channel_id}/messages: body.embeds.0.color: 16777216 is above the maximum 16777215",
        "POST /channels/{channel_id}/messages: body.content: must be 2000 or fewer in length (got 2001)",
        "GET /channels/{channel_id}/messages: query.limit: 0 is below the minimum 1",
    ]
    assert all(v.refused for v in fake.spec_violations) and len(fake.rejected(50035)) == 3
    assert fake.messages_in(channel) == [] and fake.files_delivered() == []


async def test_validation_can_be_turned_off() -> None:
    async with FakeDiscord(validate_requests=False) as fake:
        channel = fake.add_channel(fake.add_guild("Loose"), "general")
        bad = {"content": "hi", "embeds": [{"title": "t", "color": 1 << 24}]}
        async with aiohttp.ClientSession() as http:
            url = f"{fake.api_base}/channels/{channel.id}/messages"
            async with http.post(url, json=bad, headers={"Authorization": f"Bot {fake.bot_token}"}) as resp:
                assert resp.status == 200
        assert fake.spec_violations == [] and len(fake.messages_in(channel)) == 1


async def test_a_route_missing_from_the_spec_is_reported_not_refused(fake: FakeDiscord) -> None:
    async def handler(call: Any) -> tuple[int, Any]:
        return 200, {"ok": True}

    # A route the spec lacks, added the way tests/e2e/harness.py wraps the fake's routes.
    fake._routes.append(("GET", re.compile(r"^/framecast-only$"), handler, False, "/framecast-only"))  # noqa: SLF001
    async with aiohttp.ClientSession() as http, http.get(f"{fake.api_base}/framecast-only") as resp:
        assert resp.status == 200
    [violation] = fake.spec_violations
    assert violation.template is None and not violation.refused
    assert str(violation) == "GET /framecast-only: route not in the spec"


async def test_discordpy_rest_calls_pass_the_spec(fake: FakeDiscord) -> None:
    guild = fake.add_guild("Spec")
    channel = fake.add_channel(guild, "general")
    member = fake.add_member(guild, "alice")
    client = discord.Client(intents=discord.Intents.none())
    tree = command_tree(client)
    # The fake answers a synced message command without "description" (Discord answers ""), which
    # discord.py's AppCommand needs: leave the context menu to the payload test above.
    tree.remove_command("Remix This", type=discord.AppCommandType.message)
    await tree.set_translator(Translator())
    tree.copy_global_to(guild=discord.Object(guild.id))
    await client.login(fake.bot_token)
    try:
        synced = await tree.sync(guild=discord.Object(guild.id))
        assert {c.name for c in synced} == {"video", "settings"}
        target = client.get_partial_messageable(channel.id)
        sent = await target.send(
            f"{member.mention} done",
            embed=_embed(),
            file=_file(),
            allowed_mentions=discord.AllowedMentions(users=[discord.Object(member.id)]),
        )
        reply = await target.send("and a reply", reference=sent, mention_author=False)
        await sent.edit(attachments=[_file("poster.png")], embed=_embed("finished"))
        await reply.delete()
        await target.fetch_message(sent.id)
    finally:
        await client.close()
    assert fake.spec_violations == [] and fake.rejected() == []
    assert {r.route for r in fake.requests} >= {
        "PUT /applications/{app_id}/guilds/{guild_id}/commands",
        "POST /channels/{channel_id}/messages",
        "PATCH /channels/{channel_id}/messages/{message_id}",
    }
