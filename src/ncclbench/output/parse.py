"""Read nccl-tests' (or ncclbench's) text output back into the result model.

The result store imports logs people already have, and the golden tests
re-render real nccl-tests output from what this parser finds; both need the
banner parameters, the device lines, the rows and the footer.  The parser is
lenient: lines it does not know (NCCL INFO logs, warnings, alltoallv summaries)
are kept in `ParsedText.other_lines` and never stop it, and a log cut short
(no footer) still yields its rows.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ncclbench.config import BenchOptions
from ncclbench.output.text import BLOCKING_BANNERS, PARALLEL_INIT_BANNER, EXTRA_REDUCED_MAX_BYTES
from ncclbench.results import DeviceInfo, HalfResult, PerIterStats, ResultRow, RunInfo, RunSummary

_VERSION = re.compile(r"^# nccl-tests version (\S+) nccl-headers=(-?\d+) nccl-library=(-?\d+)")
_NCCLBENCH = re.compile(r"^# ncclbench (\S+) backend=(\S+) library=(.*)$")
_STARTING = re.compile(r"^# Collective test starting: (.*)$")
_PARAMS = re.compile(
    r"^# nThread (-?\d+) nGpus (-?\d+) minBytes (-?\d+) maxBytes (-?\d+) step: (-?\d+)\((factor|bytes)\)"
    r" warmup iters: (-?\d+) iters: (-?\d+) agg iters: (-?\d+) validation: (-?\d+) graph: (-?\d+)"
    r"(?: unalign: (-?\d+))?"
)
_PER_ITER = re.compile(r"^# Per-Iteration Report: .*?(?:; summary skips first (\d+) iterations)? $")
_DEVICE = re.compile(
    r"^#  Rank\s*(-?\d+) Group\s*(-?\d+) Pid\s*(-?\d+) on\s+(\S+) device\s*(-?\d+) \[([^\]]*)\] ?(.*)$"
)
_REDUCING = re.compile(r"^# Reducing maxBytes to (\d+) due to memory limitation")
_JSON = re.compile(r"^# Writing JSON output to (.*)$")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S*)\s+(-?\d+)((?:\s+\S+)+)\s*$")
_OOB = re.compile(r"^# Out of bounds values\s*: (-?\d+) (OK|FAILED)")
_AVG = re.compile(r"^# Avg bus bandwidth\s*: (\S+) ?(OK|FAILED)?")
_MEM = re.compile(r"^# GPU memory usage\s*: ")
_CONCLUDED = re.compile(r"^# Collective test concluded: (.*)$")
_ERROR = re.compile(r"^# error: (.*)$")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d$")


@dataclass
class ParsedText:
    """What the text said outside the rows.  Fields stay None when absent."""

    json_path: str | None = None
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

    def to_options(self) -> BenchOptions:
        """BenchOptions with what the banner records (the rest keep their defaults)."""
        opts = BenchOptions()
        if self.program:
            opts.program = self.program
            opts.collective = self.program[:-5] if self.program.endswith("_perf") else self.program
        for name in ("nthreads", "ngpus", "min_bytes", "max_bytes", "warmup_iters", "iters", "agg_iters", "unalign"):
            value = getattr(self, name)
            if value is not None:
                setattr(opts, name, value)
        if self.step_factor is not None:
            opts.step_factor = self.step_factor
        if self.step_bytes is not None:
            opts.step_bytes = self.step_bytes
            opts.step_factor = 1
        if self.validation is not None:
            opts.check = self.validation
        if self.graph is not None:
            opts.cudagraph = self.graph
        opts.blocking = self.blocking
        opts.per_iter_timing = self.per_iter_timing
        opts.per_iter_skip = self.per_iter_skip
        opts.parallel_init = self.parallel_init
        opts.report_cputime = self.report_cputime
        opts.report_timestamps = self.report_timestamps
        opts.output_file = self.json_path
        return opts

    def to_run_info(self) -> RunInfo:
        processes = {d.process for d in self.devices}
        extra = {}
        if self.reduced_max_bytes is not None:
            extra[EXTRA_REDUCED_MAX_BYTES] = self.reduced_max_bytes
        return RunInfo(
            program=self.program or "",
            argv=[],
            backend=self.backend or ("nccl" if self.nccl_version_code is not None else "unknown"),
            version=self.ncclbench_version or "",
            nccl_version_code=self.nccl_version_code,
            nccl_headers_code=self.nccl_headers_code,
            library=self.library or "",
            devices=list(self.devices),
            world_size=max(1, len(processes)),
            nranks=max(1, len(self.devices)),
            hosts=sorted({d.hostname for d in self.devices}),
            notes=list(self.notes),
            extra=extra,
        )

    def to_summary(self) -> RunSummary | None:
        """The footer, or None when the log has none (interrupted run)."""
        if self.out_of_bounds is None or self.avg_busbw is None:
            return None
        return RunSummary(
            out_of_bounds=self.out_of_bounds,
            avg_busbw=self.avg_busbw,
            min_bw_gate=None,  # the text shows only the verdict, not the threshold
            gate_ok=None if self.gate is None else self.gate == "OK",
            errors=list(self.errors) if self.errors else [""],
            memory_line=self.memory_line,
        )


def _half(tokens: list[str], per_iter: bool, skip: int) -> HalfResult:
    time_us, algbw, busbw = (float(t) for t in tokens[:3])
    wrong = None if tokens[3] == "N/A" else int(float(tokens[3]))
    stats = None
    if per_iter:
        mn, mx, p99, cv = (float(t) for t in tokens[4:8])
        nan = math.nan  # not printed by nccl-tests; only the JSON has them
        stats = PerIterStats(skip, mn, mx, nan, nan, nan, p99, nan, cv, [])
    return HalfResult(time_us, time_us, algbw, busbw, wrong, stats)


def _preamble(line: str):
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


def parse_row(line: str, per_iter: bool | None = None, skip: int = 0) -> ResultRow | None:
    """One result line, or None if `line` is not one.  Under -C both times are the printed cputime;
    per-iteration fields the text does not show are NaN."""
    pre = _preamble(line)
    if pre is None:
        return None
    size, count, type_name, redop, root, rest = pre
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
        oop = _half(tokens[:half_len], per_iter, skip)
        ip = _half(tokens[half_len:], per_iter, skip)
    except ValueError:
        return None
    return ResultRow(size, count, type_name, redop, root, oop, ip, timestamp=timestamp)


def _parse_header_line(line: str, info: ParsedText) -> bool:
    """Column header lines: record -C/-S/-I from the labels; True if it was one."""
    if line.startswith("#       size ") or line.startswith("#        size"):
        info.report_cputime = "cputime" in line
        info.report_timestamps = line.rstrip().endswith("timestamp")
        info.per_iter_timing = "i_min" in line
        return True
    stripped = line.strip()
    return stripped.startswith("#") and (
        "(elements)" in line or ("out-of-place" in line and "in-place" in line)
    )


def parse_text(text: str) -> tuple[ParsedText, list[ResultRow]]:
    """Parse a whole nccl-tests/ncclbench stdout log into (header/footer info, rows)."""
    info = ParsedText()
    rows: list[ResultRow] = []
    in_header = True  # before the column header
    last_proc_key = None
    process = -1
    for line in text.splitlines():
        if m := _JSON.match(line):
            info.json_path = m.group(1)
        elif m := _VERSION.match(line):
            info.nccl_tests_version = m.group(1)
            info.nccl_headers_code = int(m.group(2))
            info.nccl_version_code = int(m.group(3))
        elif m := _NCCLBENCH.match(line):
            info.ncclbench_version, info.backend, info.library = m.group(1), m.group(2), m.group(3)
        elif m := _STARTING.match(line):
            info.program = m.group(1)
        elif m := _PARAMS.match(line):
            g = m.groups()
            info.nthreads, info.ngpus, info.min_bytes, info.max_bytes = (int(x) for x in g[:4])
            if g[5] == "factor":
                info.step_factor = int(g[4])
            else:
                info.step_bytes = int(g[4])
            info.warmup_iters, info.iters, info.agg_iters, info.validation, info.graph = (
                int(x) for x in g[6:11]
            )
            info.unalign = int(g[11]) if g[11] is not None else 0
        elif line in BLOCKING_BANNERS.values():
            info.blocking = next(k for k, v in BLOCKING_BANNERS.items() if v == line)
        elif m := _PER_ITER.match(line):
            info.per_iter_timing = True
            info.per_iter_skip = int(m.group(1) or 0)
        elif line == PARALLEL_INIT_BANNER:
            info.parallel_init = True
        elif m := _DEVICE.match(line):
            pid, host = int(m.group(3)), m.group(4)
            if (pid, host) != last_proc_key:
                process += 1
                last_proc_key = (pid, host)
            info.devices.append(
                DeviceInfo(
                    rank=int(m.group(1)),
                    group=int(m.group(2)),
                    pid=pid,
                    hostname=host,
                    device=int(m.group(5)),
                    device_hex=m.group(6),
                    device_info=m.group(7),
                    process=process,
                )
            )
        elif m := _REDUCING.match(line):
            info.reduced_max_bytes = int(m.group(1))
        elif _parse_header_line(line, info):
            in_header = False
        elif m := _OOB.match(line):
            info.out_of_bounds = int(m.group(1))
        elif m := _AVG.match(line):
            info.avg_busbw = float(m.group(1))
            info.gate = m.group(2)
        elif _MEM.match(line):
            info.memory_line = line
        elif m := _CONCLUDED.match(line):
            info.concluded = True
            info.program = info.program or m.group(1)
        elif m := _ERROR.match(line):
            info.errors.append(m.group(1))
        elif (row := parse_row(line, None if in_header else info.per_iter_timing, info.per_iter_skip)) is not None:
            rows.append(row)
        elif line in ("#", "# Using devices", ""):
            continue
        elif in_header and line.startswith("# "):
            info.notes.append(line)
        else:
            info.other_lines.append(line)
    return info, rows
