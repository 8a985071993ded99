"""The house's layering, read from the source (``ast`` only: no product module is imported).

Three floors, knowledge pointing down (see ``/docs/ARCHITECTURE.md``):

* the Discord edge (``bot.py``, ``cogs/``) reaches the core only through ``framecast.app``, the
  package itself (``from framecast.app import ...``): its use cases and the values they return;
* the core (``framecast/``) knows nothing of Discord: it imports neither ``discord`` nor the edge;
* the machinery (``framecast/`` outside ``framecast/app/``) never imports the application above it.

* ``bot.py`` too reaches the core only through ``framecast.app`` (its package or its modules);
* the packages of the core (``framecast/jobs/``, ``keys/``, ..., and each top-level module such as
  ``framecast/clock.py``) form a DAG, every import counted (in functions and under
  ``if TYPE_CHECKING:`` too), and the ground floor (:data:`GROUND`: ``framecast/values/`` and the
  top-level modules) imports nothing of ours.

Plus: no import cycle between the modules of ``framecast/`` and ``cogs/``, no product module over
:data:`MAX_LINES` lines, and the storage code within :data:`MAX_STORAGE_LINES`. Each test lists every
violation it finds, one per line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The longest a product module may be.
MAX_LINES = 600
#: The longest a module of the Discord edge (``cogs/``) may be: an edge module that grows past it
#: holds more than one thing (a command, its wording, a form, a notice) and is split by what it holds.
MAX_COG_LINES = 400
#: The most non-blank lines the storage code may hold: ``framecast/storage/*.py`` (its migrations
#: apart) and ``framecast/jobs/leases.py``. A store that outgrows it holds more than storage.
MAX_STORAGE_LINES = 1_600
#: The one door of the core the Discord edge may use.
APP = "framecast.app"
#: The ground floor's package: the pure values every package shares (the top-level modules of
#: ``framecast/`` are on the ground floor too, see :func:`_on_the_ground`).
GROUND = "framecast.values"


@dataclass(frozen=True)
class Import:
    """One imported name, resolved to absolute dotted form."""

    module: str  #: the importing module, e.g. ``cogs.jobs``
    target: str  #: what is imported: ``a.b`` for ``import a.b``, ``a.b.c`` for ``from a.b import c``
    source: str  #: the module named in the statement (``a.b`` in both examples above)
    is_from: bool  #: a ``from ... import ...`` statement
    line: int
    top_level: bool  #: runs when the module is imported (not in a function, not ``if TYPE_CHECKING:``)
    typing_only: bool = False  #: under ``if TYPE_CHECKING:``: never runs

    def where(self) -> str:
        """``path:line`` of the statement, for a violation's message."""
        return f"{module_path(self.module).relative_to(REPO)}:{self.line}"


def product_files() -> Iterator[Path]:
    """Every product module: ``bot.py`` and the Python files under ``cogs/``, ``web/`` and ``framecast/``."""
    yield REPO / "bot.py"
    for folder in ("cogs", "web", "framecast"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path


def module_name(path: Path) -> str:
    """``framecast/jobs/__init__.py`` -> ``framecast.jobs``; ``cogs/jobs.py`` -> ``cogs.jobs``."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_path(module: str) -> Path:
    """The file of a product module (its ``__init__.py`` for a package)."""
    base = REPO.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


MODULES: dict[str, Path] = {module_name(path): path for path in product_files()}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of a ``from`` statement's module (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    parts = module.split(".")
    package = parts if is_package else parts[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str) -> list[Import]:
    """Every import statement of `module`, wherever it sits, marked top-level or not."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))
    found: list[Import] = []

    def visit(node: ast.AST, top_level: bool, typing_only: bool = False) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(
                    Import(module, alias.name, alias.name, False, node.lineno, top_level, typing_only)
                )
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                target = source if alias.name == "*" else f"{source}.{alias.name}"
                found.append(Import(module, target, source, True, node.lineno, top_level, typing_only))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for child in ast.iter_child_nodes(node):
                visit(child, False, typing_only)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, False, True)
            for child in node.orelse:
                visit(child, top_level, typing_only)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, top_level, typing_only)

    visit(tree, True)
    return found


IMPORTS: dict[str, list[Import]] = {module: imports_of(module) for module in MODULES}


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _floor(module: str) -> str:
    return module.split(".")[0]


def _report(violations: list[str]) -> str:
    return f"{len(violations)} violation(s):\n" + "\n".join(violations)


def test_layer_rules_see_every_floor() -> None:
    """The rules below read real code: the edge, the application and the machinery are all found."""
    assert "bot" in MODULES and APP in MODULES
    assert any(_floor(m) == "cogs" for m in MODULES)
    assert any(_under(m, "framecast") and not _under(m, APP) for m in MODULES)


def test_the_discord_edge_imports_from_the_core_only_the_application_package() -> None:
    """``cogs/`` imports from ``framecast`` only ``from framecast.app import <name>``, never a submodule."""
    app_submodules = {m for m in MODULES if m.startswith(APP + ".")}
    violations = []
    for module, imports in IMPORTS.items():
        if _floor(module) != "cogs":
            continue
        for imp in imports:
            if not _under(imp.target, "framecast"):
                continue
            allowed = imp.is_from and imp.source == APP and imp.target not in app_submodules
            if not allowed:
                violations.append(f"{imp.where()}: {module} imports {imp.target}")
    assert not violations, _report(violations)


def test_the_web_edge_imports_from_the_core_only_the_application_package_and_nothing_of_discord() -> None:
    """``web/`` is an edge beside ``cogs/``: ``from framecast.app import <name>`` only, and neither
    discord.py nor the Discord edge (who a person is in a server comes in through the application)."""
    app_submodules = {m for m in MODULES if m.startswith(APP + ".")}
    violations = []
    for module, imports in IMPORTS.items():
        if _floor(module) != "web":
            continue
        for imp in imports:
            if _floor(imp.target) in {"discord", "cogs", "bot"}:
                violations.append(f"{imp.where()}: {module} imports {imp.target}")
            elif _under(imp.target, "framecast") and not (
                imp.is_from and imp.source == APP and imp.target not in app_submodules
            ):
                violations.append(f"{imp.where()}: {module} imports {imp.target}")
    assert not violations, _report(violations)


def test_the_core_knows_nothing_of_discord_or_the_edge() -> None:
    """No module under ``framecast/`` imports ``discord``, ``cogs`` or ``bot``."""
    violations = [
        f"{imp.where()}: {module} imports {imp.target}"
        for module, imports in IMPORTS.items()
        if _floor(module) == "framecast"
        for imp in imports
        if _floor(imp.target) in {"discord", "cogs", "web", "bot"}
    ]
    assert not violations, _report(violations)


def test_the_machinery_never_imports_the_application() -> None:
    """``framecast/`` outside ``framecast/app/`` imports nothing of ``framecast.app``."""
    violations = [
        f"{imp.where()}: {module} imports {imp.target}"
        for module, imports in IMPORTS.items()
        if _floor(module) == "framecast" and not _under(module, APP)
        for imp in imports
        if _under(imp.target, APP)
    ]
    assert not violations, _report(violations)


def test_bot_imports_from_the_core_only_the_application() -> None:
    """``bot.py`` assembles the process from ``framecast.app`` alone (``app.core``, ``app.process``...),
    every import counted, never the store, the queues or the ops server directly."""
    violations = [
        f"{imp.where()}: bot imports {imp.target}"
        for imp in IMPORTS["bot"]
        if _under(imp.target, "framecast") and not _under(imp.target, APP)
    ]
    assert not violations, _report(violations)


def _core_unit(name: str) -> str | None:
    """The package of the core (or top-level module) a dotted name lies in: ``framecast.jobs.runner``
    -> ``framecast.jobs``; ``framecast.clock.Clock`` -> ``framecast.clock``; None outside the core."""
    parts = name.split(".")
    if parts[0] != "framecast" or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def _on_the_ground(module: str) -> bool:
    """The ground floor: ``framecast/values/`` and the top-level modules (``framecast/clock.py``...)."""
    unit = _core_unit(module)
    if unit is None:
        return False
    return unit == GROUND or (module == unit and MODULES[module].name != "__init__.py")


def _package_edges() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> where, over every import of the core (top-level or not)."""
    edges: dict[str, dict[str, list[str]]] = {}
    for module, imports in IMPORTS.items():
        source = _core_unit(module)
        if source is None:
            continue
        edges.setdefault(source, {})
        for imp in imports:
            target = _core_unit(imp.target)
            if target is not None and target != source:
                where = imp.where()
                found = edges[source].setdefault(target, [])
                if where not in found:  # ``from a import b, c`` is one statement, one place
                    found.append(where)
    return edges


def test_the_packages_of_the_core_form_a_dag() -> None:
    """No two packages of the core (nor a package and a top-level module) import each other, even
    through others, counting imports in functions and under ``if TYPE_CHECKING:``: a package can be
    read, tested and changed with only the floors below it in mind."""
    edges = _package_edges()
    graph = {unit: set(targets) for unit, targets in edges.items()}
    violations = []
    for cycle in _cycles(graph):
        links = [
            f"{a} -> {b} ({', '.join(edges[a][b])})" for a in cycle for b in sorted(graph[a]) if b in cycle
        ]
        violations.append(f"cycle of {len(cycle)} packages: " + "; ".join(links))
    assert not violations, _report(violations)


def test_the_ground_floor_imports_nothing_of_ours() -> None:
    """``framecast/values/`` imports only itself, and a top-level module of ``framecast/`` nothing of
    ``framecast`` at all: the values everyone shares never pull another package in."""
    violations = [] if GROUND in MODULES else [f"{GROUND}: no ground floor (the package is missing)"]
    for module, imports in IMPORTS.items():
        if not _on_the_ground(module):
            continue
        own = _core_unit(module)
        for imp in imports:
            unit = _core_unit(imp.target)
            if unit is not None and not (own == GROUND and unit == GROUND):
                violations.append(f"{imp.where()}: {module} imports {imp.target}")
    assert not violations, _report(violations)


def _imported_module(imp: Import) -> str | None:
    """The product module an import loads (``from a import b``: ``a.b`` when that is a module)."""
    if imp.target in MODULES:
        return imp.target
    if imp.source in MODULES:
        return imp.source
    return None


def _packages_run_first(target: str, importer: str) -> Iterator[str]:
    """The product packages importing `target` runs first, but for those that hold `importer`."""
    parts = target.split(".")
    for end in range(1, len(parts)):
        package = ".".join(parts[:end])
        if package in MODULES and not _under(importer, package):
            yield package


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_import_cycle_between_modules_of_the_core_and_the_edge() -> None:
    """Imports that run (at module level, or deferred into a function; not under
    ``if TYPE_CHECKING:``) form no cycle: a deferred import that closes one is a cycle all the same.

    ``bot.py`` is in the graph too: a cog importing the bot at run time would close a cycle. So are
    the packages a module's import runs first: ``from a.b.c import d`` runs ``a/b/__init__.py``
    (unless ``a.b`` holds the importer, whose import started it already), which may close one."""
    graph: dict[str, set[str]] = {}
    for module, imports in IMPORTS.items():
        targets = {_imported_module(imp) for imp in imports if not imp.typing_only}
        targets |= {p for t in targets if t is not None for p in _packages_run_first(t, module)}
        graph[module] = {t for t in targets if t is not None and t != module}
    cycles = _cycles(graph)
    violations = []
    for cycle in cycles:
        edges = [f"{a} -> {b}" for a in cycle for b in sorted(graph[a]) if b in cycle]
        violations.append(f"cycle of {len(cycle)}: " + "; ".join(edges))
    assert not violations, _report(violations)


#: The one module allowed to reach past discord.py's public API (each use says why there).
DISCORD_INTERNALS = "cogs.discord_internals"
#: discord.py modules with no public API of their own (their names are used by the library inside).
PRIVATE_DISCORD_MODULES = ("discord.http", "discord.gateway", "discord.state", "discord.webhook.async_")
#: Attributes of discord.py objects that are undocumented: the client's HTTP and websocket internals.
PRIVATE_DISCORD_ATTRIBUTES = frozenset({"http", "ws", "MISSING"})


def _private_discord_uses(module: str) -> Iterator[str]:
    """Where `module` reaches into discord.py internals (imports, attributes, ``getattr(x, "_y")``)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(REPO)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if any(_under(name, private) for private in PRIVATE_DISCORD_MODULES):
                    yield f"{where}:{node.lineno}: imports {name}"
        elif isinstance(node, ast.Attribute):
            dotted = ast.unparse(node)
            if any(_under(dotted, private) for private in PRIVATE_DISCORD_MODULES):
                yield f"{where}:{node.lineno}: uses {dotted}"
            elif node.attr in PRIVATE_DISCORD_ATTRIBUTES and not dotted.startswith("self."):
                yield f"{where}:{node.lineno}: uses {dotted}"
            elif node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = ast.unparse(node.value)
                if owner not in {"self", "cls"}:
                    yield f"{where}:{node.lineno}: uses the private {dotted}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
            and not node.args[1].value.startswith("__")
        ):
            yield f"{where}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})"


def test_discord_internals_are_used_in_one_module_only() -> None:
    """``bot.py`` and ``cogs/`` use discord.py's public API; what has none sits in :data:`DISCORD_INTERNALS`."""
    assert DISCORD_INTERNALS in MODULES
    violations = [
        use
        for module in MODULES
        if _floor(module) in {"bot", "cogs"} and module != DISCORD_INTERNALS
        for use in _private_discord_uses(module)
    ]
    assert not violations, _report(violations)


def test_no_test_module_imports_another() -> None:
    """Shared fixtures and helpers live in one place (conftest, the harness, ``tests/fakes``...),
    never in a ``test_*.py`` module another one imports."""
    violations = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_"):
                    violations.append(f"{path.relative_to(REPO)}:{node.lineno}: imports {name}")
                    break
    assert not violations, _report(violations)


def test_no_product_module_is_longer_than_the_limit() -> None:
    """``bot.py``, ``cogs/`` and ``framecast/`` modules are at most :data:`MAX_LINES` lines each."""
    violations = []
    for path in MODULES.values():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            violations.append(f"{path.relative_to(REPO)}: {lines} lines (over {MAX_LINES})")
    assert not violations, _report(violations)


def test_no_module_of_the_discord_edge_is_longer_than_its_limit() -> None:
    """``cogs/`` modules are at most :data:`MAX_COG_LINES` lines each: the edge only translates."""
    violations = []
    for module, path in MODULES.items():
        if _floor(module) != "cogs":
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_COG_LINES:
            violations.append(f"{path.relative_to(REPO)}: {lines} lines (over {MAX_COG_LINES})")
    assert not violations, _report(violations)


def test_the_storage_code_stays_within_its_budget() -> None:
    """The store and the leases hold at most :data:`MAX_STORAGE_LINES` non-blank lines together."""
    paths = [
        *sorted((REPO / "framecast" / "storage").glob("*.py")),
        REPO / "framecast" / "jobs" / "leases.py",
    ]
    counts = {
        path: sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
        for path in paths
    }
    total = sum(counts.values())
    listing = [f"{path.relative_to(REPO)}: {n}" for path, n in counts.items()]
    assert total <= MAX_STORAGE_LINES, _report(
        [f"{total} non-blank lines (over {MAX_STORAGE_LINES})", *listing]
    )
