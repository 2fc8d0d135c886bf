"""One self-contained HTML file per report: plots inline, metadata in tables.

No scripts, no stylesheets or fonts from elsewhere, no images by URL: the
file opens the same on an air-gapped cluster node as on a laptop, and can be
mailed or attached to a ticket.  The file is written to a temporary name and
renamed, so a reader never sees half a report.
"""

from __future__ import annotations

import dataclasses
import html
import math
import os
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .. import __version__
from ..core.atomic_file import check_output_path, write_atomically
from ..core.config import BenchOptions
from ..core.errors import ArgumentError, BenchError, ExitCode, UnsupportedError
from ..core.results import EXPLAIN_KEY, RunInfo, RunSummary
from ..output.numfmt import now_string
from ..store import summary_stats as stats
from . import plots

_CSS = """
body { font-family: DejaVu Sans, Arial, sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px; }
h3 { font-size: 15px; margin-bottom: 6px; }
table { border-collapse: collapse; margin: 8px 0 16px 0; font-size: 12px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-family: monospace; }
figure { margin: 10px 0 22px 0; } figcaption { font-size: 12px; color: #555; }
.note { font-size: 12px; color: #555; } code, pre { font-size: 12px; }
.status-interrupted, .status-running { color: #b00; font-weight: bold; }
"""


class ReportRun(plots.PlottedRun, Protocol):
    """What the report reads of a run: `store.db.StoredRun` and `store.imported.ImportedRun`
    are the two.  Their `source`, `source_path`, `created_at`, `end_time`, `env` and
    `messages` are shown where a run has them (read with getattr)."""

    @property
    def info(self) -> RunInfo: ...
    @property
    def options(self) -> BenchOptions: ...
    @property
    def summary(self) -> RunSummary | None: ...
    @property
    def status(self) -> str: ...


@dataclass(frozen=True)
class RunJudged:
    """A run's judgement as the report shows it.  The command layer fills it from `explain/`
    (the report draws, it does not judge): the `#` lines, the verdict and the expected ceiling."""

    lines: list[str] = field(default_factory=list)
    verdict: str = ""  # 'as expected', 'below expected', 'above the line rate', 'unknown'
    ceiling: float | None = None  # GB/s busbw
    ceiling_text: str = ""  # 'ceiling (NVLink, Ring predicted)'
    # (size, busbw) a healthy system of this kind reaches at the run's sizes (explain's recorded curve)
    expected: tuple[tuple[int, float], ...] = ()
    expected_text: str = ""  # 'expected (healthy 2x H100 all_gather)'


def _e(v: object) -> str:
    return html.escape("" if v is None else str(v))


def _num(v: float | None, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}"


def _table(headers: list[str] | None, rows: Sequence[Sequence[object]], num_cols: AbstractSet[int] = frozenset()) -> str:
    out = ["<table>"]
    if headers:
        out.append("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr>")
    for r in rows:
        out.append("<tr>" + "".join(
            f'<td class="num">{_e(c)}</td>' if i in num_cols else f"<td>{_e(c)}</td>"
            for i, c in enumerate(r)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _kv(pairs: list[tuple[str, object]]) -> str:
    return _table(None, [[k, v] for k, v in pairs if v not in (None, "", [])])


def _summary_table(runs: Sequence[ReportRun], placement: str, judged: Mapping[str, RunJudged]) -> str:
    rows = []
    for run in runs:
        info = run.info
        series: list[stats.Series | None] = list(stats.series_of(run.rows, placement)) or [None]
        for s in series:
            plateau = stats.plateau_busbw(s) if s else None
            lat = stats.latency_us(s) if s else None
            gpus = sorted({d.device_info for d in info.devices if d.device_info})
            j = judged.get(run.label)
            rows.append([run.label, info.program, s.label if s else "-", run.status, info.nranks,
                         ", ".join(gpus) or "-", ", ".join(info.hosts) or "-", _num(plateau),
                         _num(lat), _num(run.summary.avg_busbw) if run.summary else "-",
                         _num(j.ceiling, 1) if j else "-", (j.verdict or "-") if j else "-",
                         info.start_time or "-"])
    return _table(["run", "test", "series", "status", "ranks", "GPUs", "hosts",
                   "plateau busbw (GB/s)", "latency (us)", "nccl-tests avg busbw", "expected ceiling (GB/s)",
                   "verdict", "start"],
                  rows, {4, 7, 8, 9, 10})


def _options_pairs(opts: BenchOptions) -> list[tuple[str, object]]:
    default = BenchOptions()
    pairs = []
    for f in dataclasses.fields(BenchOptions):
        v = getattr(opts, f.name)
        if f.name in ("argv",) or v == getattr(default, f.name):
            continue
        pairs.append((f.name, v))
    return pairs


def _run_section(run: ReportRun, placement: str, judged: RunJudged | None = None) -> str:
    info, opts = run.info, run.options
    meta = [
        ("run", run.label), ("status", run.status), ("test", info.program),
        ("command", " ".join(info.argv) or None),
        ("source", getattr(run, "source", None)), ("file", getattr(run, "source_path", None)),
        ("stored", getattr(run, "created_at", None)), ("start time", info.start_time),
        ("end time", getattr(run, "end_time", None)), ("backend", info.backend),
        ("tool version", info.version or info.extra.get("nccl_tests_version")),
        ("library", info.library), ("NCCL runtime code", info.nccl_version_code),
        ("NCCL headers code", info.nccl_headers_code), ("processes", info.world_size),
        ("ranks per communicator", info.nranks), ("groups", info.ngroups),
        ("hosts", ", ".join(info.hosts)), ("notes", "; ".join(info.notes)),
    ]
    if run.summary:
        s = run.summary
        meta += [("out of bounds values", s.out_of_bounds),
                 ("nccl-tests avg busbw (all sizes)", _num(s.avg_busbw)),
                 ("errors", "; ".join(e for e in s.errors if e)), ("memory", s.memory_line)]
    parts = [f'<h2 id="{_e(run.label)}">{_e(run.label)}: {_e(info.program)} '
             f'<span class="status-{_e(run.status)}">({_e(run.status)})</span></h2>', _kv(meta)]
    if judged is not None and judged.lines:
        parts += ["<h3>Judgement (ncclbench explain)</h3>", f'<p class="verdict">verdict: {_e(judged.verdict)}</p>',
                  "<pre>" + _e("\n".join(judged.lines)) + "</pre>"]
    if info.devices:
        parts += ["<h3>Devices</h3>", _table(
            ["rank", "group", "pid", "host", "device", "bus id", "name"],
            [[d.rank, d.group, d.pid, d.hostname, d.device, d.device_hex, d.device_info]
             for d in info.devices])]
    opt_pairs = _options_pairs(opts)
    if opt_pairs:
        parts += ["<h3>Options (non-default)</h3>", _kv(opt_pairs)]
    env = getattr(run, "env", None) or {}
    if env:
        parts += ["<h3>Environment (NCCL_*, CUDA_*)</h3>", _kv(sorted(env.items()))]
    extra = {k: v for k, v in info.recorded_extra().items() if v not in (None, "", [], {}) and k != EXPLAIN_KEY}
    if extra:
        parts += ["<h3>Other recorded facts</h3>", _kv(sorted((k, v) for k, v in extra.items()))]
    msgs = getattr(run, "messages", None) or []
    if msgs:
        parts += ["<h3>Messages</h3>", "<pre>" + _e("\n".join(msgs)) + "</pre>"]
    rows = []
    for r in run.rows:
        h = getattr(r, placement)
        p = h.per_iter
        rows.append([r.size, r.count, r.type, r.redop, r.root, _num(h.time_us), _num(h.algbw),
                     _num(h.busbw), "N/A" if h.wrong is None else h.wrong,
                     _num(p.min_us) if p else "", _num(p.max_us) if p else "",
                     _num(p.cv_pct) if p else ""])
    parts += [f"<details><summary>Result rows ({len(rows)}, {placement.replace('_', '-')})</summary>",
              _table(["size (B)", "count", "type", "redop", "root", "time (us)", "algbw (GB/s)",
                      "busbw (GB/s)", "#wrong", "i_min (us)", "i_max (us)", "i_cv (%)"],
                     rows, {0, 1, 4, 5, 6, 7, 8, 9, 10, 11}), "</details>"]
    return "\n".join(parts)


def _ceilings(judged: Mapping[str, RunJudged]) -> dict[str, tuple[float, str]]:
    return {label: (j.ceiling, j.ceiling_text or "expected ceiling") for label, j in judged.items()
            if j.ceiling is not None}


def _expected(judged: Mapping[str, RunJudged]) -> dict[str, tuple[tuple[tuple[int, float], ...], str]]:
    return {label: (j.expected, j.expected_text or "expected") for label, j in judged.items() if j.expected}


def build_report(runs: Sequence[ReportRun], *, title: str | None = None, placement: str = "out_of_place",
                 use_matplotlib: bool | None = None, judged: Mapping[str, RunJudged] | None = None) -> str:
    """The report as one HTML string.  use_matplotlib=None: if it is installed.  `judged`: run
    label -> its judgement (verdict, ceiling drawn on the busbw plot, the explain lines)."""
    if not runs:
        raise ArgumentError("report: no runs given")
    if use_matplotlib is None:
        use_matplotlib = plots.have_matplotlib()
    judged = judged or {}
    specs = plots.build_specs(runs, placement, _ceilings(judged), _expected(judged))
    if not specs:
        raise BenchError("report: the runs hold no rows with a non-zero size to plot",
                         ExitCode.ARGUMENT)
    title = title or "ncclbench report: " + ", ".join(r.label for r in runs)
    figures = []
    for spec in specs:
        figures.append(f'<figure id="plot-{spec.name}">{plots.svg_for(spec, use_matplotlib)}'
                       f"<figcaption>{_e(spec.caption)}</figcaption></figure>")
    drawn = "matplotlib" if use_matplotlib else "built-in SVG (matplotlib not installed)"
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="note">Generated {_e(now_string())} by ncclbench '
        f"{_e(__version__)}; plots drawn with {_e(drawn)}; {_e(placement.replace('_', '-'))} "
        "columns.</p>",
        "<h2>Summary</h2>", _summary_table(runs, placement, judged),
        f'<p class="note">{_e(stats.PLATEAU_DEFINITION)}; {_e(stats.LATENCY_DEFINITION)} '
        f"{_e(stats.FOOTER_NOTE)}. Rows of size 0 are not plotted.</p>",
        "<h2>Plots</h2>", *figures,
        *(_run_section(r, placement, judged.get(r.label)) for r in runs),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_report(runs: Sequence[ReportRun], output: str | os.PathLike[str], *, png: bool = False, title: str | None = None,
                 placement: str = "out_of_place", use_matplotlib: bool | None = None,
                 judged: Mapping[str, RunJudged] | None = None) -> list[Path]:
    """Write the HTML (and with png=True one PNG per plot next to it); return the paths."""
    out = Path(output)
    check_output_path(out, "report -o", "like report.html")
    if png and not plots.have_matplotlib():
        raise UnsupportedError("report --png needs matplotlib: pip install 'ncclbench[plot]'")
    text = build_report(runs, title=title, placement=placement, use_matplotlib=use_matplotlib, judged=judged)
    written = []
    try:
        write_atomically(out, text)  # mode as open() gives it: a report is meant to be shared
        written.append(out)
        if png:
            stem = out.with_suffix("") if out.suffix.lower() in (".html", ".htm") else out
            for spec in plots.build_specs(runs, placement, _ceilings(judged or {}), _expected(judged or {})):
                p = Path(f"{stem}-{spec.name}.png")
                tmp = p.with_name(f".{p.name}.tmp")
                plots.mpl_png(spec, str(tmp))
                os.replace(tmp, p)
                written.append(p)
    except OSError as e:
        raise BenchError(f"report: cannot write {e.filename or out}: {e.strerror or e}",
                         ExitCode.ARGUMENT) from None
    return written
