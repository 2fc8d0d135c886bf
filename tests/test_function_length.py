"""No function of the package is over LIMIT lines (its `def` line to its last), unless its
docstring says why - a sentence that starts "Long because" - or it is one of the long ones found
when this check came, listed in LONG with its length then.  LONG only shrinks: a listed function
may not grow, and leaves the list when it is split (then this test asks for its entry to go).

Why: a function that does not fit on a screen hides its steps from the reader."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ncclbench"
LIMIT = 80
REASON = "long because"

# (file under src/ncclbench, function) -> its length in lines when this check came
LONG: dict[tuple[str, str], int] = {}


def functions(root: Path) -> Iterator[tuple[str, str, int, str]]:
    """(file, qualified name, lines, docstring) of every function, methods and nested ones too."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()

        def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, str, int, str]]:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = prefix + child.name
                    yield rel, name, (child.end_lineno or child.lineno) - child.lineno + 1, ast.get_docstring(child) or ""
                    yield from walk(child, name + ".")
                elif isinstance(child, ast.ClassDef):
                    yield from walk(child, prefix + child.name + ".")
                elif not isinstance(child, ast.expr):
                    yield from walk(child, prefix)

        yield from walk(ast.parse(path.read_text(), str(path)), "")


def long_functions(root: Path) -> dict[tuple[str, str], int]:
    """The functions over LIMIT whose docstring gives no reason."""
    return {(f, name): n for f, name, n, doc in functions(root) if n > LIMIT and REASON not in doc.lower()}


def test_no_function_is_over_the_limit_without_a_reason():
    found = long_functions(PACKAGE)
    new = sorted(f"{f}: {name} ({n} lines)" for (f, name), n in found.items() if (f, name) not in LONG)
    grown = sorted(f"{f}: {name} ({n} lines, was {LONG[f, name]})" for (f, name), n in found.items()
                   if (f, name) in LONG and n > LONG[f, name])
    assert not new, f"functions over {LIMIT} lines: split them, or say why in the docstring ('Long because ...')"
    assert not grown, "listed long functions that grew: split them instead"


def test_the_list_of_long_functions_only_shrinks():
    found = long_functions(PACKAGE)
    gone = sorted(f"{f}: {name}" for (f, name) in LONG if (f, name) not in found)
    assert not gone, "no longer over the limit (or renamed): remove these from LONG"


def test_the_check_sees_a_long_function_and_its_reason(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n\n\nclass C:\n    def ok(self):\n"
                                   f'        """Long because it is a table."""\n{body}\n')
    assert long_functions(tmp_path) == {("m.py", "long"): LIMIT + 1}
