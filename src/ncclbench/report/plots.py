"""Plots of busbw and time against message size, several runs overlaid.

matplotlib (the optional `plot` extra) draws them as SVG with text turned
into paths, so the SVG needs no fonts and no network; PNG for `--png`.  When
matplotlib is missing, `svg_plot` draws the same plot as a small hand-made
SVG, so a report never needs more than the core install.

Sizes use a log2 axis labelled in B/KiB/MiB/GiB; time uses a log axis;
busbw a linear one (the plateau is what people read off it).  Where runs
recorded per-iteration statistics (-I), the min..max band is shaded, and
extra plots show the iteration CV and the per-process spread.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

from ..output.numfmt import human_size
from ..store import summary_stats as stats

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..core.results import ResultRow

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


class PlottedRun(Protocol):
    """What a plot reads of a run (a stored or an imported one): its label and its rows."""

    @property
    def label(self) -> str: ...
    @property
    def rows(self) -> list[ResultRow]: ...


@dataclass
class Line:
    label: str
    color: str
    x: list[int]
    y: list[float]
    lo: list[float] | None = None  # shaded band (per-iteration min..max), same length as x
    hi: list[float] | None = None
    dashed: bool = False  # an expectation drawn beside a measured line (no markers)


@dataclass
class RefLine:
    """A horizontal reference: a run's expected busbw ceiling (dashed, in its run's colour)."""

    label: str
    color: str
    y: float


@dataclass
class PlotSpec:
    name: str  # file-name friendly: busbw, time, cv, procspread
    title: str
    ylabel: str
    ylog: bool
    lines: list[Line] = field(default_factory=list)
    caption: str = ""
    refs: list[RefLine] = field(default_factory=list)


def size_label(n: float) -> str:
    """Axis label of the power of two nearest to `n` (ticks are powers of two)."""
    return human_size(2 ** (int(round(math.log2(n))) if n > 0 else 0))


def size_ticks(lo: int, hi: int) -> list[int]:
    """Powers of two spanning [lo, hi], at most ~10 of them, on round units when thinned."""
    klo, khi = math.floor(math.log2(max(lo, 1))), math.ceil(math.log2(max(hi, 1)))
    span = max(khi - klo, 1)
    step = next(s for s in (1, 2, 5, 10, 20) if span / s <= 10)
    start = klo + (-klo) % step
    return [2 ** k for k in range(start, khi + 1, step)]


def build_specs(runs: Sequence[PlottedRun], placement: str = "out_of_place",
                ceilings: Mapping[str, tuple[float, str]] | None = None,
                expected: Mapping[str, tuple[Sequence[tuple[int, float]], str]] | None = None) -> list[PlotSpec]:
    """One line per (run, series); the plots that have data.  `ceilings`: run label -> (expected
    busbw ceiling GB/s, what it is), drawn as a dashed line on the busbw plot; `expected`: run label ->
    ((size, busbw a healthy system of its kind reaches there), what it is), drawn dashed beside the run."""
    busbw = PlotSpec("busbw", "Bus bandwidth", "busbw (GB/s)", False,
                     caption="busbw against message size (log2 axis); shaded: range implied by "
                             "per-iteration min..max time, where recorded.")
    time = PlotSpec("time", "Time per operation", "time (us)", True,
                    caption="time against message size, both axes logarithmic; shaded: "
                            "per-iteration min..max, where recorded.")
    cv = PlotSpec("cv", "Per-iteration variation", "CV of iteration times (%)", False,
                  caption="coefficient of variation of the per-iteration times (-I).")
    procs = PlotSpec("procspread", "Per-process spread", "(slowest - fastest) / fastest (%)", False,
                     caption="spread of the per-process mean iteration time (-I with several "
                             "processes): how far the slowest process lags the fastest.")
    n = 0
    for run in runs:
        series = stats.series_of(run.rows, placement)
        for s in series:
            label = run.label if len(series) == 1 else f"{run.label} {s.label}"
            color = PALETTE[n % len(PALETTE)]
            n += 1
            pts = [p for p in s.points if p.size > 0]
            if not pts:
                continue
            x = [p.size for p in pts]
            band = all(p.t_min_us and p.t_max_us and p.t_min_us > 0 for p in pts)
            bl = Line(label, color, x, [p.busbw for p in pts])
            tl = Line(label, color, x, [p.time_us for p in pts])
            if band:
                # busbw ~ 1/time: scale the point by the time ratio at either end of the range.
                t_min = [cast(float, p.t_min_us) for p in pts]  # all set: `band`
                t_max = [cast(float, p.t_max_us) for p in pts]
                bl.lo = [p.busbw * p.time_us / t for p, t in zip(pts, t_max)]
                bl.hi = [p.busbw * p.time_us / t for p, t in zip(pts, t_min)]
                tl.lo, tl.hi = t_min, t_max
            busbw.lines.append(bl)
            curve = (expected or {}).get(run.label)
            if curve is not None and curve[0] and not any(ln.label == f"{run.label} {curve[1]}" for ln in busbw.lines):
                busbw.lines.append(Line(f"{run.label} {curve[1]}", color, [p[0] for p in curve[0]],
                                        [p[1] for p in curve[0]], dashed=True))
            time.lines.append(tl)
            ceiling = (ceilings or {}).get(run.label)
            if ceiling is not None and not any(r.label.startswith(run.label + " ") for r in busbw.refs):
                busbw.refs.append(RefLine(f"{run.label} {ceiling[1]}", color, ceiling[0]))
            if any(p.spread_pct for p in pts) and band:
                cv.lines.append(Line(label, color, x, [p.spread_pct for p in pts]))
            per_process = [p.per_process_us for p in pts]
            if all(pp and len(pp) > 1 for pp in per_process):
                procs.lines.append(Line(label, color, x, [
                    100.0 * (max(pp) - min(pp)) / min(pp) if min(pp) > 0 else math.nan
                    for pp in cast(list[list[float]], per_process)]))
    return [spec for spec in (busbw, time, cv, procs) if spec.lines]


# ---------------------------------------------------------------- matplotlib

def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _mpl_figure(spec: PlotSpec) -> Figure:
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, NullLocator

    fig = Figure(figsize=(9, 4.6), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    xs = [v for line in spec.lines for v in line.x]
    for line in spec.lines:
        if line.lo and line.hi:
            ax.fill_between(line.x, line.lo, line.hi, color=line.color, alpha=0.18, linewidth=0)
        if line.dashed:
            ax.plot(line.x, line.y, linestyle="--", linewidth=1.4, color=line.color, label=line.label)
        else:
            ax.plot(line.x, line.y, marker="o", markersize=3.5, linewidth=1.8, color=line.color,
                    label=line.label)
    for ref in spec.refs:
        ax.axhline(ref.y, linestyle="--", linewidth=1.4, color=ref.color, label=ref.label)
    ax.set_xscale("log", base=2)
    if spec.ylog:
        ax.set_yscale("log")
    ticks = size_ticks(min(xs), max(xs))
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(ticks, [size_label(t) for t in ticks], rotation=30, ha="right")
    ax.set_xlim(min(xs) / 1.3, max(xs) * 1.3)
    ax.set_xlabel("message size")
    ax.set_ylabel(spec.ylabel)
    ax.set_title(spec.title)
    ax.grid(True, which="major", alpha=0.35)
    if not spec.ylog:
        ax.set_ylim(bottom=0)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def mpl_svg(spec: PlotSpec) -> str:
    import matplotlib

    fig = _mpl_figure(spec)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE (which names an URL)
    return svg


def mpl_png(spec: PlotSpec, path: str) -> None:
    fig = _mpl_figure(spec)
    fig.savefig(path, format="png", dpi=110)


# ---------------------------------------------------------------- no-dependency SVG

def _nice_linear_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 2) if start + i * step <= hi * 1.0001]


@dataclass(frozen=True)
class _Frame:
    """The plot area inside its margins and the axes' ranges: log2 of the size across, busbw (or
    log10 of it) up; maps a point to its position."""

    width: int
    height: int
    x0: float
    x1: float
    y0: float
    y1: float
    decades: range  # log axis: the powers of ten to label
    ylog: bool
    ml: int = 75
    mr: int = 20
    mt: int = 40
    mb: int = 75

    @property
    def pw(self) -> int:
        return self.width - self.ml - self.mr

    @property
    def ph(self) -> int:
        return self.height - self.mt - self.mb

    def px(self, v: float) -> float:
        return self.ml + (math.log2(v) - self.x0) / (self.x1 - self.x0) * self.pw

    def py(self, v: float) -> float:
        t = (math.log10(v) - self.y0) / (self.y1 - self.y0) if self.ylog else (v - self.y0) / (self.y1 - self.y0)
        return self.mt + self.ph - t * self.ph

    def ok(self, v: float | None) -> bool:
        """Whether a value can be drawn: known, and above 0 on a log axis."""
        return v is not None and not math.isnan(v) and (v > 0 or not self.ylog)


def _frame(spec: PlotSpec, width: int, height: int) -> _Frame:
    """The axes' ranges: the sizes with some room either side; from 0 (or the decade below the
    lowest value on a log axis) to a little above the highest value, bands and references included."""
    xs = [v for line in spec.lines for v in line.x]
    ys = [v for line in spec.lines for seq in (line.y, line.lo or [], line.hi or [])
          for v in seq if v is not None and not math.isnan(v) and (v > 0 or not spec.ylog)]
    ys += [r.y for r in spec.refs if r.y > 0 or not spec.ylog]
    x0, x1 = math.log2(min(xs)) - 0.4, math.log2(max(xs)) + 0.4
    y0: float
    y1: float
    decades = range(0)
    if spec.ylog:
        d0 = math.floor(math.log10(min(ys))) if ys else 0
        d1 = max(math.ceil(math.log10(max(ys))) if ys else 1, d0 + 1)
        y0, y1, decades = d0, d1, range(d0, d1 + 1)
    else:
        y0, y1 = 0.0, (max(ys) * 1.08 if ys and max(ys) > 0 else 1.0)
    return _Frame(width, height, x0, x1, y0, y1, decades, spec.ylog)


def _axes_svg(spec: PlotSpec, f: _Frame) -> list[str]:
    """The document's start, the title, the grid with its tick labels, the frame and axis labels."""
    e = html.escape
    ml, mt, pw, ph, width, height = f.ml, f.mt, f.pw, f.ph, f.width, f.height
    xs = [v for line in spec.lines for v in line.x]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" '
           f'font-size="11">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
           f'<text x="{ml + pw / 2}" y="22" text-anchor="middle" font-size="14">{e(spec.title)}</text>']
    yticks = [10.0 ** k for k in f.decades] if spec.ylog else _nice_linear_ticks(f.y0, f.y1)
    for t in yticks:
        y = f.py(t)
        out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#dddddd"/>')
        lab = (f"{t:g}" if spec.ylog else (f"{t:.0f}" if t == int(t) else f"{t:g}"))
        out.append(f'<text x="{ml - 6}" y="{y + 4:.1f}" text-anchor="end">{lab}</text>')
    for t in size_ticks(min(xs), max(xs)):
        x = f.px(t)
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#dddddd"/>')
        out.append(f'<text x="{x:.1f}" y="{mt + ph + 16}" text-anchor="end" '
                   f'transform="rotate(-30 {x:.1f} {mt + ph + 16})">{e(size_label(t))}</text>')
    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#333333"/>')
    out.append(f'<text x="{ml + pw / 2}" y="{height - 12}" text-anchor="middle">message size</text>')
    out.append(f'<text x="16" y="{mt + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {mt + ph / 2})">{e(spec.ylabel)}</text>')
    return out


def _curves_svg(spec: PlotSpec, f: _Frame) -> list[str]:
    """Each line with its band (lo..hi) and points, then the reference lines."""
    out = []
    for line in spec.lines:
        if line.lo and line.hi:
            upper = [(f.px(x), f.py(v)) for x, v in zip(line.x, line.hi) if f.ok(v)]
            lower = [(f.px(x), f.py(v)) for x, v in zip(line.x, line.lo) if f.ok(v)]
            if upper and lower:
                polygon = " ".join(f"{a:.1f},{b:.1f}" for a, b in upper + lower[::-1])
                out.append(f'<polygon points="{polygon}" fill="{line.color}" fill-opacity="0.18"/>')
        pts = [(f.px(x), f.py(v)) for x, v in zip(line.x, line.y) if f.ok(v)]
        dash = ' stroke-dasharray="6,4"' if line.dashed else ""
        if pts:
            out.append(f'<polyline fill="none" stroke="{line.color}" stroke-width="2"{dash} points="'
                       + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
            if not line.dashed:
                out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{line.color}"/>' for a, b in pts]
    for ref in spec.refs:
        y = f.py(ref.y)
        out.append(f'<line x1="{f.ml}" y1="{y:.1f}" x2="{f.ml + f.pw}" y2="{y:.1f}" stroke="{ref.color}" '
                   f'stroke-width="1.5" stroke-dasharray="6,4"/>')
    return out


def _legend_svg(spec: PlotSpec, f: _Frame) -> list[str]:
    """One entry per line, then per reference, down the top left corner of the plot area."""
    e, ml = html.escape, f.ml
    out = []
    ly = f.mt + 10
    for line in spec.lines:
        out.append(f'<line x1="{ml + 10}" y1="{ly}" x2="{ml + 30}" y2="{ly}" stroke="{line.color}" '
                   f'stroke-width="2"{dash_of(line)}/>')
        out.append(f'<text x="{ml + 36}" y="{ly + 4}">{e(line.label)}</text>')
        ly += 16
    for ref in spec.refs:
        out.append(f'<line x1="{ml + 10}" y1="{ly}" x2="{ml + 30}" y2="{ly}" stroke="{ref.color}" '
                   f'stroke-width="1.5" stroke-dasharray="6,4"/>')
        out.append(f'<text x="{ml + 36}" y="{ly + 4}">{e(ref.label)}</text>')
        ly += 16
    return out


def svg_plot(spec: PlotSpec, width: int = 900, height: int = 460) -> str:
    """The same plot as `mpl_svg`, hand-drawn: axes, grid, ticks, bands, lines, legend."""
    f = _frame(spec, width, height)
    out = _axes_svg(spec, f) + _curves_svg(spec, f) + _legend_svg(spec, f)
    out.append("</svg>")
    return "\n".join(out)


def dash_of(line: Line) -> str:
    return ' stroke-dasharray="6,4"' if line.dashed else ""


def svg_for(spec: PlotSpec, use_matplotlib: bool) -> str:
    return mpl_svg(spec) if use_matplotlib else svg_plot(spec)


_EXTERNAL = re.compile(r"""(?:\b(?:src|href)\s*=\s*["']?\s*(?:https?:|ftp:|//))|url\(\s*["']?\s*(?:https?:|//)"""
                       r"""|@import""", re.IGNORECASE)


def external_references(text: str) -> list[str]:
    """Anything in an HTML/SVG text that a browser would fetch from the network."""
    return [m.group(0) for m in _EXTERNAL.finditer(text)]
