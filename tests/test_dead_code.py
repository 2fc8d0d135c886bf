"""No function or class of the package is referenced nowhere: its name appears, besides its own
`def`/`class`, somewhere in src, tests or bench as code (a name, an attribute, an import) or in
a string the code uses (getattr, `__all__`, monkeypatch and mock targets); docstrings and
comments do not count.  Dunder methods are Python's.  The ones found when this check came are
in UNUSED: that list only shrinks (use or delete them; this test asks for stale entries to go).

A name is counted wherever it appears, so a method shares its use with every other definition of
that name: the check misses some dead code (no false alarm is the aim), never the reverse."""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "ncclbench"
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# (file under src/ncclbench, qualified name) referenced nowhere when this check came
UNUSED: set[tuple[str, str]] = {
    ("backends/nccl_gpu.py", "NcclWorker.bind_thread"),
    ("backends/threads.py", "ThreadTeam.allgather_threads"),
    ("cuda/runtime.py", "CudaRuntime.device_synchronize"),
    ("cuda/runtime.py", "CudaRuntime.get_device"),
    ("cuda/runtime.py", "CudaRuntime.runtime_version"),
    ("explain/stored.py", "explain_stored"),
    ("health/core/physics.py", "physics_map"),
    ("launch/detect.py", "LaunchInfo.is_multi"),
    ("launch/jobwatch.py", "JobWatch.rank_of_pid"),
    ("launch/rendezvous.py", "TcpHostComm.peer_hosts"),
    ("nccl/binding.py", "NcclLibrary.comm_user_rank"),
    ("output/csvout.py", "write_rows"),
    ("output/nccl_log_line.py", "is_log_line"),
    ("output/text.py", "TextReporter.set_json_path"),
    ("store/summary_stats.py", "has_per_iter"),
    ("tune/emit.py", "band_text"),
}


def definitions(root: Path) -> Iterator[tuple[str, str]]:
    """(file, qualified name) of every function and class, methods and nested ones too."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()

        def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, str]]:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    yield rel, prefix + child.name
                    yield from walk(child, prefix + child.name + ".")
                elif not isinstance(child, ast.expr):
                    yield from walk(child, prefix)

        yield from walk(ast.parse(path.read_text(), str(path)), "")


def uses(files: Iterable[Path]) -> Counter[str]:
    """How often each name appears as code or inside a string the code uses."""
    counts: Counter[str] = Counter()
    for path in files:
        text = path.read_text()
        prose = {(n.lineno, n.col_offset) for n in ast.walk(ast.parse(text, str(path)))
                 if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
        for i, t in enumerate(toks):
            if t.type == tokenize.NAME:
                if not (i and toks[i - 1].type == tokenize.NAME and toks[i - 1].string in ("def", "class")):
                    counts[t.string] += 1
            elif t.type == tokenize.STRING and t.start not in prose:
                counts.update(WORD.findall(t.string))
    return counts


def unused(root: Path, files: Iterable[Path]) -> set[tuple[str, str]]:
    counts = uses(files)
    found = set()
    for f, name in definitions(root):
        short = name.rpartition(".")[2]
        if not (short.startswith("__") and short.endswith("__")) and counts[short] == 0:
            found.add((f, name))
    return found


# the ratchets' own lists name the functions they list: not a use
RATCHETS = {"test_dead_code.py", "test_function_length.py", "test_complexity_ratchet.py"}


def project_files() -> list[Path]:
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    return sorted(f for f in files if f.name not in RATCHETS)


@functools.lru_cache(maxsize=1)
def found_unused() -> frozenset[tuple[str, str]]:
    return frozenset(unused(PACKAGE, project_files()))


def test_no_function_or_class_is_referenced_nowhere():
    new = sorted(f"{f}: {name}" for f, name in found_unused() - UNUSED)
    assert not new, "referenced nowhere: use them or delete them"


def test_the_list_of_unused_names_only_shrinks():
    gone = sorted(f"{f}: {name}" for f, name in UNUSED - found_unused())
    assert not gone, "used now, deleted or renamed: remove these from UNUSED"


def test_the_check_sees_a_dead_function(tmp_path):
    (tmp_path / "m.py").write_text("def used():\n    pass\n\n\ndef dead():\n    'used() is in a docstring'\n\n\n"
                                   "class C:\n    def __init__(self):\n        used()\n")
    (tmp_path / "t.py").write_text("x = getattr(object, 'C')  # dead() in a comment\n")
    assert unused(tmp_path, sorted(tmp_path.glob("*.py"))) == {("m.py", "dead")}
