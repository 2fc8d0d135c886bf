"""The gate's verdict (gate.py) as text, what `check` and `--baseline` print, and as JSON
(`check --format json`; output/junit.py and output/metrics.py read that dict)."""

from __future__ import annotations

from typing import Any

from ..output.numfmt import human_size
from . import noise
from . import summary_stats as stats
from .comparison_format import comparison_to_dict, finite, number_text
from .gate import GATE_DEFINITION
from .gate_figures import pct_text
from .gate_verdicts import GateResult, Judgement
from .noise import Noise


def _rise_text(g: GateResult) -> str:
    if g.max_rise_pct is not None:
        return f"{g.max_rise_pct:g}%"
    return (f"{g.max_drop_pct:g}% (no --max-rise: the latency floor is judged against its noise alone, "
            "the smallest rise it detects is its limit)")


def can_see_text(nruns: int, j: Judgement) -> str:
    """'this 5-run baseline can see a latency rise of 24.0% or more': the noise's limit alone (the
    multiple x the noise, what the limit would be if nothing were asked), the figure's own words."""
    see = j.limit_pct if j.detectable_pct is None else j.detectable_pct
    return f"this {nruns}-run baseline can see {j.figure.change_text} of {pct_text(see)} or more"


def _noise_text(n: Noise) -> str:
    if n.pct is None:
        return "noise unknown"
    return f"noise {pct_text(n.pct)} x {n.multiple:g} from {n.source}"


def _judgement_line(j: Judgement, baseline_runs: int) -> str:
    """One judged figure: its verdict, values, change, limit and noise."""
    sizes = (f"{human_size(j.sizes[0])}..{human_size(j.sizes[-1])}, {len(j.sizes)} sizes"
             if len(j.sizes) > 1 else human_size(j.sizes[0]))
    if j.how:
        sizes += f"; {j.how}"
    worse = (f"{pct_text(j.worse_pct)} {j.metric.worse_word}" if j.worse_pct >= 0
             else f"{pct_text(-j.worse_pct)} better")
    return (f"{j.verdict:>10}  {j.series} {j.figure.name} ({sizes}): {number_text(j.baseline)} -> "
            f"{number_text(j.value)} {j.metric.unit}; median change {worse} (limit {pct_text(j.limit_pct)}; "
            f"{can_see_text(baseline_runs, j)}; {_noise_text(j.noise)})"
            + (f"; {j.not_judged}" if j.not_judged else ""))


def _result_line(g: GateResult) -> str:
    if g.regression:
        return "result: REGRESSION at sizes " + ", ".join(str(s) for s in g.failing_sizes)
    if g.unstable:
        return "result: NOT JUDGED: unstable candidate: cannot confirm; re-run (exit 9)"
    if g.cannot_confirm:
        return "result: NOT JUDGED: cannot confirm: the baseline's noise is too wide to tell (exit 9)"
    return f"result: OK ({g.checked} figure{'s' if g.checked != 1 else ''} within limits)"


def format_gate(g: GateResult, baseline_name: str | None = None) -> str:
    c = g.comparison
    base = f"baseline '{baseline_name}' = {c.a_desc}" if baseline_name else f"baseline {c.a_desc}"
    if g.baseline_runs > 1:
        base += f" and {g.baseline_runs - 1} more run{'s' if g.baseline_runs > 2 else ''} of its history"
    lines = [f"check: {c.b_desc}", f"against {base}",
             f"{c.placement.replace('_', '-')}; fails when plateau busbw drops more than {g.max_drop_pct:g}% or "
             f"the latency floor rises more than {_rise_text(g)}, and beyond the baseline's noise "
             f"({noise.Z_KNOWN:g} standard deviations, more when measured on few runs)"]
    lines += [f"warning: {w}" for w in c.warnings]
    if g.assumed:
        lines.append("note: the baseline carries no noise of its own (one run, no -N cycles): its noise "
                     "is assumed from recorded figures; give it a history (`ncclbench baseline set NAME RUN "
                     "--runs 5`) or run with -N 5")
    lines += [_judgement_line(j, g.baseline_runs) for j in g.judgements]
    lines.append(_result_line(g))
    lines.append(f"Summaries: {stats.PLATEAU_DEFINITION}; {stats.LATENCY_DEFINITION} "
                 f"{stats.FOOTER_NOTE}.")
    return "\n".join(lines) + "\n"


def gate_to_dict(g: GateResult) -> dict[str, Any]:
    return {"ok": g.ok, "status": g.status, "exit_code": g.exit_code,
            "max_drop_pct": g.max_drop_pct, "max_rise_pct": g.max_rise_pct,
            "baseline_runs": g.baseline_runs,
            "whole_run_noise_known": g.whole_run_noise_known, "noise_assumed": g.assumed,
            "definition": GATE_DEFINITION,
            "failing_sizes": g.failing_sizes, "failures": [f.to_dict() for f in g.failures],
            "judgements": [_judgement_dict(j) for j in g.judgements],
            "comparison": comparison_to_dict(g.comparison)}


def _judgement_dict(j: Judgement) -> dict[str, Any]:
    return {"series": j.series, "figure": j.figure.name, "metric": j.metric.value, "sizes": j.sizes,
            "baseline": finite(j.baseline), "value": finite(j.value), "worse_pct": j.worse_pct,
            "noise_pct": j.noise.pct, "noise_source": j.noise.source,
            "noise_multiple": j.noise.multiple, "noise_assumed": j.noise.assumed,
            "whole_run_noise_known": j.noise.whole_run_known, "limit_pct": j.limit_pct,
            "failed": j.failed, "verdict": j.verdict.lower(), "asked_pct": j.asked_pct,
            "detectable_pct": j.detectable_pct, "measured": j.how,
            "cannot_confirm": j.cannot_confirm, "unstable": j.not_judged}
