"""A server's own API key, end to end: set, used, removed, shared.

A key typed with spaces is stored trimmed and never reaches the log or the database file in clear;
removing it spares a job already running on it while new jobs use the operator's key; two servers
that set the same key share its one request budget. (The shared budget was a product defect once.)
Restarted without the secret that encrypted a stored key, that server is refused with the reason
(and /settings show says so) instead of silently moving onto the operator's key.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from tests.e2e.commands import answer, image, refused, set_key, settings, text_of, video
from tests.e2e.harness import (
    MANAGE_GUILD,
    MEMBER_PERMS,
    StartWorld,
    World,
    service_creates,
    status_of,
    wait_state,
)
from tests.fakes.discord_api import FakeInteraction
from tests.fakes.gen_service import POLL_PATH, TaskPlan

SERVER_KEY = "sk-server-" + "r" * 24 + "qrst"


async def test_a_key_typed_with_spaces_is_stored_trimmed_and_remove_spares_a_running_job(
    start_synced: StartWorld,
) -> None:
    def setup(world: World) -> None:
        world.service.api_keys.add(SERVER_KEY)

    world = await start_synced(
        extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode()}, setup=setup
    )
    msg = await set_key(world, f"  {SERVER_KEY}\t ")
    assert "…qrst" in msg.content, msg.content
    world.service.plans = [("long", TaskPlan(polls=40))]
    job_id = await world.job_id(await video(world, "long running on the server key"))
    await world.service.wait_for(lambda: bool(service_creates(world, "long running on the server key")), 10)
    msg = await settings(world, "key remove")
    assert "operator's key" in msg.content
    # The running job finishes on the key that created its task; new jobs use the operator's key.
    await wait_state(world, job_id, "delivered", timeout=30)
    [create] = service_creates(world, "long running on the server key")
    assert create.key == SERVER_KEY
    polls = [r for r in world.service.requests if r.path == POLL_PATH]
    assert len(polls) >= 40 and {r.key for r in polls} == {SERVER_KEY}
    it = await image(world, "after removal", member=world.bob)
    await world.delivered(it)
    assert service_creates(world, "after removal")[0].key == world.service.api_key
    assert SERVER_KEY not in world.bot.log_text()
    db = Path(world.env["DATABASE_PATH"])
    for path in (db, db.with_name(db.name + "-wal"), db.with_name("framecast.spent-requests")):
        if path.exists():
            assert SERVER_KEY.encode() not in path.read_bytes()
    # The server key's requests were recorded for the next start, under its HMAC (salt: the header's).
    spent = db.with_name("framecast.spent-requests").read_text().splitlines()
    name = hmac.new(spent[0].split()[-1].encode(), SERVER_KEY.encode(), hashlib.sha256).hexdigest()[:32]
    assert any(line.split()[1] == name for line in spent[1:])


async def test_a_key_replaced_while_its_task_runs_never_polls_it_after_a_restart(
    start_synced: StartWorld,
) -> None:
    """The service knows a task only by the key that created it. Replaced, then a crash: the job
    fails saying so, and no request goes out with the new key for the old task (it used to be
    polled with the new key, answered 404, and told as a request the service refused)."""
    replacing = "sk-server-" + "w" * 24 + "wxyz"

    def setup(world: World) -> None:
        world.service.api_keys.update({SERVER_KEY, replacing})

    world = await start_synced(
        extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode()}, setup=setup
    )
    await set_key(world, SERVER_KEY)
    world.service.plans = [("long", TaskPlan(polls=40))]
    it = await video(world, "long running on the first key")
    job_id = await world.job_id(it)
    await wait_state(world, job_id, "running", timeout=15)
    assert "…wxyz" in (await set_key(world, replacing)).content
    await world.bot.kill()
    await world.restart_bot()
    row = await wait_state(world, job_id, "failed", timeout=15)
    assert row["error_code"] == "key_removed"
    msg = await it.wait_original(lambda m: "replaced" in status_of(m), timeout=10)
    assert status_of(msg).startswith("❌")
    [task] = [t for t in world.service.tasks.values() if t.prompt == "long running on the first key"]
    polls = [r for r in world.service.requests if r.path == POLL_PATH and r.query.get("video_id") == task.id]
    assert replacing not in {r.key for r in polls}


async def test_two_servers_with_the_same_key_share_its_budget(start_synced: StartWorld) -> None:
    def setup(world: World) -> None:
        world.service.api_keys.add(SERVER_KEY)
        world.service.rate_limit = (4, 1.0)

    world = await start_synced(
        guilds=2,
        extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode(), "GEN_RATE_LIMIT": "4/1"},
        setup=setup,
    )
    for g in (0, 1):
        assert "…qrst" in (await set_key(world, SERVER_KEY, guild=g)).content
    its = []  # at once: the keys' checks count in the same budget as these jobs
    for g in (0, 1):
        for member in world.members[g]:
            its.append(
                await world.discord.slash(
                    world.guilds[g],
                    world.channels[g],
                    member,
                    "image",
                    {"prompt": f"shared {g} {member.name}"},
                )
            )
    for it in its:
        await world.delivered(it, timeout=60)
    assert world.service.max_in_window(1.0, key=SERVER_KEY) <= 4
    assert world.service.count(status=429) == 0


async def test_a_keys_check_counts_in_its_first_window_so_jobs_right_after_get_no_429(
    start_synced: StartWorld,
) -> None:
    def setup(world: World) -> None:
        world.service.api_keys.add(SERVER_KEY)
        world.service.rate_limit = (4, 1.0)

    world = await start_synced(
        members=4,
        extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode(), "GEN_RATE_LIMIT": "4/1"},
        setup=setup,
    )
    assert "…qrst" in (await set_key(world, SERVER_KEY)).content
    # A full window of jobs right after the check: the check's request is one of the window's four.
    its = [
        await world.discord.slash(
            world.guilds[0], world.channels[0], member, "image", {"prompt": f"first window {member.name}"}
        )
        for member in world.members[0]
    ]
    for it in its:
        await world.delivered(it, timeout=60)
    assert world.service.count(status=429) == 0
    assert world.service.max_in_window(1.0, key=SERVER_KEY) <= 4
    assert world.service.count(key=SERVER_KEY) >= 5


async def test_without_the_secret_a_stored_key_refuses_jobs_and_settings_show_says_so(
    start_synced: StartWorld,
) -> None:
    """Restarted without KEY_ENCRYPTION_SECRET, a server that stored a key is refused with the reason
    (never moved onto the operator's key); removing the key is the way back to the operator's key."""

    def setup(world: World) -> None:
        world.service.api_keys.add(SERVER_KEY)

    world = await start_synced(
        extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode()}, setup=setup
    )
    assert "…qrst" in (await set_key(world, SERVER_KEY)).content
    assert await world.bot.terminate() == 0
    del world.env["KEY_ENCRYPTION_SECRET"]
    await world.restart_bot()  # one unreadable key does not stop the start

    text = await refused(await video(world, "without the secret"))
    assert "can no longer be read" in text and "/settings key set" in text, text
    french = await refused(await video(world, "sans le secret", locale="fr"))
    assert "ne peut plus lire" in french, french
    shown = text_of(await settings(world, "show"))
    assert "…qrst" in shown and "can no longer read it" in shown, shown
    assert not service_creates(world, "without the secret") and not service_creates(world, "sans le secret")
    log = world.bot.log_text()
    assert f"guild {world.guild.id}: its stored API key cannot be decrypted" in log
    assert SERVER_KEY not in log

    assert "operator's key" in (await settings(world, "key remove")).content
    it = await image(world, "back on the operator's key")
    await world.delivered(it)
    assert service_creates(world, "back on the operator's key")[0].key == world.service.api_key


async def test_a_job_running_on_a_key_the_new_secret_cannot_read_fails_with_that_reason(
    start_synced: StartWorld,
) -> None:
    """KEY_ENCRYPTION_SECRET changed while a job runs on the server's key: its task cannot be polled
    with another key, so it fails, saying why: the key cannot be read (it said the key was removed
    or replaced, which nobody did)."""

    def setup(world: World) -> None:
        world.service.api_keys.add(SERVER_KEY)

    world = await start_synced(
        extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode()}, setup=setup
    )
    await set_key(world, SERVER_KEY)
    world.service.default_plan = TaskPlan(polls=10**9)
    it = await world.video("running when the secret changed")
    job_id = await world.job_id(it)
    await wait_state(world, job_id, "running")
    assert await world.bot.terminate() == 0
    world.env["KEY_ENCRYPTION_SECRET"] = Fernet.generate_key().decode()
    await world.restart_bot()
    row = await wait_state(world, job_id, "failed")
    assert row["error_code"] == "guild_key_unreadable"
    message = await it.wait_original(lambda m: "can no longer be read" in status_of(m))
    assert "/settings key set" in status_of(message)


async def test_a_pasted_key_that_cannot_be_one_is_told_so_and_spends_no_check(
    start_synced: StartWorld,
) -> None:
    """A key with a line break or a space inside (a paste slip) is no key: the service is not asked,
    the answer says so (it said the service refused it), and no check of the hour is spent on it."""

    def setup(world: World) -> None:
        world.service.api_keys.add(SERVER_KEY)

    world = await start_synced(
        extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode()}, setup=setup
    )
    asked = len(world.service.requests)
    for n in range(6):  # one more than the checks an hour
        slip = f"sk-server-rrrr\nrrrr-{n:04d}-qrst" if n % 2 else f"sk-server rrrr-{n:04d}-qrst"
        assert "can't be an API key" in (await set_key(world, slip)).content
    assert len(world.service.requests) == asked
    assert "…qrst" in (await set_key(world, SERVER_KEY)).content


def key_input(it: FakeInteraction) -> str:
    """The custom id of the key's text input in the form `it` was answered with."""
    modal = it.modal
    assert modal is not None
    [custom_id] = [
        c["custom_id"]
        for row in modal["components"]
        for c in [row.get("component"), *row.get("components", [])]
        if isinstance(c, dict) and c.get("type") == 4
    ]
    return str(custom_id)


async def test_two_admins_key_forms_open_at_once_are_both_answered_also_after_a_restart(
    start_synced: StartWorld,
) -> None:
    """Two admins open the key form together (and a third before a restart): each form has its own
    id, and each submit is checked and answered, whatever the order; none is lost."""
    other_key = "sk-server-" + "o" * 24 + "wxyz"
    admins: list[Any] = []

    def setup(world: World) -> None:
        world.service.api_keys.update({SERVER_KEY, other_key})
        second = world.discord.add_member(
            world.guild, "second-admin", permissions=MEMBER_PERMS | MANAGE_GUILD
        )
        admins.extend([world.admins[0], second])

    world = await start_synced(
        extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode()}, setup=setup
    )
    first_admin, second_admin = admins

    async def open_form(admin: Any) -> FakeInteraction:
        it = await world.discord.slash(
            world.guild, world.channel, admin, "settings", {}, subcommand="key set"
        )
        kind, _ = await it.wait_response()
        assert kind == 9 and it.modal is not None  # a form
        return it

    first, second = await open_form(first_admin), await open_form(second_admin)
    assert first.modal is not None and second.modal is not None
    assert first.modal["custom_id"] != second.modal["custom_id"]
    # The second form is submitted first, then the first one: both are answered.
    late = await world.discord.submit_modal(second, {key_input(second): other_key})
    assert "…wxyz" in (await answer(late, timeout=15)).content
    early = await world.discord.submit_modal(first, {key_input(first): SERVER_KEY})
    assert "…qrst" in (await answer(early, timeout=15)).content
    assert "…qrst" in text_of(await settings(world, "show"))  # the last submitted is the server's key

    # A form opened before a restart and submitted after it still reaches the use case.
    before = await open_form(second_admin)
    assert await world.bot.terminate() == 0
    await world.restart_bot()
    after = await world.discord.submit_modal(before, {key_input(before): other_key})
    assert "…wxyz" in (await answer(after, timeout=15)).content
    assert not world.discord.rejected()


async def test_a_sixth_key_check_within_the_hour_is_refused_clearly_without_asking_the_service(
    start_synced: StartWorld,
) -> None:
    world = await start_synced(extra_env={"KEY_ENCRYPTION_SECRET": Fernet.generate_key().decode()})
    for n in range(5):
        assert "refused" in (await set_key(world, f"sk-typed-wrong-{n:04d}")).content
    asked = len(world.service.requests)
    reply = (await set_key(world, SERVER_KEY)).content
    assert reply.startswith(
        "Too many key checks for this server (at most 5 per hour). You can try again <t:"
    ), reply
    assert len(world.service.requests) == asked  # the sixth asked nothing of the service
