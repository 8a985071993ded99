"""The store uses its libraries (SQLAlchemy, aiosqlite, asyncpg, Alembic) through their public API only.

The SQLite store once ran on a fast path through aiosqlite's private ``_execute``/``_conn``
and subclasses of SQLAlchemy's adapter classes, which any release of either could break without
notice (``benchmarks/README.md``, "Store", says what giving it up cost). These checks keep it out.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import framecast.storage

STORAGE = Path(framecast.storage.__file__).parent


def sources() -> list[Path]:
    """Every Python file of the storage package, migrations included."""
    return sorted(STORAGE.rglob("*.py"))


def test_no_private_name_of_another_object_or_module_is_used() -> None:
    found = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                private = [a.name for a in node.names if a.name.startswith("_")]
                if any(part.startswith("_") for part in (node.module or "").split(".")) or private:
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "private internals used by the store:\n" + "\n".join(found)


def test_no_class_of_a_library_is_subclassed() -> None:
    ours = []
    for info in pkgutil.iter_modules(framecast.storage.__path__, "framecast.storage."):
        module = importlib.import_module(info.name)
        ours += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    assert ours
    foreign = {
        f"{cls.__name__} <- {base.__module__}.{base.__qualname__}"
        for cls in ours
        for base in cls.__mro__
        if not base.__module__.startswith(("framecast.", "builtins", "typing", "abc", "enum"))
    }
    assert not foreign, f"the store subclasses a library's class: {sorted(foreign)}"
