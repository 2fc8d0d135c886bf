"""Compare two runs size by size, and the regression gate built on it.

Sizes are matched within series of the same (type, op, root).  A change
counts only when it is larger than the noise: max(2%, the per-iteration CV
or -N spread either run recorded at that size, the resolution of the
printed numbers).  The gate fails when busbw at the large sizes (the
baseline's plateau sizes) drops, or time at small sizes (<= 64 KiB) rises,
by more than the user's limit *and* more than the noise.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field
from typing import Protocol

from ..config import BenchOptions
from ..errors import ArgumentError, ExitCode
from ..results import ResultRow, RunInfo, RunSummary
from . import stats
from .stats import Point, Series


class RunLike(Protocol):
    """A stored or imported run, as read here (read-only: attributes or properties)."""

    @property
    def label(self) -> str: ...
    @property
    def info(self) -> RunInfo: ...
    @property
    def options(self) -> BenchOptions: ...
    @property
    def rows(self) -> list[ResultRow]: ...
    @property
    def summary(self) -> RunSummary | None: ...
    @property
    def status(self) -> str: ...


@dataclass
class SizeDelta:
    size: int
    a: Point | None
    b: Point | None
    busbw_delta: float | None = None  # percent, (B - A) / A
    time_delta: float | None = None
    busbw_noise: float | None = None
    time_noise: float | None = None

    @property
    def busbw_beyond(self) -> bool:
        return self.busbw_delta is not None and abs(self.busbw_delta) > self.busbw_noise

    @property
    def time_beyond(self) -> bool:
        return self.time_delta is not None and abs(self.time_delta) > self.time_noise

    @property
    def verdict(self) -> str:
        """Judged on time: busbw is derived from it and printed with fewer digits."""
        if not self.time_beyond:
            return ""
        return "SLOWER" if self.time_delta > 0 else "faster"


@dataclass
class SeriesComparison:
    label: str
    key_a: tuple
    key_b: tuple
    sizes: list[SizeDelta]
    plateau_sizes: list[int]
    latency_sizes: list[int]
    plateau_a: float | None
    plateau_b: float | None
    latency_a: float | None
    latency_b: float | None

    @property
    def plateau_delta(self) -> float | None:
        return stats.delta_pct(self.plateau_a, self.plateau_b)

    @property
    def latency_delta(self) -> float | None:
        return stats.delta_pct(self.latency_a, self.latency_b)


@dataclass
class Comparison:
    a_label: str
    b_label: str
    a_desc: str
    b_desc: str
    placement: str
    series: list[SeriesComparison]
    warnings: list[str] = field(default_factory=list)


def describe(run: RunLike) -> str:
    info = run.info
    bits = [info.program, f"{info.nranks} rank{'s' if info.nranks != 1 else ''}"]
    gpus = sorted({d.device_info for d in info.devices if d.device_info})
    if gpus:
        bits.append(", ".join(gpus))
    if info.start_time:
        bits.append(info.start_time)
    if run.status != "complete":
        bits.append(run.status)
    return f"{run.label} ({'; '.join(bits)})"


def _match(sa: list[Series], sb: list[Series], warnings: list[str],
           fuzzy: bool = True) -> list[tuple[Series, Series]]:
    bykey = {s.key: s for s in sb}
    pairs = [(s, bykey[s.key]) for s in sa if s.key in bykey]
    if fuzzy and not pairs and len(sa) == 1 and len(sb) == 1:
        warnings.append(f"series differ: comparing {sa[0].label} with {sb[0].label}")
        pairs = [(sa[0], sb[0])]
    matched_a = {a.key for a, _ in pairs}
    matched_b = {b.key for _, b in pairs}
    for s in sa:
        if s.key not in matched_a:
            warnings.append(f"{s.label}: only in A")
    for s in sb:
        if s.key not in matched_b:
            warnings.append(f"{s.label}: only in B")
    return pairs


def compare_runs(a: RunLike, b: RunLike, placement: str = "out_of_place", *,
                 strict: bool = False) -> Comparison:
    """strict (the gate): the same collective, series matched by (type, op, root) only."""
    if strict and a.options.collective != b.options.collective:
        raise ArgumentError(f"cannot check {b.label} ({b.info.program}) against {a.label} "
                            f"({a.info.program}): different collectives")
    warnings = []
    if a.info.program != b.info.program:
        warnings.append(f"different tests: {a.info.program} vs {b.info.program}")
    if a.info.nranks != b.info.nranks:
        warnings.append(f"different rank counts: {a.info.nranks} vs {b.info.nranks}")
    if a.options.report_cputime != b.options.report_cputime:
        warnings.append("one run reports cputime (-C), the other completion time")
    for r in (a, b):
        if r.status != "complete":
            warnings.append(f"{r.label} is {r.status}: only its recorded sizes are compared")
    out = []
    for sa, sb in _match(stats.series_of(a.rows, placement), stats.series_of(b.rows, placement),
                         warnings, fuzzy=not strict):
        sizes = sorted(set(sa.sizes) | set(sb.sizes))
        deltas = []
        for size in sizes:
            pa, pb = sa.point(size), sb.point(size)
            d = SizeDelta(size, pa, pb)
            if pa and pb:
                d.busbw_delta = stats.delta_pct(pa.busbw, pb.busbw)
                d.time_delta = stats.delta_pct(pa.time_us, pb.time_us)
                d.busbw_noise = stats.noise_pct(pa, pb, "busbw")
                d.time_noise = stats.noise_pct(pa, pb, "time")
            deltas.append(d)
        common = sorted(set(sa.sizes) & set(sb.sizes))
        psizes = [s for s in stats.plateau_sizes(sa.sizes) if s in common]
        lsizes = [s for s in stats.latency_sizes(common)]
        label = sa.label if sa.key == sb.key else f"{sa.label} vs {sb.label}"
        out.append(SeriesComparison(
            label, sa.key, sb.key, deltas, psizes, lsizes,
            stats.plateau_busbw(sa, psizes), stats.plateau_busbw(sb, psizes),
            stats.latency_us(sa, lsizes), stats.latency_us(sb, lsizes)))
    if not any(d.a and d.b for sc in out for d in sc.sizes):
        raise ArgumentError(f"nothing to compare: {a.label} and {b.label} have no "
                            f"{'series and ' if not out else ''}sizes in common")
    return Comparison(a.label, b.label, describe(a), describe(b), placement, out, warnings)


# ---------------------------------------------------------------- formatting

def _pct(v: float | None, mark: bool = False) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:+.1f}%" + ("*" if mark else "")


def _v(v: float | None) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:.2f}"


def _summary_lines(sc: SeriesComparison) -> list[str]:
    lines = []
    if sc.plateau_sizes:
        lines.append(f"  plateau busbw ({len(sc.plateau_sizes)} sizes, "
                     f"{stats.human_size(sc.plateau_sizes[0])}..{stats.human_size(sc.plateau_sizes[-1])})"
                     f": {_v(sc.plateau_a)} -> {_v(sc.plateau_b)} GB/s ({_pct(sc.plateau_delta)})")
    if sc.latency_sizes:
        lines.append(f"  latency ({len(sc.latency_sizes)} sizes, "
                     f"{stats.human_size(sc.latency_sizes[0])}..{stats.human_size(sc.latency_sizes[-1])})"
                     f": {_v(sc.latency_a)} -> {_v(sc.latency_b)} us ({_pct(sc.latency_delta)})")
    return lines


def format_comparison(c: Comparison) -> str:
    place = c.placement.replace("_", "-")
    lines = [f"A = {c.a_desc}", f"B = {c.b_desc}",
             f"{place}; delta = (B - A) / A; '*' = beyond noise (max of 2%, per-iteration CV "
             "or -N spread, printed resolution)"]
    lines += [f"warning: {w}" for w in c.warnings]
    head = "%12s  %9s  %9s  %8s  %9s  %9s  %8s  %6s  %s" % (
        "size", "busbw A", "busbw B", "delta", "time A", "time B", "delta", "noise", "")
    for sc in c.series:
        lines += ["", f"# {sc.label}", head.rstrip()]
        for d in sc.sizes:
            a, b = d.a, d.b
            lines.append(("%12d  %9s  %9s  %8s  %9s  %9s  %8s  %6s  %s" % (
                d.size, _v(a.busbw if a else None), _v(b.busbw if b else None),
                _pct(d.busbw_delta, d.busbw_beyond), _v(a.time_us if a else None),
                _v(b.time_us if b else None), _pct(d.time_delta, d.time_beyond),
                "-" if d.time_noise is None else f"{d.time_noise:.1f}%", d.verdict)).rstrip())
        lines += _summary_lines(sc)
    lines += ["", f"Summaries: {stats.PLATEAU_DEFINITION}; {stats.LATENCY_DEFINITION} "
              f"{stats.FOOTER_NOTE}."]
    return "\n".join(lines) + "\n"


def comparison_to_dict(c: Comparison) -> dict:
    def point(p: Point | None):
        return None if p is None else {"busbw": _nn(p.busbw), "time_us": _nn(p.time_us),
                                       "spread_pct": p.spread_pct}
    return {
        "a": c.a_desc, "b": c.b_desc, "placement": c.placement, "warnings": c.warnings,
        "definitions": {"plateau": stats.PLATEAU_DEFINITION, "latency": stats.LATENCY_DEFINITION},
        "series": [{
            "label": sc.label, "plateau_sizes": sc.plateau_sizes, "latency_sizes": sc.latency_sizes,
            "plateau_busbw": [sc.plateau_a, sc.plateau_b], "plateau_delta_pct": sc.plateau_delta,
            "latency_us": [sc.latency_a, sc.latency_b], "latency_delta_pct": sc.latency_delta,
            "sizes": [{"size": d.size, "a": point(d.a), "b": point(d.b),
                       "busbw_delta_pct": d.busbw_delta, "time_delta_pct": d.time_delta,
                       "noise_pct": d.time_noise, "beyond_noise": d.time_beyond,
                       "verdict": d.verdict.lower() or None} for d in sc.sizes],
        } for sc in c.series],
    }


def _nn(v: float) -> float | None:
    return None if v is None or math.isnan(v) else v


# ---------------------------------------------------------------- gate

@dataclass
class GateFailure:
    series: str
    size: int
    metric: str  # 'busbw' (large sizes) or 'time' (small sizes)
    baseline: float
    value: float
    delta_pct: float
    limit_pct: float  # the effective limit: max(user limit, noise)


@dataclass
class GateResult:
    comparison: Comparison
    max_drop_pct: float
    max_rise_pct: float
    failures: list[GateFailure]
    checked: int  # (series, size) pairs checked

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failing_sizes(self) -> list[int]:
        return sorted({f.size for f in self.failures})


def gate(run: RunLike, baseline: RunLike, max_drop_pct: float = 5.0,
         max_rise_pct: float | None = None, placement: str = "out_of_place") -> GateResult:
    """Fail on busbw drops at the baseline's plateau sizes and on time rises at
    sizes <= 64 KiB, each beyond max(limit, noise)."""
    max_rise_pct = max_drop_pct if max_rise_pct is None else max_rise_pct
    c = compare_runs(baseline, run, placement, strict=True)
    failures, checked = [], 0
    for sc in c.series:
        for d in sc.sizes:
            if not (d.a and d.b):
                continue
            if d.size in sc.plateau_sizes and d.busbw_delta is not None:
                checked += 1
                limit = max(max_drop_pct, d.busbw_noise)
                if d.busbw_delta < -limit:
                    failures.append(GateFailure(sc.label, d.size, "busbw", d.a.busbw, d.b.busbw,
                                                d.busbw_delta, limit))
            if d.size in sc.latency_sizes and d.time_delta is not None:
                checked += 1
                limit = max(max_rise_pct, d.time_noise)
                if d.time_delta > limit:
                    failures.append(GateFailure(sc.label, d.size, "time", d.a.time_us, d.b.time_us,
                                                d.time_delta, limit))
    if checked == 0:
        raise ArgumentError(f"nothing to check: {run.label} and the baseline share no sizes "
                            "<= 64 KiB and none of the baseline's large sizes")
    return GateResult(c, max_drop_pct, max_rise_pct, failures, checked)


def format_gate(g: GateResult, baseline_name: str | None = None) -> str:
    c = g.comparison
    base = f"baseline '{baseline_name}' = {c.a_desc}" if baseline_name else f"baseline {c.a_desc}"
    lines = [f"check: {c.b_desc}", f"against {base}",
             f"{c.placement.replace('_', '-')}; fails when busbw at large sizes drops more than "
             f"{g.max_drop_pct:g}% or time at sizes <= 64 KiB rises more than {g.max_rise_pct:g}% "
             "(and beyond noise)"]
    lines += [f"warning: {w}" for w in c.warnings]
    for sc in c.series:
        lines.append(f"# {sc.label}")
        lines += _summary_lines(sc)
    for f in g.failures:
        what = ("busbw dropped", "GB/s") if f.metric == "busbw" else ("time rose", "us")
        lines.append(f"REGRESSION {f.series}: {what[0]} at {f.size} B ({stats.human_size(f.size)}): "
                     f"{f.baseline:.2f} -> {f.value:.2f} {what[1]} ({f.delta_pct:+.1f}%, "
                     f"limit {f.limit_pct:.1f}%)")
    if g.ok:
        lines.append(f"result: OK ({g.checked} size checks within limits)")
    else:
        lines.append("result: REGRESSION at sizes " + ", ".join(str(s) for s in g.failing_sizes))
    lines.append(f"Summaries: {stats.PLATEAU_DEFINITION}; {stats.LATENCY_DEFINITION} "
                 f"{stats.FOOTER_NOTE}.")
    return "\n".join(lines) + "\n"


def gate_to_dict(g: GateResult) -> dict:
    return {"ok": g.ok, "max_drop_pct": g.max_drop_pct, "max_rise_pct": g.max_rise_pct,
            "failing_sizes": g.failing_sizes, "failures": [asdict(f) for f in g.failures],
            "comparison": comparison_to_dict(g.comparison)}


def check_against_baseline(store, run_id: int, name: str, max_drop_pct: float = 5.0,
                           max_rise_pct: float | None = None,
                           placement: str = "out_of_place") -> GateResult:
    """For `ncclbench <test> --baseline NAME`: gate a just-stored run."""
    base_id = store.get_baseline(name)
    if base_id is None:
        raise ArgumentError(f"no baseline named {name!r} (set one with "
                            "`ncclbench baseline set NAME RUN`)")
    return gate(store.get_run(run_id), store.get_run(base_id), max_drop_pct, max_rise_pct, placement)


def gate_stored_run(store, run_id: int, name: str, max_drop_pct: float = 5.0,
                    max_rise_pct: float | None = None, out=None) -> int:
    """`ncclbench <test> ... --baseline NAME`: print the check of the run just
    stored and return its exit code (0 ok, 7 regression)."""
    g = check_against_baseline(store, run_id, name, max_drop_pct, max_rise_pct)
    print(format_gate(g, name), end="", file=out or sys.stdout)
    return 0 if g.ok else int(ExitCode.DATA_ERRORS)
