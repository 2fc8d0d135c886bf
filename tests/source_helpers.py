"""Shared by the tests that read the package's source as text (import graph, private names):
where an import statement points, read the same way by every such check."""

import ast


def import_from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a `from X import ...` names, from inside `package` (the importing
    module's package, dotted): `from ..a.m import f` in ncclbench.b -> ncclbench.a.m."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))
