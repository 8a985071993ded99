"""The lock files: every transitive version pinned with its hashes, and still inside the ranges.

``requirements.txt`` and ``requirements-dev.txt`` keep the ranges the project accepts;
``requirements.lock`` and ``requirements-dev.lock`` (pip-tools' ``pip-compile --generate-hashes``)
pin what the image, CI and the README's commands install. These tests fail when a range moves and
the lock was not refreshed, when a pin lost its hashes, or when the two locks disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Pin:
    """One locked package: its version and the hashes pip checks."""

    version: Version
    hashes: tuple[str, ...]


def ranges(path: Path) -> list[Requirement]:
    """The requirements a ``requirements*.txt`` states, following its ``-r`` includes."""
    found: list[Requirement] = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            found.extend(ranges(path.parent / line[3:].strip()))
            continue
        found.append(Requirement(line))
    return found


def pins(text: str) -> dict[str, Pin]:
    """A lock's ``name==version`` entries with their ``--hash`` options, by canonical name."""
    found: dict[str, Pin] = {}
    joined = re.sub(r"\\\n\s*", " ", text)  # one logical line per entry
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        head, *options = line.split()
        name, sep, version = head.partition("==")
        assert sep, f"not a pin: {line!r}"
        hashes = tuple(o.removeprefix("--hash=") for o in options if o.startswith("--hash=sha256:"))
        found[canonicalize_name(name)] = Pin(Version(version), hashes)
    return found


def unmet(requirements: list[Requirement], locked: dict[str, Pin]) -> list[str]:
    """Why `locked` does not satisfy `requirements` (empty: it does)."""
    problems = []
    for req in requirements:
        pin = locked.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name}: not in the lock")
        elif not req.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{req.name}: locked {pin.version}, outside {req.specifier}")
    return problems


LOCKS = [("requirements.txt", "requirements.lock"), ("requirements-dev.txt", "requirements-dev.lock")]


@pytest.mark.parametrize(("stated", "lock"), LOCKS)
def test_the_lock_satisfies_every_range(stated: str, lock: str) -> None:
    locked = pins((ROOT / lock).read_text())
    assert unmet(ranges(ROOT / stated), locked) == [], f"refresh {lock} (README: 'The lock files')"


@pytest.mark.parametrize("lock", [lock for _, lock in LOCKS])
def test_every_locked_package_carries_its_hashes(lock: str) -> None:
    locked = pins((ROOT / lock).read_text())
    assert locked, f"{lock} pins nothing"
    assert [name for name, pin in locked.items() if not pin.hashes] == []


def test_the_dev_lock_pins_the_runtime_packages_at_the_runtime_locks_versions() -> None:
    runtime = pins((ROOT / "requirements.lock").read_text())
    dev = pins((ROOT / "requirements-dev.lock").read_text())
    assert set(runtime) <= set(dev)
    assert {n: str(p.version) for n, p in runtime.items()} == {n: str(dev[n].version) for n in runtime}


def test_a_lock_outside_a_range_is_caught() -> None:
    locked = pins((ROOT / "requirements.lock").read_text())
    moved = [Requirement("aiohttp>=99"), Requirement("redis<1"), Requirement("not-a-package==1")]
    assert unmet(moved, locked) == [
        f"aiohttp: locked {locked['aiohttp'].version}, outside >=99",
        f"redis: locked {locked['redis'].version}, outside <1",
        "not-a-package: not in the lock",
    ]


def test_the_image_ci_and_the_readme_install_from_the_locks() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"(?m)^RUN pip install .*--require-hashes -r requirements\.lock$", dockerfile)
    assert "!requirements.lock" in (ROOT / ".dockerignore").read_text().splitlines()
    readme = (ROOT / "README.md").read_text()
    tests = readme.split("\n## Tests\n", 1)[1].split("\n## ", 1)[0]
    assert "pip install -r requirements-dev.lock" in tests
    assert (
        "pip install -r requirements.lock" in readme.split("\n## Install and run", 1)[1].split("\n## ", 1)[0]
    )
