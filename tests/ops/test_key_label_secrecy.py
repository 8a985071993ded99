"""A server key's metrics label says nothing about the key.

Whoever reads ``/metrics`` must not be able to confirm a guessed key: the label may not be a
function of the key alone (it was the first 8 hex digits of the key's unsalted SHA-256).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys

from framecast.config import Secret
from framecast.ops.metrics import key_label

KEY = "sk-guild-guessable-key-0001"


def _label_in_a_new_process(key: str) -> str:
    code = f"from framecast.ops.metrics import key_label; print(key_label({key!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def test_the_label_is_not_the_keys_sha256_prefix() -> None:
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    label = key_label(KEY)
    assert label.startswith("guild-")
    assert label.removeprefix("guild-") not in digest


def test_the_label_is_stable_within_a_process() -> None:
    assert key_label(KEY) == key_label(Secret(KEY)) == key_label(KEY)
    assert key_label(KEY) != key_label(KEY + "x")


def test_another_process_names_the_same_key_differently() -> None:
    # Two processes with the same key: if the label were computable from the key alone, they
    # would agree. (Equal by chance: one in 2**32 per pair; two more processes make it 2**-96.)
    labels = {_label_in_a_new_process(KEY) for _ in range(3)} | {key_label(KEY)}
    assert len(labels) > 1
