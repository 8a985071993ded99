"""What ``import bot`` costs a start: every bot.py (a container's, each one the end-to-end tests start)
pays for its imports in CPU before it does anything.

Optional backends load only where they are configured (redis-py with ``REDIS_URL``, asyncpg with a
PostgreSQL store, Alembic for a database to upgrade, PyAV for a result to re-encode), and what the
imports made is frozen out of the garbage collector's way, the collector on again afterwards.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Loaded only when the configuration or the work needs them.
OPTIONAL = ("redis", "asyncpg", "alembic", "av")

_PROBE = (
    "import gc, sys\n"
    "import bot\n"
    f"print(gc.get_freeze_count(), gc.isenabled(), *[m for m in {OPTIONAL!r} if m in sys.modules])\n"
)


def test_importing_the_bot_loads_no_optional_backend_and_freezes_what_it_made() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    frozen, enabled, *loaded = done.stdout.split()
    assert loaded == [], f"`import bot` loaded {', '.join(loaded)}: import it where it is used"
    assert enabled == "True", "the garbage collector was left off after the imports"
    assert int(frozen) > 10_000, f"only {frozen} objects frozen after the imports"
