"""zwarm's layers are true: its packages stand in one declared order (``LAYERS``, bottom-up)
and every import between two of them points down that order, so no package cycle exists
(agents never import the engine; the process entry points of ``runtime`` sit above the engine
and never build the facade; the text helpers lie below every front end; ``serve`` never
imports ``cli``); the import graph of modules has no cycle either; and the orchestrator layer
sits on the API's public methods: it never reaches through ``Zwarm.store`` or
``Zwarm.config``, and the API never imports it.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import``,
including those inside functions (lazy imports still form cycles at run time), but not those
under ``if TYPE_CHECKING:`` (never executed). Imports by name at run time are added from
where they are declared: ``zwarm.cli.commands.LAZY_COMMANDS``, and the ``zwarm.*``
entry-point groups in ``pyproject.toml`` (an edge from the package that loads the group, the
one of its name, to each module in it); an ``import_module`` anywhere but in
``zwarm.cli.commands`` and ``zwarm.plugins`` fails the test, so a new one must be taught here.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

from tests.support import ROOT

PKG = ROOT / "zwarm"
# zwarm's packages (and top-level modules), bottom-up: each may import only those before it.
# ``zwarm`` is the root package's own ``__init__`` (the version).
LAYERS = [
    "zwarm",
    "errors",  # the exceptions: every layer raises them
    "xdg",  # where per-user files live
    "plugins",  # entry points (agents, launchers)
    "rules",  # how trust treats a config value
    "secret_names",  # which names hold secrets
    "legacy_config",  # zwarm 3.x's config, recognised and ignored
    "text",  # terminal text, every cut of it: below every front end
    "system",  # the operating system: process identity, files, file-change waits
    "model",  # the session record, its schema, steps, rows
    "trust",  # which state dirs and config values may be used
    "store",  # the state dir's records
    "env",  # the environment: state dir rule, how Python and agents are started
    "agents",  # the agent plugins (never the engine: hooks it calls)
    "launchers",  # where a turn runs
    "config",  # config.toml: the schema the agents and launchers declare
    "config_text",  # the commented config zwarm init writes
    "sandbox",  # zwarm's own sandbox of a turn: its policy, bubblewrap, the preflight
    "engine",  # the session life cycle
    "runtime",  # the process entry points: supervisor, fork server, watch, hooks
    "trust_plan",  # what zwarm trust shows and records
    "upgrade",  # zwarm init --upgrade
    "legacy",  # zwarm 3.x's sessions: read, continued once confirmed
    "ops",  # the API's operations, one job per module
    "api",  # the one public Python API (the facade)
    "orchestrator",  # the built-in orchestrator and its tools, on the API
    "serve",  # HTTP, streams and the dashboard, on the API
    "mcp_install",  # zwarm mcp install: the MCP clients' config files
    "cli",  # the command line, on everything
    "__main__",
]
# Upward package edges another task is removing; nothing else may be here, and an edge
# that no longer exists must leave (the test says so).
PENDING: set[tuple[str, str]] = set()
DYNAMIC_IMPORTERS = {"zwarm.cli.commands", "zwarm.plugins"}
LAYER_FILES = [*sorted((PKG / "orchestrator").rglob("*.py")), PKG / "cli" / "orchestrator.py"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except the bodies of ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(module: str, node: ast.AST) -> set[str]:
    """The zwarm modules an import statement in ``module`` loads by name."""
    if isinstance(node, ast.Import):
        return {_known(a.name) for a in node.names} - {""}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
    # ``from pkg import sibling`` inside pkg needs only the sibling (pkg is already loading);
    # any other name taken from a package needs its __init__ to have run: an edge to it
    parent = module.startswith(base + ".") and len(subs) == len(node.names)
    return (subs | (set() if parent else {_known(base)})) - {""}


def _known(name: str) -> str:
    """``name`` or its nearest enclosing zwarm module; "" if it is not zwarm's."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _dynamic_edges() -> dict[str, set[str]]:
    """``zwarm.cli.commands`` -> its LAZY_COMMANDS modules; the package that loads an
    entry-point group (``zwarm.agents`` loads the group ``zwarm.agents``, ``zwarm.launchers``
    the group ``zwarm.launchers``: ``plugins.load`` is called nowhere else, checked here) ->
    the modules registered in that group. ``zwarm.plugins`` only names the groups."""
    edges: dict[str, set[str]] = {"zwarm.cli.commands": _lazy_commands()}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {
        group: {spec.partition(":")[0].strip() for spec in items.values()}
        for group, items in project.get("entry-points", {}).items()
        if group.startswith("zwarm.")
    }
    for group, modules in groups.items():
        assert group in MODULES, f"entry-point group {group} is not loaded by a package of its name"
        edges.setdefault(group, set()).update(modules)
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if _calls_plugins_load(node):
                assert module in groups, f"{module} loads plugins: teach this test"
    return edges


def _calls_plugins_load(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "load"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "plugins"
    )


def _lazy_commands() -> set[str]:
    cli = ast.parse((PKG / "cli" / "commands.py").read_text())
    lazy: set[str] = set()
    for node in ast.walk(cli):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "LAZY_COMMANDS" for t in node.targets
        ):
            assert isinstance(node.value, ast.Dict)
            for value in node.value.values:
                assert isinstance(value, ast.Tuple) and isinstance(value.elts[0], ast.Constant)
                lazy.add(str(value.elts[0].value))
    return lazy


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in _runtime_nodes(tree):
            graph[module] |= _targets(module, node)
            if _calls_import_module(node):
                assert module in DYNAMIC_IMPORTERS, f"{module} imports by name: teach this test"
    for module, targets in _dynamic_edges().items():
        unknown = targets - MODULES.keys()
        assert not unknown, f"{module} loads modules that do not exist: {unknown}"
        graph[module] |= targets
    for module in graph:
        graph[module].discard(module)
    return graph


def _calls_import_module(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in ("import_module", "__import__")


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*path[path.index(n) :], n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def package(module: str) -> str:
    """The package (or top-level module) of zwarm that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], set[str]]:
    """Each import between two packages, with the module imports that make it."""
    edges: dict[tuple[str, str], set[str]] = {}
    for m, targets in graph.items():
        for t in targets:
            if package(m) != package(t):
                edges.setdefault((package(m), package(t)), set()).add(f"{m} -> {t}")
    return edges


# ---------------------------------------------------------------------------- the tests
def test_every_package_has_its_place_in_the_layers() -> None:
    found = {package(m) for m in MODULES}
    assert len(set(LAYERS)) == len(LAYERS)
    unplaced = sorted(found - set(LAYERS))
    assert unplaced == [], (
        f"packages with no place in LAYERS (add them where they import): {unplaced}"
    )
    assert sorted(set(LAYERS) - found) == [], "LAYERS names packages that do not exist"


def test_every_package_import_points_down_the_layers() -> None:
    rank = {p: i for i, p in enumerate(LAYERS)}
    up = [
        f"{a} -> {b}: " + ", ".join(sorted(why))
        for (a, b), why in sorted(package_edges(import_graph()).items())
        if rank[b] > rank[a] and (a, b) not in PENDING
    ]
    assert up == [], "imports up the layers:\n" + "\n".join(up)


def test_no_package_cycle_and_nothing_stale_is_pending() -> None:
    """(The order alone proves there is none; this says where one is, if the order changes.)"""
    edges = package_edges(import_graph())
    graph: dict[str, set[str]] = {p: set() for p in LAYERS}
    for a, b in edges.keys() - PENDING:
        graph[a].add(b)
    cycle = find_cycle(graph)
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])
    assert sorted(PENDING - edges.keys()) == [], "gone: remove these from PENDING"


def test_the_import_graph_has_no_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_cycle_runs_through_the_api_the_orchestrator_or_the_commands() -> None:
    """The cycles this layering removed (api <-> orchestrator.tools, cli <-> cli.orchestrator)
    stay removed, whatever the rest of the graph does."""
    graph = import_graph()
    mine = [m for m in MODULES if m == "zwarm.api" or m.startswith(("zwarm.cli", "zwarm.orch"))]
    looping = [m for m in sorted(mine) if m in _reachable(graph, graph[m])]
    assert looping == [], f"import cycles through {looping}"


def _reachable(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    return seen


def test_the_api_never_imports_the_orchestrator_layer() -> None:
    graph = import_graph()
    top = ("zwarm.orchestrator", "zwarm.cli", "zwarm.serve", "zwarm.__main__")  # layers on top
    below = {m for m in MODULES if not m.startswith(top)}
    for m in sorted(below):
        up = {t for t in graph[m] if t.startswith(("zwarm.orchestrator", "zwarm.cli"))}
        assert not up, f"{m} imports {up}"


def test_the_orchestrator_layer_uses_no_store_or_config_of_the_api() -> None:
    for path in LAYER_FILES:
        tree = ast.parse(path.read_text(), str(path))
        used = [
            f"{path.name}:{n.lineno} .{n.attr}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr in ("store", "config")
        ]
        assert used == [], used


def test_the_checker_sees_what_it_must() -> None:
    """The graph reader itself: lazy, relative and by-name imports are edges; TYPE_CHECKING
    ones are not; a cycle is reported as a path."""
    graph = import_graph()
    assert "zwarm.cli.orchestrator" in graph["zwarm.cli.commands"]  # LAZY_COMMANDS
    assert "zwarm.agents.codex" in graph["zwarm.agents"]  # the group it loads
    assert "zwarm.launchers.slurm" in graph["zwarm.launchers"]
    assert "zwarm.api" in graph["zwarm.orchestrator.tools.toolbox"]
    lazy = ast.parse("def f():\n    from zwarm import api\n")
    found = set().union(*(_targets("zwarm.cli", n) for n in _runtime_nodes(lazy)))
    assert found == {"zwarm.api"}
    typing_only = ast.parse("if TYPE_CHECKING:\n    import zwarm.api\n")
    assert set().union(*(_targets("zwarm.cli", n) for n in _runtime_nodes(typing_only))) == set()
    relative = ast.parse("from .common import get_api\n")
    assert set().union(*(_targets("zwarm.cli", n) for n in _runtime_nodes(relative))) == {
        "zwarm.cli.common"
    }
    sibling = ast.parse("from zwarm.cli import render\n")
    assert _targets("zwarm.cli.demo", sibling.body[0]) == {"zwarm.cli.render"}
    from_parent = ast.parse("from zwarm.cli import get_api\n")  # the package's own names
    assert _targets("zwarm.cli.orchestrator", from_parent.body[0]) == {"zwarm.cli"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


FRONT_ENDS = [p for d in ("cli", "serve", "orchestrator") for p in sorted((PKG / d).rglob("*.py"))]


def test_no_front_end_reaches_into_the_store() -> None:
    """The front ends (the commands, the server, the orchestrator) go through ``Zwarm``'s
    methods, following a growing turn log included (``Zwarm.follow``, ``turn_watch``): none
    reads ``.store`` (the state dir's files are the API's, ``zwarm.ops``'s and the
    engine's)."""
    assert FRONT_ENDS
    used = [
        f"{path.relative_to(PKG)}:{n.lineno}"
        for path in FRONT_ENDS
        for n in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(n, ast.Attribute) and n.attr == "store"
    ]
    assert used == [], f"reaches into Zwarm.store: {used}"
