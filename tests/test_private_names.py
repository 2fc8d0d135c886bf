"""A leading underscore means "this module's own": no module of the package
imports another package's private name (`from ..backends.nccl_gpu import
_free_buffers` was one), so a module can change its private helpers without
breaking a reader elsewhere.  Inside one package (commands/_runs.py for the
commands) is allowed."""

from __future__ import annotations

import ast
from pathlib import Path

from source_helpers import import_from_module

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ncclbench"


def private_imports(root: Path) -> list[str]:
    """'importer <- module.name' for every private name imported from another package."""
    found = []
    for path in sorted(root.rglob("*.py")):
        mod = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        package = mod.removesuffix(".__init__") if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = import_from_module(node, package)
            if not target.startswith(root.name):
                continue
            target_package = target if (root.parent / target.replace(".", "/")).is_dir() else target.rpartition(".")[0]
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and target_package != package:
                    found.append(f"{mod} <- {target}.{alias.name}")
    return found


def test_no_private_name_is_imported_across_packages():
    assert private_imports(PACKAGE) == []


def test_the_check_sees_a_private_import(tmp_path):
    pkg = tmp_path / "ncclbench"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    for d in (pkg, pkg / "a", pkg / "b"):
        (d / "__init__.py").write_text("")
    (pkg / "a" / "m.py").write_text("def _helper():\n    pass\n")
    (pkg / "a" / "same.py").write_text("from .m import _helper\n")
    (pkg / "b" / "other.py").write_text("from ..a.m import _helper\n")
    assert private_imports(pkg) == ["ncclbench.b.other <- ncclbench.a.m._helper"]
