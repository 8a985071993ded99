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
#: Marks the custom_id of a text input that holds a secret (a server's API key typed into a modal):
#: discord.py logs raw gateway events at DEBUG, modal submissions with their values included.
SECRET_INPUT_MARK = "secret"
_LITERAL = r"'(?:[^'\\]|\\.)*'" + r'|"(?:[^"\\]|\\.)*"'
_SIMPLE_FIELDS = r"""(?:['"]\w+['"]\s*:\s*[^,{}\[\]]+,\s*)*"""
_SECRET_ID = rf"""['"]custom_id['"]\s*:\s*['"][^'"]*{SECRET_INPUT_MARK}[^'"]*['"]"""
# The value of a secret text input, whichever side of its custom_id it is on (same flat object).
_SECRET_VALUE_AFTER = re.compile(rf"""({_SECRET_ID},\s*{_SIMPLE_FIELDS}['"]value['"]\s*:\s*)(?:{_LITERAL})""")
_SECRET_VALUE_BEFORE = re.compile(
    rf"""(['"]value['"]\s*:\s*)(?:{_LITERAL})(,\s*{_SIMPLE_FIELDS}{_SECRET_ID})"""
)
#: Secrets learnt while running (a server's API key set through /settings): every filter masks them.
_RUNTIME_SECRETS: set[str] = set()


def add_secret(secret: str) -> None:
    """Mask `secret` in every log record from now on (for secrets learnt after start-up)."""
    if secret and len(secret) >= 4:
        _RUNTIME_SECRETS.add(secret)


def _scrub_secret_inputs(text: str) -> str:
    text = _SECRET_VALUE_AFTER.sub(r"\1'***'", text)
    return _SECRET_VALUE_BEFORE.sub(r"\1'***'\2", text)


class RedactingFilter(logging.Filter):
    """Replaces known secrets and token-bearing URL parts with ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = [s for s in secrets if s and len(s) >= 4]

    def _all_secrets(self) -> list[str]:
        # Longest first, so a secret that contains another is masked whole.
        return sorted({*self._secrets, *_RUNTIME_SECRETS}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = _URL_TOKENS.sub(r"\1***", message)
        clean = _BEARER.sub(r"\1 ***", clean)
        clean = _TOKEN_FIELDS.sub(r"\1***", clean)
        clean = _scrub_secret_inputs(clean)
        for secret in self._all_secrets():
            clean = clean.replace(secret, "***")
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            scrubbed = _scrub_secret_inputs(text)
            for secret in self._all_secrets():
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
