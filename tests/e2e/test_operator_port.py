"""The operating endpoints under trouble: ``/readyz`` and ``/metrics`` say what an operator needs.

``/readyz`` names the database while PostgreSQL is unreachable (behind a relay the test cuts) and
recovers with it, names Redis the same way (``REDIS_URL``: without it no key grants a request), and
names the model list while it never loaded; ``/healthz`` stays alive through
both. The port answers before the login too: while Discord refuses or holds it, ``/readyz`` and
``framecast_ready`` name the login. ``/metrics`` counts 429s, failed jobs, Discord errors and re-encodes. (The healthy path is
tests/e2e/test_operate.py.)
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.endpoints import Ops, free_port, ops_of, parse, ready_body, value
from tests.e2e.harness import BotProcess, StartWorld, World, close_world, hold_route, make_world, wait_log
from tests.e2e.servers import Relay
from tests.fakes.gen_service import TaskPlan
from tests.fakes.keys import TEST_REDIS_KEY_SECRET
from tests.fakes.media import make_large_mp4

MiB = 1024 * 1024


async def test_readyz_names_the_database_while_postgresql_is_unreachable_and_recovers(
    pg_relay: tuple[str, Relay], start: StartWorld
) -> None:
    dsn, relay = pg_relay
    world = await start(extra_env={"HTTP_PORT": str(free_port()), "DATABASE_URL": dsn})
    async with ops_of(world) as ops:
        await ops.until("/readyz", lambda s, _: s == 200, what="ready")
        await relay.cut()
        status, text = await ops.until("/readyz", lambda s, _: s == 503, timeout=15, what="not ready")
        checks = ready_body(text)["checks"]
        assert checks["database"] != "ok" and checks["gateway"] == "ok" and checks["models"] == "ok"
        assert (await ops.get("/healthz"))[0] == 200  # alive: no restart for a database outage
        await relay.start()
        await ops.until("/readyz", lambda s, _: s == 200, timeout=20, what="ready again")
        # And the store works again: a job goes through.
        it = await world.video("after the database came back")
        await world.delivered(it)


async def test_readyz_names_redis_while_it_is_unreachable_and_recovers(
    redis_relay: tuple[str, Relay], start: StartWorld
) -> None:
    url, relay = redis_relay
    world = await start(
        extra_env={"HTTP_PORT": str(free_port()), "REDIS_URL": url, "REDIS_KEY_SECRET": TEST_REDIS_KEY_SECRET}
    )
    async with ops_of(world) as ops:
        status, text = await ops.until("/readyz", lambda s, _: s == 200, what="ready")
        assert ready_body(text)["checks"]["redis"] == "ok"
        await relay.cut()
        # Without Redis no key grants a request: the bot is not ready, and says why.
        status, text = await ops.until("/readyz", lambda s, _: s == 503, timeout=15, what="not ready")
        assert ready_body(text)["checks"] == {
            "login": "ok",
            "gateway": "ok",
            "database": "ok",
            "redis": "failed",
            "models": "ok",
        }
        assert value(parse((await ops.get("/metrics"))[1]), "framecast_ready", check="redis") == 0
        assert value(parse((await ops.get("/metrics"))[1]), "framecast_ready", check="database") == 1
        assert (await ops.get("/healthz"))[0] == 200
        await relay.start()
        await ops.until("/readyz", lambda s, _: s == 200, timeout=20, what="ready again")
        assert value(await ops.samples(), "framecast_ready", check="redis") == 1
    assert world.bot.log_text().count("readiness check redis: failed") == 1


async def test_readyz_fails_on_models_while_the_model_list_never_loaded(start: StartWorld) -> None:
    def models_down(world: World) -> None:
        world.service.path_scripted["/v1/models"] = [(503, {"error": {"message": "down"}}, None)] * 200

    world = await start(setup=models_down, extra_env={"HTTP_PORT": str(free_port())})
    async with ops_of(world) as ops:
        await ops.until("/healthz", lambda s, _: s == 200, what="healthy")
        # The list's 503s are the service out of reach: said once (its refreshes then fail quietly).
        await wait_log(world, "does not answer (HTTP 503)", timeout=20)
        # Connected and the database answers: only the model list keeps the bot from being ready.
        status, text = await ops.until(
            "/readyz", lambda s, t: ready_body(t)["checks"]["gateway"] == "ok", timeout=15, what="connected"
        )
        assert status == 503
        assert ready_body(text)["checks"] == {
            "login": "ok",
            "gateway": "ok",
            "database": "ok",
            "models": "failed",
        }


async def test_metrics_count_429s_failures_discord_errors_and_reencodes(start: StartWorld) -> None:
    world = await start(extra_env={"HTTP_PORT": str(free_port()), "REENCODE_TIMEOUT": "60"})
    async with ops_of(world) as ops:
        await ops.until("/readyz", lambda s, _: s == 200, what="ready")
        # Two 429s on the create, then a video too large for the channel: re-encoded to fit.
        world.service.path_scripted["/v1/videos"] = [
            (429, {"error": {"message": "slow down", "type": "rate_limit_error"}}, {"Retry-After": "0.1"})
        ] * 2
        world.service.video_payload = make_large_mp4(3 * MiB, width=320, height=240)
        it = await world.video("too large a lighthouse", attachment_size_limit=1 * MiB)
        await world.delivered(it, timeout=60)
        # A job that fails: the service fails the task.
        world.service.plans.append(("doomed", TaskPlan(outcome="failed", error="content_policy")))
        await world.video("doomed prompt")
        # A Discord error on an edit of the job message.
        world.discord.fail_next("PATCH /webhooks", status=403, code=50013, count=1)
        await ops.until(
            "/metrics",
            lambda s, t: (
                (value(parse(t), "framecast_jobs_delivered_total", kind="video") or 0) >= 1
                and sum(v for (n, _), v in parse(t).items() if n == "framecast_jobs_failed_total") >= 1
            ),
            timeout=20,
            what="counting the delivery and the failure",
        )
        samples = await ops.samples()
    names = {n for (n, _) in samples}
    for family in (
        "framecast_jobs",
        "framecast_queue_depth",
        "framecast_service_requests_total",
        "framecast_service_429_total",
        "framecast_budget_used",
        "framecast_planner_concurrency",
        "framecast_completion_to_file_seconds_count",
        "framecast_discord_errors_total",
        "framecast_reencodes_total",
        "framecast_reencode_seconds_count",
        "framecast_jobs_failed_total",
    ):
        assert family in names, f"{family} missing from /metrics"
    assert value(samples, "framecast_service_429_total", key="operator") == 2
    # (README's metrics table gives this family a `key` label too; the code has kind and status only.)
    assert value(samples, "framecast_service_requests_total", kind="create_video", status="429") == 2
    fitted = value(samples, "framecast_reencodes_total", kind="video", outcome="fitted")
    assert fitted is not None and fitted >= 1
    assert (value(samples, "framecast_reencode_seconds_count", kind="video") or 0) >= 1
    failures = {
        dict(labels).get("code")
        for (n, labels), v in samples.items()
        if n == "framecast_jobs_failed_total" and v
    }
    assert failures and None not in failures
    errors = {
        (dict(labels)["status"], dict(labels)["code"])
        for (n, labels), v in samples.items()
        if n == "framecast_discord_errors_total" and v
    }
    assert ("403", "50013") in errors, errors


# -- before the login: the port answers while Discord refuses or holds the login -----------------------
async def _not_ready_until_the_login(world: World, ops: Ops) -> None:
    """Alive, not ready, with the login named as the reason in /readyz and in framecast_ready."""
    await ops.until("/healthz", lambda s, _: s == 200, timeout=30, what="alive before the login")
    # The store is opened right after the port starts: "pending" until then.
    status, text = await ops.until(
        "/readyz", lambda _, t: ready_body(t)["checks"]["database"] != "pending", what="the store opened"
    )
    assert status == 503
    assert ready_body(text) == {
        "ready": False,
        "checks": {"login": "failed", "gateway": "pending", "database": "ok", "models": "pending"},
    }
    samples = await ops.samples()
    assert value(samples, "framecast_ready", check="login") == 0
    assert value(samples, "framecast_ready", check="database") == 1
    assert not world.discord.sessions, "no gateway session before the login"


async def test_the_operator_port_answers_while_discord_refuses_the_login(tmp_path: Path) -> None:
    world = await make_world(
        tmp_path, extra_env={"HTTP_PORT": str(free_port()), "DISCORD_RETRY_MAX_DELAY": "0.2"}
    )
    world.discord.fail_next("GET /users/@me", status=503, count=1_000_000)
    world.bot = BotProcess(world.env, tmp_path / "bot.log")
    try:
        await world.bot.start()
        async with ops_of(world) as ops:
            await _not_ready_until_the_login(world, ops)
            await wait_log(world, "cannot reach Discord (HTTP 503)")
            # Discord is back: the same process logs in, connects and becomes ready.
            world.discord.clear_injections()
            await world.discord.wait_ready(timeout=30)
            await ops.until("/readyz", lambda s, _: s == 200, timeout=30, what="ready after the login")
            assert (await ops.samples())[("framecast_ready", frozenset({("check", "login")}))] == 1
    finally:
        await close_world(world)


async def test_the_operator_port_answers_while_discord_holds_the_login(tmp_path: Path) -> None:
    world = await make_world(tmp_path, extra_env={"HTTP_PORT": str(free_port())})
    release, held = hold_route(world.discord, "GET", "/users/@me")
    world.bot = BotProcess(world.env, tmp_path / "bot.log")
    try:
        await world.bot.start()
        await world.discord.wait_for(lambda: bool(held), timeout=30, what="the login asked")
        async with ops_of(world) as ops:
            await _not_ready_until_the_login(world, ops)
            release.set()
            await world.discord.wait_ready(timeout=30)
            await ops.until("/readyz", lambda s, _: s == 200, timeout=30, what="ready after the login")
    finally:
        release.set()
        await close_world(world)
