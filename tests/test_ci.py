"""CI runs exactly the test command the README gives."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readmes_test_command_word_for_word() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Tests\n", 1)[1].split("\n## ", 1)[0]
    readme_commands = re.findall(r"^python3 -m venv .*$", section, flags=re.MULTILINE)
    ci_commands = re.findall(
        r"^python3 -m venv .*$", (ROOT / ".ci" / "run").read_text(encoding="utf-8"), re.MULTILINE
    )
    assert len(readme_commands) == 1, "the README's Tests section must give exactly one test command"
    assert ci_commands == readme_commands
