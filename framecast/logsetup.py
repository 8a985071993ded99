"""Logging to stdout with secrets scrubbed from every record.

discord.py logs request URLs at DEBUG level, and interaction webhook URLs contain the interaction
token; the Discord token and the API key must never reach a log either. The filter below masks all of
them in the formatted message, whatever logger produced it.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable

_URL_TOKENS = re.compile(r"(/(?:webhooks|interactions)/\d+/)[A-Za-z0-9_\-.:]+")
# discord.py logs raw gateway events at DEBUG: interaction payloads carry their token.
_TOKEN_FIELDS = re.compile(r"""(['"]token['"]\s*:\s*['"])[^'"]+""")
_BEARER = re.compile(r"(?i)(bearer|bot)\s+[A-Za-z0-9_\-.=]{8,}")


class RedactingFilter(logging.Filter):
    """Replaces known secrets and token-bearing URL parts with ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = [s for s in secrets if s and len(s) >= 4]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = _URL_TOKENS.sub(r"\1***", message)
        clean = _BEARER.sub(r"\1 ***", clean)
        clean = _TOKEN_FIELDS.sub(r"\1***", clean)
        for secret in self._secrets:
            clean = clean.replace(secret, "***")
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            scrubbed = text
            for secret in self._secrets:
                scrubbed = scrubbed.replace(secret, "***")
            scrubbed = _URL_TOKENS.sub(r"\1***", scrubbed)
            if scrubbed != text:
                record.msg = f"{record.getMessage()}\n{scrubbed}"
                record.exc_info = None
                record.exc_text = None
        return True


def setup_logging(level: str, secrets: Iterable[str]) -> None:
    """Log to stdout at `level`, scrubbing `secrets` from every record."""
    # Text from outside (the service's error messages, prompts) may hold anything: a log line must
    # never fail on it, so characters stdout cannot encode are escaped instead of raising.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiohttp's access/client internals are noisy at DEBUG and add nothing for operators.
    logging.getLogger("aiohttp").setLevel(max(logging.INFO, root.level))
