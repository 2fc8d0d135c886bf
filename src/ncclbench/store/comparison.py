"""Compare two runs size by size, and the regression gate built on it.

Sizes are matched within series of the same (type, op, root).  `compare`
marks a per-size change when it is larger than that size's noise: max(2%, the
per-iteration CV or -N spread either run recorded at that size, the
resolution of the printed numbers).

The gate (`check`, `--baseline`) judges summaries against noise, not raw
deltas (see `GATE_DEFINITION` and store/noise.py): per series, the plateau
busbw and the latency floor, each the median change of its sizes, fail only
when worse by more than the user's limit *and* by more than NOISE_MULTIPLE
times their noise, estimated from the baseline's history (a baseline of
several runs), the -N cycles of both runs, or, failing those, the size scatter
of the pair alone (then the verdict says that the noise of whole runs is
unknown).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TextIO

from ..core.config import BenchOptions
from ..core.errors import ArgumentError, ExitCode
from ..core.results import ONE_RANK_NOTE, ResultRow, RunInfo, RunSummary
from ..output.numfmt import human_size
from . import noise
from . import summary_stats as stats
from .noise import Noise
from .summary_stats import Point, Series, SeriesKey


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
        return _beyond(self.busbw_delta, self.busbw_noise)

    @property
    def time_beyond(self) -> bool:
        return _beyond(self.time_delta, self.time_noise)

    @property
    def verdict(self) -> str:
        """Judged on time: busbw is derived from it and printed with fewer digits."""
        if self.time_delta is None or not self.time_beyond:
            return ""
        return "SLOWER" if self.time_delta > 0 else "faster"


def _beyond(delta: float | None, noise_pct: float | None) -> bool:
    return delta is not None and noise_pct is not None and abs(delta) > noise_pct


@dataclass
class SeriesComparison:
    label: str
    key_a: tuple[str, str, int]
    key_b: tuple[str, str, int]
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
    """strict (the gate): the same collective, series matched by (type, op, root) only.
    A run of one rank is refused (ArgumentError): it moves no data."""
    refuse_one_rank(a, b)
    if strict and a.options.collective != b.options.collective:
        raise ArgumentError(f"cannot check {b.label} ({b.info.program}) against {a.label} "
                            f"({a.info.program}): different collectives")
    warnings: list[str] = []
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
    size_noise = _SizeNoise(a, placement)
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
                beyond = size_noise.pct(sa.key, size)
                d.busbw_noise = max(beyond, stats.resolution_pct(pa.busbw, pb.busbw))
                d.time_noise = max(beyond, stats.resolution_pct(pa.time_us, pb.time_us))
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


class _SizeNoise:
    """The change one size must exceed to be marked by `compare`: the gate's own noise for that
    size judged on its own (`reference_noise`, as --every-size: A's -N cycles, else its -I samples,
    else the prior for the backend, system and size class), times the gate's multiple.  A per-size
    CV floor of 2 % marked 20 of 24 sizes of two identical CPU runs (issue 32 item 4)."""

    def __init__(self, a: RunLike, placement: str):
        self.a, self.placement = a, placement
        self.values = stats.run_values(a.rows, placement)
        self.cycles = stats.cycle_values(a.rows, placement)
        self.iters = stats.iteration_noise(a.rows, placement)
        self.counts = stats.iteration_counts(a.rows, placement)
        self.system = _system(a)

    def pct(self, key: tuple[str, str, int], size: int) -> float:
        metric = "time" if size <= stats.LATENCY_MAX_SIZE else "busbw"
        per_run = [self.values[key]] if key in self.values else []
        nz = reference_noise([size], per_run, self.cycles.get(key, []), self.a.info.backend, metric, single=True,
                             iters=_iteration_sigma(self.iters.get(key, {}), self.counts.get(key, {}), [size]),
                             system=self.system)
        return 100.0 * math.expm1(nz.multiple * nz.sigma) if nz.sigma is not None else stats.MIN_NOISE_PCT


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
                     f"{human_size(sc.plateau_sizes[0])}..{human_size(sc.plateau_sizes[-1])})"
                     f": {_v(sc.plateau_a)} -> {_v(sc.plateau_b)} GB/s ({_pct(sc.plateau_delta)})")
    if sc.latency_sizes:
        lines.append(f"  latency ({len(sc.latency_sizes)} sizes, "
                     f"{human_size(sc.latency_sizes[0])}..{human_size(sc.latency_sizes[-1])})"
                     f": {_v(sc.latency_a)} -> {_v(sc.latency_b)} us ({_pct(sc.latency_delta)})")
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
                d.size, _v(a.busbw if a else None), _v(b.busbw if b else None),
                _pct(d.busbw_delta, d.busbw_beyond), _v(a.time_us if a else None),
                _v(b.time_us if b else None), _pct(d.time_delta, d.time_beyond),
                "-" if d.time_noise is None else f"{d.time_noise:.1f}%", d.verdict)).rstrip())
        lines += _summary_lines(sc)
    lines += ["", f"Summaries: {stats.PLATEAU_DEFINITION}; {stats.LATENCY_DEFINITION} "
              f"{stats.FOOTER_NOTE}."]
    return "\n".join(lines) + "\n"


def comparison_to_dict(c: Comparison) -> dict[str, Any]:
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


def _nn(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) else v


# ---------------------------------------------------------------- what can be judged at all

def moves_no_data(run: RunLike) -> bool:
    """One rank: nothing crosses a link, busbw is 0 (or a local copy) at every size.
    An imported log without device lines counts as unknown, not as one rank."""
    info = run.info
    return info.nranks == 1 and (bool(info.devices) or info.backend in ("nccl", "mpi"))


def refuse_one_rank(*runs: RunLike) -> None:
    """ArgumentError (one line, exit 255) when one of `runs` has a single rank."""
    for r in runs:
        if moves_no_data(r):
            raise ArgumentError(f"cannot judge {r.label} ({r.info.program}): it ran one rank, and {ONE_RANK_NOTE}; "
                                "record runs of 2 or more ranks (--nprocs N, or a launcher)")


def _release(version: str) -> tuple[str, ...]:
    """'0.1.0' -> ('0', '1'): runs of one major.minor release time the same way."""
    return tuple(version.split(".")[:2])


def refuse_baseline(run: RunLike, baseline: RunLike, history: Sequence[RunLike] = ()) -> None:
    """A baseline that is another test is no reference: another collective, another rank
    count, backend, datatype or operation, runs recorded by another ncclbench release (the
    timed loop and what a row means may differ), a run of one rank, a baseline of one size, a
    checked run missing sizes the baseline's figures are made of.  ArgumentError, one line
    (exit 255), nothing judged."""
    refuse_one_rank(run, baseline, *history)
    for ref in (baseline, *history):
        what = "the baseline" if ref is baseline else f"the baseline's {ref.label}"
        _refuse_other_test(run, ref, what)
        _refuse_other_series(run, ref, what)
    _refuse_missing_sizes(run, baseline)


def _refuse_other_test(run: RunLike, ref: RunLike, what: str) -> None:
    """Another collective, rank count, backend or ncclbench release."""
    head = f"cannot check {run.label}"
    if ref.options.collective != run.options.collective:
        raise ArgumentError(f"{head} ({run.info.program}) against {what} ({ref.label}, {ref.info.program}): "
                            "different collectives")
    if ref.info.nranks != run.info.nranks:
        raise ArgumentError(f"{head} ({run.info.nranks} ranks) against {what} ({ref.label}, {ref.info.nranks} "
                            f"ranks): a baseline of another rank count is another test; set a baseline of "
                            f"{run.info.nranks}-rank runs")
    ours = {r.info.backend for r in (run, ref)} <= {"nccl", "mpi"}
    if ours and ref.info.backend != run.info.backend:
        raise ArgumentError(f"{head} (backend {run.info.backend}) against {what} ({ref.label}, backend "
                            f"{ref.info.backend}): another backend is another machine's numbers; set a baseline "
                            f"of --backend {run.info.backend} runs")
    if ours and ref.info.version and run.info.version and _release(ref.info.version) != _release(run.info.version):
        raise ArgumentError(f"{head} (ncclbench {run.info.version}) against {what} ({ref.label}, ncclbench "
                            f"{ref.info.version}): runs of another release may be timed differently; set a "
                            "baseline recorded by this release")


def _labels(run: RunLike) -> dict[tuple[str, str, int], str]:
    return {s.key: s.label for s in stats.series_of(run.rows)}


def _refuse_other_series(run: RunLike, ref: RunLike, what: str) -> None:
    """No (datatype, operation, root) in common: another measurement, not a slower one."""
    mine, theirs = _labels(run), _labels(ref)
    if mine and theirs and not set(mine) & set(theirs):
        raise ArgumentError(f"cannot check {run.label} ({', '.join(mine.values())}) against {what} ({ref.label}, "
                            f"{', '.join(theirs.values())}): no datatype and operation in common; set a baseline "
                            "of the same -d/-o")


def _refuse_missing_sizes(run: RunLike, baseline: RunLike) -> None:
    """A baseline of one size has no plateau and latency floor to judge; a checked run that lacks
    sizes of the baseline's figures would be judged on other figures than the baseline's."""
    for key, sizes in _sizes(baseline).items():
        if len(sizes) == 1:
            raise ArgumentError(f"cannot check against {baseline.label}: the baseline measured one size "
                                f"({human_size(sizes[0])}), and the gate judges figures over sizes (the plateau, "
                                "the latency floor); set a baseline of a sweep (-b 8 -e 64M), or use `compare`")
        have = set(_sizes(run).get(key, sizes))
        figure = set(stats.plateau_sizes(sizes)) | set(stats.latency_sizes(sizes))
        missing = sorted(figure - have)
        if missing:
            raise ArgumentError(f"cannot check {run.label} against {baseline.label}: it lacks {len(missing)} of the "
                                f"sizes the baseline's figures are made of ({human_size(missing[0])}"
                                f"{'..' + human_size(missing[-1]) if len(missing) > 1 else ''}); run the "
                                "baseline's sweep (-b/-e/-f) to the end")


def _sizes(run: RunLike) -> dict[tuple[str, str, int], list[int]]:
    return {s.key: s.sizes for s in stats.series_of(run.rows)}


def refuse_as_baseline(runs: Sequence[RunLike]) -> None:
    """`baseline set`: the runs of one baseline must be one test (the newest is the
    reference, the others its history); none may be a run of one rank."""
    if not runs:
        raise ArgumentError("a baseline needs at least one run")
    refuse_baseline(runs[-1], runs[-1], runs[:-1])


# What `baseline set` checks a baseline can see unless told otherwise: a plateau drop of the gate's
# default --max-drop, and the +30 % small-message latency rise that issue 31 asks a 5-run baseline to
# catch (19 of 20).
DROP_TO_SEE = 5.0
RISE_TO_SEE = 30.0
# Baseline sizes `baseline set` projects to when suggesting more runs (a 20-run history is about
# what PRIOR_MAX_DOF weighs a recorded prior as: past it the baseline speaks for itself).
SUGGEST_RUNS = (3, 5, 7, 10, 15, 20)


def projected_limit(nruns: int, backend: str, system: str | None, size_class: str, metric: str,
                    sigma: float | None = None) -> float:
    """The limit (% worse) a baseline of `nruns` runs gets against a checked run of one, if its runs
    move by `sigma` per run (None: as the prior for the backend, system and size class says): the
    very posterior and combination `reference_noise` applies to a baseline's history."""
    prior = noise.prior_for(backend, size_class, system)
    measured = (prior.sigma if sigma is None else sigma) if nruns >= 2 else None
    post = noise.posterior(prior, measured, nruns - 1, "runs")
    return _limit(0.0, noise.combine(post.sigma, post.source, nruns, 1, shift_dof=post.dof), metric)


def detectable(nruns: int, backend: str, system: str | None, size_class: str) -> float:
    """The smallest change (% worse) a baseline of `nruns` runs lets the gate detect in a size
    class, if its runs move as the prior for the backend and system says (`projected_limit`)."""
    return projected_limit(nruns, backend, system, size_class, "busbw" if size_class == "bandwidth" else "time")


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
    backend, system = ref.info.backend, _system(ref)
    for series in dict.fromkeys(j.series for j in g.judgements):
        js = {j.figure: j for j in g.judgements if j.series == series}
        seen = [can_see_text(n, j).replace(f"this {n}-run baseline can see ", "")
                for f, j in js.items() if f in ("plateau busbw", "latency")]
        lat = js.get("latency")
        how = f" (latency {lat.how})" if lat is not None and lat.how else ""
        lines.append(f"this {n}-run baseline can see {' and '.join(seen)}: {series}{how}")
        for figure, asked in (("plateau busbw", drop_pct), ("latency", rise_pct)):
            j = js.get(figure)
            if j is not None and (j.detectable_pct or 0.0) > asked:
                lines.append(_more_runs_line(j, n, asked, backend, system))
    return lines


def _more_runs_line(j: Judgement, n: int, asked: float, backend: str, system: str) -> str:
    """How many runs would let this baseline see `asked`, projected at its own noise per run."""
    gated = bool(j.how and j.how.startswith("gate rounds"))
    size_class = noise.GATED_LATENCY if gated else ("bandwidth" if j.metric == "busbw" else "latency")
    sigma = None
    if j.noise.sigma is not None and n >= 2:  # the per-run noise the spread was made of
        sigma = j.noise.sigma / math.sqrt(noise.median_variance(1) + noise.median_variance(n))
    kind = "a plateau drop" if j.metric == "busbw" else "a latency rise"
    per = (f"{100 * sigma:.1f}% per run as its runs moved" if sigma is not None
           else "its runs moving as the recorded figures say")
    fits = [m for m in SUGGEST_RUNS if m > n and projected_limit(m, backend, system, size_class, j.metric, sigma) <= asked]
    head = f"too few runs to see {kind} of {asked:g}%: "
    if fits:
        line = (f"{head}{fits[0]} runs would ({per}): record {fits[0] - n} more with the same command"
                f"{'' if gated or j.metric == 'busbw' else ' and --gate'}, then `ncclbench baseline set NAME RUN "
                f"--runs {fits[0]}`")
    else:
        best = projected_limit(SUGGEST_RUNS[-1], backend, system, size_class, j.metric, sigma)
        line = (f"{head}even {SUGGEST_RUNS[-1]} runs would see only {_pct_text(best)} ({per}): the checked run "
                "is one run, and its own noise sets that floor")
    if j.metric == "time" and not gated:
        line += ("; small-message time moves between processes far more than within one, so measure the runs "
                 "with --gate (the small sizes again in rounds on fresh communicators, the median of them)")
    return line


# ---------------------------------------------------------------- gate


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
    "the median over rounds, and its noise the baseline's runs' own shifts (at least their rounds' spread; "
    "the per-process prior only bounds it, for a baseline of one run).  OK means the figure was measured precisely enough to see "
    "the change asked for and there is none: a figure worse than asked but within its noise, or whose "
    "limit is more than 1.5x what was asked, is \"cannot confirm\": not judged, exit 9.  "
    'A checked run far noisier than the baseline (its -N cycles, or its '
    "size-to-size roughness beyond the recorded scatter of identical runs'), with no regression beyond the "
    "limit, is an unstable candidate: not judged, "
    'exit 9.  --every-size also judges each size on its own (for a baseline of one run, against the -I '
    'samples of that size)')


# A figure whose limit is more than this multiple of what was asked (--max-drop, --max-rise) cannot
# see a change of what was asked: a change of 1.5x the asked size already sits at the limit, caught
# at most half the time.  Such a figure is "cannot confirm", never "ok" (exit 9).
WIDE_LIMIT = 1.5


@dataclass
class Judgement:
    """One judged figure of one series: a summary over sizes, or one size."""

    series: str
    figure: str  # 'plateau busbw', 'latency' or 'size N'
    metric: str  # 'busbw' (a drop is worse) or 'time' (a rise is worse)
    sizes: list[int]
    baseline: float | None  # the figure in the baseline (GB/s or us), for reading
    value: float | None  # the figure in the checked run
    worse_pct: float  # how much worse (negative: better), from the median log ratio of the sizes
    noise: Noise
    limit_pct: float  # max(the user's limit, noise.multiple x noise): the smallest change it detects
    unstable: str | None = None  # why the checked run is too noisy to confirm this figure
    asked_pct: float | None = None  # the user's limit (--max-drop / --max-rise)
    how: str | None = None  # how the figure was measured where not from the table (gate rounds), or why not
    detectable_pct: float | None = None  # noise.multiple x noise alone: the smallest change this baseline can see

    @property
    def failed(self) -> bool:
        return self.worse_pct > self.limit_pct

    @property
    def cannot_confirm(self) -> str | None:
        """Why the gate cannot tell for this figure (no regression beyond its noise, but no
        precise "ok" either), or None: the change is beyond what was asked yet within the
        noise, or the noise lets only a change far larger than what was asked be seen."""
        asked = self.asked_pct
        if self.failed or asked is None:
            return None
        way = "lower" if self.metric == "busbw" else "higher"
        kind = "drop" if self.metric == "busbw" else "rise"
        if self.worse_pct > asked:
            return (f"cannot confirm: {_pct_text(self.worse_pct)} {way}, beyond the {asked:g}% asked, but this "
                    f"baseline's noise allows {_pct_text(self.limit_pct)}: {_more_runs_hint(self.noise, self.metric, self.how)}")
        if self.limit_pct > WIDE_LIMIT * max(asked, 1e-9):
            return (f"cannot confirm: this baseline can only see a {kind} of {_pct_text(self.limit_pct)} or more, "
                    f"not the {asked:g}% asked: {_more_runs_hint(self.noise, self.metric, self.how)}")
        return None

    @property
    def not_judged(self) -> str | None:
        """Why this figure is neither ok nor a regression (exit 9), or None."""
        return None if self.failed else (self.cannot_confirm or self.unstable)

    @property
    def verdict(self) -> str:
        if self.failed:
            return "REGRESSION"
        if self.cannot_confirm:
            return "CANNOT CONFIRM"
        return "UNSTABLE" if self.unstable else "ok"


def _more_runs_hint(n: Noise, metric: str = "busbw", how: str | None = None) -> str:
    """What would narrow the noise: more baseline runs (and -N cycles where it had none); for
    small-message time read from the table, runs measured with --gate (-N cycles of one process
    cannot narrow what moves between processes: run/gate_rounds.py)."""
    if metric == "time" and not (how or "").startswith("gate rounds"):
        return ("measure the baseline's runs and the checked run with --gate (the small sizes again in rounds on "
                "fresh communicators) and give the baseline 5 runs or more (`ncclbench baseline set NAME RUN "
                "--runs 5`), or raise the limit")
    if n.assumed:
        return ("give the baseline 3 runs or more (`ncclbench baseline set NAME RUN --runs 5`) or run with -N 5, "
                "or raise the limit to what it can see")
    return "give the baseline more runs (`ncclbench baseline set NAME RUN --runs N` with a larger N), or raise the limit"


@dataclass
class GateFailure:
    series: str
    size: int  # the figure's first size (all of them in `sizes`)
    metric: str  # 'busbw' (large sizes) or 'time' (small sizes)
    baseline: float
    value: float
    delta_pct: float  # signed change of the metric: busbw -10 = 10 % drop
    limit_pct: float  # the effective limit: max(user limit, the noise's multiple x noise)
    figure: str = ""
    sizes: list[int] = field(default_factory=list)


@dataclass
class GateResult:
    comparison: Comparison
    max_drop_pct: float
    max_rise_pct: float | None  # None: latency judged against its noise alone (gate())
    judgements: list[Judgement]
    baseline_runs: int = 1  # runs in the baseline (its history)

    @property
    def failures(self) -> list[GateFailure]:
        out = []
        for j in self.judgements:
            if j.failed:
                delta = -j.worse_pct if j.metric == "busbw" else j.worse_pct
                out.append(GateFailure(j.series, j.sizes[0], j.metric, _nan(j.baseline), _nan(j.value), delta,
                                       j.limit_pct, j.figure, list(j.sizes)))
        return out

    @property
    def checked(self) -> int:
        return len(self.judgements)

    @property
    def regression(self) -> bool:
        return any(j.failed for j in self.judgements)

    @property
    def unstable(self) -> bool:
        """No regression, but a figure could not be confirmed: the checked run is far noisier."""
        return not self.regression and any(j.unstable for j in self.judgements)

    @property
    def cannot_confirm(self) -> bool:
        """No regression, but a figure's noise is too wide to tell (Judgement.cannot_confirm)."""
        return not self.regression and any(j.cannot_confirm for j in self.judgements)

    @property
    def ok(self) -> bool:
        return not self.regression and not self.unstable and not self.cannot_confirm

    @property
    def status(self) -> str:
        if self.regression:
            return "regression"
        return "unstable candidate" if self.unstable else "cannot confirm" if self.cannot_confirm else "ok"

    @property
    def exit_code(self) -> int:
        """0 ok, 7 a regression, 9 not judged: an unstable candidate (re-run) or a figure the
        baseline's noise cannot confirm."""
        if self.regression:
            return int(ExitCode.DATA_ERRORS)
        return int(ExitCode.OK) if self.ok else int(ExitCode.NOT_JUDGED)

    @property
    def failing_sizes(self) -> list[int]:
        return sorted({s for j in self.judgements if j.failed for s in j.sizes})

    @property
    def whole_run_noise_known(self) -> bool:
        return all(j.noise.whole_run_known for j in self.judgements)

    @property
    def assumed(self) -> bool:
        return any(j.noise.assumed for j in self.judgements)


def _nan(v: float | None) -> float:
    return math.nan if v is None else v


def _worse_pct(change: float, metric: str) -> float:
    """A median log ratio of times as 'percent worse': a busbw drop or a time rise."""
    return 100.0 * (-math.expm1(-change) if metric == "busbw" else math.expm1(change))


def _worse_log(pct: float, metric: str) -> float:
    """The inverse of _worse_pct: a percentage worse as a log ratio of times."""
    return -math.log1p(-min(pct, 99.999) / 100.0) if metric == "busbw" else math.log1p(pct / 100.0)


def _limit(user_pct: float, noise: Noise, metric: str) -> float:
    if noise.sigma is None:
        return user_pct
    return max(user_pct, _worse_pct(noise.multiple * noise.sigma, metric))


def gate(run: RunLike, baseline: RunLike, max_drop_pct: float = 5.0,
         max_rise_pct: float | None = None, placement: str = "out_of_place", *,
         history: Sequence[RunLike] | None = None, every_size: bool = False) -> GateResult:
    """Judge `run` against `baseline` (plus the baseline's other runs, `history`):
    see GATE_DEFINITION.  Raises ArgumentError when nothing can be judged or the
    baseline is no reference for this run (`refuse_baseline`).  `max_rise_pct` None: the
    latency figures are judged against their noise alone, with --max-drop as the least rise that
    fails; nothing was asked of their precision, so they are never "cannot confirm" (each prints
    the smallest rise it detects)."""
    history = [h for h in (history or []) if h is not baseline]
    refuse_baseline(run, baseline, history)
    c = compare_runs(baseline, run, placement, strict=True)
    refs = [baseline, *history]
    ref_values = [stats.run_values(r.rows, placement) for r in refs]
    ref_cycles = stats.cycle_values(baseline.rows, placement)
    run_cycles = stats.cycle_values(run.rows, placement)
    run_values = stats.run_values(run.rows, placement)
    iter_a = stats.iteration_noise(baseline.rows, placement)
    count_a = stats.iteration_counts(baseline.rows, placement)
    ref_rounds = [stats.gate_round_values(r.summary, placement) for r in refs]
    run_rounds = stats.gate_round_values(run.summary, placement)
    backend = baseline.info.backend
    system = _system(baseline)
    judgements: list[Judgement] = []
    for sc in c.series:
        ka, kb = sc.key_a, sc.key_b
        per_run = [v[ka] for v in ref_values if ka in v]
        ref = noise.reference_profile(per_run) if len(per_run) > 1 else (per_run[0] if per_run else {})
        mine = run_values.get(kb, {})
        cyc_a = ref_cycles.get(ka, [])
        cyc_b = run_cycles.get(kb, [])
        table = _Source(per_run, ref, mine, cyc_a, cyc_b)
        gated = _gated_source(ka, kb, ref_rounds, run_rounds, refs, run)
        rise = max_drop_pct if max_rise_pct is None else max_rise_pct
        figures: list[tuple[str, str, list[int], float]] = []
        if sc.plateau_sizes:
            figures.append(("plateau busbw", "busbw", sc.plateau_sizes, max_drop_pct))
        if sc.latency_sizes:
            figures.append(("latency", "time", sc.latency_sizes, rise))
        if every_size:
            for d in sc.sizes:
                if d.a and d.b:
                    big = d.size > stats.LATENCY_MAX_SIZE
                    figures.append((f"size {d.size}", "busbw" if big else "time", [d.size],
                                    max_drop_pct if big else rise))
        for figure, metric, sizes, user_pct in figures:
            src = table
            if figure == "latency" and isinstance(gated, _Source):
                src = gated
                sizes = sorted(set(sizes) & set(gated.ref) & set(gated.mine))
            ratios = noise.log_ratios(src.ref, src.mine, sizes)
            change = noise.median_change(ratios)
            if change is None:
                continue
            single = figure.startswith("size ")
            iters = _iteration_sigma(iter_a.get(ka, {}), count_a.get(ka, {}), sizes)
            nz = reference_noise(sorted(ratios), src.per_run, src.cyc_a, backend, metric, single=single,
                                 iters=iters, system=system, rough_sizes=_class_sizes(src.ref, metric),
                                 size_class=src.size_class, floor=src.floor)
            limit = _limit(user_pct, nz, metric)
            worse = _worse_pct(change, metric)
            cyc_a2, cyc_b2 = (src.rounds_a, src.rounds_b) if src.how else (src.cyc_a, src.cyc_b)
            unstable = None if single or worse > limit else \
                instability(sorted(ratios), src.mine, src.per_run, cyc_a2, cyc_b2, nz, limit, metric,
                            _class_sizes(src.ref, metric))
            base_fig, run_fig = _figures(sc, figure, metric) if src is table else \
                (_median_of(src.ref, sizes), _median_of(src.mine, sizes))
            how = src.how if src is not table else (gated if figure == "latency" and isinstance(gated, str) else None)
            judgements.append(Judgement(sc.label, figure, metric, sorted(ratios), base_fig, run_fig,
                                        worse, nz, limit, unstable,
                                        None if metric == "time" and max_rise_pct is None else user_pct,
                                        how=how, detectable_pct=_limit(0.0, nz, metric)))
    if not judgements:
        raise ArgumentError(f"nothing to check: {run.label} and the baseline share no sizes "
                            "<= 64 KiB and none of the baseline's large sizes")
    return GateResult(c, max_drop_pct, max_rise_pct, judgements, len(refs))


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
    how: str | None = None  # how the figure was measured, for the verdict line (gate rounds)
    rounds_a: list[dict[int, float]] = field(default_factory=list)  # the reference run's gate rounds
    rounds_b: list[dict[int, float]] = field(default_factory=list)


def _gated_source(ka: SeriesKey, kb: SeriesKey, ref_rounds: list[dict[SeriesKey, list[dict[int, float]]]],
                  run_rounds: dict[SeriesKey, list[dict[int, float]]], refs: Sequence[RunLike],
                  run: RunLike) -> _Source | str | None:
    """The latency figure from the gate rounds (run/gate_rounds.py) where the checked run and every
    run of the baseline carry them for this series; else why not (said on the verdict line) where
    only some do, or None where none does (the table's figure, as always)."""
    have = [ka in r for r in ref_rounds]
    mine = kb in run_rounds
    if not mine and not any(have):
        return None
    if not mine or not all(have):
        missing = run.label if not mine else ", ".join(r.label for r, h in zip(refs, have) if not h)
        return (f"table times: {missing} measured without --gate, so the gate rounds of the others are not "
                "used (measure every run of the baseline and the checked run with --gate)")
    rounds = [r[ka] for r in ref_rounds]
    per_run = [stats.round_profile(x) for x in rounds]
    ref = noise.reference_profile(per_run) if len(per_run) > 1 else per_run[0]
    spreads = []
    for x in rounds:  # a run's figure, the median of its rounds, moves at least by its rounds' spread
        sp = noise.cycle_spread(x, sorted(set(ref) & set().union(*x)))
        if sp is not None:
            spreads.append(noise.Spread(sp.sigma * math.sqrt(noise.median_variance(len(x))), sp.dof, sp.what))
    floor = noise.pooled(spreads)
    n = sorted({len(x) for x in rounds} | {len(run_rounds[kb])})
    what = stats.gate_rounds_text(refs[0].summary) or "rounds"
    how = (f"gate rounds: {what}" if len(n) == 1 else f"gate rounds: {n[0]}-{n[-1]} per run") + \
        "; the median of rounds"
    return _Source(per_run, ref, stats.round_profile(run_rounds[kb]), [], [], noise.GATED_LATENCY,
                   None if floor is None else noise.Spread(floor.sigma, floor.dof, "rounds' spread"), how,
                   rounds[0], run_rounds[kb])


def _median_of(values: dict[int, float], sizes: list[int]) -> float | None:
    xs = [values[s] for s in sizes if s in values]
    return statistics.median(xs) if xs else None


def _class_sizes(ref: dict[int, float], metric: str) -> list[int]:
    """The reference's sizes of a figure's size class: > 64 KiB for busbw, <= 64 KiB for time."""
    big = metric == "busbw"
    return sorted(s for s in ref if (s > stats.LATENCY_MAX_SIZE) == big)


def _system(run: RunLike) -> str:
    """The system whose prior the gate uses (noise.system_of): hosts and GPU models of the run."""
    info = run.info
    hosts = info.hosts or [d.hostname for d in info.devices]
    return noise.system_of(info.backend, hosts, [d.device_info for d in info.devices if d.device_info])


def _iteration_sigma(a: dict[int, float], counts: dict[int, int], sizes: list[int]) -> tuple[float, int] | None:
    """One size's noise from the baseline's -I samples: the standard error of its mean,
    on both sides of the change (the checked run is taken to be as steady), and the dof of
    that estimate (samples - 1); None for a group of sizes or without samples."""
    if len(sizes) != 1 or sizes[0] not in a:
        return None
    return math.hypot(a[sizes[0]], a[sizes[0]]), max(1, counts.get(sizes[0], 2) - 1)


def reference_noise(sizes: list[int], per_run: list[dict[int, float]], cyc_a: list[dict[int, float]],
                    backend: str, metric: str, *, single: bool = False, iters: tuple[float, int] | None = None,
                    system: str | None = None, rough_sizes: list[int] | None = None,
                    size_class: str | None = None, floor: noise.Spread | None = None) -> Noise:
    """The noise of one figure's change, from the reference alone (see store/noise.py): the
    prior for the backend, system and size class, updated by what the baseline measured
    (`noise.posterior`): its history's whole-run shifts (2 runs or more), else its -N
    cycles' (2 or more).  Without either: for one size its -I samples, else the prior
    alone, or the baseline's own size-to-size roughness where larger ("assumed"; over
    `rough_sizes`, the figure's size class: a plateau of 2 sizes shows no roughness).
    `size_class`: the prior's class where not the metric's (the gate rounds' latency figure);
    `floor`: the least a run's figure moves between runs (the gate rounds' spread within runs)."""
    size_class = size_class or ("bandwidth" if metric == "busbw" else "latency")
    measured = _measured_shift(sizes, per_run, cyc_a, single, floor)
    if measured is not None:
        shift, dof, what, n_ref = measured
        post = noise.posterior(noise.prior_for(backend, size_class, system), shift, dof, what)
        return noise.combine(post.sigma, post.source, n_ref, 1, shift_dof=post.dof)
    if iters is not None:
        return Noise(iters[0], f"the baseline's -I samples of this size ({iters[1] + 1}; noise of whole runs "
                     "unknown)", False, iters[1])
    rough = None if single else noise.pooled([noise.roughness(r, rough_sizes or sizes) for r in per_run])
    return noise.assumed_noise(backend, size_class, rough, system)


def _measured_shift(sizes: list[int], per_run: list[dict[int, float]], cyc_a: list[dict[int, float]],
                    single: bool, least: noise.Spread | None = None) -> tuple[float, int, str, int] | None:
    """(whole-run shift, its dof, what it was measured on, runs the reference is the median of)
    from the baseline's history, else its -N cycles; None when it has neither.  Where few runs'
    medians agreed closer than their sizes' jitter allows, `noise.jitter_floor` stands in; where
    they agreed closer than `least` (a figure that is a median of rounds moves at least by their
    spread), that does.  Cycles of one process measure shifts within it: the reference is still one run."""
    for runs, what in ((per_run, "runs"), (cyc_a, "-N cycles")):
        if len(runs) < 2:
            continue
        shift = noise.shift_sigma(runs, sizes)
        if shift is None:
            continue
        source = f"the baseline's {len(runs)} {what}"
        floor = None if single else noise.jitter_floor(runs, sizes)
        if floor is not None and floor > shift:  # the medians agreed closer than their sizes' jitter allows
            shift, source = floor, f"{source} (their sizes' run-to-run jitter, more than the medians moved)"
        if least is not None and least.sigma > shift:
            shift, source = least.sigma, f"{source} (their {least.what} within runs, more than the runs moved)"
        return shift, len(runs) - 1, source, len(runs) if what == "runs" else 1
    return None


def instability(sizes: list[int], mine: dict[int, float], per_run: list[dict[int, float]],
                cyc_a: list[dict[int, float]], cyc_b: list[dict[int, float]], nz: Noise, limit_pct: float,
                metric: str, rough_sizes: list[int] | None = None) -> str | None:
    """Why the checked run cannot confirm a figure, or None: it is far noisier than the
    reference (like with like: -N cycle shifts when both have >= 3 cycles, else the
    size-to-size roughness of each run, over `rough_sizes`: the figure's size class, since a
    plateau of 2 sizes shows none) and its own noise could hide a change of the limit."""
    cand, ref = noise.cycle_spread(cyc_b, sizes), noise.cycle_spread(cyc_a, sizes)
    n = len(cyc_b)
    if cand is None or ref is None:
        cand = noise.roughness(mine, rough_sizes or sizes)
        ref = noise.pooled([noise.roughness(r, rough_sizes or sizes) for r in per_run])
        n = 0
    if cand is None or ref is None:
        return None
    z = noise.far_noisier(cand, ref, "bandwidth" if metric == "busbw" else "latency")
    if z is None:
        return None
    own = cand.sigma * (math.sqrt(noise.median_variance(n)) if n else
                        noise.MEDIAN_EFFICIENCY / math.sqrt(len(sizes)))
    if nz.multiple * own < noise.UNSTABLE_SHARE_OF_LIMIT * _worse_log(limit_pct, metric):
        return None  # noisier, but not enough to hide a change of the limit
    return (f"unstable candidate: cannot confirm; re-run (its {cand.what} {_pct_text(100 * math.expm1(cand.sigma))} "
            f"against the baseline's {_pct_text(100 * math.expm1(ref.sigma))})")


def _figures(sc: SeriesComparison, figure: str, metric: str) -> tuple[float | None, float | None]:
    """The figure's readable values (GB/s, us) in baseline and run."""
    if figure == "plateau busbw":
        return sc.plateau_a, sc.plateau_b
    if figure == "latency":
        return sc.latency_a, sc.latency_b
    size = int(figure.split()[1])
    d = next(x for x in sc.sizes if x.size == size)
    if metric == "busbw":
        return d.a.busbw if d.a else None, d.b.busbw if d.b else None
    return d.a.time_us if d.a else None, d.b.time_us if d.b else None


def _pct_text(v: float) -> str:
    return f"{v:.1f}%" if v < 1000 else ">1000%"


def _unit(metric: str) -> str:
    return "GB/s" if metric == "busbw" else "us"


def _rise_text(g: GateResult) -> str:
    if g.max_rise_pct is not None:
        return f"{g.max_rise_pct:g}%"
    return (f"{g.max_drop_pct:g}% (no --max-rise: the latency floor is judged against its noise alone, "
            "the smallest rise it detects is its limit)")


def can_see_text(nruns: int, j: Judgement) -> str:
    """'this 5-run baseline can see a latency rise of 24.0% or more': the noise's limit alone (the
    multiple x the noise, what the limit would be if nothing were asked), the figure's own words."""
    kind = {"plateau busbw": "a plateau drop", "latency": "a latency rise"}.get(
        j.figure, "a drop" if j.metric == "busbw" else "a rise")
    see = j.limit_pct if j.detectable_pct is None else j.detectable_pct
    return f"this {nruns}-run baseline can see {kind} of {_pct_text(see)} or more"


def _noise_text(n: Noise) -> str:
    if n.pct is None:
        return "noise unknown"
    return f"noise {_pct_text(n.pct)} x {n.multiple:g} from {n.source}"


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
    for j in g.judgements:
        sizes = (f"{human_size(j.sizes[0])}..{human_size(j.sizes[-1])}, {len(j.sizes)} sizes"
                 if len(j.sizes) > 1 else human_size(j.sizes[0]))
        if j.how:
            sizes += f"; {j.how}"
        worse = (f"{_pct_text(j.worse_pct)} {'lower' if j.metric == 'busbw' else 'higher'}"
                 if j.worse_pct >= 0 else f"{_pct_text(-j.worse_pct)} better")
        lines.append(f"{j.verdict:>10}  {j.series} {j.figure} ({sizes}): {_v(j.baseline)} -> {_v(j.value)} "
                     f"{_unit(j.metric)}; median change {worse} (limit {_pct_text(j.limit_pct)}; "
                     f"{can_see_text(g.baseline_runs, j)}; {_noise_text(j.noise)})"
                     + (f"; {j.not_judged}" if j.not_judged else ""))
    if g.regression:
        lines.append("result: REGRESSION at sizes " + ", ".join(str(s) for s in g.failing_sizes))
    elif g.unstable:
        lines.append("result: NOT JUDGED: unstable candidate: cannot confirm; re-run (exit 9)")
    elif g.cannot_confirm:
        lines.append("result: NOT JUDGED: cannot confirm: the baseline's noise is too wide to tell (exit 9)")
    else:
        lines.append(f"result: OK ({g.checked} figure{'s' if g.checked != 1 else ''} within limits)")
    lines.append(f"Summaries: {stats.PLATEAU_DEFINITION}; {stats.LATENCY_DEFINITION} "
                 f"{stats.FOOTER_NOTE}.")
    return "\n".join(lines) + "\n"


def gate_to_dict(g: GateResult) -> dict[str, Any]:
    return {"ok": g.ok, "status": g.status, "exit_code": g.exit_code,
            "max_drop_pct": g.max_drop_pct, "max_rise_pct": g.max_rise_pct,
            "baseline_runs": g.baseline_runs,
            "whole_run_noise_known": g.whole_run_noise_known, "noise_assumed": g.assumed,
            "definition": GATE_DEFINITION,
            "failing_sizes": g.failing_sizes, "failures": [asdict(f) for f in g.failures],
            "judgements": [{"series": j.series, "figure": j.figure, "metric": j.metric, "sizes": j.sizes,
                            "baseline": _nn(j.baseline), "value": _nn(j.value), "worse_pct": j.worse_pct,
                            "noise_pct": j.noise.pct, "noise_source": j.noise.source,
                            "noise_multiple": j.noise.multiple, "noise_assumed": j.noise.assumed,
                            "whole_run_noise_known": j.noise.whole_run_known, "limit_pct": j.limit_pct,
                            "failed": j.failed, "verdict": j.verdict.lower(), "asked_pct": j.asked_pct,
                            "detectable_pct": j.detectable_pct, "measured": j.how,
                            "cannot_confirm": j.cannot_confirm, "unstable": j.not_judged}
                           for j in g.judgements],
            "comparison": comparison_to_dict(g.comparison)}


class BaselineStore(Protocol):
    """What the gate reads from the result store (store/db.py's ResultStore)."""

    def get_baseline(self, name: str) -> int | None: ...
    def get_baseline_runs(self, name: str) -> list[int]: ...
    def get_run(self, run_id: int) -> Any: ...


def baseline_history(store: BaselineStore, name: str) -> tuple[int, list[int]]:
    """(reference run, its other runs) of a stored baseline; ArgumentError if unknown."""
    runs = store.get_baseline_runs(name)
    ref = store.get_baseline(name)
    if not runs or ref is None:
        raise ArgumentError(f"no baseline named {name!r} (set one with "
                            "`ncclbench baseline set NAME RUN`)")
    return ref, [r for r in runs if r != ref]


def check_against_baseline(store: BaselineStore, run_id: int, name: str, max_drop_pct: float = 5.0,
                           max_rise_pct: float | None = None,
                           placement: str = "out_of_place") -> GateResult:
    """For `ncclbench <test> --baseline NAME`: gate a just-stored run."""
    ref, more = baseline_history(store, name)
    history = [store.get_run(r) for r in more if r != run_id]
    return gate(store.get_run(run_id), store.get_run(ref), max_drop_pct, max_rise_pct, placement,
                history=history)


def gate_stored_run(store: BaselineStore, run_id: int, name: str, max_drop_pct: float = 5.0,
                    max_rise_pct: float | None = None, out: TextIO | None = None) -> int:
    """`ncclbench <test> ... --baseline NAME`: print the check of the run just
    stored and return its exit code (0 ok, 7 regression, 9 not judged)."""
    g = check_against_baseline(store, run_id, name, max_drop_pct, max_rise_pct)
    print(format_gate(g, name), end="", file=out or sys.stdout)
    return g.exit_code
