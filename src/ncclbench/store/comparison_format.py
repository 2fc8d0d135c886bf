"""A comparison (comparison.py) as text, the table `ncclbench compare` prints, and as JSON
(`compare --format json`, and the comparison inside the gate's JSON: gate_format.py)."""

from __future__ import annotations

import math
from typing import Any

from ..output.numfmt import human_size
from . import summary_stats as stats
from .comparison import Comparison, SeriesComparison
from .summary_stats import Point


def _pct(v: float | None, mark: bool = False) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:+.1f}%" + ("*" if mark else "")


def number_text(v: float | None) -> str:
    """A figure as printed: two decimals, '-' where unknown."""
    if v is None or math.isnan(v):
        return "-"
    return f"{v:.2f}"


def _summary_lines(sc: SeriesComparison) -> list[str]:
    lines = []
    if sc.plateau_sizes:
        lines.append(f"  plateau busbw ({len(sc.plateau_sizes)} sizes, "
                     f"{human_size(sc.plateau_sizes[0])}..{human_size(sc.plateau_sizes[-1])})"
                     f": {number_text(sc.plateau_a)} -> {number_text(sc.plateau_b)} GB/s ({_pct(sc.plateau_delta)})")
    if sc.latency_sizes:
        lines.append(f"  latency ({len(sc.latency_sizes)} sizes, "
                     f"{human_size(sc.latency_sizes[0])}..{human_size(sc.latency_sizes[-1])})"
                     f": {number_text(sc.latency_a)} -> {number_text(sc.latency_b)} us ({_pct(sc.latency_delta)})")
    return lines


def format_comparison(c: Comparison) -> str:
    place = c.placement.replace("_", "-")
    lines = [f"A = {c.a_desc}", f"B = {c.b_desc}",
             f"{place}; delta = (B - A) / A; '*' = beyond noise: the change the gate needs to see at that size "
             "(`check --every-size`: A's -N cycles, -I samples or the prior for its backend and system, times "
             "the gate's multiple), or the printed resolution"]
    lines += [f"warning: {w}" for w in c.warnings]
    head = "%12s  %9s  %9s  %8s  %9s  %9s  %8s  %6s  %s" % (
        "size", "busbw A", "busbw B", "delta", "time A", "time B", "delta", "noise", "")
    for sc in c.series:
        lines += ["", f"# {sc.label}", head.rstrip()]
        for d in sc.sizes:
            a, b = d.a, d.b
            lines.append(("%12d  %9s  %9s  %8s  %9s  %9s  %8s  %6s  %s" % (
                d.size, number_text(a.busbw if a else None), number_text(b.busbw if b else None),
                _pct(d.busbw_delta, d.busbw_beyond), number_text(a.time_us if a else None),
                number_text(b.time_us if b else None), _pct(d.time_delta, d.time_beyond),
                "-" if d.time_noise is None else f"{d.time_noise:.1f}%", d.verdict)).rstrip())
        lines += _summary_lines(sc)
    lines += ["", f"Summaries: {stats.PLATEAU_DEFINITION}; {stats.LATENCY_DEFINITION} "
              f"{stats.FOOTER_NOTE}."]
    return "\n".join(lines) + "\n"


def comparison_to_dict(c: Comparison) -> dict[str, Any]:
    def point(p: Point | None) -> dict[str, Any] | None:
        return None if p is None else {"busbw": finite(p.busbw), "time_us": finite(p.time_us),
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


def finite(v: float | None) -> float | None:
    """None for a missing or NaN figure (JSON has no NaN)."""
    return None if v is None or math.isnan(v) else v

