"""The regression gate: `ncclbench check RUN --against NAME`, and `ncclbench <test> --baseline NAME`
(baseline_gate.py) on the run just stored.  This is where the gate is described; the other modules
of the gate point here.

What is judged, in the words `check --help` and the gate's JSON print: GATE_DEFINITION, below.
`gate()` goes through it in this order:

1. refusals first (baseline_rules.py): runs of one rank, a baseline that is another test or of one
   size, a checked run missing the sizes of the baseline's figures: ArgumentError, exit 255;
2. the size-by-size comparison of baseline and run (comparison.py, strict: series matched by key);
3. per series of (datatype, op, root) that both runs have, the figures (gate_figures.py: the
   plateau busbw, the latency floor, under --every-size each size on its own), each read from the
   table, or for the latency floor from the gate rounds where every run carries them (`_Source`,
   run/gate_rounds.py), its change the median of its sizes' log ratios;
4. each figure's noise from the baseline alone, and whether the checked run is too noisy to confirm
   it (figure_noise.py, on store/noise.py's statistics); its limit is the larger of what was asked
   (--max-drop, --max-rise) and the noise's multiple times the noise (gate_figures.limit_pct);
5. the verdicts (gate_verdicts.py): REGRESSION (exit 7) beyond the limit; CANNOT CONFIRM or
   UNSTABLE (exit 9, not judged) where the baseline cannot see what was asked or the checked run
   is far noisier than it; ok (exit 0) otherwise.

The verdict as text and JSON: gate_format.py; what a baseline lets the gate see (`baseline set`):
baseline_advice.py.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..core.errors import ArgumentError
from . import noise
from . import summary_stats as stats
from .baseline_rules import refuse_baseline
from .comparison import SeriesComparison, compare_runs
from .figure_noise import class_sizes, instability, iteration_sigma, reference_noise, run_system
from .gate_figures import LATENCY, PLATEAU, Figure, FigureKind, Metric, limit_pct, worse_pct
from .gate_verdicts import GateResult, Judgement
from .run_like import RunLike
from .summary_stats import SeriesKey

# The rule, as `check --help` and the gate's JSON print it.
GATE_DEFINITION = (
    'per series, two figures are judged: the plateau busbw (the sizes within a factor of 4 of the largest) and'
    " the latency floor (sizes <= 64 KiB); each figure's change is the median of its sizes' changes in time, "
    'and it fails when worse by more than the limit and by more than 2.58 standard deviations of its noise '
    "(more when the noise was measured on few runs: Student's t at the same one-sided 0.995 on the degrees "
    "of freedom of the estimate).  The noise "
    "comes from the baseline alone, never from the checked run: its history (`baseline set NAME RUN --runs "
    "N`) or its -N cycles update a prior recorded for the backend, system and size class (pooled on "
    "their degrees of freedom, Student's t on the sum; a baseline far noisier than its prior stands alone "
    "and says so); a baseline of one run gets the prior, updated the same way by its own size-to-size "
    "roughness where that is larger (on the roughness's effective dof), printed as \"assumed\".  Runs "
    "measured with --gate (implied by --baseline) carry the sizes <= 64 KiB again in rounds on fresh "
    "communicators: where the checked run and every run of the baseline carry them, the latency floor is "
    "per size the median of its rounds (GPU; the CPU backend: per size the fastest round), and its noise "
    "the baseline's runs' own shifts (at least their rounds' spread; the per-process prior only bounds it, "
    "for a baseline of one run).  OK means the figure was measured precisely enough to see "
    "the change asked for and there is none: a figure worse than asked but within its noise, or whose "
    "limit is more than 1.5x what was asked, is \"cannot confirm\": not judged, exit 9.  "
    'A checked run far noisier than the baseline (its -N cycles, or its '
    "size-to-size roughness beyond the recorded scatter of identical runs'), with no regression beyond the "
    "limit, is an unstable candidate: not judged, "
    'exit 9.  --every-size also judges each size on its own (for a baseline of one run, against the -I '
    'samples of that size)')


def gate(run: RunLike, baseline: RunLike, max_drop_pct: float = 5.0,
         max_rise_pct: float | None = None, placement: str = "out_of_place", *,
         history: Sequence[RunLike] | None = None, every_size: bool = False) -> GateResult:
    """Judge `run` against `baseline` (plus the baseline's other runs, `history`), as the module
    docstring says.  Raises ArgumentError when nothing can be judged or the baseline is no
    reference for this run (`refuse_baseline`).  `max_rise_pct` None: the latency figures are
    judged against their noise alone, with --max-drop as the least rise that fails; nothing was
    asked of their precision, so they are never "cannot confirm" (each prints the smallest rise
    it detects)."""
    history = [h for h in (history or []) if h is not baseline]
    refuse_baseline(run, baseline, history)
    c = compare_runs(baseline, run, placement, strict=True)
    reads = _Reads.of(run, [baseline, *history], placement)
    asked = _Asked(max_drop_pct, max_rise_pct)
    judgements = [j for sc in c.series for j in _judge_series(sc, reads, asked, every_size)]
    if not judgements:
        raise ArgumentError(f"nothing to check: {run.label} and the baseline share no sizes "
                            "<= 64 KiB and none of the baseline's large sizes")
    return GateResult(c, max_drop_pct, max_rise_pct, judgements, len(reads.refs))


@dataclass(frozen=True)
class _Asked:
    """What was asked: --max-drop, --max-rise (None: the latency figures judged against their
    noise alone, with --max-drop as the least rise that fails)."""

    max_drop_pct: float
    max_rise_pct: float | None

    def limit(self, metric: Metric) -> float:
        """The user's limit of a figure of `metric`."""
        if metric is Metric.BUSBW or self.max_rise_pct is None:
            return self.max_drop_pct
        return self.max_rise_pct

    def asked(self, metric: Metric) -> float | None:
        """The precision asked of a figure of `metric`, None where nothing was."""
        return None if metric is Metric.TIME and self.max_rise_pct is None else self.limit(metric)


@dataclass
class _Source:
    """Where one figure's values and noise come from: the table (each run's per-size median over
    its -N cycles), or, for the latency figure of runs measured with --gate, their gate rounds."""

    per_run: list[dict[int, float]]  # the baseline's runs, one profile each
    ref: dict[int, float]  # the reference profile (per-size median over per_run)
    mine: dict[int, float]  # the checked run's profile
    cyc_a: list[dict[int, float]]  # the reference run's -N cycles (a measured shift where no history)
    cyc_b: list[dict[int, float]]
    size_class: str | None = None  # the prior's size class, None: by the metric
    floor: noise.Spread | None = None  # the least a run's figure moves between runs (its rounds' spread)
    how: str | None = None  # how the figure was measured (gate rounds), or why not, for the verdict line
    rounds_a: list[dict[int, float]] = field(default_factory=list)  # the reference run's gate rounds
    rounds_b: list[dict[int, float]] = field(default_factory=list)
    gated: bool = False  # from the gate rounds, not the table
    estimate: noise.Spread | None = None  # the whole-run noise as the rounds measured it (rounds in fresh processes)


@dataclass
class _Reads:
    """What the gate reads of the baseline's runs (`refs`: the reference first, then its history)
    and of the checked run, per series."""

    refs: list[RunLike]
    run: RunLike
    ref_values: list[dict[SeriesKey, dict[int, float]]]
    ref_cycles: dict[SeriesKey, list[dict[int, float]]]
    run_cycles: dict[SeriesKey, list[dict[int, float]]]
    run_values: dict[SeriesKey, dict[int, float]]
    iter_a: dict[SeriesKey, dict[int, float]]
    count_a: dict[SeriesKey, dict[int, int]]
    ref_rounds: list[dict[SeriesKey, list[dict[int, float]]]]
    run_rounds: dict[SeriesKey, list[dict[int, float]]]
    backend: str
    system: str

    @classmethod
    def of(cls, run: RunLike, refs: list[RunLike], placement: str) -> _Reads:
        baseline = refs[0]
        return cls(refs, run, [stats.run_values(r.rows, placement) for r in refs],
                   stats.cycle_values(baseline.rows, placement), stats.cycle_values(run.rows, placement),
                   stats.run_values(run.rows, placement), stats.iteration_noise(baseline.rows, placement),
                   stats.iteration_counts(baseline.rows, placement),
                   [stats.gate_round_values(r.summary, placement) for r in refs],
                   stats.gate_round_values(run.summary, placement), baseline.info.backend, run_system(baseline))

    def table(self, ka: SeriesKey, kb: SeriesKey) -> _Source:
        """The table's values of one series: the baseline's runs (series `ka`), the checked run's (`kb`)."""
        per_run = [v[ka] for v in self.ref_values if ka in v]
        ref = noise.reference_profile(per_run) if len(per_run) > 1 else (per_run[0] if per_run else {})
        return _Source(per_run, ref, self.run_values.get(kb, {}), self.ref_cycles.get(ka, []),
                       self.run_cycles.get(kb, []))


def _judge_series(sc: SeriesComparison, reads: _Reads, asked: _Asked, every_size: bool) -> list[Judgement]:
    """The judgements of one series: its figures that have sizes to judge."""
    table = reads.table(sc.key_a, sc.key_b)
    latency = _latency_source(table, sc.key_a, sc.key_b, reads)
    out = []
    for figure, sizes in _figures_of(sc, every_size):
        src = latency if figure.kind is FigureKind.LATENCY else table
        if src.gated:
            sizes = sorted(set(sizes) & set(src.ref) & set(src.mine))
        j = _judge_figure(sc, figure, sizes, src, reads, asked)
        if j is not None:
            out.append(j)
    return out


def _figures_of(sc: SeriesComparison, every_size: bool) -> list[tuple[Figure, list[int]]]:
    """The figures of one series and their sizes: the plateau busbw, the latency floor, and under
    --every-size each size both runs have."""
    figures: list[tuple[Figure, list[int]]] = []
    if sc.plateau_sizes:
        figures.append((PLATEAU, sc.plateau_sizes))
    if sc.latency_sizes:
        figures.append((LATENCY, sc.latency_sizes))
    if every_size:
        figures += [(Figure.of_size(d.size), [d.size]) for d in sc.sizes if d.a and d.b]
    return figures


def _judge_figure(sc: SeriesComparison, figure: Figure, sizes: list[int], src: _Source, reads: _Reads,
                  asked: _Asked) -> Judgement | None:
    """One figure's judgement, None where the two runs have none of its sizes in common."""
    metric = figure.metric
    ratios = noise.log_ratios(src.ref, src.mine, sizes)
    change = noise.median_change(ratios)
    if change is None:
        return None
    judged = sorted(ratios)
    rough = class_sizes(src.ref, metric)
    iters = iteration_sigma(reads.iter_a.get(sc.key_a, {}), reads.count_a.get(sc.key_a, {}), sizes)
    nz = reference_noise(judged, src.per_run, src.cyc_a, reads.backend, metric, single=figure.single,
                         iters=iters, system=reads.system, rough_sizes=rough,
                         size_class=src.size_class, floor=src.floor, estimate=src.estimate)
    limit = limit_pct(asked.limit(metric), nz, metric)
    worse = worse_pct(change, metric)
    cyc_a, cyc_b = (src.rounds_a, src.rounds_b) if src.gated else (src.cyc_a, src.cyc_b)
    unstable = None if figure.single or worse > limit else \
        instability(judged, src.mine, src.per_run, cyc_a, cyc_b, nz, limit, metric, rough)
    base_fig, run_fig = (_median_of(src.ref, sizes), _median_of(src.mine, sizes)) if src.gated else \
        _figure_values(sc, figure)
    return Judgement(sc.label, figure, judged, base_fig, run_fig, worse, nz, limit, unstable, asked.asked(metric),
                     how=src.how, detectable_pct=limit_pct(0.0, nz, metric), gated=src.gated)


def _latency_source(table: _Source, ka: SeriesKey, kb: SeriesKey, reads: _Reads) -> _Source:
    """The latency figure's source: the gate rounds (run/gate_rounds.py) where the checked run and
    every run of the baseline carry them for this series; else the table, with why not (said on
    the verdict line) where only some do."""
    have = [ka in r for r in reads.ref_rounds]
    mine = kb in reads.run_rounds
    if not mine and not any(have):
        return table
    if not mine or not all(have):
        missing = reads.run.label if not mine else ", ".join(r.label for r, h in zip(reads.refs, have) if not h)
        return replace(table, how=f"table times: {missing} measured without --gate, so the gate rounds of the "
                       "others are not used (measure every run of the baseline and the checked run with --gate)")
    rounds = [r[ka] for r in reads.ref_rounds]
    figure = noise.round_figure(reads.backend)
    per_run = [stats.round_profile(x, figure) for x in rounds]
    ref = noise.reference_profile(per_run) if len(per_run) > 1 else per_run[0]
    renew = {stats.gate_rounds_renew(r.summary) for r in (*reads.refs, reads.run)}
    processes = renew == {"process"}  # every round a process of its own: the spread is the runs' noise
    floor = _rounds_spread(rounds, sorted(set(ref)), figure)
    n = sorted({len(x) for x in rounds} | {len(reads.run_rounds[kb])})
    what = stats.gate_rounds_text(reads.refs[0].summary) or "rounds"
    how = (f"gate rounds: {what}" if len(n) == 1 else f"gate rounds: {n[0]}-{n[-1]} per run") + f"; {figure.text}"
    spread = None if floor is None else noise.Spread(floor.sigma, floor.dof, floor.what)
    return _Source(per_run, ref, stats.round_profile(reads.run_rounds[kb], figure), [], [], noise.GATED_LATENCY,
                   None if processes else spread, how, rounds[0], reads.run_rounds[kb], gated=True,
                   estimate=spread if processes else None)


def _rounds_spread(rounds: list[list[dict[int, float]]], sizes: list[int],
                   figure: noise.RoundFigure) -> noise.Spread | None:
    """How far a run's gated figure moves by its rounds alone.  Per size the median of its rounds
    (GPU): the rounds' spread around their run's median (MAD-based) x sqrt(pi/2 / n)
    (noise.median_round_spread).  Per size the fastest of n rounds (CPU backend): the spread of a
    round at the machine's floor (the two fastest rounds' gap, noise.floor_spread: lifted rounds say
    nothing of it) x sqrt(min_variance(n)).  Rounds on fresh communicators share what the machine
    does over minutes, so for them this is only a floor; rounds that were each a process of their
    own are independent draws, and it is an estimate `reference_noise` pools with the runs' shifts."""
    if figure is noise.RoundFigure.MEDIAN:
        return noise.median_round_spread(rounds, sizes)
    n = int(statistics.median(len(x) for x in rounds))
    sp = noise.floor_spread(rounds, sizes)
    return None if sp is None else noise.Spread(sp.sigma * math.sqrt(noise.min_variance(n)), sp.dof,
                                                "rounds' spread at the floor")


def _median_of(values: dict[int, float], sizes: list[int]) -> float | None:
    xs = [values[s] for s in sizes if s in values]
    return statistics.median(xs) if xs else None


def _figure_values(sc: SeriesComparison, figure: Figure) -> tuple[float | None, float | None]:
    """The figure's readable values (GB/s, us) in baseline and run, from the table."""
    if figure.kind is FigureKind.PLATEAU:
        return sc.plateau_a, sc.plateau_b
    if figure.kind is FigureKind.LATENCY:
        return sc.latency_a, sc.latency_b
    d = next(x for x in sc.sizes if x.size == figure.size)
    if figure.metric is Metric.BUSBW:
        return d.a.busbw if d.a else None, d.b.busbw if d.b else None
    return d.a.time_us if d.a else None, d.b.time_us if d.b else None
