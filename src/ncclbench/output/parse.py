"""Read nccl-tests' (or ncclbench's) text output back into the result model.

The one reader of these logs: the golden tests re-render real nccl-tests
output from what it finds, and the result store imports the logs people
already have (`ncclbench import`, run references that name a file).  Both
need the banner parameters, the device lines, the rows and the footer.

It is lenient because real logs are messy: NCCL's own INFO lines, warnings
and alltoallv summaries are kept in `ParsedText.other_lines` and never stop
it; `-I` / `-C` / `-S` columns, `N/A` cells and hypercube's empty op column
are read; a log cut short (no footer) still yields its rows; damaged lines
are skipped, never raised on.  `parse_tests` cuts a log holding several
tests (binaries run one after the other into one file) into one result per
test; `parse_text` reads the first.

Logs as people keep them are untangled first (`output.demux`): launcher
tags (Open MPI `--tag-output`, `srun --label`) come off, NCCL's own log
lines go to `ParsedText.nccl_lines` (even when they were printed inside a
row), and rows cut apart by them are put back together.  Older nccl-tests
tables (before 2.13: 3-5 leading columns depending on the collective, an
`error` column holding the largest deviation instead of `#wrong`) are read
by the column labels of their header.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ncclbench.core.config import BenchOptions
from ncclbench.core.results import DeviceInfo, HalfResult, PerIterStats, ResultRow, RunInfo, RunSummary
from ncclbench.output.demux import untangle
from ncclbench.output.text import BLOCKING_BANNERS

# '#' is optional where a paste lost it (a terminal or a forum that ate the comment marks).
_VERSION = re.compile(r"^#? ?nccl-tests version (\S+)(?: nccl-headers=(-?\d+))?(?: nccl-library=(-?\d+))?")
_NCCLBENCH = re.compile(r"^# ncclbench (\S+) backend=(\S+) library=(.*)$")
_STARTING = re.compile(r"^#? ?Collective test starting: (.*)$")
# banner keys one by one, so that older nccl-tests banners (no `agg iters`, `graph`, `unalign`) read too
_PARAM_KEYS = (
    ("nthreads", r"nThread"), ("ngpus", r"nGpus"), ("min_bytes", r"minBytes"),
    ("max_bytes", r"maxBytes"), ("warmup_iters", r"warmup iters:"),
    ("iters", r"(?<!warmup )(?<!agg )iters:"), ("agg_iters", r"agg iters:"),
    ("validation", r"validation:"), ("graph", r"graph:"), ("unalign", r"unalign:"),
)
_PARAM_RES = tuple((name, re.compile(r"(?:^#|^|\s)" + key + r"\s+(-?\d+)")) for name, key in _PARAM_KEYS)
_BANNER = re.compile(r"^#?\s*nThread -?\d+ nGpus -?\d+ ")
_STEP = re.compile(r"step:\s+(-?\d+)\((factor|bytes)\)")
_PER_ITER_SKIP = re.compile(r"; summary skips first (\d+) iterations")
_DEVICE = re.compile(  # Pid since nccl-tests 2.0 (2019), Group since 2.13
    r"^#?\s+Rank\s*(-?\d+)(?: Group\s*(-?\d+))?(?: Pid\s*(-?\d+))? on\s+(\S+) device\s*(-?\d+) \[([^\]]*)\] ?(.*)$"
)
_REDUCING = re.compile(r"^# Reducing maxBytes to (\d+) due to memory limitation")
_JSON = re.compile(r"^# Writing JSON output to (.*)$")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S*)\s+(-?\d+)((?:\s+\S+)+)\s*$")
_OOB = re.compile(r"^#?\s*Out of bounds values[^:]*:\s*(-?\d+)")  # '#' lost in some pastes
_AVG = re.compile(r"^#?\s*Avg bus bandwidth[^:]*:\s*(\S+)\s*(OK|FAILED)?")
_CONCLUDED = re.compile(r"^#? ?Collective test concluded: (.*)$")
_ERROR = re.compile(r"^# error: (.*)$")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d$")
_PROGRAM = re.compile(r"^(.+?)_perf(?:_\w+)?$")
# How a run that ended badly shows in nccl-tests' output (src/common.h, every version since 2.0):
# "<host>: Test NCCL failure common.cu:961 '<ncclGetErrorString>[ / <ncclGetLastError>]'",
# "<host>: Test CUDA failure ...", " .. <host> pid <pid>: Test failure common.cu:891"; and the launcher's
# own last words (Open MPI, MPICH, Slurm) about a rank that died.
_FAILURE = re.compile(
    r"(?:Test (?:NCCL|CUDA) failure |: Test failure |^\s*\.\. \S+(?: pid \d+)?: Test failure|MPI_ABORT was invoked|"
    r"mpirun noticed that process|exited on signal \d+|Primary job +terminated normally, but|"
    r"^srun: error: .*(?:exit code|Terminated|Killed)|BAD TERMINATION OF ONE OF YOUR APPLICATION|"
    r"^(?:\S+: )?(?:Segmentation fault|Aborted)(?: \(core dumped\))?$|terminate called after throwing|"
    r"^Invalid number of GPUs|No CUDA-capable device|^\S+: Test .* failure)")
# The command line pasted with the log: a launcher or an nccl-tests binary with options.
_LAUNCH = re.compile(r"(?:^|[\s$#>])(?:mpirun|mpiexec|orterun|srun|prun|torchrun)\s+-|"
                     r"(?:^|[\s/$>])\w+_perf(?:_mpi)?\s+-[bgetfncdowaNIGTRzmC]\b")
# A gap: `[... N lines cut by ncclbench corpus ...]` (tests/fixtures/log_corpus) or what people paste
# for one ("...", "[...]", "<snip>").
_GAP = re.compile(r"^\s*(?:\[\.\.\..*\]|\.\.\.+|\[\s*\.\.\.\s*\]|<\s*snip\s*>|\[snip\])\s*$", re.IGNORECASE)
_INT64 = 1 << 63
STANDARD_PREAMBLE = ("size", "count", "type", "redop", "root")


def collective_of(program: str) -> str:
    """`all_reduce_perf`, `all_reduce_perf_mpi`, `/path/all_reduce_perf` -> `all_reduce`."""
    base = program.rsplit("/", 1)[-1]
    m = _PROGRAM.match(base)
    return m.group(1) if m else base


@dataclass
class ParsedText:
    """What the text of one test said outside the rows.  Fields stay None when absent."""

    json_path: str | None = None
    json_skip_line: str | None = None  # `# skipping json output; <path> not accessible`
    nccl_tests_version: str | None = None
    nccl_headers_code: int | None = None
    nccl_version_code: int | None = None
    ncclbench_version: str | None = None  # from `# ncclbench <v> backend=... library=...`
    backend: str | None = None
    library: str | None = None
    program: str | None = None
    nthreads: int | None = None
    ngpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    step_factor: int | None = None  # set when the banner says (factor)
    step_bytes: int | None = None  # set when the banner says (bytes)
    warmup_iters: int | None = None
    iters: int | None = None
    agg_iters: int | None = None
    validation: int | None = None
    graph: int | None = None
    unalign: int | None = None
    blocking: int = 0
    per_iter_timing: bool = False
    per_iter_skip: int = 0
    parallel_init: bool = False
    devices: list[DeviceInfo] = field(default_factory=list)
    reduced_max_bytes: int | None = None
    notes: list[str] = field(default_factory=list)  # other `#` lines before the column header
    report_cputime: bool = False
    report_timestamps: bool = False
    out_of_bounds: int | None = None
    avg_busbw: float | None = None
    gate: str | None = None  # "OK" / "FAILED" when NCCL_TESTS_MIN_BW was set
    memory_line: str | None = None
    errors: list[str] = field(default_factory=list)
    concluded: bool = False
    other_lines: list[str] = field(default_factory=list)
    nccl_lines: list[str] = field(default_factory=list)  # NCCL's log lines met in this test
    failure_lines: list[str] = field(default_factory=list)  # nccl-tests' / the launcher's failure lines
    launch_lines: list[str] = field(default_factory=list)  # command lines pasted with the log
    gaps: int = 0  # places where lines were cut out of the paste
    ends_in_gap: bool = False  # the last line that says anything is a gap: the paste lost its tail
    preamble: tuple[str, ...] = STANDARD_PREAMBLE  # the row's leading columns, by the header's labels
    error_column: bool = False  # before nccl-tests 2.13: `error` (largest deviation) instead of `#wrong`
    launcher_prefix: str | None = None  # "open-mpi" / "srun": tags taken off every line
    rejoined_rows: int = 0  # rows put back together after NCCL lines cut them apart
    lines: list[str] = field(default_factory=list)  # every line of this test, as read

    def to_options(self) -> BenchOptions:
        """BenchOptions with what the banner records (the rest keep their defaults)."""
        values: dict[str, object] = {}
        if self.program:
            values["program"] = self.program
            values["collective"] = collective_of(self.program)
        for name in ("nthreads", "ngpus", "min_bytes", "max_bytes", "warmup_iters", "iters", "agg_iters", "unalign"):
            value = getattr(self, name)
            if value is not None:
                values[name] = value
        if self.step_factor is not None:
            values["step_factor"] = self.step_factor
        if self.step_bytes is not None:
            values["step_bytes"] = self.step_bytes
            values["step_factor"] = 1
        if self.validation is not None:
            values["check"] = self.validation
        if self.graph is not None:
            values["cudagraph"] = self.graph
        return BenchOptions(**values, blocking=self.blocking, per_iter_timing=self.per_iter_timing,  # type: ignore[arg-type]
                            per_iter_skip=self.per_iter_skip, parallel_init=self.parallel_init,
                            report_cputime=self.report_cputime, report_timestamps=self.report_timestamps,
                            memory_report=self.memory_line is not None, output_file=self.json_path)

    def to_run_info(self) -> RunInfo:
        """RunInfo of the banner and device lines; nranks counts the first group's devices."""
        first_group = self.devices[0].group if self.devices else 0
        return RunInfo(
            program=self.program or "",
            argv=[],
            backend=self.backend or ("nccl" if self.nccl_version_code is not None else "unknown"),
            version=self.ncclbench_version or "",
            nccl_version_code=self.nccl_version_code,
            nccl_headers_code=self.nccl_headers_code,
            library=self.library or "",
            devices=list(self.devices),
            world_size=max(1, len({d.process for d in self.devices})),
            nranks=max(1, sum(1 for d in self.devices if d.group == first_group)),
            ngroups=max(1, len({d.group for d in self.devices})),
            hosts=sorted({d.hostname for d in self.devices}),
            notes=list(self.notes),
            reduced_max_bytes=self.reduced_max_bytes,
        )

    def to_summary(self) -> RunSummary | None:
        """The footer, or None when the log has none (interrupted run)."""
        if self.avg_busbw is None:
            return None
        return RunSummary(
            out_of_bounds=self.out_of_bounds or 0,
            avg_busbw=self.avg_busbw,
            min_bw_gate=None,  # the text shows only the verdict, not the threshold
            gate_ok=None if self.gate is None else self.gate == "OK",
            errors=list(self.errors) if self.errors else [""],
            memory_line=self.memory_line,
        )


# ---------------------------------------------------------------- rows


def _half(tokens: list[str], per_iter: bool, skip: int, cputime: bool, error_column: bool = False) -> HalfResult:
    time_us, algbw, busbw = (float(t) for t in tokens[:3])
    if error_column:  # the largest deviation: 0 means every element exact, anything else an unknown count
        wrong = None if tokens[3] == "N/A" or float(tokens[3]) != 0.0 else 0
    else:
        wrong = None if tokens[3] == "N/A" else int(float(tokens[3]))
    if wrong is not None and abs(wrong) >= _INT64:
        raise ValueError("#wrong out of range")
    stats = None
    if per_iter:
        mn, mx, p99, cv = (float(t) for t in tokens[4:8])
        nan = math.nan  # not printed by nccl-tests; only the JSON has them
        stats = PerIterStats(skip, mn, mx, nan, nan, nan, p99, nan, cv, [])
    return HalfResult(time_us, time_us if cputime else math.nan, algbw, busbw, wrong, stats)


# (size, count, type, redop, root, rest of the line) of a result row
_Preamble = tuple[int, int, str, str, int, str]


def _preamble(line: str) -> _Preamble | None:
    """(size, count, type, redop, root, rest) of a result line, or None.

    nccl-tests' preamble has fixed columns (`%12li  %12li  %8s  %6s  %6s`),
    which also copes with an empty op name (hypercube); the whitespace split is
    the fallback for hand-edited or over-wide lines.
    """
    if len(line) > 52 and line[12:14] == line[26:28] == line[36:38] == line[44:46] == "  ":
        try:
            return (int(line[0:12]), int(line[14:26]), line[28:36].strip(), line[38:44].strip(),
                    int(line[46:52]), line[52:])
        except ValueError:
            pass
    m = _ROW.match(line)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), m.group(3), m.group(4), int(m.group(5)), m.group(6)


def _old_preamble(line: str, labels: tuple[str, ...]) -> _Preamble | None:
    """(size, count, type, redop, root, rest) of a row of an older layout (its header's labels).

    A column the layout lacks reads as today's table prints it: redop `none`, root -1.
    """
    spans = [m.span() for m in re.finditer(r"\S+", line)]
    n = len(labels)
    if n < 3 or len(spans) <= n:
        return None
    tokens = [line[a:b] for a, b in spans[:n]]
    if not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    cells = dict(zip(labels, tokens))
    try:
        root = int(cells["root"]) if "root" in cells else -1
    except ValueError:
        return None
    return (int(tokens[0]), int(tokens[1]), cells.get("type", ""), cells.get("redop", "none"), root,
            line[spans[n - 1][1]:])


def parse_row(line: str, per_iter: bool | None = None, skip: int = 0, cputime: bool = False,
              preamble: tuple[str, ...] = STANDARD_PREAMBLE, error_column: bool = False) -> ResultRow | None:
    """One result line, or None if `line` is not one (or is damaged).

    `per_iter=None` guesses the -I columns from the cell count.  Under -C
    (`cputime`) both times are the printed cputime; otherwise the CPU time is
    NaN (not printed), as are the per-iteration fields the text does not show.
    `preamble` / `error_column` describe an older layout (see the module docstring).
    """
    pre = _preamble(line) if preamble == STANDARD_PREAMBLE else _old_preamble(line, preamble)
    if pre is None:
        return None
    size, count, type_name, redop, root, rest = pre
    if max(size, count, abs(root)) >= _INT64:
        return None
    tokens = rest.split()
    timestamp = None
    if len(tokens) >= 2 and _TIMESTAMP.match(tokens[-2]):
        timestamp = tokens[-2] + " " + tokens[-1]
        tokens = tokens[:-2]
    if per_iter is None:
        per_iter = len(tokens) == 16
    if len(tokens) != (16 if per_iter else 8):
        return None
    try:
        half_len = len(tokens) // 2
        oop = _half(tokens[:half_len], per_iter, skip, cputime, error_column)
        ip = _half(tokens[half_len:], per_iter, skip, cputime, error_column)
    except (ValueError, OverflowError):
        return None
    return ResultRow(size, count, type_name, redop, root, oop, ip, timestamp=timestamp)


_OLD_PREAMBLES = (("size", "count", "type"), ("size", "count", "type", "redop"),
                  ("size", "count", "type", "root"), ("size", "count", "type", "redop", "root"))


def _is_whole_row(line: str) -> bool:
    """A complete result row in today's layout or an older one (the untangler's test)."""
    return parse_row(line) is not None or any(
        parse_row(line, per_iter=False, preamble=p, error_column=True) is not None for p in _OLD_PREAMBLES)


# ---------------------------------------------------------------- whole logs


class _Test:
    """The test being read: its ParsedText, rows and reading state."""

    def __init__(self) -> None:
        self.info = ParsedText()
        self.rows: list[ResultRow] = []
        self.in_header = True  # before the column header
        self.header_seen = False
        self.banner_seen = False
        self.processes: dict[tuple[str, int], int] = {}

    @property
    def started(self) -> bool:
        i = self.info
        return bool(i.program or self.banner_seen or i.devices or self.header_seen or self.rows)

    @property
    def has_version(self) -> bool:
        return self.info.nccl_tests_version is not None or self.info.ncclbench_version is not None


def _parse_params(line: str, info: ParsedText) -> None:
    for name, regex in _PARAM_RES:
        if m := regex.search(line):
            setattr(info, name, int(m.group(1)))
    if m := _STEP.search(line):
        if m.group(2) == "factor":
            info.step_factor = int(m.group(1))
        else:
            info.step_bytes = int(m.group(1))


def _parse_blocking(line: str) -> int:
    for mode, banner in BLOCKING_BANNERS.items():
        if line.rstrip() == banner.rstrip():
            return mode
    return 3 if "outer iteration" in line else 2 if "no barrier" in line else 1


def _size_header_labels(line: str) -> list[str] | None:
    """The labels of the `size count type ...` column header line, or None."""
    toks = line.lstrip("#").split()  # a paste that lost the '#' still has the labels
    return toks if toks[:3] == ["size", "count", "type"] and ("time" in toks or "busbw" in toks) else None


def _is_other_header_line(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("#") and ("(elements)" in line or ("out-of-place" in line and "in-place" in line))


class _Reader:
    """The tests of one log read so far: the finished ones and the one being read.  The rules
    below ask it for the test a line belongs to, which may be a new one that the line starts."""

    def __init__(self) -> None:
        self.done: list[_Test] = []
        self.cur = _Test()

    def next_if(self, starts_new: bool) -> _Test:
        """The test a line goes to: a fresh one when the line starts a new test (the current one
        kept when it got far enough to count), else the current one."""
        if starts_new:
            if self.cur.started:
                self.done.append(self.cur)
            self.cur = _Test()
        return self.cur


def _top_of_test_line(r: _Reader, line: str) -> bool:
    """The lines a test starts with (JSON announcement, version, `Collective test starting`,
    banner): one that follows lines of the current test begins the next test."""
    t = r.cur
    if m := _JSON.match(line):
        r.next_if(t.started).info.json_path = m.group(1)
    elif line.startswith("# skipping json output"):
        r.next_if(t.started).info.json_skip_line = line
    elif m := _VERSION.match(line):
        info = r.next_if(t.started or t.has_version).info
        info.nccl_tests_version = m.group(1)
        info.nccl_headers_code = int(m.group(2)) if m.group(2) else None
        info.nccl_version_code = int(m.group(3)) if m.group(3) else None
    elif m := _NCCLBENCH.match(line):
        info = r.next_if(t.started or t.has_version).info
        info.ncclbench_version, info.backend, info.library = m.groups()
    elif m := _STARTING.match(line):
        r.next_if(bool(t.info.program or t.rows or t.header_seen)).info.program = m.group(1)
    elif _BANNER.match(line):
        t = r.next_if(bool(t.banner_seen or t.rows or t.header_seen))
        t.banner_seen = True
        _parse_params(line, t.info)
    else:
        return False
    return True


def _option_line(r: _Reader, line: str) -> bool:
    """The banner's mode lines (blocking, per-iteration report, parallel init, reduced maxBytes)."""
    info = r.cur.info
    if line.startswith("# Blocking Enabled:"):
        info.blocking = _parse_blocking(line)
    elif line.startswith("# Per-Iteration Report:"):
        info.per_iter_timing = True
        m = _PER_ITER_SKIP.search(line)
        info.per_iter_skip = int(m.group(1)) if m else 0
    elif line.startswith("# Parallel Init Enabled"):
        info.parallel_init = True
    elif m := _REDUCING.match(line):
        info.reduced_max_bytes = int(m.group(1))
    else:
        return False
    return True


def _device_line(r: _Reader, line: str) -> bool:
    """A `Rank N ... on host device D` line; after rows it begins the next test."""
    if not (m := _DEVICE.match(line)):
        return False
    t = r.next_if(bool(r.cur.rows))
    pid, host = int(m.group(3) or 0), m.group(4)
    process = t.processes.setdefault((host, pid), len(t.processes))
    t.info.devices.append(
        DeviceInfo(
            rank=int(m.group(1)),
            group=int(m.group(2) or 0),
            pid=pid,
            hostname=host,
            device=int(m.group(5)),
            device_hex=m.group(6),
            device_info=m.group(7),
            process=process,
        )
    )
    return True


def _column_header_line(r: _Reader, line: str) -> bool:
    """The table's header lines: the `size count type ...` labels say the row layout (and,
    after rows, begin the next test); the others only end the part before the table."""
    if (labels := _size_header_labels(line)) is not None:
        t = r.next_if(bool(r.cur.rows))
        t.info.report_cputime = "cputime" in labels
        t.info.report_timestamps = labels[-1] == "timestamp"
        t.info.per_iter_timing = t.info.per_iter_timing or "i_min" in labels
        first_time = next((i for i, x in enumerate(labels) if x in ("time", "cputime")), len(labels))
        t.info.preamble = tuple(labels[:first_time])
        t.info.error_column = "error" in labels[first_time:]
        t.in_header, t.header_seen = False, True
    elif _is_other_header_line(line):
        r.cur.in_header = False
    else:
        return False
    return True


def _footer_line(r: _Reader, line: str) -> bool:
    """The lines after the table: out-of-bounds count, average bus bandwidth (and gate), memory
    usage, `Collective test concluded`, `# error:`."""
    info = r.cur.info
    if m := _OOB.match(line):
        info.out_of_bounds = int(m.group(1))
    elif m := _AVG.match(line):
        try:
            info.avg_busbw = float(m.group(1))
        except ValueError:
            info.avg_busbw = math.nan
        info.gate = m.group(2)
    elif line.startswith("# GPU memory usage"):
        info.memory_line = line
    elif m := _CONCLUDED.match(line):
        info.concluded = True
        info.program = info.program or m.group(1)
    elif m := _ERROR.match(line):
        info.errors.append(m.group(1))
    else:
        return False
    return True


def _row_line(r: _Reader, line: str) -> bool:
    """A result row, read in the layout the header and banner gave (before the header the
    per-iteration columns are guessed from the row's width)."""
    t, info = r.cur, r.cur.info
    row = parse_row(line, None if t.in_header else info.per_iter_timing, info.per_iter_skip,
                    info.report_cputime, info.preamble, info.error_column)
    if row is None:
        return False
    t.rows.append(row)
    return True


def _loose_line(r: _Reader, line: str) -> None:
    """What no rule above took: blank lines dropped; failures, pasted command lines (one after a
    finished test begins the next test) and gaps noted; `# ` lines before the table kept as notes;
    the rest kept in `other_lines`."""
    t, info = r.cur, r.cur.info
    if line.strip() in ("#", "# Using devices", "Using devices", ""):
        pass
    elif _FAILURE.search(line):
        info.failure_lines.append(line)
        info.other_lines.append(line)
    elif _LAUNCH.search(line):  # also as a comment ("#  ./all_reduce_perf -b 8 ..."), as some paste it
        # the next binary's command line after a finished test
        t = r.next_if(bool(t.rows and (info.concluded or info.avg_busbw is not None)))
        t.info.launch_lines.append(line)
        t.info.other_lines.append(line)
    elif _GAP.match(line):
        info.gaps += 1
        info.other_lines.append(line)
    elif t.in_header and line.startswith("# "):
        info.notes.append(line)
    else:
        info.other_lines.append(line)


# In order: the first that takes a line reads it; `_loose_line` gets the rest.
_LINE_RULES: tuple[Callable[[_Reader, str], bool], ...] = (
    _top_of_test_line, _option_line, _device_line, _column_header_line, _footer_line, _row_line)


def _read_line(r: _Reader, kind: str, line: str) -> None:
    """One untangled line into the test it belongs to, then into that test's `lines`."""
    if kind == "nccl":
        r.cur.info.nccl_lines.append(line)
    elif not any(rule(r, line) for rule in _LINE_RULES):
        _loose_line(r, line)
    info = r.cur.info
    if line.strip():
        info.ends_in_gap = bool(_GAP.match(line))
    info.lines.append(line)


def parse_tests(text: str) -> list[tuple[ParsedText, list[ResultRow]]]:
    """Every test in a log, in order, as (header/footer info, rows).

    A new test starts where a line that belongs to the top of a test (JSON
    announcement, version line, `Collective test starting`, parameters)
    follows lines of the current one, or where device lines or a column
    header follow rows.  Lines before the first test belong to it, lines
    after a footer to the test they follow (`ParsedText.lines`: what the
    store hashes to recognise a re-import).  Only tests that got as far as a
    banner, device line, column header or row are returned (a text with none
    gives one empty ParsedText).
    """
    r = _Reader()
    untangled = untangle(text, row_complete=_is_whole_row)
    for kind, line in untangled.items:
        _read_line(r, kind, line)
    done, cur = r.done, r.cur
    if cur.started or cur.info.failure_lines or cur.info.nccl_lines or not done:
        done.append(cur)  # (a text with no test at all gives one empty ParsedText)
    for t in done:
        t.info.launcher_prefix, t.info.rejoined_rows = untangled.prefix_style, untangled.rejoined_rows
    return [(t.info, t.rows) for t in done]


def parse_text(text: str) -> tuple[ParsedText, list[ResultRow]]:
    """Parse an nccl-tests/ncclbench stdout log into (header/footer info, rows) of its
    first test (`parse_tests` gives every test of a concatenated log)."""
    return parse_tests(text)[0]
