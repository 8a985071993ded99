"""A hostile or broken generation service, end to end: odd URLs, bodies and files.

The real bot.py runs against the fakes; the fake service answers what an attacker or a broken
service would: result URLs naming local files and internal addresses, redirects to them, padded
and gzip-bomb answers, absurd numbers and JSON nested 200,000 deep. Whatever it answers, the bot
must upload nothing it should not, post no refused link, stay within bounded memory and never
leave a job stuck or failed as "internal".

No test sends a packet off the loopback interface: internal addresses are refused before any
connection is made (they carry the fake's own port all the same, so nothing listens there).
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

from cryptography.fernet import Fernet

from tests.e2e.commands import set_key
from tests.e2e.harness import (
    StartWorld,
    World,
    button_ids,
    job_rows,
    service_creates,
    status_of,
    wait_log,
    wait_state,
)
from tests.fakes.gen_service import POLL_PATH, TaskPlan
from tests.fakes.media import make_large_mp4

MiB = 1024 * 1024


# -- helpers ------------------------------------------------------------------------------------------
def everything_sent_to_discord(world: World) -> str:
    """Every payload the bot sent to Discord (messages, edits, interaction replies) as one text."""
    parts = [json.dumps(r.body, default=str) for r in world.discord.requests if r.body is not None]
    for message in world.discord.messages.values():
        parts.append(message.content)
        parts.append(json.dumps(message.embeds, default=str))
    return "\n".join(parts)


async def fails_with(world: World, it: Any, code: str, timeout: float = 30) -> dict[str, Any]:
    """Wait until the job of `it` failed with `code`, shown with a Retry button; return its row."""
    job_id = await world.job_id(it)
    row = await wait_state(world, job_id, "failed", timeout=timeout)
    assert row["error_code"] == code, row
    msg = await it.wait_original(lambda m: status_of(m).startswith("❌"), timeout=10)
    assert [c for c in button_ids(msg) if c.startswith(f"framecast:retry:{job_id}:")], button_ids(msg)
    assert world.files_for(job_id) == []  # nothing uploaded
    return row


def no_internal_failure(world: World) -> None:
    assert world.bot is not None
    log = world.bot.log_text()
    assert world.bot.running
    assert "unexpected error" not in log and "Traceback" not in log
    assert all(row["error_code"] != "internal" for row in job_rows(world).values())


def peak_rss(world: World) -> int:
    """The bot process's peak resident memory so far (VmHWM), in bytes."""
    assert world.bot is not None and world.bot.proc is not None
    with open(f"/proc/{world.bot.proc.pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def file_requests(world: World) -> list[Any]:
    return [r for r in world.service.requests if r.path.startswith("/files/")]


# -- case 1: local files -----------------------------------------------------------------------------
async def test_file_urls_are_never_read_nor_uploaded(start: StartWorld) -> None:
    world = await start()
    environ = "file:///proc/self/environ"
    world.service.result_url = environ
    video = await world.video("the environment, please")
    await fails_with(world, video, "result_refused")

    wal = "file://" + world.env["DATABASE_PATH"] + "-wal"
    world.service.result_url = wal
    world.service.image_shape = "data_url"  # {"data": [{"url": "file://...-wal"}]}
    image = await world.image("the database, please", member=world.bob)
    await fails_with(world, image, "result_refused")

    sent = everything_sent_to_discord(world)
    for secret in (world.env["DISCORD_TOKEN"], world.env["GEN_API_KEY"]):
        assert secret not in sent
    assert "file://" not in sent and "/proc/self/environ" not in sent and "-wal" not in sent
    assert world.discord.files_delivered() == []
    no_internal_failure(world)


# -- case 2: internal addresses ----------------------------------------------------------------------
async def test_internal_result_urls_are_refused_before_connecting(start: StartWorld) -> None:
    world = await start(extra_env={"GEN_RESULT_HOSTS": "localhost"})
    port = world.service.port
    for n, host in enumerate(("127.0.0.2", "169.254.169.254", "10.0.0.1", "[::ffff:127.0.0.1]")):
        url = f"http://{host}:{port}/files/secret.mp4"
        world.service.result_url = url
        it = await world.video(f"internal result {n}")
        await fails_with(world, it, "result_refused")
        assert url not in everything_sent_to_discord(world)
    assert file_requests(world) == []  # not one of them was fetched

    # The listed "CDN" (the fake under the name localhost) redirects to an internal address.
    world.service.result_url = world.service.alt_base_url + "/files/cdn.mp4"
    world.service.file_redirect = f"http://127.0.0.2:{port}/files/metadata.mp4"
    it = await world.video("a redirect inside")
    await fails_with(world, it, "result_refused")
    [cdn] = file_requests(world)
    assert cdn.path == "/files/cdn.mp4" and cdn.auth == "missing"  # the key never goes to a CDN
    assert "metadata" not in everything_sent_to_discord(world)
    no_internal_failure(world)


async def test_a_foreign_host_needs_the_allow_list_when_it_resolves_inside(start: StartWorld) -> None:
    refusing = await start()  # `localhost` resolves to loopback: refused where the connection is made
    refusing.service.result_base_url = refusing.service.alt_base_url
    it = await refusing.video("a cdn on localhost")
    await fails_with(refusing, it, "result_refused")
    assert file_requests(refusing) == []
    no_internal_failure(refusing)

    allowing = await start(extra_env={"GEN_RESULT_HOSTS": "localhost"})
    allowing.service.result_base_url = allowing.service.alt_base_url
    it = await allowing.video("a cdn on localhost")
    msg = await allowing.delivered(it)
    assert msg.attachments[0].data == allowing.service.video_bytes()
    [download] = file_requests(allowing)
    assert download.auth == "missing"


# -- case 3: unbounded answers -----------------------------------------------------------------------
def gzip_bomb(inflated: int) -> bytes:
    """A poll answer that is ~1/1000 of its size on the wire: ``{"status": "pending", "pad": "   ...``."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(b'{"status": "pending", "progress": 10, "pad": "')]
    block = b" " * MiB
    parts += [packer.compress(block) for _ in range(inflated // MiB)]
    parts += [packer.compress(b'"}'), packer.flush()]
    return b"".join(parts)


async def test_huge_and_compressed_answers_keep_memory_bounded(start: StartWorld) -> None:
    world = await start(extra_env={"GEN_JSON_MAX_BYTES": "65536"})
    # Warm up: one whole job (imports, the first upload) before the peak is taken as a baseline.
    await world.delivered(await world.video("warm up"))
    baseline = peak_rss(world)

    padded = b'{"status": "pending", "progress": 10}' + b" " * (128 * MiB)
    bomb = gzip_bomb(1024 * MiB)
    assert len(bomb) < 2 * MiB
    world.service.path_scripted[POLL_PATH] = [
        (200, padded, None),
        (200, bomb, {"Content-Encoding": "gzip"}),
    ]
    it = await world.video("a huge answer")
    msg = await world.delivered(it, timeout=60)  # two unreadable polls, then a good one: delivered
    assert msg.attachments[0].data == world.service.video_bytes()
    grown = peak_rss(world) - baseline
    # The old bot read both answers whole: +256 MiB for the padding, +1 GiB inflating the bomb.
    assert grown < 32 * MiB, f"peak RSS grew by {grown / MiB:.0f} MiB"
    await wait_log(world, "unreadable answer 2 of 3 in a row")
    no_internal_failure(world)


# -- case 7: malformed numbers and nesting -------------------------------------------------------------
HUGE_INT = b'{"status": "pending", "progress": 1' + b"0" * 400 + b"}"
DEEP = b'{"status": "pending", "progress": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
HUGE_FLOAT = b'{"status": "pending", "progress": 1e400}'


async def test_malformed_polls_are_counted_then_the_job_goes_on(start: StartWorld) -> None:
    world = await start()
    world.service.default_plan = TaskPlan(polls=2)
    world.service.path_scripted[POLL_PATH] = [(200, HUGE_INT, None), (200, DEEP, None)]
    it = await world.video("odd numbers then fine")
    await world.delivered(it)
    await wait_log(world, "unreadable answer 2 of 3 in a row")
    no_internal_failure(world)


async def test_malformed_polls_in_a_row_fail_the_job_plainly(start: StartWorld) -> None:
    world = await start()
    world.service.default_plan = TaskPlan(duration=3600)
    world.service.path_scripted[POLL_PATH] = [
        (200, DEEP, None),
        (200, HUGE_INT, None),
        (200, HUGE_FLOAT, None),
    ]
    it = await world.video("nothing but nonsense")
    row = await fails_with(world, it, "bad_response")
    assert row["error_detail"] is None
    await wait_log(world, "unreadable 3 times in a row")
    job = row["task_id"]
    assert (
        len([r for r in world.service.requests if r.path == POLL_PATH and r.query.get("video_id") == job])
        == 3
    )
    no_internal_failure(world)


async def test_an_unreadable_create_is_sent_again_and_the_member_gets_the_file(start: StartWorld) -> None:
    # Cut off or garbled, like an answer lost on the way: the service may have started a task the
    # bot cannot name, so it may run an extra one; the member gets the file, not a failed job.
    world = await start()
    world.service.path_scripted["/v1/videos"] = [
        (200, gzip.compress(b'{"video_id": "v1"' + b" " * 2 * MiB), {"Content-Encoding": "gzip"})
    ]
    it = await world.video("sent twice")
    await world.delivered(it)
    assert len(world.files_for(await world.job_id(it))) == 1
    assert len(service_creates(world, "sent twice")) == 2
    await wait_log(world, "create video: unreadable answer 1 of 3 in a row")
    no_internal_failure(world)


async def test_a_service_that_keeps_answering_creates_unreadably_fails_the_job_after_three(
    start: StartWorld,
) -> None:
    world = await start()
    world.service.path_scripted["/v1/videos"] = [(200, b'{"video_id": "v', None)] * 5
    it = await world.video("never readable")
    row = await fails_with(world, it, "bad_response")
    assert len(service_creates(world, "never readable")) == 3  # GEN_MALFORMED_POLLS, then given up
    assert "unreadable 3 times in a row" in world.bot.log_text()
    assert row["error_detail"] is None
    no_internal_failure(world)


# -- a result link that carries a key ----------------------------------------------------------------
async def test_a_result_link_carrying_the_key_is_never_posted_nor_shown(start: StartWorld) -> None:
    world = await start()
    key = world.env["GEN_API_KEY"]
    base = world.service.base_url
    world.service.video_payload = make_large_mp4(1_000_000, seconds=2.0)  # fits no 4 kB limit: linked
    for n, url in enumerate((f"{base}/files/a.mp4?api_key={key}", f"{base}/files/{key}.mp4")):
        world.service.result_url = url
        it = await world.video(f"a clip too large {n}", attachment_size_limit=4_000)
        row = await fails_with(world, it, "download_failed")
        assert row["error_detail"] is None
    # A link whose credentials are the key is posted without them; /job never shows them either,
    # even once the job's message is gone (a moderator deleted it).
    world.service.result_url = base.replace("://", f"://user:{key}@") + "/files/c.mp4"
    it = await world.video("a clip linked", attachment_size_limit=4_000)
    job_id = await world.job_id(it)
    msg = await it.wait_original(lambda m: status_of(m).startswith("✅"), timeout=30)
    assert f"{base}/files/c.mp4" in msg.content
    await wait_state(world, job_id, "delivered")
    msg.deleted = True
    look = await world.discord.slash(world.guild, world.channel, world.alice, "job", {"id": job_id})
    await look.wait_response()
    private = await look.wait_original(lambda m: bool(m.embeds))
    assert f"{base}/files/c.mp4" in private.content
    assert key not in everything_sent_to_discord(world)
    no_internal_failure(world)


async def test_a_failure_reason_naming_another_key_never_shows_it(start_synced: StartWorld) -> None:
    server_key = "sk-server-" + "r" * 24 + "qrst"

    def setup(world: World) -> None:
        world.service.api_keys.add(server_key)

    world = await start_synced(
        guilds=2, extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode()}, setup=setup
    )
    operator_key = world.env["GEN_API_KEY"]
    assert "…qrst" in (await set_key(world, server_key)).content
    # The service may name any key it was ever sent: the operator's in a job run on the server's
    # key, and the server's in another server's job (run on the operator's).
    for guild, named in ((0, operator_key), (1, server_key)):
        world.service.plans = [(f"named {guild}", TaskPlan(outcome="failed", error=f"bad key {named} here"))]
        it = await world.video(f"named {guild}", guild=guild)
        row = await fails_with(world, it, "task_failed")
        assert row["error_detail"] == "bad key *** here"
    sent = everything_sent_to_discord(world)
    assert operator_key not in sent and server_key not in sent
    no_internal_failure(world)


async def test_a_model_named_like_the_key_is_never_listed(start: StartWorld) -> None:
    def listing(world: World) -> None:
        world.service.models.append((world.service.api_key, "video"))

    world = await start(setup=listing)
    key = world.env["GEN_API_KEY"]
    models = await world.discord.slash(world.guild, world.channel, world.alice, "models", {})
    await models.wait_response()
    choices = await world.discord.autocomplete(
        world.guild, world.channel, world.alice, "video", {"prompt": "x", "model": ""}, focused="model"
    )
    await choices.wait_response()
    assert choices.choices is not None and [c["value"] for c in choices.choices] == ["svc-video-v2.0"]
    picked = await world.discord.slash(
        world.guild, world.channel, world.alice, "video", {"prompt": "x", "model": "unlisted"}
    )
    await picked.wait_response()
    assert key not in everything_sent_to_discord(world)
    no_internal_failure(world)
