"""Log redaction: no token, key or interaction token reaches the log, whoever logs it and however."""

from __future__ import annotations

import asyncio
import io
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from framecast.app import Actor, KeySetResult
from framecast.app.core import Core
from framecast.config import Secret, Settings
from framecast.logsetup import (
    RedactingFilter,
    SecretIndex,
    mask,
    mask_secrets,
    masked_secrets,
    setup_logging,
)
from tests.fakes.chat_side import QuietChat
from tests.fakes.gen_service import FakeService

DISCORD_TOKEN = "MTAxMjM0NTY3ODkwMTIzNDU2Nw.GAbcDe.s3cr3t-discord-token_value"
API_KEY = "sk-live-0123456789abcdef"
INTERACTION_TOKEN = "aW50ZXJhY3Rpb246MTIzNDU2Nzg5MDEyMzQ1Njc4OmFiY2RlZg"


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose records go through the filter to a string, formatted as in production."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter([DISCORD_TOKEN, API_KEY]))
    logger = logging.getLogger("tests.logsetup")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.handlers.clear()
        logger.propagate = True


def test_known_secrets_are_masked_in_the_message_and_its_arguments(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = logged
    logger.info("token is %s", DISCORD_TOKEN)
    logger.info(f"key={API_KEY} and again {API_KEY}")
    logger.warning("both: %r %s", {"k": API_KEY}, DISCORD_TOKEN)
    text = out.getvalue()
    assert DISCORD_TOKEN not in text and API_KEY not in text
    assert text.count("***") == 5


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            f"POST https://discord.com/api/v10/webhooks/1234/{INTERACTION_TOKEN}/messages/@original",
            "POST https://discord.com/api/v10/webhooks/1234/***/messages/@original",
        ),
        (
            f"POST /api/v10/interactions/98765/{INTERACTION_TOKEN}/callback",
            "POST /api/v10/interactions/98765/***/callback",
        ),
    ],
)
def test_interaction_tokens_in_urls_are_masked(
    logged: tuple[logging.Logger, io.StringIO], line: str, expected: str
) -> None:
    logger, out = logged
    logger.debug("%s has returned 200", line)
    assert out.getvalue().strip() == f"DEBUG tests.logsetup: {expected} has returned 200"


@pytest.mark.parametrize(
    "payload",
    [
        f'{{"type": 2, "token": "{INTERACTION_TOKEN}", "id": "1"}}',
        f"{{'type': 2, 'token': '{INTERACTION_TOKEN}', 'id': '1'}}",
        f'{{"token":"{INTERACTION_TOKEN}"}}',
    ],
)
def test_token_fields_of_gateway_payloads_are_masked(
    logged: tuple[logging.Logger, io.StringIO], payload: str
) -> None:
    logger, out = logged
    logger.debug("For Shard ID None: WebSocket Event: %s", payload)
    text = out.getvalue()
    assert INTERACTION_TOKEN not in text
    assert "token" in text and "***" in text


@pytest.mark.parametrize(
    "header",
    [
        "Authorization: Bearer abcdefgh12345678",
        "authorization: bearer abcdefgh12345678",
        "Authorization: Bot abcdefgh.12345678-xyz",
    ],
)
def test_authorization_headers_are_masked(logged: tuple[logging.Logger, io.StringIO], header: str) -> None:
    logger, out = logged
    logger.debug("headers: %s", header)
    text = out.getvalue()
    assert "abcdefgh" not in text and "***" in text


def test_tracebacks_are_scrubbed(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = logged
    try:
        raise RuntimeError(f"request to /webhooks/55/{INTERACTION_TOKEN} with key {API_KEY} failed")
    except RuntimeError:
        logger.exception("delivery failed")
    text = out.getvalue()
    assert "delivery failed" in text and "Traceback (most recent call last)" in text
    assert "RuntimeError: request to /webhooks/55/*** with key *** failed" in text
    assert INTERACTION_TOKEN not in text and API_KEY not in text


def test_clean_records_are_left_alone(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = logged
    record = logger.makeRecord(
        "tests.logsetup", logging.INFO, __file__, 1, "job %s queued at %d", (42, 3), None
    )
    assert RedactingFilter([DISCORD_TOKEN]).filter(record)
    assert (record.msg, record.args) == ("job %s queued at %d", (42, 3))
    try:
        raise ValueError("nothing secret")
    except ValueError:
        logger.exception("plain failure")
    assert "ValueError: nothing secret" in out.getvalue()


def test_very_short_or_empty_secrets_are_ignored() -> None:
    # An empty or tiny "secret" would otherwise star out every record.
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "a bot at 127.0.0.1", None, None)
    assert RedactingFilter(["", "a", "bot"]).filter(record)
    assert record.getMessage() == "a bot at 127.0.0.1"


def test_setup_logging_installs_the_filter_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("INFO", secrets=[API_KEY])
        logging.getLogger("framecast.test").info("calling with %s", API_KEY)
        logging.getLogger("framecast.test").debug("below the level")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    out = capsys.readouterr().out
    assert "framecast.test: calling with ***" in out
    assert API_KEY not in out and "below the level" not in out


def filtered(message: str, *args: object, secrets: tuple[str, ...] = ()) -> str:
    """`message % args` as a filter with the operator's `secrets` leaves it."""
    record = logging.LogRecord("x", logging.INFO, __file__, 1, message, args or None, None)
    assert RedactingFilter(secrets).filter(record)
    return record.getMessage()


# -- what is masked ---------------------------------------------------------------------------------
def test_the_longest_secret_at_a_place_wins_and_overlapping_secrets_leave_nothing_behind() -> None:
    index = SecretIndex(["abcd", "abcd1234", "zzab", "5678"])
    assert mask("key=abcd1234;", index) == "key=***;"  # not "***1234"
    assert mask("zzabcd1234!", index) == "***!"  # overlapping: one run, no tail of either
    assert mask("abcd12345678", index) == "******"  # adjacent secrets: each masked
    assert mask("abc 123 zza", index) == "abc 123 zza"
    assert filtered("%s and %s", API_KEY, API_KEY[:-1], secrets=(API_KEY,)) == f"*** and {API_KEY[:-1]}"


@pytest.mark.parametrize("count", [3, 500])  # few heads (found with str.find) and many (one scan)
def test_every_secret_is_found_however_many_there_are(count: int) -> None:
    keys = [f"k{n:03d}-{uuid.uuid4().hex}" for n in range(count)]
    index = SecretIndex(keys)
    for key in (keys[0], keys[-1]):
        assert mask(f"a {key} b {key}", index) == "a *** b ***"
    assert mask("k000-not-a-key k", index) == "k000-not-a-key k"


def test_an_owner_masks_exactly_what_it_publishes_until_it_withdraws_it() -> None:
    one, two = object(), object()
    first, second = f"sk-first-{uuid.uuid4().hex}", f"sk-second-{uuid.uuid4().hex}"
    try:
        mask_secrets(one, [first, second])
        mask_secrets(two, [second])
        assert filtered("%s %s", first, second) == "*** ***"
        mask_secrets(one, [second])  # replaced: the first is not masked any more
        assert filtered("%s %s", first, second) == f"{first} ***"
        mask_secrets(one, ())
        assert filtered("%s", second) == "***"  # still published by the other owner
        mask_secrets(two, ())
        assert filtered("%s", second) == second
        assert filtered("%s", second, secrets=(second,)) == "***"  # the operator's: always masked
        assert first not in masked_secrets() and second not in masked_secrets()
    finally:
        mask_secrets(one, ())
        mask_secrets(two, ())


def test_masking_work_per_record_does_not_grow_with_the_number_of_secrets() -> None:
    # Keys of one service look alike: same prefix, same length. 100,000 of them masked at once.
    keys = [f"sk-proj-{uuid.uuid4().hex}" for _ in range(100_000)]
    message = f"GET /v1/models with sk-proj-{'x' * 32} failed for {keys[77_777]}, sk-proj- retried"
    work = {}
    owner = object()
    try:
        for count in (10, 100_000):
            mask_secrets(owner, [*keys[:count], keys[77_777]])
            index = masked_secrets()
            before = index.lookups
            line = filtered("%s", message)
            work[count] = index.lookups - before
            assert line == message.replace(keys[77_777], "***")
            assert filtered("%s", keys[count - 1]) == "***"  # each of them is masked
    finally:
        mask_secrets(owner, ())
    assert work[10] == work[100_000] <= 4  # a set lookup per place a key's head occurs, that is all


def test_secrets_can_be_published_while_other_threads_log() -> None:
    owner = object()
    secret = f"sk-threads-{uuid.uuid4().hex}"
    stop = threading.Event()
    failures: list[BaseException] = []

    def log_lines() -> None:
        while not stop.is_set():
            try:
                line = filtered("using %s", secret)
                assert line in (f"using {secret}", "using ***")
            except BaseException as exc:  # noqa: BLE001 -- any failure in a thread is the test's
                failures.append(exc)
                return

    threads = [threading.Thread(target=log_lines) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for n in range(200):
            mask_secrets(owner, [secret, f"sk-other-{n:04d}"] if n % 2 else [])
    finally:
        stop.set()
        for t in threads:
            t.join()
        mask_secrets(owner, ())
    assert not failures


# -- servers' keys: masked once accepted, while in use ------------------------------------------------
SERVER_KEY = "sk-server-key-0123456789abcdef"
NEW_KEY = "sk-server-key-fedcba9876543210"


@pytest.fixture
async def core(fake_service: FakeService, tmp_path: Path) -> AsyncIterator[Core[QuietChat]]:
    fake_service.api_keys.update({SERVER_KEY, NEW_KEY})
    settings = Settings(
        discord_token=Secret("discord-token-not-used-here"),
        gen_api_base_url=fake_service.base_url,
        gen_api_key=Secret(fake_service.api_key),
        gen_retry_max=2,
        gen_backoff_base=0.01,
        gen_backoff_max=0.05,
        database_path=tmp_path / "data" / "framecast.sqlite3",
        shutdown_timeout=2.0,
        key_encryption_secret=Secret(Fernet.generate_key().decode("ascii")),
    )
    opened = await asyncio.wait_for(Core.open(settings, reporter=lambda **_: QuietChat()), 20)

    async def model_list_read() -> None:
        # The operator's model list is read in the background at start (no event to wait on).
        while opened.models.catalog is None:  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    await asyncio.wait_for(model_list_read(), 20)
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_refused_key_is_never_masked_so_an_admins_word_still_appears_in_logs(
    core: Core[QuietChat],
) -> None:
    for word in ("guild", "error", "Traceback"):
        outcome = await core.admins.set_key(Actor(77, 1, manages_guild=True), word)
        assert outcome.result is KeySetResult.REFUSED
        assert filtered("guild 1: error in job 5\nTraceback") == "guild 1: error in job 5\nTraceback"
    assert not any(word in masked_secrets() for word in ("guild", "error", "Traceback"))


async def test_an_accepted_key_is_masked_while_it_is_stored_until_it_is_replaced_or_removed(
    core: Core[QuietChat],
) -> None:
    admins, accounts = core.admins, core.accounts
    assert (await admins.set_key(Actor(77, 1, manages_guild=True), SERVER_KEY)).result is KeySetResult.SAVED
    assert filtered("key %s", SERVER_KEY) == "key ***"
    assert (
        await admins.set_key(Actor(77, 1, manages_guild=True), NEW_KEY)
    ).result is KeySetResult.SAVED  # replaced
    assert filtered("%s %s", SERVER_KEY, NEW_KEY) == f"{SERVER_KEY} ***"
    await admins.remove_key(Actor(77, 1, manages_guild=True))
    assert filtered("%s", NEW_KEY) == NEW_KEY
    assert (await admins.set_key(Actor(77, 1, manages_guild=True), SERVER_KEY)).result is KeySetResult.SAVED
    assert (await admins.set_key(Actor(77, 2, manages_guild=True), NEW_KEY)).result is KeySetResult.SAVED
    # The service refused it later: it was a real key once, and stays masked while it is stored.
    await accounts.key_rejected(accounts.for_guild(1))
    assert filtered("%s %s", SERVER_KEY, NEW_KEY) == "*** ***"
    await admins.remove_key(Actor(77, 1, manages_guild=True))
    assert filtered("%s %s", SERVER_KEY, NEW_KEY) == f"{SERVER_KEY} ***"
    await core.close()
    assert filtered("%s", NEW_KEY) == NEW_KEY  # nothing outlives the accounts


@pytest.mark.parametrize(
    "answer",
    [
        (401, {"error": {"message": f"the key {SERVER_KEY} is not valid"}}, None),
        (400, {"error": {"message": f"bad key {SERVER_KEY}"}}, None),
        (503, f"upstream failed for {SERVER_KEY}", None),
        (429, {"error": {"message": f"slow down, {SERVER_KEY}"}}, {"Retry-After": "0"}),
        (200, f"not json {SERVER_KEY}", None),
        (200, {"data": f"no list but {SERVER_KEY}"}, None),
    ],
    ids=["401", "400", "503", "429", "broken-json", "not-a-list"],
)
async def test_a_typed_key_never_reaches_a_log_while_it_is_checked(
    core: Core[QuietChat],
    fake_service: FakeService,
    caplog: pytest.LogCaptureFixture,
    answer: tuple[int, object, dict[str, str] | None],
) -> None:
    # No filter knows the key while it is checked: whatever the service says, nothing may log it.
    fake_service.scripted = [answer] * 3
    with caplog.at_level(logging.DEBUG):
        outcome = await core.admins.set_key(Actor(77, 1, manages_guild=True), SERVER_KEY)
    assert outcome.result is not KeySetResult.SAVED and SERVER_KEY not in masked_secrets()
    assert {r.status for r in fake_service.requests if r.key == SERVER_KEY} == {answer[0]}
    logged = [r.getMessage() for r in caplog.records]
    logged += [logging.Formatter().formatException(r.exc_info) for r in caplog.records if r.exc_info]
    assert not any(SERVER_KEY in text for text in logged)
