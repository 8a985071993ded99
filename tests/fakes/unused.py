"""A stand-in for a collaborator the code under test must never use.

``unused(Store)`` has the type ``Store`` for the type checker; at run time any attribute
read on it fails the test with a message naming what was used.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

T = TypeVar("T")


class _Unused:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        raise AssertionError(f"the test's stand-in {self._name} was used: .{attr}")

    def __repr__(self) -> str:
        return f"<unused {self._name}>"


def unused(kind: type[T]) -> T:
    """A `kind` that the code under test may hold but never touch."""
    return cast(T, _Unused(kind.__name__))
