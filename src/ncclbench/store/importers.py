"""Bring existing nccl-tests output into the store: text logs and -J JSON files.

Users already have years of `all_reduce_perf` logs.  The text parser follows
the layout of behaviour spec §5 but is driven by the column header it finds,
so it copes with -I / -C / -S tables, `N/A` cells, hypercube's empty op
column, NCCL's own log lines mixed in, several tests concatenated in one
file, and a log cut off mid-run (imported as 'interrupted').  JSON (spec §6,
versions 1-3) lives in `jsonlog`.  Anything that is not recognisably
nccl-tests output is refused with one line, before anything is written.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..config import BenchOptions
from ..errors import BenchError, ExitCode
from ..results import DeviceInfo, HalfResult, PerIterStats, ResultRow, RunInfo, RunSummary
from .db import env_that_matters

ROOTED = {"broadcast", "reduce", "gather", "scatter"}
REDUCING = {"all_reduce", "reduce", "reduce_scatter", "sendrecv"}
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


def collective_of(program: str) -> str:
    """`all_reduce_perf`, `all_reduce_perf_mpi`, `/path/all_reduce_perf` -> `all_reduce`."""
    base = program.rsplit("/", 1)[-1]
    m = re.match(r"^(.+?)_perf(?:_\w+)?$", base)
    return m.group(1) if m else base


def nccl_version_string(code: int | None) -> str:
    if not code:
        return ""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _num(tok) -> float:
    """A number from a table cell or JSON value ('nan', '-nan', 'inf' included)."""
    if tok is None:
        return math.nan
    return float(tok)


# ---------------------------------------------------------------- text logs

_BANNER_KEYS = {
    r"nThread": "nthreads", r"nGpus": "ngpus", r"minBytes": "min_bytes", r"maxBytes": "max_bytes",
    r"warmup iters:": "warmup_iters", r"(?<!warmup )(?<!agg )iters:": "iters",
    r"agg iters:": "agg_iters", r"validation:": "check", r"graph:": "cudagraph",
    r"unalign:": "unalign",
}
_DEVICE_RE = re.compile(
    r"^#\s+Rank\s+(-?\d+)(?:\s+Group\s+(-?\d+))?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(-?\d+)"
    r"\s+\[([^\]]*)\]\s*(.*?)\s*$")
_VERSION_RE = re.compile(r"^# nccl-tests version (\S+)(?: nccl-headers=(\d+))?(?: nccl-library=(\d+))?")


@dataclass
class _Layout:
    has_root: bool
    half: list[str]  # column names of one placement: time algbw busbw #wrong [i_min ...]
    timestamp: bool

    @property
    def ntokens(self) -> int:
        return (5 if self.has_root else 4) + 2 * len(self.half) + (2 if self.timestamp else 0)


def _parse_header(line: str) -> _Layout | None:
    toks = line.lstrip("#").split()
    if len(toks) < 8 or toks[:3] != ["size", "count", "type"]:
        return None
    has_root = "root" in toks[:5]
    rest = toks[(5 if has_root else 4):]
    timestamp = bool(rest) and rest[-1] == "timestamp"
    if timestamp:
        rest = rest[:-1]
    starts = [i for i, t in enumerate(rest) if t in ("time", "cputime")]
    if len(starts) != 2 or starts[0] != 0:
        return None
    half = rest[: starts[1]]
    if rest[starts[1]:] != half or not {"algbw", "busbw"} <= set(half):
        return None
    return _Layout(has_root, half, timestamp)


class _Block:
    """One test (one binary run) inside a text log."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.version = ""
        self.headers_code: int | None = None
        self.library_code: int | None = None
        self.program = ""
        self.banner: dict[str, int] = {}
        self.step: tuple[int, str] | None = None
        self.blocking = 0
        self.per_iter_banner = False
        self.per_iter_skip = 0
        self.parallel_init = False
        self.devices: list[DeviceInfo] = []
        self.layout: _Layout | None = None
        self.rows: list[ResultRow] = []
        self.oob: tuple[int, bool] | None = None
        self.avg: tuple[float, bool | None] | None = None
        self.concluded = False
        self.memory_line: str | None = None
        self.error_line: str | None = None
        self.messages: list[str] = []
        self.json_path: str | None = None
        self.skipped_lines = 0

    @property
    def started(self) -> bool:
        return bool(self.program or self.banner or self.devices or self.layout or self.rows)


def _parse_banner(line: str, b: _Block) -> None:
    for key, name in _BANNER_KEYS.items():
        m = re.search(r"(?:^#|\s)" + key + r"\s+(-?\d+)", line)
        if m:
            b.banner[name] = int(m.group(1))
    m = re.search(r"step:\s+(\d+)\((factor|bytes)\)", line)
    if m:
        b.step = (int(m.group(1)), m.group(2))


def _parse_row(line: str, layout: _Layout, b: _Block, skip: int) -> ResultRow | None:
    toks = line.split()
    if not toks or not toks[0].isdigit():
        return None
    n_pre = 5 if layout.has_root else 4
    if len(toks) == layout.ntokens - 1:
        toks.insert(3, "")  # hypercube prints an empty op name
    if len(toks) != layout.ntokens or not toks[1].isdigit():
        return None
    try:
        size, count, dtype, redop = int(toks[0]), int(toks[1]), toks[2], toks[3]
        root = int(toks[4]) if layout.has_root else -1
        halves = []
        nh = len(layout.half)
        for h in range(2):
            cells = dict(zip(layout.half, toks[n_pre + h * nh: n_pre + (h + 1) * nh]))
            value = _num(cells.get("time", cells.get("cputime")))
            wrong_tok = cells.get("#wrong")
            wrong = None if wrong_tok in (None, "N/A") else int(float(wrong_tok))
            per_iter = None
            if "i_min" in cells:
                per_iter = PerIterStats(
                    skipped_iterations=skip, min_us=_num(cells["i_min"]),
                    max_us=_num(cells.get("i_max")), avg_us=math.nan, p50_us=math.nan,
                    p95_us=math.nan, p99_us=_num(cells.get("i_p99")), stdev_us=math.nan,
                    cv_pct=_num(cells.get("i_cv%")), times_us=[])
            halves.append(HalfResult(
                time_us=value, cpu_time_us=value if "cputime" in cells else math.nan,
                algbw=_num(cells["algbw"]), busbw=_num(cells["busbw"]), wrong=wrong,
                per_iter=per_iter))
    except (ValueError, KeyError, OverflowError):
        return None
    if max(size, count, abs(root)) >= 1 << 63:
        return None
    timestamp = " ".join(toks[-2:]) if layout.timestamp else None
    return ResultRow(size=size, count=count, type=dtype, redop=redop, root=root,
                     out_of_place=halves[0], in_place=halves[1], timestamp=timestamp)


def split_text_log(text: str) -> list[_Block]:
    """Cut a log into tests and parse each; blocks without rows are dropped."""
    blocks: list[_Block] = []
    cur = _Block()

    def new_block() -> _Block:
        nonlocal cur
        if cur.started:
            blocks.append(cur)
        cur = _Block()
        return cur

    pending_json: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        s = line.strip()
        if line.startswith("# Writing JSON output to "):
            pending_json = line[len("# Writing JSON output to "):].strip()
            if cur.started:
                new_block()
            cur.json_path = pending_json
            cur.lines.append(line)
            continue
        m = _VERSION_RE.match(line)
        if m:
            if cur.started or cur.version:
                new_block()
            cur.version = m.group(1)
            cur.headers_code = int(m.group(2)) if m.group(2) else None
            cur.library_code = int(m.group(3)) if m.group(3) else None
        elif line.startswith("# Collective test starting:"):
            if cur.program or cur.rows or cur.layout:
                new_block()
            cur.program = line.partition(":")[2].strip()
        elif line.startswith("# nThread"):
            if cur.banner or cur.rows or cur.layout:
                new_block()
            _parse_banner(line, cur)
        elif line.startswith("# Blocking Enabled:"):
            cur.blocking = 3 if "outer iteration" in line else 2 if "no barrier" in line else 1
        elif line.startswith("# Per-Iteration Report:"):
            cur.per_iter_banner = True
            m2 = re.search(r"skips first (\d+) iterations", line)
            cur.per_iter_skip = int(m2.group(1)) if m2 else 0
        elif line.startswith("# Parallel Init Enabled"):
            cur.parallel_init = True
        elif _DEVICE_RE.match(line):
            d = _DEVICE_RE.match(line)
            if cur.rows:
                new_block()
            pid = int(d.group(3))
            pids = []
            for dev in cur.devices:
                if (dev.hostname, dev.pid) not in pids:
                    pids.append((dev.hostname, dev.pid))
            key = (d.group(4), pid)
            process = pids.index(key) if key in pids else len(pids)
            cur.devices.append(DeviceInfo(
                rank=int(d.group(1)), group=int(d.group(2) or 0), pid=pid, hostname=d.group(4),
                device=int(d.group(5)), device_hex=d.group(6), device_info=d.group(7),
                process=process))
        elif s.startswith("#") and _parse_header(s):
            if cur.rows:
                new_block()
            cur.layout = _parse_header(s)
        elif line.startswith("# Out of bounds values"):
            m2 = re.search(r":\s*(\d+)\s*(OK|FAILED)?", line)
            if m2:
                cur.oob = (int(m2.group(1)), m2.group(2) != "FAILED")
        elif line.startswith("# Avg bus bandwidth"):
            m2 = re.search(r":\s*(\S+)\s*(OK|FAILED)?", line)
            if m2:
                try:
                    avg = float(m2.group(1))
                except ValueError:
                    avg = math.nan
                cur.avg = (avg, None if m2.group(2) is None else m2.group(2) == "OK")
        elif line.startswith("# Collective test concluded"):
            cur.concluded = True
            if not cur.program:
                cur.program = line.partition(":")[2].strip()
        elif line.startswith("# GPU memory usage"):
            cur.memory_line = line
        elif line.startswith("# error:"):
            cur.error_line = line[len("# error:"):].strip()
        elif line.startswith("# Reducing maxBytes") or line.startswith("# skipping json"):
            cur.messages.append(line)
        elif cur.layout and s and s[0].isdigit():
            row = _parse_row(s, cur.layout, cur, cur.per_iter_skip)
            if row is None:
                cur.skipped_lines += 1
            else:
                cur.rows.append(row)
        else:
            cur.lines.append(line)
            continue
        cur.lines.append(line)
    if cur.started:
        blocks.append(cur)
    return [b for b in blocks if b.rows]


def _options_from_block(b: _Block, collective: str, program: str) -> BenchOptions:
    o = BenchOptions(collective=collective, program=program, argv=[])
    for name, value in b.banner.items():
        if name == "check":
            o.check = value
        else:
            setattr(o, name, value)
    if b.step:
        if b.step[1] == "factor":
            o.step_factor = b.step[0]
        else:
            o.step_factor, o.step_bytes = 1, b.step[0]
    o.blocking = b.blocking
    layout = b.layout
    o.per_iter_timing = b.per_iter_banner or bool(layout and "i_min" in layout.half)
    o.per_iter_skip = b.per_iter_skip
    o.parallel_init = b.parallel_init
    o.report_cputime = bool(layout and "cputime" in layout.half)
    o.report_timestamps = bool(layout and layout.timestamp)
    o.memory_report = b.memory_line is not None
    o.output_file = b.json_path
    _options_from_rows(o, b.rows, collective)
    return o


def _options_from_rows(o: BenchOptions, rows: list[ResultRow], collective: str) -> None:
    types = list(dict.fromkeys(r.type for r in rows))
    o.datatypes, o.datatype_arg = types, (types[0] if len(types) == 1 else "all")
    ops = [op for op in dict.fromkeys(r.redop for r in rows) if op not in ("none", "")]
    if ops and collective in REDUCING:
        o.ops, o.op_arg = ops, (ops[0] if len(ops) == 1 else "all")
    roots = list(dict.fromkeys(r.root for r in rows))
    if collective in ROOTED and roots:
        o.root = roots[0] if len(roots) == 1 else -1


def _info_from_block(b: _Block, program: str, path: str, index: int) -> RunInfo:
    groups = sorted({d.group for d in b.devices})
    procs = {(d.hostname, d.pid) for d in b.devices}
    first_group = b.devices[0].group if b.devices else 0
    nranks = sum(1 for d in b.devices if d.group == first_group) or 1
    lib = nccl_version_string(b.library_code)
    return RunInfo(
        program=program, argv=[], backend="nccl-tests", version=b.version,
        nccl_version_code=b.library_code, nccl_headers_code=b.headers_code,
        library=f"NCCL {lib}" if lib else "", devices=b.devices,
        world_size=len(procs) or 1, nranks=nranks, ngroups=len(groups) or 1,
        start_time=next((r.timestamp for r in b.rows if r.timestamp), "") or "",
        hosts=list(dict.fromkeys(d.hostname for d in b.devices)),
        extra={"imported_from": path, "format": "text", "test_index": index,
               "nccl_tests_version": b.version})


def parse_text_log(text: str, path: str = "<text>") -> list[ImportedRun]:
    """Every test with at least one result row, in file order."""
    blocks = split_text_log(text)
    runs = []
    for i, b in enumerate(blocks):
        program = b.program or _guess_program(path)
        collective = collective_of(program)
        complete = b.avg is not None
        summary = None
        if complete:
            oob = b.oob or (0, True)
            summary = RunSummary(out_of_bounds=oob[0], avg_busbw=b.avg[0], min_bw_gate=None,
                                 gate_ok=b.avg[1], errors=[b.error_line or ""],
                                 memory_line=b.memory_line)
        digest = hashlib.sha256("\n".join(b.lines).encode()).hexdigest()
        runs.append(ImportedRun(
            info=_info_from_block(b, program, path, i),
            options=_options_from_block(b, collective, program), rows=b.rows, summary=summary,
            status="complete" if complete else "interrupted", source="import:text",
            source_path=path, index=i, ntests=len(blocks), content_hash="text:" + digest,
            messages=b.messages))
    return runs


def _guess_program(path: str) -> str:
    name = os.path.basename(path)
    m = re.search(r"(all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoallv|alltoall|"
                  r"scatter|gather|sendrecv|hypercube)", name)
    return f"{m.group(1)}_perf" if m else "unknown_perf"


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
