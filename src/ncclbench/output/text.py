"""nccl-tests' stdout table, character for character (docs/behaviour.md §5).

Existing log scrapers split these lines on fixed widths and trailing spaces,
so the layout below follows nccl-tests 2.19.6 exactly: banner, device lines,
the 3-line column header (with its -C/-S/-I variants), one line per row and
the footer.  The pure `*_lines` functions build the text; `TextReporter`
streams it as the run progresses and `render_run` re-creates it for a stored
run (`ncclbench show`).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import TextIO

from ncclbench import NCCL_TESTS_COMPAT_VERSION
from ncclbench.core.config import BenchOptions, Blocking
from ncclbench.core.results import DeviceInfo, HalfResult, ResultRow, RunInfo, RunSummary
from ncclbench.output.numfmt import format_g, format_number, format_wrong, now_string

BLOCKING_BANNERS: dict[int, str] = {
    Blocking.WAIT_BARRIER_EACH_OP: "# Blocking Enabled: wait and barrier after each inner iteration (-m) ",
    Blocking.WAIT_EACH_OP: "# Blocking Enabled: wait after each inner iteration (-m), no barrier ",
    Blocking.TIME_EACH_ITERATION: "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier ",
}
PARALLEL_INIT_BANNER = "# Parallel Init Enabled: threads call into NcclInitRank concurrently "
DEVICE_BLOCK_CAP = 2048  # nccl-tests' per-process device-line buffer (bytes incl. NUL)


def json_announce_line(path: str) -> str:
    return "# Writing JSON output to %s" % path


def reducing_max_bytes_text(max_bytes: int) -> str:
    """nccl-tests' words for maxBytes after the memory clamp (§5.1 item 9)."""
    return "Reducing maxBytes to %d due to memory limitation" % max_bytes


def reducing_max_bytes_lines(max_bytes: int) -> list[str]:
    """The clamp (RunInfo.reduced_max_bytes) as printed between the device lines and the
    column header, where nccl-tests prints it."""
    return ["#", "# " + reducing_max_bytes_text(max_bytes)]


def version_line(info: RunInfo) -> str:
    """nccl-tests' version line; runs without NCCL (MPI backend) name ncclbench instead.

    A backend without NCCL has no NCCL codes to print, and claiming
    `nccl-library=0` would mislead scrapers, so such runs print
    `# ncclbench <version> backend=<backend> library=<library>`.
    """
    if info.nccl_version_code is None:
        return "# ncclbench %s backend=%s library=%s" % (info.version, info.backend, info.library)
    headers = info.nccl_headers_code if info.nccl_headers_code is not None else info.nccl_version_code
    return "# nccl-tests version %s nccl-headers=%d nccl-library=%d" % (
        NCCL_TESTS_COMPAT_VERSION,
        headers,
        info.nccl_version_code,
    )


def params_line(opts: BenchOptions) -> str:
    if opts.step_factor > 1:
        step = "%d(factor)" % opts.step_factor
    else:
        step = "%d(bytes)" % opts.step_bytes
    return (
        "# nThread %d nGpus %d minBytes %d maxBytes %d step: %s warmup iters: %d iters: %d "
        "agg iters: %d validation: %d graph: %d unalign: %d"
        % (
            opts.nthreads,
            opts.ngpus,
            opts.min_bytes,
            opts.max_bytes,
            step,
            opts.warmup_iters,
            opts.iters,
            opts.agg_iters,
            opts.check,
            opts.cudagraph,
            opts.unalign,
        )
    )


def banner_lines(info: RunInfo, opts: BenchOptions, json_path: str | None = None) -> list[str]:
    """Everything up to and including `# Using devices` (§5.1 items 1-7)."""
    lines = []
    if json_path is not None:
        lines.append(json_announce_line(json_path))
    lines.append(version_line(info))
    lines.append("# Collective test starting: %s" % info.program)
    lines.append(params_line(opts))
    if opts.blocking in BLOCKING_BANNERS:
        lines.append(BLOCKING_BANNERS[opts.blocking])
    if opts.per_iter_timing:
        text = "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows"
        if opts.per_iter_skip:
            text += "; summary skips first %d iterations" % opts.per_iter_skip
        lines.append(text + " ")
    if opts.parallel_init:
        lines.append(PARALLEL_INIT_BANNER)
    lines.append("#")
    lines.append("# Using devices")
    return lines


def device_line(dev: DeviceInfo) -> str:
    return "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s" % (
        dev.rank,
        dev.group,
        dev.pid,
        dev.hostname,
        dev.device,
        dev.device_hex,
        dev.device_info,
    )


def device_lines(devices: Iterable[DeviceInfo]) -> list[str]:
    """Device lines in world-process order; each process's block is capped like nccl-tests'
    2048-byte buffer (cut to 2043 characters + `...`)."""
    blocks: dict[int, list[str]] = {}
    for dev in devices:
        blocks.setdefault(dev.process, []).append(device_line(dev))
    out: list[str] = []
    for process in sorted(blocks):
        text = "".join(line + "\n" for line in blocks[process])
        if len(text) >= DEVICE_BLOCK_CAP:
            text = text[: DEVICE_BLOCK_CAP - 5] + "...\n"
        out.extend(text[:-1].split("\n"))
    return out


def note_lines(notes: Iterable[str]) -> list[str]:
    return [n if n.startswith("#") else "# " + n for n in notes]


def column_header_lines(opts: BenchOptions) -> list[str]:
    """`#` plus the 3 header lines (§5.3), including the trailing spaces."""
    t = "cputime" if opts.report_cputime else "time"
    ts_label = "%19s" % "timestamp" if opts.report_timestamps else ""
    ts_format = "%19s" % "%Y-%m-%d %H:%M:%S" if opts.report_timestamps else ""
    pre = "# %10s  %12s  %8s  %6s  %6s"
    names: tuple[str, ...]
    units: tuple[str, ...]
    if opts.per_iter_timing:
        top = (pre % ("", "", "", "", "")) + (
            "              out-of-place (+ per-iteration)"
            "                                in-place (+ per-iteration)"
        )
        half = "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s"
        names = (t, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%")
        units = ("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)")
    else:
        top = (pre % ("", "", "", "", "")) + (
            "           out-of-place                       in-place          "
        )
        half = "  %7s  %6s  %6s  %6s"
        names = (t, "algbw", "busbw", "#wrong")
        units = ("(us)", "(GB/s)", "(GB/s)", "")
    labels = pre % ("size", "count", "type", "redop", "root") + half % names + half % names
    unit_line = pre % ("(B)", "(elements)", "", "", "") + half % units + half % units
    return ["#", top, labels + " " + ts_label, unit_line + " " + ts_format]


def _half_text(half: HalfResult, opts: BenchOptions) -> str:
    shown = half.cpu_time_us if opts.report_cputime else half.time_us
    text = "  %7s  %6s  %6s" % (
        format_number(shown, 7),
        format_number(half.algbw, 6),
        format_number(half.busbw, 6),
    )
    text += "    N/A" if half.wrong is None else "  " + format_wrong(half.wrong)
    if opts.per_iter_timing and half.per_iter is not None:
        p = half.per_iter
        text += "  %7s  %7s  %7s  %7s" % tuple(
            format_number(v, 7) for v in (p.min_us, p.max_us, p.p99_us, p.cv_pct)
        )
    return text


def row_line(row: ResultRow, opts: BenchOptions) -> str:
    """One result line (§5.4), without the newline."""
    text = "%12d  %12d  %8s  %6s  %6s" % (row.size, row.count, row.type, row.redop, "%6i" % row.root)
    text += _half_text(row.out_of_place, opts)
    text += _half_text(row.in_place, opts)
    if opts.report_timestamps:
        text += "%21s" % (row.timestamp if row.timestamp is not None else now_string())
    return text


def footer_lines(summary: RunSummary, program: str) -> list[str]:
    """Footer (§5.5): out-of-bounds, average (+ gate), concluded, -M line, `#`, error or empty.
    ncclbench's judgement of the run (`RunSummary.explain_lines`, `#` lines) comes right after the
    average, where a reader looks for the verdict; none with --no-explain."""
    oob = summary.out_of_bounds
    lines = ["# %-20s : %d %s" % ("Out of bounds values", oob, "FAILED" if oob else "OK")]
    gate = ""
    if summary.gate_ok is not None:
        gate = "OK" if summary.gate_ok else "FAILED"
    lines.append("# %-20s : %s %s" % ("Avg bus bandwidth", format_g(summary.avg_busbw), gate))
    lines += summary.explain_lines  # ncclbench's judgement (explain/), before nccl-tests' closing lines
    lines += summary.gate_lines  # --gate: what the gate's latency rounds measured (run/gate_rounds.py)
    lines.append("#")
    lines.append("# Collective test concluded: %s" % program)
    if summary.memory_line:
        mem = summary.memory_line
        lines.append(mem if mem.startswith("#") else "# %-20s : %s" % ("GPU memory usage", mem))
    lines.append("#")
    errors = [e for e in summary.errors if e]
    if errors:
        lines.extend("# error: %s" % e for e in errors)
    else:
        lines.append("")
    return lines


def begin_lines(info: RunInfo, opts: BenchOptions, json_path: str | None = None) -> list[str]:
    """Banner, device lines, memory-clamp note, ncclbench notes and the column header."""
    lines = banner_lines(info, opts, json_path)
    lines += device_lines(info.devices)
    if info.reduced_max_bytes is not None:
        lines += reducing_max_bytes_lines(info.reduced_max_bytes)
    lines += note_lines(info.notes)
    lines += column_header_lines(opts)
    return lines


class TextReporter:
    """Streams nccl-tests' text to `stream`, one flushed line at a time.

    Only the writing process (world rank 0) should own one.  Call
    `set_json_path` (or pass `json_path`) before `begin` when -J is active so
    that the `# Writing JSON output to <path>` line comes first, as in nccl-tests.
    """

    def __init__(self, stream: TextIO, opts: BenchOptions, json_path: str | None = None):
        self.stream = stream
        self.opts = opts
        self.json_path = json_path
        self.program = opts.program
        self._closed = False

    def set_json_path(self, path: str | None) -> None:
        self.json_path = path

    def _write(self, lines: Iterable[str]) -> None:
        if self._closed:
            return
        self.stream.write("".join(line + "\n" for line in lines))
        self.stream.flush()

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        self.opts = opts
        self.program = info.program
        self._write(begin_lines(info, opts, self.json_path))

    def message(self, line: str) -> None:
        self._write([line])

    def row(self, row: ResultRow) -> None:
        self._write([row_line(row, self.opts)])

    def end(self, summary: RunSummary) -> None:
        self._write(footer_lines(summary, self.program))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.stream.flush()
        except (OSError, ValueError):
            pass


def render_run(
    info: RunInfo,
    opts: BenchOptions,
    rows: Iterable[ResultRow],
    summary: RunSummary | None,
    json_path: str | None = None,
) -> str:
    """The whole text of a stored run (no footer when `summary` is None: an interrupted run)."""
    buf = io.StringIO()
    rep = TextReporter(buf, opts, json_path=json_path)
    rep.begin(info, opts)
    for row in rows:
        rep.row(row)
    if summary is not None:
        rep.end(summary)
    rep.close()
    return buf.getvalue()
