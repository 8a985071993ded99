"""Issue 7, the Discord side: prompts shown as text (10), one retry per failed job (9), model drift
(12) and start-up while Discord is unreachable (13), end to end against the real bot.py."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tests.e2e.harness import (
    BotProcess,
    StartWorld,
    World,
    button_ids,
    close_world,
    job_rows,
    make_world,
    service_creates,
    status_of,
    wait_log,
)
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL, TaskPlan

FAST_RETRIES = {"DISCORD_RETRY_MAX_DELAY": "0.2"}
UNREACHABLE = "cannot reach Discord ("
GATEWAY_UNREACHABLE = "cannot reach Discord's gateway ("

# Discord's markdown: a backslash before ASCII punctuation shows that character.
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def shown(text: str) -> str:
    """What Discord displays for `text`, escapes-wise."""
    return _ESCAPE.sub(r"\1", text)


def unescaped(text: str, chars: str) -> list[str]:
    """Characters of `chars` in `text` that no backslash escapes (Discord could read them as markup)."""
    return [m[0] for m in re.finditer(r"\\.|.", text, re.DOTALL) if len(m[0]) == 1 and m[0] in chars]


def lines_with(world: World, text: str) -> list[str]:
    assert world.bot is not None
    return [line for line in world.bot.log_text().splitlines() if text in line]


async def wait_lines(world: World, text: str, count: int, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(lines_with(world, text)) < count:
        assert world.bot is not None and world.bot.running, world.bot and world.bot.log_text()[-3000:]
        if loop.time() > deadline:
            raise TimeoutError(f"fewer than {count} log lines with {text!r}")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------------- 10: prompts are shown as text


async def test_markup_in_a_prompt_is_shown_literally_and_sent_exactly(world: World) -> None:
    prompt = (
        "[Claim your free Nitro](https://discord.gift/x) # big **bold** <@&1> @everyone "
        "`code` ||spoiler|| <t:1700000000:R>"
    )
    it = await world.video(prompt)
    msg = await world.delivered(it)
    # The service gets the member's exact text...
    assert [r.json["prompt"] for r in service_creates(world)] == [prompt]
    # ...and Discord shows it as typed: no masked link, no link at all, no markup, no mention.
    description = msg.embeds[0]["description"]
    assert shown(description) == prompt
    assert unescaped(description, "[]<@*_~|`") == []
    assert "https://" not in description
    # /job shows the same embed.
    job_id = await world.job_id(it)
    look = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
    await look.wait_response()
    private = await look.wait_original(lambda m: bool(m.embeds))
    assert private.embeds[0]["description"] == description


# ---------------------------------------------------------------------- 9: one retry per failed job


async def test_two_simultaneous_retry_clicks_make_exactly_one_new_job(world: World) -> None:
    prompt = "a doomed lighthouse"
    world.service.plans = [("doomed", TaskPlan(outcome="failed", error="GPU on fire"))]
    it = await world.video(prompt)
    job_id = await world.job_id(it)
    msg = await it.wait_original(lambda m: status_of(m).startswith("❌") and bool(button_ids(m)))
    [retry] = button_ids(msg)
    world.service.plans = []

    # A double click: two interactions for the same button, at the same moment.
    clicks = await asyncio.gather(*(world.discord.click(msg, retry, world.alice) for _ in range(2)))
    await asyncio.gather(*(c.wait_response() for c in clicks))
    await world.discord.wait_for(
        lambda: (
            sum(1 for r in job_rows(world).values() if r["retry_of"] == job_id) >= 1
            and any(c.followups for c in clicks)
        ),
        timeout=10,
        what="one retry job and one refusal",
    )
    [new_id] = [i for i, r in job_rows(world).items() if r["retry_of"] == job_id]
    winner = next(c for c in clicks if not c.followups)
    loser = next(c for c in clicks if c.followups)
    assert await world.job_id(winner) == new_id
    await world.delivered(winner)
    # The other click was answered privately, in plain words, and its "thinking" message is gone.
    note = await loser.wait_followup(lambda m: m.ephemeral)
    assert note.content == f"Job #{job_id} was already retried as job #{new_id}."
    assert loser.original is None or loser.original.deleted

    # A later click, by a member reading German: the same answer, privately.
    late = await world.discord.click(msg, retry, world.alice, locale="de")
    await late.wait_response()
    note = await late.wait_followup(lambda m: m.ephemeral)
    assert note.content == f"Auftrag #{job_id} wurde bereits als Auftrag #{new_id} erneut gestartet."
    assert len(service_creates(world, prompt)) == 2  # the failed job and its one retry
    assert len([r for r in job_rows(world).values() if r["retry_of"] == job_id]) == 1


# ---------------------------------------------------------------------- 12: model drift


def drifted(world: World) -> None:
    world.service.models = [
        ("svc-video-v1.9", "video"),
        ("svc-video-v2.1", "video"),
        (IMAGE_MODEL, "image"),
        ("svc-text-1.5", "text"),
    ]


async def test_a_default_model_the_service_dropped_is_replaced_by_the_newest_of_its_family(
    start: StartWorld,
) -> None:
    world = await start(setup=drifted)
    await wait_log(world, f"GEN_VIDEO_MODEL {VIDEO_MODEL} is not in the service's model list", timeout=15)
    it = await world.video("a drifting glacier")
    msg = await world.delivered(it)
    [create] = service_creates(world, "a drifting glacier")
    assert create.json["model"] == "svc-video-v2.1"
    fields = {f["name"]: f["value"] for f in msg.embeds[0]["fields"]}
    assert fields["Settings"].endswith("· svc-video-v2.1")
    # One warning for the operator, naming both ids; the image default is listed, so nothing about it.
    [warning] = lines_with(world, "is not in the service's model list")
    assert "WARNING" in warning and VIDEO_MODEL in warning and "svc-video-v2.1" in warning
    assert not lines_with(world, "GEN_IMAGE_MODEL")

    # A model a member picks that the list lacks is still refused, with the list.
    pick = await world.discord.slash(
        world.guild,
        world.channel,
        world.bob,
        "video",
        {"prompt": "a drifting glacier", "model": VIDEO_MODEL},
    )
    kind, data = await pick.wait_response()
    assert kind == 4 and data is not None and data["flags"] & 64
    assert VIDEO_MODEL in data["content"] and "svc-video-v1.9, svc-video-v2.1" in data["content"]
    assert len(service_creates(world, "a drifting glacier")) == 1


async def test_retry_of_a_job_made_with_a_dropped_default_follows_the_list(start: StartWorld) -> None:
    world = await start()
    world.service.plans = [("moth", TaskPlan(outcome="failed", error=f"{VIDEO_MODEL} does not exist"))]
    it = await world.video("a moth at a lamp")
    job_id = await world.job_id(it)
    msg = await it.wait_original(lambda m: status_of(m).startswith("❌") and bool(button_ids(m)))
    assert world.bot is not None
    await world.bot.terminate()
    world.service.plans = []
    drifted(world)
    await world.restart_bot()
    await wait_log(world, "using svc-video-v2.1", timeout=15)
    click = await world.discord.click(msg, button_ids(msg)[0], world.alice)
    await click.wait_response()
    new_id = await world.job_id(click)
    await world.delivered(click)
    assert [c.json["model"] for c in service_creates(world, "a moth at a lamp")] == [
        VIDEO_MODEL,
        "svc-video-v2.1",
    ]
    assert job_rows(world)[new_id]["retry_of"] == job_id


# ---------------------------------------------------------------------- 13: start-up without Discord


async def bot_without_discord(world: World) -> BotProcess:
    """bot.py started while the fake Discord listens nowhere (connection refused)."""
    await world.discord.stop()
    world.bot = BotProcess(world.env, world.tmp / "bot.log")
    await world.bot.start()
    return world.bot


def assert_one_line_per_attempt(world: World, marker: str) -> None:
    assert world.bot is not None
    log = world.bot.log_text()
    assert "Traceback" not in log
    for line in lines_with(world, marker):
        assert re.search(r"\(.+\); retrying in \d+\.\d s$", line), line


async def test_the_bot_waits_for_an_unreachable_discord_then_serves(tmp_path: Any) -> None:
    world = await make_world(tmp_path, extra_env=FAST_RETRIES)
    try:
        await bot_without_discord(world)
        await wait_lines(world, UNREACHABLE, 3)
        assert_one_line_per_attempt(world, UNREACHABLE)
        await world.discord.start()  # Discord is back, on the same address
        await world.discord.wait_ready(timeout=30)
        it = await world.video("a ship in a bottle")
        await world.delivered(it)
        assert "Traceback" not in world.bot.log_text()  # type: ignore[union-attr]
    finally:
        await close_world(world)


async def test_5xx_from_discord_at_log_in_and_at_the_gateway_are_waited_out(start: StartWorld) -> None:
    def flaky(world: World) -> None:
        world.discord.fail_next("GET /users/@me", status=503, count=3)
        world.discord.gateway_failures = 2

    world = await start(setup=flaky, extra_env=FAST_RETRIES)
    assert len(lines_with(world, UNREACHABLE)) == 3
    assert len(lines_with(world, GATEWAY_UNREACHABLE)) == 2
    assert world.discord.gateway_refused == 2
    assert_one_line_per_attempt(world, "cannot reach Discord")
    assert "HTTP 503" in lines_with(world, UNREACHABLE)[0]
    it = await world.video("a patient heron")
    await world.delivered(it)
    # The core was opened once, however many log-in attempts it took.
    assert len(lines_with(world, "model list:")) == 1


async def test_a_lost_gateway_is_one_log_line_and_the_bot_carries_on(world: World) -> None:
    mark = world.discord.identify_count
    world.discord.gateway_failures = 1  # the first reconnection attempt meets a 503
    await world.discord.disconnect(code=4000)
    await world.discord.wait_for(
        lambda: world.discord.gateway_refused == 1, timeout=10, what="a refused reconnect"
    )
    await wait_log(world, "lost the connection to Discord's gateway (WSServerHandshakeError", timeout=10)
    # discord.py resumes the session (no new IDENTIFY) and the bot keeps serving.
    await world.discord.wait_for(
        lambda: any(c for c in world.discord._connections if not c.closed),  # noqa: SLF001
        timeout=20,
        what="a gateway connection again",
    )
    assert world.discord.identify_count == mark
    it = await world.video("a bridge after the storm")
    await world.delivered(it)
    assert world.bot is not None and "Traceback" not in world.bot.log_text()
    [line] = lines_with(world, "lost the connection to Discord's gateway")
    assert "WARNING" in line


async def test_sigterm_while_waiting_for_discord_exits_promptly_and_cleanly(tmp_path: Any) -> None:
    world = await make_world(tmp_path, extra_env=FAST_RETRIES)
    try:
        bot = await bot_without_discord(world)
        await wait_lines(world, UNREACHABLE, 1)
        loop = asyncio.get_running_loop()
        began = loop.time()
        assert await bot.terminate(timeout=10) == 0
        assert loop.time() - began < 5
        assert "Traceback" not in bot.log_text()
    finally:
        await close_world(world)


async def test_a_rejected_token_is_one_line_and_exit_code_2(tmp_path: Any) -> None:
    world = await make_world(tmp_path, extra_env=FAST_RETRIES)
    try:
        env = dict(world.env, DISCORD_TOKEN="wrong-token-" + "z" * 40)
        bot = BotProcess(env, tmp_path / "wrong.log")
        await bot.start()
        assert await bot.wait(30) == 2
        log = bot.log_text()
        [line] = [x for x in log.splitlines() if "ERROR" in x]
        assert "DISCORD_TOKEN" in line
        assert "Traceback" not in log and UNREACHABLE not in log  # refused, not retried
        assert "z" * 40 not in log and world.env["GEN_API_KEY"] not in log
    finally:
        await close_world(world)
