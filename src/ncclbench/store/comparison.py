"""Compare two runs size by size (`ncclbench compare`, and the comparison the gate judges).

Sizes are matched within series of the same (type, op, root).  A size's change is marked beyond
noise when it is larger than that size's noise: the change the gate would need to see at that
size judged on its own (`check --every-size`: the baseline's -N cycles, else its -I samples, else
the prior for its backend, system and size class, times the noise's multiple: figure_noise.py),
or the resolution of the printed numbers where larger.  Each series also gets the figures the
gate judges, the plateau busbw and the latency floor (summary_stats.py); the gate itself is
gate.py, the text and JSON of a comparison comparison_format.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..core.errors import ArgumentError
from . import summary_stats as stats
from .baseline_rules import refuse_one_rank, refuse_other_collective
from .figure_noise import iteration_sigma, reference_noise, run_system
from .gate_figures import Metric
from .run_like import RunLike
from .summary_stats import Point, Series, SeriesKey


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
    key_a: SeriesKey
    key_b: SeriesKey
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


def _warnings(a: RunLike, b: RunLike) -> list[str]:
    """What makes the two runs less than like with like (printed, not refused)."""
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
    return warnings


def compare_runs(a: RunLike, b: RunLike, placement: str = "out_of_place", *,
                 strict: bool = False) -> Comparison:
    """strict (the gate): the same collective, series matched by (type, op, root) only.
    A run of one rank is refused (ArgumentError): it moves no data."""
    refuse_one_rank(a, b)
    if strict:
        refuse_other_collective(a, b)
    warnings = _warnings(a, b)
    size_noise = _SizeNoise(a, placement)
    out = [_compare_series(sa, sb, size_noise)
           for sa, sb in _match(stats.series_of(a.rows, placement), stats.series_of(b.rows, placement),
                                warnings, fuzzy=not strict)]
    if not any(d.a and d.b for sc in out for d in sc.sizes):
        raise ArgumentError(f"nothing to compare: {a.label} and {b.label} have no "
                            f"{'series and ' if not out else ''}sizes in common")
    return Comparison(a.label, b.label, describe(a), describe(b), placement, out, warnings)


def _compare_series(sa: Series, sb: Series, size_noise: _SizeNoise) -> SeriesComparison:
    """One series of A against its match in B: every size of either, and the summary figures
    over the sizes both have."""
    deltas = []
    for size in sorted(set(sa.sizes) | set(sb.sizes)):
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
    return SeriesComparison(
        label, sa.key, sb.key, deltas, psizes, lsizes,
        stats.plateau_busbw(sa, psizes), stats.plateau_busbw(sb, psizes),
        stats.latency_us(sa, lsizes), stats.latency_us(sb, lsizes))


class _SizeNoise:
    """The change one size must exceed to be marked by `compare`: the gate's own noise for that
    size judged on its own (`reference_noise`, as --every-size: A's -N cycles, else its -I samples,
    else the prior for the backend, system and size class), times the noise's multiple.  A per-size
    CV floor of 2 % marked 20 of 24 sizes of two identical CPU runs (issue 32 item 4)."""

    def __init__(self, a: RunLike, placement: str):
        self.a, self.placement = a, placement
        self.values = stats.run_values(a.rows, placement)
        self.cycles = stats.cycle_values(a.rows, placement)
        self.iters = stats.iteration_noise(a.rows, placement)
        self.counts = stats.iteration_counts(a.rows, placement)
        self.system = run_system(a)

    def pct(self, key: SeriesKey, size: int) -> float:
        metric = Metric.of_size(size)
        per_run = [self.values[key]] if key in self.values else []
        nz = reference_noise([size], per_run, self.cycles.get(key, []), self.a.info.backend, metric, single=True,
                             iters=iteration_sigma(self.iters.get(key, {}), self.counts.get(key, {}), [size]),
                             system=self.system)
        return 100.0 * math.expm1(nz.multiple * nz.sigma) if nz.sigma is not None else stats.MIN_NOISE_PCT
