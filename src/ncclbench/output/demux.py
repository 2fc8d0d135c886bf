"""Untangle a log as people have it: launcher tags, NCCL's log lines and the table, in one text.

Why: logs reach `ncclbench import` the way a terminal or a batch system
wrote them, not the way nccl-tests printed them:

* Open MPI's `--tag-output` puts `[job,rank]<stdout>:` in front of every line
  (PRRTE's TAG-DETAILED: `[namespace,rank][host:pid]<stdout>:`), Slurm's
  `srun --label` puts `N: ` (the task id, right-aligned);
* NCCL writes its log to the same stdout FILE as the program, so its lines
  land *inside* a result row: nccl-tests prints the row's first columns,
  runs the collective (NCCL logs, e.g. with NCCL_DEBUG_SUBSYS=COLL or
  TUNING), prints the out-of-place cells, runs again, prints the in-place
  cells and the newline (docs/behaviour.md §5.4).  A NCCL line may also be
  glued to a row's last printed cell (`...       0node001:42:42 [0] NCCL INFO`);
  a WARN starts with a newline of its own and cuts the row in two.
* CRLF line ends.

`untangle` returns the text as (kind, line) items in order: "text" lines
are the program's own output with every row put back together exactly as
printed, "nccl" lines are NCCL's log lines on their own.  A clean log comes
back line for line unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .nccl_log_line import read_log_line

# Open MPI 4 `[1,0]<stdout>:`; PRRTE `[prterun-host-123@1,0]<stdout>:` and
# TAG-DETAILED `[ns,rank][host:pid]<stdout>:`.
_OMPI_TAG = re.compile(r"\[(?P<job>[^\[\],]+),(?P<rank>\d+)\](?:\[[^\]]*\])?<(?P<stream>stdout|stderr|stddiag)>:")
# srun --label: "%*d: " (task id right-aligned to the widest id).
_SRUN_LABEL = re.compile(r"^ *(?P<rank>\d+): ")
# A row begun: size, count, a type name, then whatever was printed before the collective ran.
_ROW_START = re.compile(r"^ *\d+ +\d+ +[A-Za-z]\w*(?: +\S+)* *$")
# What is printed after a measurement: one placement's cells (time algbw busbw #wrong [-I cells]).
_CELLS = re.compile(r"^(?: +(?:-?[\d.]+(?:e[+-]?\d+)?|N/A|-?nan|-?inf|\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d))+ *$")
_TIMESTAMP = re.compile(r"^\[[^\]]*\] ?$")  # NCCL_DEBUG_TIMESTAMP_FORMAT's default shape
# A host name glued behind a row's last cell, when no clean line names the host.
_GLUED_HOST = re.compile(r"^(?P<cell>-?\d+(?:\.\d+)?(?:e[+-]\d+)?|N/A)(?P<host>[A-Za-z].*)$")


@dataclass
class Untangled:
    items: list[tuple[str, str]] = field(default_factory=list)  # ("text" | "nccl", line)
    prefix_style: str | None = None  # "open-mpi" / "srun" / None
    rejoined_rows: int = 0  # rows put back together from pieces

    @property
    def text_lines(self) -> list[str]:
        return [line for kind, line in self.items if kind == "text"]

    @property
    def nccl_lines(self) -> list[str]:
        return [line for kind, line in self.items if kind == "nccl"]


def _prefix_style(lines: list[str]) -> str | None:
    """The launcher's tag, if most non-empty lines carry it."""
    body = [ln for ln in lines if ln.strip()]
    if not body:
        return None
    ompi = sum(1 for ln in body if _OMPI_TAG.match(ln))
    srun = sum(1 for ln in body if _SRUN_LABEL.match(ln))
    if ompi * 2 >= len(body):
        return "open-mpi"
    if srun * 2 >= len(body):
        return "srun"
    return None


def _split_tags(line: str, style: str | None) -> list[tuple[str, str]]:
    """(stream key, fragment) pieces of one physical line; a tag may also appear mid-line."""
    if style == "open-mpi":
        out = []
        pos, key = 0, "untagged"
        for m in _OMPI_TAG.finditer(line):
            if m.start() > pos:
                out.append((key, line[pos:m.start()]))
            key, pos = f"{m.group('rank')}/{m.group('stream')}", m.end()
        out.append((key, line[pos:]))
        return [piece for piece in out if piece[1] or len(out) == 1]
    if style == "srun":
        label = _SRUN_LABEL.match(line)
        return [(label.group("rank"), line[label.end():])] if label else [("untagged", line)]
    return [("all", line)]


def _known_hosts(fragments: list[tuple[str, str]]) -> set[str]:
    """Hosts of NCCL lines with nothing glued in front (at most NCCL's own timestamp)."""
    hosts = set()
    for _, frag in fragments:
        ln = read_log_line(frag)
        if ln is not None and ln.host and (not ln.before or _TIMESTAMP.match(ln.before)):
            hosts.add(ln.host)
    return hosts


def _split_nccl(frag: str, hosts: set[str]) -> tuple[str, str | None]:
    """(program text, NCCL line or None) of one fragment."""
    ln = read_log_line(frag)
    if ln is None:
        return frag, None
    before = ln.before
    if not before or _TIMESTAMP.match(before):
        return "", frag  # a whole NCCL line (NCCL's own timestamp in front)
    if ln.host is None:  # a bare "NCCL version" line behind program text
        return before, frag[len(before):]
    host_at = frag.index(ln.host + ":", len(before))
    glued = ""
    if ln.host not in hosts:
        real = next((h for h in sorted(hosts, key=len, reverse=True) if ln.host.endswith(h)), None)
        if real is not None:
            glued = ln.host[:-len(real)]
        elif m := _GLUED_HOST.match(ln.host):
            glued = m.group("cell")
    return before + glued, frag[host_at + len(glued):]


def untangle(text: str, row_complete: Callable[[str], bool]) -> Untangled:
    """Program lines (rows rejoined) and NCCL lines, in order; see the module docstring.

    `row_complete(line)` says whether a line is a whole result row (the
    table parser's rule, passed in so this module needs no table knowledge).
    """
    out = Untangled()
    lines = text.splitlines()
    out.prefix_style = _prefix_style(lines)
    fragments = [piece for line in lines for piece in _split_tags(line, out.prefix_style)]
    hosts = _known_hosts(fragments)
    open_rows: dict[str, int] = {}  # stream -> index of its row still waiting for cells

    for key, frag in fragments:
        text_part, nccl_part = _split_nccl(frag, hosts)
        at = open_rows.get(key)
        consumed = False
        if at is not None and text_part and _CELLS.match(text_part):
            joined = out.items[at][1] + text_part
            out.items[at] = ("text", joined)
            consumed = True
            if row_complete(joined):
                del open_rows[key]
                out.rejoined_rows += 1
        elif at is not None and text_part.strip():
            del open_rows[key]  # something else came: that row stays as far as it got
        if not consumed and (text_part or nccl_part is None):
            if _ROW_START.match(text_part) and not row_complete(text_part):
                open_rows[key] = len(out.items)
            out.items.append(("text", text_part))
        if nccl_part is not None:
            out.items.append(("nccl", nccl_part))
    return out
