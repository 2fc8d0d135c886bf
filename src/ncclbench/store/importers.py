"""Bring existing nccl-tests output into the store: text logs and -J JSON files.

Users already have years of `all_reduce_perf` logs.  Text logs are read by
the output module's parser (`ncclbench.output.parse.parse_tests`, the same
one the golden tests use), which copes with -I / -C / -S tables, `N/A`
cells, hypercube's empty op column, NCCL's own log lines mixed in, several
tests concatenated in one file, and a log cut off mid-run (imported as
'interrupted').  This module turns what it finds into store records; JSON
(spec §6, versions 1-3) lives in `jsonlog`.  Anything that is not
recognisably nccl-tests output is refused with one line, before anything is
written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..collectives import COLLECTIVES
from ..config import BenchOptions
from ..errors import BenchError, ExitCode
from ..output.parse import ParsedText, collective_of, parse_tests
from ..output.text import reducing_max_bytes_lines
from ..results import ResultRow, RunInfo, RunSummary
from .db import env_that_matters

MAX_IMPORT_BYTES = 512 * 1024 * 1024


class ImportError_(BenchError):
    """A file that cannot be imported (exit 255: the user named a bad file)."""

    def __init__(self, message: str):
        super().__init__(message, ExitCode.ARGUMENT)


@dataclass
class ImportedRun:
    """One nccl-tests test read from a file, ready to store or compare."""

    info: RunInfo
    options: BenchOptions
    rows: list[ResultRow]
    summary: RunSummary | None
    status: str  # 'complete' | 'interrupted'
    source: str  # 'import:text' | 'import:json'
    source_path: str
    index: int  # position of this test within its file
    ntests: int  # tests in the file
    content_hash: str
    env: dict[str, str] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    end_time: str | None = None

    @property
    def label(self) -> str:
        name = os.path.basename(self.source_path)
        return name if self.ntests == 1 else f"{name}#{self.index + 1}"


def nccl_version_string(code: int | None) -> str:
    if not code:
        return ""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def options_from_rows(o: BenchOptions, rows: list[ResultRow], collective: str) -> BenchOptions:
    """`o` with -d / -o / -r as the rows show them (the banner does not print them)."""
    types = list(dict.fromkeys(r.type for r in rows))
    o = dataclasses.replace(o, datatypes=tuple(types), datatype_arg=types[0] if len(types) == 1 else "all")
    coll = COLLECTIVES.get(collective)
    ops = [op for op in dict.fromkeys(r.redop for r in rows) if op not in ("none", "")]
    if ops and coll is not None and coll.reduces:
        o = dataclasses.replace(o, ops=tuple(ops), op_arg=ops[0] if len(ops) == 1 else "all")
    roots = list(dict.fromkeys(r.root for r in rows))
    if coll is not None and coll.rooted and roots:
        o = dataclasses.replace(o, root=roots[0] if len(roots) == 1 else -1)
    return o


# ---------------------------------------------------------------- text logs

def _run_info(p: ParsedText, rows: list[ResultRow], program: str, path: str, index: int) -> RunInfo:
    base = p.to_run_info()
    lib = nccl_version_string(p.nccl_version_code)
    return dataclasses.replace(
        base, program=program,
        backend=p.backend if p.ncclbench_version is not None else "nccl-tests",
        version=p.nccl_tests_version or p.ncclbench_version or "",
        library=p.library or (f"NCCL {lib}" if lib else ""),
        start_time=next((r.timestamp for r in rows if r.timestamp), ""),
        extra={**base.extra, "imported_from": path, "format": "text", "test_index": index,
               "nccl_tests_version": p.nccl_tests_version or ""})


def _messages(p: ParsedText) -> list[str]:
    """Lines a live run would have passed to Reporter.message (kept with the run)."""
    out = [p.json_skip_line] if p.json_skip_line else []
    if p.reduced_max_bytes is not None:
        out.append(reducing_max_bytes_lines(p.reduced_max_bytes)[1])
    return out


def parse_text_log(text: str, path: str = "<text>") -> list[ImportedRun]:
    """Every test with at least one result row, in file order."""
    tests = [(p, rows) for p, rows in parse_tests(text) if rows]
    runs = []
    for i, (p, rows) in enumerate(tests):
        program = p.program or _guess_program(path)
        collective = collective_of(program)
        options = dataclasses.replace(p.to_options(), program=program, collective=collective)
        options = options_from_rows(options, rows, collective)
        summary = p.to_summary()
        digest = hashlib.sha256("\n".join(p.lines).encode()).hexdigest()
        runs.append(ImportedRun(
            info=_run_info(p, rows, program, path, i), options=options, rows=rows, summary=summary,
            status="interrupted" if summary is None else "complete", source="import:text",
            source_path=path, index=i, ntests=len(tests), content_hash="text:" + digest,
            messages=_messages(p)))
    return runs


def _guess_program(path: str) -> str:
    name = os.path.basename(path)
    names = sorted(COLLECTIVES, key=len, reverse=True)  # alltoallv before alltoall
    m = re.search("|".join(names), name)
    return f"{m.group(0)}_perf" if m else "unknown_perf"


# ---------------------------------------------------------------- dispatch

def load_file(path: str | os.PathLike) -> list[ImportedRun]:
    """Parse one nccl-tests text log or JSON file; raise one-line errors for anything else."""
    from .jsonlog import parse_json_bytes

    p = Path(path)
    name = str(path)
    try:
        if p.is_dir():
            raise ImportError_(f"cannot import {name}: it is a directory")
        size = p.stat().st_size
        if size > MAX_IMPORT_BYTES:
            raise ImportError_(f"cannot import {name}: {size} bytes is too large for an "
                               "nccl-tests output file")
        data = p.read_bytes()
    except FileNotFoundError:
        raise ImportError_(f"cannot import {name}: no such file") from None
    except PermissionError:
        raise ImportError_(f"cannot import {name}: permission denied") from None
    except OSError as e:
        raise ImportError_(f"cannot import {name}: {e.strerror or e}") from None
    if not data.strip():
        raise ImportError_(f"cannot import {name}: the file is empty")
    if data.lstrip()[:1] in (b"{", b"["):
        return [parse_json_bytes(data, name)]
    if b"\x00" in data[:65536]:
        raise ImportError_(f"cannot import {name}: binary file, not an nccl-tests text log or "
                           "JSON output")
    runs = parse_text_log(data.decode("utf-8", errors="replace"), name)
    if not runs:
        raise ImportError_(f"cannot import {name}: not an nccl-tests text log or JSON file "
                           "(no result table found)")
    return runs


__all__ = ["ImportedRun", "load_file", "parse_text_log", "collective_of", "nccl_version_string",
           "env_that_matters"]
