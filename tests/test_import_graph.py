"""No import circles in the package: every `import` of every module is read
from the source (at module level, inside functions and under TYPE_CHECKING
alike, since an import hidden in a function is still a circle of the design),
and the module graph must have no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ncclbench"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> modules of the same package it imports (by name, as files)."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    top = root.name

    def resolve(name: str) -> str | None:
        while name and name not in files:  # `from pkg.mod import func` -> pkg.mod
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [f"{stem}.{a.name}" for a in node.names] or [stem]
            for t in targets:
                if t == top or t.startswith(top + "."):
                    found = resolve(t)
                    if found and found != mod:
                        graph[mod].add(found)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def describe(graph: dict[str, set[str]], component: list[str]) -> str:
    members = set(component)
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in component)


def test_the_package_has_no_import_circle():
    graph = import_graph(PACKAGE)
    assert len(graph) > 50 and graph["ncclbench.bench"]  # the walk really read the package
    found = cycles(graph)
    assert not found, "import circles:\n" + "\n".join(describe(graph, c) for c in found)


def test_a_circle_hidden_inside_a_function_is_found(tmp_path):
    pkg = tmp_path / "demo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub.b import thing\n")
    (pkg / "sub" / "b.py").write_text("def thing():\n    from ..a import other\n    return other\n")
    (pkg / "c.py").write_text("import demo.a\n")
    graph = import_graph(pkg)
    assert graph["demo.a"] == {"demo.sub.b"} and graph["demo.sub.b"] == {"demo.a"}
    assert graph["demo.c"] == {"demo.a"}
    assert cycles(graph) == [["demo.a", "demo.sub.b"]]


def test_no_runtime_module_imports_the_simulators():
    """`ncclbench.simulation` (fake hosts, the simulated fabric) serves tests and bench/ only:
    the package the user runs must not reach it, at module level or inside a function."""
    graph = import_graph(PACKAGE)
    sim = "ncclbench.simulation"
    assert any(m.startswith(sim + ".") for m in graph)  # the simulators are where this test looks
    runtime_users = sorted(m for m, deps in graph.items()
                           if not (m == sim or m.startswith(sim + "."))
                           and any(d == sim or d.startswith(sim + ".") for d in deps))
    assert not runtime_users, f"runtime modules importing the simulators: {runtime_users}"
