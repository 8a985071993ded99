"""Log redaction: no token, key or interaction token reaches the log, whoever logs it and however."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from framecast.logsetup import RedactingFilter, setup_logging

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
