"""No import circles in the package: every `import` of every module is read
from the source (at module level, inside functions and under TYPE_CHECKING
alike, since an import hidden in a function is still a circle of the design),
and the module graph must have no cycle."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from source_helpers import import_from_module

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
                stem = import_from_module(node, package)
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
    assert len(graph) > 50 and graph["ncclbench.benchmark.orchestrate"]  # the walk really read the package
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


# The layers of docs/architecture.md, top to bottom, each with its folders (top-level packages):
# every folder is in exactly one layer (test_every_folder_is_in_one_layer). A folder may import the
# folders of its own layer (as long as they form no circle) and of the layers below it, never of a
# layer above. `simulation` is test and bench support: nothing at runtime imports it
# (test_no_runtime_module_imports_the_simulators), so it sits on top. `__main__` and `cli` are the
# package's two entry modules (`python -m ncclbench`, the console script), `__init__` its version.
LAYERS: list[tuple[str, set[str]]] = [
    ("support", {"simulation"}),
    ("entry", {"__main__", "cli", "commands"}),
    ("tools", {"benchmark", "explain", "health", "tune"}),
    ("run", {"run"}),
    ("backends", {"backends"}),
    ("launch", {"launch"}),
    ("outputs", {"output", "store", "report"}),
    ("platform", {"collectives", "cuda", "nccl"}),
    ("core", {"core", "__init__"}),
]


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(package: str) -> int:
    for i, (_, members) in enumerate(LAYERS):
        if package in members:
            return i
    return len(LAYERS)


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    pkgs: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        a = package_of(mod)
        pkgs.setdefault(a, set())
        for d in deps:
            b = package_of(d)
            if b != a:
                pkgs[a].add(b)
    return pkgs


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Module-level evidence for every import from a lower layer into a higher one."""
    found = []
    for mod, deps in graph.items():
        for d in deps:
            if layer_of(package_of(d)) < layer_of(package_of(mod)):
                found.append(f"{mod} -> {d}")
    return sorted(found)


def test_packages_import_only_their_layer_and_below():
    graph = import_graph(PACKAGE)
    known = {p for _, members in LAYERS for p in members}
    assert known - {package_of(m) for m in graph} == set(), "a layer names a package that does not exist"
    bad = upward_imports(graph)
    assert not bad, "imports into a higher layer:\n" + "\n".join(bad)


def test_packages_form_no_circle():
    pkgs = package_graph(import_graph(PACKAGE))
    found = cycles(pkgs)
    assert not found, "package circles:\n" + "\n".join(describe(pkgs, c) for c in found)


def test_the_layer_checks_catch_an_upward_import_and_a_package_circle():
    graph = {"ncclbench.store.db": {"ncclbench.report.html"}, "ncclbench.report.html": {"ncclbench.store.db"},
             "ncclbench.core.errors": {"ncclbench.commands.check"}, "ncclbench.commands.check": set()}
    assert upward_imports(graph) == ["ncclbench.core.errors -> ncclbench.commands.check"]
    assert cycles(package_graph(graph)) == [["report", "store"]]


def test_every_folder_is_in_one_layer():
    """The layer table maps one-to-one onto the folders: a new folder (or a module at the top of the
    package) is given its layer here and in docs/architecture.md's table."""
    named = [p for _, members in LAYERS for p in members]
    assert len(named) == len(set(named)), "a folder is in two layers"
    found = {package_of(m) for m in import_graph(PACKAGE)}
    assert found == set(named), (f"folders in no layer: {sorted(found - set(named))}; "
                                 f"layers naming no folder: {sorted(set(named) - found)}")


def child_folder_graph(graph: dict[str, set[str]], folder: str) -> dict[str, set[str]]:
    """The folders directly inside `folder` (a dotted package): which imports which."""
    def child(module: str) -> str | None:
        if not module.startswith(folder + "."):
            return None
        name = module[len(folder) + 1:].split(".")[0]
        return name if (PACKAGE.parent / folder.replace(".", "/") / name).is_dir() else None

    children: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        a = child(mod)
        if a is None:
            continue
        children.setdefault(a, set())
        for d in deps:
            b = child(d)
            if b is not None and b != a:
                children[a].add(b)
    return children


def test_the_folders_inside_a_folder_form_no_circle():
    """health/ is its core, its outputs and its runtime: the runtime imports the other two, the outputs
    the core, and the core neither; so for every folder that holds folders."""
    graph = import_graph(PACKAGE)
    folders = sorted({m.rpartition(".")[0] for m in graph if m.count(".") >= 2})
    found = []
    for folder in folders:
        inner = child_folder_graph(graph, folder)
        found += [f"{folder}: " + describe(inner, c) for c in cycles(inner)]
    assert "ncclbench.health" in folders  # the walk saw the folders inside a folder
    assert not found, "circles between the folders of one folder:\n" + "\n".join(found)


def test_file_names_are_unique():
    """A file's name says what it holds, once in the package: no two modules share a file name, so
    a name in a traceback, a review or a search is one module."""
    names = Counter(p.name for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
    assert not sorted(n for n, count in names.items() if count > 1)
