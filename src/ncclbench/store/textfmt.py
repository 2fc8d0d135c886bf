"""Re-render a stored run as the nccl-tests text table (behaviour spec §5).

`ncclbench show` prefers `ncclbench.output.text.render_run` (the live run's
own formatter) when that module is present, and uses this one otherwise, so
a stored run reprints exactly like the log it came from.  Same signature;
`summary=None` (an interrupted run) prints no footer.
"""

from __future__ import annotations

import math

from ..config import BenchOptions
from ..results import HalfResult, ResultRow, RunInfo, RunSummary

_HEAD1 = "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place" + " " * 10
_HEAD1_I = "#" + " " * 65 + "out-of-place (+ per-iteration)" + " " * 32 + "in-place (+ per-iteration)"


def fmt_value(v: float, width: int) -> str:
    """2 decimals if they fit, else 1, else 0, else exponent form, cut to width (spec §5.4)."""
    if v is None or math.isnan(v):
        return "nan".rjust(width)
    for digits in (2, 1, 0):
        s = f"{v:.{digits}f}"
        if len(s) <= width:
            return s.rjust(width)
    s = f"{v:.{1 if width >= 7 else 0}e}"
    return s[:width].rjust(width)


def _g(v: float) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return "%g" % v


def _header(opts: BenchOptions) -> list[str]:
    tlabel = "cputime" if opts.report_cputime else "time"
    line2 = "#%11s  %12s  %8s  %6s  %6s" % ("size", "count", "type", "redop", "root")
    line3 = "#%11s  %12s  %8s  %6s  %6s" % ("(B)", "(elements)", "", "", "")
    for _ in range(2):
        line2 += "  %7s  %6s  %6s  %6s" % (tlabel, "algbw", "busbw", "#wrong")
        line3 += "  %7s  %6s  %6s  %6s" % ("(us)", "(GB/s)", "(GB/s)", "")
        if opts.per_iter_timing:
            line2 += "  %7s  %7s  %7s  %7s" % ("i_min", "i_max", "i_p99", "i_cv%")
            line3 += "  %7s  %7s  %7s  %7s" % ("(us)", "(us)", "(us)", "(%)")
    line2 += " "
    line3 += " "
    if opts.report_timestamps:
        line2 += "%19s" % "timestamp"
        line3 += "%19s" % "%Y-%m-%d %H:%M:%S"
    return ["#", _HEAD1_I if opts.per_iter_timing else _HEAD1, line2, line3]


def _half(h: HalfResult, opts: BenchOptions) -> str:
    t = h.cpu_time_us if opts.report_cputime and not math.isnan(h.cpu_time_us) else h.time_us
    s = "  " + fmt_value(t, 7) + "  " + fmt_value(h.algbw, 6) + "  " + fmt_value(h.busbw, 6)
    s += "    N/A" if h.wrong is None else "  %6g" % h.wrong
    if opts.per_iter_timing:
        p = h.per_iter
        vals = (p.min_us, p.max_us, p.p99_us, p.cv_pct) if p else (math.nan,) * 4
        s += "".join("  " + fmt_value(v, 7) for v in vals)
    return s


def render_row(row: ResultRow, opts: BenchOptions) -> str:
    line = "%12d  %12d  %8s  %6s  %6d" % (row.size, row.count, row.type, row.redop, row.root)
    line += _half(row.out_of_place, opts) + _half(row.in_place, opts)
    if opts.report_timestamps and row.timestamp:
        line += "%21s" % row.timestamp
    return line


def _banner(info: RunInfo, opts: BenchOptions) -> list[str]:
    version = info.extra.get("nccl_tests_version") or "2.19.6"
    out = []
    if opts.json_enabled and info.backend == "nccl-tests" and info.extra.get("format") == "text":
        out.append(f"# Writing JSON output to {opts.output_file}")
    out.append(f"# nccl-tests version {version} nccl-headers={info.nccl_headers_code or 0} "
               f"nccl-library={info.nccl_version_code or 0}")
    out.append(f"# Collective test starting: {info.program}")
    step = f"{opts.step_factor}(factor)" if opts.step_factor > 1 else f"{opts.step_bytes}(bytes)"
    out.append(f"# nThread {opts.nthreads} nGpus {opts.ngpus} minBytes {opts.min_bytes} "
               f"maxBytes {opts.max_bytes} step: {step} warmup iters: {opts.warmup_iters} "
               f"iters: {opts.iters} agg iters: {opts.agg_iters} validation: {opts.check} "
               f"graph: {opts.cudagraph} unalign: {opts.unalign}")
    if opts.blocking == 1:
        out.append("# Blocking Enabled: wait and barrier after each inner iteration (-m) ")
    elif opts.blocking == 2:
        out.append("# Blocking Enabled: wait after each inner iteration (-m), no barrier ")
    elif opts.blocking == 3:
        out.append("# Blocking Enabled: wait and barrier after each outer iteration (-n); "
                   "time excludes barrier ")
    if opts.per_iter_timing:
        skip = f"; summary skips first {opts.per_iter_skip} iterations" if opts.per_iter_skip else ""
        out.append("# Per-Iteration Report: CUDA event timing; i_* uses max over process rows"
                   + skip + " ")
    if opts.parallel_init:
        out.append("# Parallel Init Enabled: threads call into NcclInitRank concurrently ")
    out += ["#", "# Using devices"]
    for d in info.devices:
        out.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s"
                   % (d.rank, d.group, d.pid, d.hostname, d.device, d.device_hex, d.device_info))
    return out


def render_run(info: RunInfo, opts: BenchOptions, rows: list[ResultRow],
               summary: RunSummary | None) -> str:
    lines = _banner(info, opts) + _header(opts) + [render_row(r, opts) for r in rows]
    if summary is not None:
        oob = summary.out_of_bounds
        lines.append(f"# {'Out of bounds values':<20} : {oob} {'OK' if oob == 0 else 'FAILED'}")
        gate = "" if summary.gate_ok is None else ("OK" if summary.gate_ok else "FAILED")
        lines.append(f"# {'Avg bus bandwidth':<20} : {_g(summary.avg_busbw)} {gate}")
        lines += ["#", f"# Collective test concluded: {info.program}"]
        if summary.memory_line:
            lines.append(summary.memory_line)
        lines.append("#")
        err = next((e for e in summary.errors if e), "")
        lines.append(f"# error: {err}" if err else "")
    return "\n".join(lines) + "\n"
