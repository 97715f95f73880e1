"""The house as drawn in docs/architecture.md: no import runs upward, no cycle between packages or modules,
psycopg's errors stay inside db/, and serve/'s doors never import each other. Run as a script to print the
drawing's edges: `python tests/test_layers.py`."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "ragvps"

# Lower layers never import higher ones; packages of one layer do not import each other, except where
# ALLOWED says so (measure reads the stages it measures; retrieve, generate and ingest use the store).
LAYERS = {
    "errors": 0,
    "config": 0,
    "urls": 0,
    "reach": 0,
    "version": 0,
    "backends": 0,
    "tokens": 0,
    "records": 0,
    "text": 0,
    "langs": 0,
    "data": 0,
    "sql": 0,
    "embed": 1,
    "db": 2,
    "ingest": 3,
    "retrieve": 3,
    "generate": 3,
    "measure": 4,
    "app": 5,
    "cli": 6,
    "serve": 6,
    "__main__": 7,
    "__init__": 7,
}
ALLOWED_SIDEWAYS = {("cli", "serve")}  # `ragvps serve` and `ragvps mcp` start the server
# What the interfaces may import below the app layer: its types and the leaf modules.
INTERFACE_MAY_IMPORT = {"app", "config", "errors", "version", "cli", "serve"}


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")


def package_edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        here = path.relative_to(ROOT).with_suffix("").parts[0]
        for name, line in _imports(path):
            if name.startswith("ragvps.") and (there := name.split(".")[1]) != here:
                edges.setdefault((here, there), []).append(f"{path.relative_to(ROOT.parent)}:{line}")
    return {k: sorted(set(v)) for k, v in edges.items()}


def module_cycles() -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        graph[_module(path)] = {name for name, _ in _imports(path) if name.startswith("ragvps")}
    for name, deps in graph.items():  # a package's own __init__ is not an edge back from its modules
        graph[name] = {d for d in deps if d in graph and d != name and not name.startswith(d + ".")}
    return cycles(graph)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module: each is an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def upward() -> list[str]:
    found = []
    for (a, b), where in package_edges().items():
        la, lb = LAYERS.get(a), LAYERS.get(b)
        assert la is not None and lb is not None, f"{a} or {b} has no layer in tests/test_layers.py"
        if lb > la or (lb == la and (a, b) not in ALLOWED_SIDEWAYS and la > 0):
            found.append(f"{a} -> {b}: {', '.join(where)}")
    return found


def test_every_package_has_a_layer() -> None:
    names = {p.relative_to(ROOT).with_suffix("").parts[0] for p in ROOT.rglob("*.py")}
    assert names <= LAYERS.keys(), names - LAYERS.keys()


def test_no_import_runs_upward_or_sideways() -> None:
    assert upward() == []


def test_no_cycle_between_modules() -> None:
    assert module_cycles() == []


def test_interfaces_import_only_the_app_layer() -> None:
    # cli/ and serve/ may import the app layer, config and errors; anything else they need the app exposes
    reach = {
        (a, b): w for (a, b), w in package_edges().items() if a in ("cli", "serve") and b not in INTERFACE_MAY_IMPORT
    }
    assert reach == {}, "\n".join(f"{a} -> {b}: {', '.join(w)}" for (a, b), w in reach.items())


def test_driver_errors_stay_in_db() -> None:
    leaks = []
    for path in ROOT.rglob("*.py"):
        if path.relative_to(ROOT).parts[0] == "db":
            continue
        text = path.read_text(encoding="utf-8")
        for needle in (
            "psycopg.Error",
            "psycopg.errors",
            "psycopg.OperationalError",
            "PoolTimeout",
            "psycopg.InterfaceError",
        ):
            if needle in text:
                leaks.append(f"{path.relative_to(ROOT.parent)}: {needle}")
    assert leaks == []


# --- imports at the top: one inside a function says why (`# lazy: <reason>`) ----------------------------------

LAZY = re.compile(r"# lazy: \S")


def unreasoned_imports(path: Path) -> list[int]:
    """Lines of the imports inside functions with no `# lazy: <reason>`: on the import's own lines, or above it
    in its run of imports (a comment above or on an import covers the imports below it in the same run)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for block in ast.walk(fn):
            for body in (getattr(block, f, None) for f in ("body", "orelse", "finalbody")):
                if not isinstance(body, list):
                    continue
                start = None  # the first line of the current run of imports
                for stmt in body:
                    if not isinstance(stmt, ast.Import | ast.ImportFrom):
                        start = None
                        continue
                    start = stmt.lineno if start is None else start
                    above = lines[start - 2] if start > 1 else ""
                    covering = [above, *lines[start - 1 : stmt.end_lineno or stmt.lineno]]
                    if not any(LAZY.search(line) for line in covering):
                        found.append(stmt.lineno)
    return sorted(set(found))


def test_every_import_inside_a_function_says_why_it_is_lazy() -> None:
    found = {
        str(p.relative_to(ROOT.parent)): lines for p in sorted(ROOT.rglob("*.py")) if (lines := unreasoned_imports(p))
    }
    unreasoned = [f"{name}:{line}" for name, lines in found.items() for line in lines]
    assert unreasoned == [], "move these imports to the top of their module, or say why not with `# lazy: ...`"


# --- serve/: doors behind one gate, mounted by one factory ------------------------------------------------------
# serve/http.py (create_app, the one app factory, and serve) mounts every door; serve/protocol.py is the HTTP protocol
# it runs. A door imports only itself, the gate and shared, never another door: what two doors need lives in shared/,
# in one place. The gate imports only itself and shared; shared only itself.

SERVE = ROOT / "serve"
SERVE_DOORS = ("api", "documents", "openai", "ollama", "mcp")
SERVE_MAY_IMPORT = {door: {door, "gate", "shared"} for door in SERVE_DOORS} | {
    "gate": {"gate", "shared"},
    "shared": {"shared"},
}


def serve_imports() -> dict[str, list[str]]:
    """serve/'s part (a door, gate, shared, or a top module such as http) -> `where: what` of each serve import."""
    found: dict[str, list[str]] = {}
    for path in sorted(SERVE.rglob("*.py")):
        part = path.relative_to(SERVE).with_suffix("").parts[0]
        for name, line in _imports(path):
            if name.startswith("ragvps.serve."):
                found.setdefault(part, []).append(f"{path.relative_to(ROOT.parent)}:{line}: {name}")
    return found


def test_serve_holds_the_factory_the_gate_shared_and_the_doors() -> None:
    top = {p.name for p in SERVE.iterdir() if p.name != "__pycache__"}
    assert top == {"__init__.py", "http.py", "protocol.py", "web", *SERVE_MAY_IMPORT}, (
        "a module of serve/ belongs in a door, the gate or shared (or it is a new door: add it to SERVE_DOORS)"
    )


def test_doors_never_import_each_other() -> None:
    wrong = [
        where
        for part, imports in serve_imports().items()
        if part in SERVE_MAY_IMPORT
        for where in imports
        if where.rsplit(": ", 1)[1].split(".")[2] not in SERVE_MAY_IMPORT[part]
    ]
    assert wrong == [], "a door imports only itself, the gate and shared (serve/shared/ holds what doors share)"


def test_the_app_factory_mounts_every_door() -> None:
    mounted = {where.rsplit(": ", 1)[1].split(".")[2] for where in serve_imports()["http"]}
    assert set(SERVE_DOORS) <= mounted


# --- bench/: the benches import the shared helpers in bench/common/, never each other ----------------------

BENCH = ROOT.parent / "bench"


def bench_modules() -> dict[str, Path]:
    """Each module under bench/ by the name a bench imports it as: `answer_quality`, `common`, `common.load`."""
    found = {path.stem: path for path in BENCH.glob("*.py")}
    for path in (BENCH / "common").glob("*.py"):
        found["common" if path.stem == "__init__" else f"common.{path.stem}"] = path
    return found


def bench_imports() -> dict[str, set[tuple[str, str]]]:
    """module -> {(bench module it imports, name taken from it, or "")}; `from common import load` is a module."""
    modules = bench_modules()
    found: dict[str, set[tuple[str, str]]] = {}
    for name, path in modules.items():
        edges = found.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in modules and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    edges.add((sub, "") if sub in modules else (node.module, alias.name))
            elif isinstance(node, ast.Import):
                edges |= {(alias.name, "") for alias in node.names if alias.name in modules}
    return found


def bench_graph() -> dict[str, set[str]]:
    """Which bench modules each imports; a module of common/ importing common's __init__ is no edge back."""
    return {
        name: {m for m, _ in edges if m != name and not (m == "common" and name.startswith("common."))}
        for name, edges in bench_imports().items()
    }


def test_no_cycle_in_bench() -> None:
    assert cycles(bench_graph()) == []


def test_benches_import_the_shared_helpers_not_each_other() -> None:
    wrong = sorted(
        f"{name} imports {m}"
        for name, edges in bench_imports().items()
        for m, _ in edges
        if not m.startswith("common") or (name.startswith("common") and m == name)
    )
    assert wrong == []


def test_no_bench_imports_another_modules_private_helpers() -> None:
    private = sorted(
        f"{name}: from {m} import {what}"
        for name, edges in bench_imports().items()
        for m, what in edges
        if what.startswith("_")
    )
    assert private == []


def test_every_bench_is_listed_with_its_command() -> None:
    readme = (BENCH / "README.md").read_text(encoding="utf-8")
    unlisted = [path.name for path in sorted(BENCH.glob("*.py")) if f"bench/{path.name}" not in readme]
    assert unlisted == []


def test_everything_a_bench_imports_from_ragvps_exists() -> None:
    # Benches are not type-checked: a name moved in ragvps/ must not leave one that cannot start.
    import importlib

    def exists(module: str, name: str | None) -> bool:
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError:
            return False
        return name is None or hasattr(found, name) or exists(f"{module}.{name}", None)

    missing = []
    for path in bench_modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ragvps":
                missing += [
                    f"{path.relative_to(ROOT.parent)}:{node.lineno}: from {node.module} import {a.name}"
                    for a in node.names
                    if not exists(node.module, a.name)
                ]
            elif isinstance(node, ast.Import):
                missing += [
                    f"{path.relative_to(ROOT.parent)}:{node.lineno}: import {a.name}"
                    for a in node.names
                    if a.name.split(".")[0] == "ragvps" and not exists(a.name, None)
                ]
    assert missing == []


if __name__ == "__main__":
    for (a, b), where in sorted(package_edges().items()):
        print(f"{a:>9} -> {b:<9} {len(where):3} imports")
    print("upward or sideways:", upward() or "none")
    print("module cycles:", module_cycles() or "none")
    print("bench/ cycles:", cycles(bench_graph()) or "none")
    sys.exit(0)


# Counted as `ruff format` lays the code out (one argument a line once a call does not fit in 120 columns). A function
# is at most 60 lines of that layout; a module at most 450, the 400 of the hand-packed layout plus the ~11% the
# formatter adds.
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 60


def test_modules_and_functions_stay_readable_in_one_sitting() -> None:
    too_long = []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(ROOT.parent)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}: {length} lines")
    assert too_long == []
