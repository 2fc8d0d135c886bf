"""What an import produces, shared by the text reader (`importers`) and the JSON reader (`jsonlog`).

Kept apart so that both readers import it and neither imports the other's
caller: `importers.load_file` dispatches to `jsonlog`, and `jsonlog` needs
only these pieces.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from ..collectives import COLLECTIVES
from ..core.config import BenchOptions
from ..core.errors import BenchError, ExitCode
from ..core.results import ResultRow, RunInfo, RunSummary
from ..nccl.version_text import version_text


class NotImportableError(BenchError):
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
    return version_text(code) if code else ""


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
