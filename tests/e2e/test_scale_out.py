"""Two sharded bot processes on PostgreSQL and Redis: one request budget, each job once, takeover.

Two real ``bot.py`` processes run shards 0 and 1 of 2 (``SHARD_COUNT=2``, ``SHARD_IDS=0`` / ``1``)
against one fake Discord (four guilds, two on each shard) and one fake service whose rate limit is
the bot's ``GEN_RATE_LIMIT``. They share a fresh PostgreSQL database (``DATABASE_URL``, from
tests/pg.py) and a Redis database (``REDIS_URL``, db 9, flushed before and after): the ``cluster``
fixture of tests/e2e/servers.py. Skipped, saying why, unless PostgreSQL answers on 127.0.0.1:5432 and
Redis on 127.0.0.1:6379.

* A burst of jobs across all four guilds: the service never sees more than N requests in any
  window, no 429, every job is delivered exactly once, and each process ran only its shards' jobs.
* ``kill -9`` of one process while its jobs run: once their leases lapse the other process takes
  them over and delivers each exactly once (through the stored interaction token), without
  creating their service tasks again.
* ``SIGSTOP`` of one process past its leases, then ``SIGCONT``: the other process takes its jobs
  over, and the paused one, on waking, lets them go before it spends another request on them (no
  second poll, no second delivery, no error logged). Its requests reach the fake service through a
  recording relay (:class:`ServiceTap`), so the test knows which process sent each of them.
* PostgreSQL cut under both processes for longer than a lease, as a create is answered: no job is
  taken over (the outage was everyone's), and no task is created twice.
* A partition of one process from Redis and PostgreSQL past its leases, while its polls wait for a
  budget slot: the other process takes its jobs over, and on heal the cut-off one, granted its
  slots at last, checks its lease again and sends nothing for them.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import ClientSession, web

from tests.e2e.endpoints import Ops, free_port, parse, value
from tests.e2e.harness import World, button_ids, service_creates, service_polls, status_of, task_for
from tests.e2e.servers import LEASE_SECONDS, RATE, SHARDS, SLOW, Cluster, Relay
from tests.fakes.gen_service import POLL_PATH, TaskPlan

#: Seconds a task of the paused or cut-off process would stay pending on its own: longer than any
#: test. Each test ends it (:func:`_release`) once what it waits through has happened, so however
#: loaded the machine, the task is still pending through the pause or the partition.
HELD_TASK = 600.0


def _release(world: World, task_ids: Iterable[str]) -> None:
    """Let held tasks end: each completes at its next poll."""
    for task_id in task_ids:
        world.service.tasks[task_id].plan.duration = 0.0


def _assert_within_budget(world: World) -> None:
    assert world.service.count(status=429) == 0, "the service answered 429"
    seen = world.service.max_in_window()
    assert seen <= RATE[0], f"{seen} requests in one {RATE[1]:g}s window (limit {RATE[0]})"


# No process is meant to lose a lease here: a 3 s lease renewed each second lapses when a loaded
# machine stalls a process's loop for two seconds, and the other process then rightly takes the job
# over (the takeover has its own tests below). A lease longer than any such stall keeps this test
# about the shards' split of the work.
@pytest.mark.lease_seconds(15)
async def test_a_burst_across_two_shards_keeps_one_budget_and_delivers_each_job_once(
    cluster: Cluster,
) -> None:
    world = cluster.world
    prompts = {(g, m): f"burst guild {g} member {m}" for g in range(4) for m in range(3)}
    its = await asyncio.gather(
        *(world.video(p, member=world.members[g][m], guild=g) for (g, m), p in prompts.items())
    )
    ids = [await world.job_id(it) for it in its]
    assert len(set(ids)) == len(ids) == 12
    # The fake Discord sent each interaction only to the shard session that handles its guild.
    for session in (s for s in world.discord.sessions if s.live):
        guilds = {int(e["d"]["guild_id"]) for e in session.events if e["t"] == "INTERACTION_CREATE"}
        assert len(guilds) == 2 and all(session.handles_guild(g) for g in guilds), session.shard
    for it in its:
        await world.delivered(it, timeout=60)

    await asyncio.sleep(0.5)  # a late second upload would show up here
    for job_id in ids:
        assert len(world.files_for(job_id)) == 1, (
            f"job {job_id} was delivered {len(world.files_for(job_id))}x"
        )
    # The file reaches Discord a moment before the delivering process records the job delivered.
    jobs = await cluster.jobs_once(ids, "delivered")
    _assert_within_budget(world)

    # Each process created exactly its own shards' tasks, and held its own shards' jobs.
    for shard in range(SHARDS):
        mine = sorted(p for (g, _), p in prompts.items() if cluster.shard_of(g) == shard)
        await cluster.wait_created(shard, mine)
    for (g, _), job_id in zip(prompts, ids, strict=True):
        assert jobs[job_id]["lease_owner"] == f"framecast-shards-{cluster.shard_of(g)}"
    for prompt in prompts.values():
        assert len(service_creates(world, prompt)) == 1


async def test_kill_9_of_one_process_and_the_other_finishes_its_jobs_once(cluster: Cluster) -> None:
    world = cluster.world
    world.service.plans.append(("slow", TaskPlan(duration=SLOW)))
    victim, survivor = 1, 0
    # One job in each of the victim's guilds (few enough that its planner starts them all at once)
    # and one of the survivor's own: prompt -> the shard whose process accepts it.
    jobs = {
        f"slow job on guild {g}": cluster.shard_of(g)
        for g in cluster.guilds_of(victim) + cluster.guilds_of(survivor)[:1]
    }
    guild_of = {p: int(p.rsplit(" ", 1)[1]) for p in jobs}
    its = {p: await world.video(p, guild=guild_of[p]) for p in jobs}
    ids = {p: await world.job_id(it) for p, it in its.items()}
    # Every task exists on the service (its process created it and is polling it): now the crash.
    await world.service.wait_for(lambda: all(len(service_creates(world, p)) == 1 for p in jobs), timeout=30)
    victims = sorted(p for p, s in jobs.items() if s == victim)
    await cluster.wait_created(victim, victims)
    # The task ids are stored too (RUNNING): a kill between a create's answer and that write leaves
    # a job whose task nobody can know (the service has no idempotency key), so it is created again.
    deadline = time.monotonic() + 5
    while any(row["state"] != "running" for row in (await cluster.jobs()).values()):
        assert time.monotonic() < deadline, "the jobs never showed RUNNING"
        await asyncio.sleep(0.05)
    await cluster.bots[victim].kill()
    assert not any(world.files_for(ids[p]) for p in victims), "the victim's jobs ended before the kill"
    # The leases as the victim last renewed them (possibly a moment before the kill): none of its
    # jobs may be delivered by the survivor before its own lease lapses.
    held = await cluster.jobs()
    lapses = {p: held[ids[p]]["lease_until"] for p in victims}

    for prompt, it in its.items():
        await world.delivered(it, timeout=45)
        if prompt in lapses:
            early = lapses[prompt] - time.time()  # lease_until: the database's epoch seconds
            assert early <= 0, f"{prompt!r} delivered {early:.2f}s before its lease could lapse"

    await asyncio.sleep(0.5)
    rows = await cluster.jobs_once(ids.values(), "delivered")
    survivor_log = cluster.bots[survivor].log_text()
    for prompt, job_id in ids.items():
        assert len(world.files_for(job_id)) == 1, f"{prompt!r} delivered {len(world.files_for(job_id))}x"
        assert rows[job_id]["state"] == "delivered"
        assert len(service_creates(world, prompt)) == 1, f"{prompt!r}: its task was created again"
        assert rows[job_id]["lease_owner"] == f"framecast-shards-{survivor}"
        if jobs[prompt] == victim:
            assert f"job {job_id} taken over from a lapsed lease" in survivor_log
    _assert_within_budget(world)
    # The victim's members got their file where they asked for it.
    for prompt, it in its.items():
        message = await world.delivered(it, timeout=1)
        assert message.channel_id == world.channels[guild_of[prompt]].id


@pytest.mark.cluster_env({"GEN_MAX_RUNNING": "1"})
async def test_a_cancel_in_the_process_serving_the_server_holds_for_a_job_queued_in_the_other(
    cluster: Cluster,
) -> None:
    """The other process took the server's jobs over while this one was down, and still queues them:
    its message worker drew the cancelled job as it knew it, "Queued" with a live Cancel button, for
    good. It lets go of the job at its next renewal and draws its end."""
    world = cluster.world
    victim, survivor = 1, 0
    guild = cluster.guilds_of(victim)[0]
    members = world.members[guild]
    world.service.plans.append(("blocker", TaskPlan(duration=600)))
    first = await world.video("blocker job", guild=guild, member=members[0])
    queued = [await world.video(f"queued {n}", guild=guild, member=members[n]) for n in (1, 2)]
    ids = [await world.job_id(it) for it in (first, *queued)]
    await world.service.wait_for(lambda: len(service_creates(world, "blocker job")) == 1, timeout=20)
    await cluster.wait_created(victim, ["blocker job"])
    await cluster.bots[victim].kill()
    taken = cluster.bots[survivor].log_text
    await _until(lambda: all(f"job {j} taken over" in taken() for j in ids), "the takeover", 30)
    mark = world.discord.identify_count
    await cluster.bots[victim].start()
    await world.discord.wait_ready(timeout=30, after=mark, count=1)

    message = await queued[0].wait_original(lambda m: bool(button_ids(m)), timeout=10)
    click = await world.discord.click(
        message, next(b for b in button_ids(message) if ":cancel:" in b), members[1]
    )
    await click.wait_response(timeout=5)
    task_for(world, "blocker job").plan.duration = 0  # the survivor's queue moves on
    await world.delivered(first, timeout=30)
    await world.delivered(queued[1], timeout=30)
    final = await queued[0].wait_original(
        lambda m: "Cancelled" in status_of(m) and not any(":cancel:" in b for b in button_ids(m)), timeout=10
    )
    assert f"job {ids[1]}: ended in another process" in taken()
    assert (await cluster.jobs())[ids[1]]["state"] == "cancelled" and "Cancelled" in status_of(final)
    assert not service_creates(world, "queued 1")


async def _until(done: Callable[[], bool], what: str, timeout: float) -> None:
    # A process's log, read as it grows.
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout} s in vain for {what}"
        await asyncio.sleep(0.05)


@dataclass(frozen=True)
class Tapped:
    """One request a process sent, as the tap saw it."""

    at: float  # time.monotonic() on arrival
    method: str
    path: str
    query: dict[str, str]


@dataclass
class ServiceTap:
    """The fake service as one process sees it: every request is recorded, then passed on as is."""

    target: str
    seen: list[Tapped] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _session: ClientSession | None = None
    port: int = 0

    async def start(self) -> None:
        self._session = ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.25)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def polls(self, task_id: str, *, since: float = 0.0) -> list[Tapped]:
        return [
            t
            for t in self.seen
            if t.path == POLL_PATH and t.query.get("video_id") == task_id and t.at >= since
        ]

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(Tapped(time.monotonic(), request.method, request.path, dict(request.query)))
        assert self._session is not None
        passed = ("authorization", "content-type", "accept", "accept-encoding")
        async with self._session.request(
            request.method,
            self.target + request.path_qs,
            data=await request.read(),
            headers={k: v for k, v in request.headers.items() if k.lower() in passed},
            allow_redirects=False,
        ) as answer:
            body = await answer.read()
            kept = ("content-type", "content-encoding", "retry-after", "location")
            headers = {k: v for k, v in answer.headers.items() if k.lower() in kept}
            return web.Response(status=answer.status, body=body, headers=headers)


async def _wait_until(what: str, predicate: Callable[[], bool], timeout: float) -> None:
    """Wait for `predicate` (log lines and database rows notify no one: re-checked every 50 ms)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"waited {timeout:g}s in vain for {what}"
        await asyncio.sleep(0.05)


def _errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if " ERROR " in line or line.startswith("Traceback")]


async def test_a_process_paused_past_its_leases_lets_the_taken_over_jobs_go_quietly(cluster: Cluster) -> None:
    world = cluster.world
    paused, survivor = 1, 0
    # The process to pause talks to the service through a tap: its own requests are told apart.
    tap = ServiceTap(world.service.base_url)
    await tap.start()
    try:
        bot = cluster.bots[paused]
        await bot.terminate()
        bot.env = {**bot.env, "GEN_API_BASE_URL": tap.url}
        mark = world.discord.identify_count
        await bot.start()
        await world.discord.wait_ready(timeout=30, after=mark, count=1)

        # Pending through the pause, the takeover and the wake-up (released after it).
        world.service.plans.append(("fenced", TaskPlan(duration=HELD_TASK)))
        prompts = {f"fenced job on guild {g}": g for g in cluster.guilds_of(paused)}
        its = {p: await world.video(p, guild=g) for p, g in prompts.items()}
        ids = {p: await world.job_id(it) for p, it in its.items()}
        # Created by the process to pause, which polls them: then it stops (SIGSTOP), mid-wait.
        # The fake records a create before it makes the task: wait for the tasks too.
        await world.service.wait_for(
            lambda: all(
                len(service_creates(world, p)) == 1
                and any(t.prompt == p for t in world.service.tasks.values())
                for p in prompts
            ),
            timeout=30,
        )
        tasks = {p: task_for(world, p).id for p in prompts}
        await world.service.wait_for(lambda: all(tap.polls(t) for t in tasks.values()), timeout=15)
        assert bot.proc is not None
        bot.proc.send_signal(signal.SIGSTOP)
        try:
            # The leases as the stopped process last renewed them (possibly just before the stop):
            # nothing may take a job over before its own lease lapses.
            held = await cluster.jobs()
            lapses = {j: held[j]["lease_until"] for j in ids.values()}
            assert all(held[j]["lease_owner"] == f"framecast-shards-{paused}" for j in ids.values())
            survivor_log = cluster.bots[survivor].log_text
            await _wait_until(
                "the takeover",
                lambda: all(
                    f"job {j} taken over from a lapsed lease" in survivor_log() for j in ids.values()
                ),
                timeout=LEASE_SECONDS * 4,
            )
            seen_at = time.time()  # lease_until is in the database's epoch seconds (wall clock)
            assert all(seen_at >= until for until in lapses.values()), (
                f"taken over {max(lapses.values()) - seen_at:.2f}s before a lease lapsed"
            )
            # The new owner polls each task (every poll but the tap's comes from the survivor).
            await world.service.wait_for(
                lambda: all(len(service_polls(world, t)) > len(tap.polls(t)) for t in tasks.values()),
                timeout=10,
            )
            assert all(world.service.tasks[t].state == "pending" for t in tasks.values())
        finally:
            bot.proc.send_signal(signal.SIGCONT)
        woken_at = time.monotonic()

        # The woken process lets its old jobs go; only then do the tasks end (the survivor's polls
        # see it), so the woken process had its chance to poll a pending task too.
        await _wait_until(
            "the woken process letting its jobs go",
            lambda: all(
                f"job {j}: left to the process that holds its lease now" in bot.log_text()
                for j in ids.values()
            ),
            timeout=15,
        )
        _release(world, tasks.values())
        await world.service.wait_for(
            lambda: all(world.service.tasks[t].state == "completed" for t in tasks.values()), timeout=15
        )
        for prompt, task_id in tasks.items():
            # Polled by one process at a time: the woken process sent nothing more for its old jobs.
            assert tap.polls(task_id, since=woken_at) == [], f"{prompt!r}: polled by both processes"
        for it in its.values():
            await world.delivered(it, timeout=30)
        await asyncio.sleep(0.5)  # a late poll or second upload from the woken process would show up here
        rows = await cluster.jobs_once(ids.values(), "delivered")
        for prompt, job_id in ids.items():
            assert len(service_creates(world, prompt)) == 1, f"{prompt!r}: its task was created again"
            assert tap.polls(tasks[prompt], since=woken_at) == [], f"{prompt!r}: polled by both processes"
            assert len(world.files_for(job_id)) == 1, f"{prompt!r} delivered {len(world.files_for(job_id))}x"
            assert rows[job_id]["state"] == "delivered"
            assert rows[job_id]["lease_owner"] == f"framecast-shards-{survivor}"
        assert [t for t in tap.seen if t.at >= woken_at and t.path != "/v1/models"] == []
        assert "left to the process that holds its lease now" in bot.log_text()
        for shard, process in cluster.bots.items():
            assert _errors(process.log_text()) == [], f"shard {shard} logged an error"
        _assert_within_budget(world)
    finally:
        await tap.stop()


async def test_a_process_cut_off_past_its_leases_sends_nothing_for_the_jobs_taken_over(
    cluster: Cluster,
) -> None:
    """A partition, not a pause: the process's jobs wait for a budget slot in Redis, past their lease
    check, when its network to Redis and PostgreSQL goes silent. On heal, the slots are granted a
    whole lease after the other process took the jobs over: each request asks again, after its grant."""
    world = cluster.world
    cut_off, survivor = 1, 0
    tap = ServiceTap(world.service.base_url)
    pg, redis = Relay(("127.0.0.1", 5432)), Relay(("127.0.0.1", 6379))
    for server in (tap, pg, redis):
        await server.start()
    try:
        bot = cluster.bots[cut_off]
        await bot.terminate()
        http_port = free_port()
        bot.env = {
            **bot.env,
            "GEN_API_BASE_URL": tap.url,
            "DATABASE_URL": cluster.dsn.replace("127.0.0.1:5432", f"127.0.0.1:{pg.port}"),
            "REDIS_URL": bot.env["REDIS_URL"].replace("127.0.0.1:6379", f"127.0.0.1:{redis.port}"),
            "HTTP_PORT": str(http_port),
        }
        mark = world.discord.identify_count
        await bot.start()
        await world.discord.wait_ready(timeout=30, after=mark, count=1)

        world.service.plans.append(("partitioned", TaskPlan(duration=HELD_TASK)))
        prompts = {f"partitioned job on guild {g}": g for g in cluster.guilds_of(cut_off)}
        its = {p: await world.video(p, guild=g) for p, g in prompts.items()}
        ids = {p: await world.job_id(it) for p, it in its.items()}
        await world.service.wait_for(
            lambda: all(len(service_creates(world, p)) == 1 for p in prompts), timeout=30
        )
        tasks = {p: task_for(world, p).id for p in prompts}
        await world.service.wait_for(lambda: all(tap.polls(t) for t in tasks.values()), timeout=15)

        # Redis goes silent first: every poll of the cut-off process waits for its budget slot...
        redis.blackhole()
        async with aiohttp.ClientSession() as session:
            ops = Ops(session, http_port)
            await ops.until(
                "/metrics",
                lambda _s, text: (
                    (value(parse(text), "framecast_budget_waiting", key="operator") or 0) >= len(prompts)
                ),
                timeout=10,
                what="every poll waiting for the budget",
            )
        # ...then PostgreSQL: its leases lapse, and the other process takes the jobs over.
        pg.blackhole()
        survivor_log = cluster.bots[survivor].log_text
        await _wait_until(
            "the takeover",
            lambda: all(f"job {j} taken over from a lapsed lease" in survivor_log() for j in ids.values()),
            timeout=LEASE_SECONDS * 4,
        )
        await world.service.wait_for(
            lambda: all(len(service_polls(world, t)) > len(tap.polls(t)) for t in tasks.values()),
            timeout=10,
        )
        assert all(world.service.tasks[t].state == "pending" for t in tasks.values())
        healed_at = time.monotonic()
        await pg.restore()
        await redis.restore()

        _release(world, tasks.values())
        await world.service.wait_for(
            lambda: all(world.service.tasks[t].state == "completed" for t in tasks.values()), timeout=15
        )
        for it in its.values():
            await world.delivered(it, timeout=30)
        await _wait_until(
            "the cut-off process letting its jobs go",
            lambda: all(
                f"job {j}: left to the process that holds its lease now" in bot.log_text()
                for j in ids.values()
            ),
            timeout=10,
        )
        rows = await cluster.jobs_once(ids.values(), "delivered")
        for prompt, job_id in ids.items():
            # Granted its slots after the heal, the cut-off process sent nothing for its old jobs.
            assert tap.polls(tasks[prompt], since=healed_at) == [], (
                f"{prompt!r}: polled on a stale lease check"
            )
            assert len(service_creates(world, prompt)) == 1, f"{prompt!r}: its task was created again"
            assert len(world.files_for(job_id)) == 1, f"{prompt!r} delivered {len(world.files_for(job_id))}x"
            assert rows[job_id]["state"] == "delivered"
            assert rows[job_id]["lease_owner"] == f"framecast-shards-{survivor}"
        _assert_within_budget(world)
    finally:
        for server in (pg, redis):
            await server.cut()
        await tap.stop()


async def test_a_postgresql_cut_longer_than_a_lease_under_two_processes_moves_no_job_and_creates_none_twice(
    cluster: Cluster,
) -> None:
    """Both processes lose the database for longer than a lease, one of them just as the service
    accepted a create: no job is taken over (the outage was everyone's), the task id is saved by the
    process that holds it, and every job is delivered once, created once, failed never."""
    world = cluster.world
    pg = Relay(("127.0.0.1", 5432))
    await pg.start()
    try:
        for bot in cluster.bots.values():
            await bot.terminate()
            bot.env = {
                **bot.env,
                "DATABASE_URL": cluster.dsn.replace("127.0.0.1:5432", f"127.0.0.1:{pg.port}"),
            }
        mark = world.discord.identify_count
        for bot in cluster.bots.values():
            await bot.start()
        await world.discord.wait_ready(timeout=30, after=mark, count=SHARDS)

        world.service.plans.append(("held", TaskPlan(polls=10**9)))
        held = {f"held job on guild {g}": g for g in (cluster.guilds_of(0)[0], cluster.guilds_of(1)[0])}
        its = {p: await world.video(p, guild=g) for p, g in held.items()}
        await world.service.wait_for(lambda: all(service_creates(world, p) for p in held), timeout=30)
        saved, saved_guild = "saved after the cut", cluster.guilds_of(1)[1]
        cut = asyncio.Event()

        async def cut_then_answer(record: Any) -> None:
            body = record.json if isinstance(record.json, dict) else {}
            if not cut.is_set() and record.status == 200 and body.get("prompt") == saved:
                held_until = max(row["lease_until"] for row in (await cluster.jobs()).values())
                leases_lapse.append(held_until)
                await pg.cut()
                cut.set()

        leases_lapse: list[float] = []
        world.service.before_answer = cut_then_answer
        its[saved] = await world.video(saved, guild=saved_guild)
        await asyncio.wait_for(cut.wait(), 15)
        # Down for longer than any lease: every lease in the database lapses meanwhile.
        await _wait_until(
            "every lease lapsing", lambda: time.time() > leases_lapse[0] + 0.5, LEASE_SECONDS * 3
        )
        await _wait_until(
            "both processes meeting the outage",
            lambda: all("the job store does not answer" in b.log_text() for b in cluster.bots.values()),
            10,
        )
        for prompt in held:
            task_for(world, prompt).plan = TaskPlan(polls=0)
        await pg.restore()

        for it in its.values():
            await world.delivered(it, timeout=30)
        await asyncio.sleep(0.5)  # a late second create or upload would show up here
        rows = await cluster.jobs()
        for prompt, it in its.items():
            job_id = await world.job_id(it)
            assert len(service_creates(world, prompt)) == 1, f"{prompt!r}: its task was created again"
            assert len(world.files_for(job_id)) == 1, f"{prompt!r} delivered {len(world.files_for(job_id))}x"
            assert rows[job_id]["state"] == "delivered"
        for shard, process in cluster.bots.items():
            log = process.log_text()
            assert "taken over from a lapsed lease" not in log, f"shard {shard} took a job over"
            assert _errors(log) == [], f"shard {shard} logged an error"
        _assert_within_budget(world)
    finally:
        world.service.before_answer = None
        await pg.cut()
