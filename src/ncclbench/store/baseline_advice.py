"""What a baseline lets the gate (gate.py) see, for `ncclbench baseline set`: per series the
smallest plateau drop and latency rise it detects, and how many runs would see what is asked."""

from __future__ import annotations

from collections.abc import Sequence

from . import noise
from .figure_noise import run_system
from .gate import gate
from .gate_figures import LATENCY, PLATEAU, Metric, limit_pct, pct_text
from .gate_format import can_see_text
from .gate_verdicts import Judgement
from .run_like import RunLike

# What `baseline set` checks a baseline can see unless told otherwise: a plateau drop of the gate's
# default --max-drop, and the +30 % small-message latency rise that issue 31 asks a 5-run baseline to
# catch (19 of 20).
DROP_TO_SEE = 5.0
RISE_TO_SEE = 30.0
# Baseline sizes `baseline set` projects to when suggesting more runs (a 20-run history is about
# what PRIOR_MAX_DOF weighs a recorded prior as: past it the baseline speaks for itself).
SUGGEST_RUNS = (3, 5, 7, 10, 15, 20)


def projected_limit(nruns: int, backend: str, system: str | None, size_class: str, metric: Metric,
                    sigma: float | None = None) -> float:
    """The limit (% worse) a baseline of `nruns` runs gets against a checked run of one, if its runs
    move by `sigma` per run (None: as the prior for the backend, system and size class says): the
    very posterior and combination `reference_noise` applies to a baseline's history."""
    prior = noise.prior_for(backend, size_class, system)
    measured = (prior.sigma if sigma is None else sigma) if nruns >= 2 else None
    post = noise.posterior(prior, measured, nruns - 1, "runs")
    return limit_pct(0.0, noise.combine(post.sigma, post.source, nruns, 1, shift_dof=post.dof), metric)


def detectable(nruns: int, backend: str, system: str | None, size_class: str) -> float:
    """The smallest change (% worse) a baseline of `nruns` runs lets the gate detect in a size
    class, if its runs move as the prior for the backend and system says (`projected_limit`)."""
    return projected_limit(nruns, backend, system, size_class,
                           Metric.BUSBW if size_class == "bandwidth" else Metric.TIME)


def baseline_noise_note(runs: Sequence[RunLike], drop_pct: float = DROP_TO_SEE, rise_pct: float = RISE_TO_SEE,
                        placement: str = "out_of_place") -> list[str]:
    """What a baseline made of `runs` (the newest is the reference) lets the gate see, for `baseline set`:
    per series the smallest plateau drop and latency rise it detects, from the very judgement `check`
    makes against it (`gate`, the noise from the baseline alone); and, where that is more than
    `drop_pct` / `rise_pct`, how many runs would see them (`projected_limit` at this baseline's own
    noise per run) and, for table times of small messages, that runs measured with --gate are what can."""
    ref = runs[-1]
    g = gate(ref, ref, drop_pct, rise_pct, placement, history=list(runs[:-1]))
    n = len(runs)
    lines = []
    backend, system = ref.info.backend, run_system(ref)
    for series in dict.fromkeys(j.series for j in g.judgements):
        js = {j.figure: j for j in g.judgements if j.series == series}
        seen = [can_see_text(n, j).replace(f"this {n}-run baseline can see ", "")
                for f, j in js.items() if f in (PLATEAU, LATENCY)]
        lat = js.get(LATENCY)
        how = f" (latency {lat.how})" if lat is not None and lat.how else ""
        lines.append(f"this {n}-run baseline can see {' and '.join(seen)}: {series}{how}")
        for figure, asked in ((PLATEAU, drop_pct), (LATENCY, rise_pct)):
            j = js.get(figure)
            if j is not None and (j.detectable_pct or 0.0) > asked:
                lines.append(_more_runs_line(j, n, asked, backend, system))
    return lines


def _more_runs_line(j: Judgement, n: int, asked: float, backend: str, system: str) -> str:
    """How many runs would let this baseline see `asked`, projected at its own noise per run: the
    whole-run shift its runs measured, before the prior pooled it (`Noise.measured`), which
    `projected_limit` pools with the prior once, on the projected runs' dof.  (Its posterior
    noise has the prior in it already: projecting that pooled the prior twice.)"""
    size_class = noise.GATED_LATENCY if j.gated else j.metric.size_class
    sigma = j.noise.measured[0] if j.noise.measured is not None and n >= 2 else None
    kind = "a plateau drop" if j.metric is Metric.BUSBW else "a latency rise"
    per = (f"{100 * sigma:.1f}% per run as its runs moved" if sigma is not None
           else "its runs moving as the recorded figures say")
    fits = [m for m in SUGGEST_RUNS if m > n and projected_limit(m, backend, system, size_class, j.metric, sigma) <= asked]
    head = f"too few runs to see {kind} of {asked:g}%: "
    if fits:
        line = (f"{head}{fits[0]} runs would ({per}): record {fits[0] - n} more with the same command"
                f"{'' if j.gated or j.metric is Metric.BUSBW else ' and --gate'}, then `ncclbench baseline set "
                f"NAME RUN --runs {fits[0]}`")
    else:
        best = projected_limit(SUGGEST_RUNS[-1], backend, system, size_class, j.metric, sigma)
        line = (f"{head}even {SUGGEST_RUNS[-1]} runs would see only {pct_text(best)} ({per}): the checked run "
                "is one run, and its own noise sets that floor")
    if j.metric is Metric.TIME and not j.gated:
        line += ("; small-message time moves between processes far more than within one, so measure the runs "
                 "with --gate (the small sizes again in rounds on fresh communicators, "
                 f"{noise.round_figure(backend).text})")
    return line
