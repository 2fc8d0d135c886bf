"""Summary figures that answer "is this as good as before?".

nccl-tests' footer averages busbw over *every* size, so it mostly measures
how many small sizes the sweep had.  ncclbench summarises a sweep with two
numbers that mean something on their own, and says which:

* plateau busbw: the median busbw of the sizes within a factor of 4 of the
  largest (core.results.PLATEAU_DEFINITION: the one definition explain, the banner,
  --metrics, history, compare and check share);
* small-message latency: median time over the sizes <= 64 KiB.

Rows of size 0 (per-rank shares rounded down to nothing) carry no signal and
are left out everywhere.  A run can hold several series (-d all, -o all,
-r -1): each (type, op, root) is summarised on its own; repeated sizes (-N
cycles) are combined by their median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..core.results import PLATEAU_DEFINITION as PLATEAU_DEFINITION
from ..core.results import HalfResult, ResultRow, RunSummary
from ..core.results import plateau_sizes as _plateau_sizes
from .noise import RoundFigure

MiB, KiB = 1 << 20, 1 << 10
LATENCY_MAX_SIZE = 64 * KiB
MIN_NOISE_PCT = 2.0

LATENCY_DEFINITION = "latency = median time over sizes <= 64 KiB"
FOOTER_NOTE = "(not nccl-tests' 'Avg bus bandwidth', which averages over all sizes)"


@dataclass
class Point:
    """One size of one series (repeats already combined)."""

    size: int
    busbw: float
    time_us: float
    algbw: float
    spread_pct: float  # observed variation: per-iteration CV, spread of -N repeats (0 if unknown)
    repeats: int = 1
    t_min_us: float | None = None  # per-iteration min/max, when recorded
    t_max_us: float | None = None
    per_process_us: list[float] | None = None  # mean time per process, when recorded


@dataclass
class Series:
    type: str
    redop: str
    root: int
    points: list[Point] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.type, self.redop, self.root)

    @property
    def label(self) -> str:
        parts = [self.type]
        if self.redop not in ("", "none"):
            parts.append(self.redop)
        if self.root >= 0:
            parts.append(f"root {self.root}")
        return " ".join(parts)

    def point(self, size: int) -> Point | None:
        return next((p for p in self.points if p.size == size), None)

    @property
    def sizes(self) -> list[int]:
        return [p.size for p in self.points]


def _median(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def series_of(rows: list[ResultRow], placement: str = "out_of_place") -> list[Series]:
    """Group rows into series, in order of first appearance; sizes ascending."""
    groups: dict[tuple[str, str, int], dict[int, list[ResultRow]]] = {}
    for r in rows:
        if r.size <= 0:
            continue
        groups.setdefault((r.type, r.redop, r.root), {}).setdefault(r.size, []).append(r)
    out = []
    for (t, op, root), by_size in groups.items():
        s = Series(t, op, root)
        for size in sorted(by_size):
            halves = [getattr(r, placement) for r in by_size[size]]
            busbw = _median([h.busbw for h in halves])
            time_us = _median([h.time_us for h in halves])
            spread = 0.0
            cvs = [h.per_iter.cv_pct for h in halves if h.per_iter and not math.isnan(h.per_iter.cv_pct)]
            if cvs:
                spread = max(cvs)
            if len(halves) > 1:
                times = [h.time_us for h in halves if not math.isnan(h.time_us)]
                if len(times) > 1 and statistics.mean(times) > 0:
                    spread = max(spread, 100.0 * statistics.stdev(times) / statistics.mean(times))
            pis = [h.per_iter for h in halves if h.per_iter]
            t_min = min((p.min_us for p in pis), default=None)
            t_max = max((p.max_us for p in pis), default=None)
            per_proc = None
            ppm = next((p.per_process_max_times_us for p in pis if p.per_process_max_times_us), None)
            if ppm:
                skip = pis[0].skipped_iterations
                per_proc = [statistics.mean(row[skip:] or row) for row in ppm if row]
            s.points.append(Point(size, busbw, time_us, _median([h.algbw for h in halves]), spread,
                                  len(halves), t_min, t_max, per_proc))
        out.append(s)
    return out


def plateau_sizes(sizes: list[int]) -> list[int]:
    """core.results.plateau_sizes: within a factor of 4 of the largest."""
    return _plateau_sizes(sizes)


def latency_sizes(sizes: list[int]) -> list[int]:
    return sorted(s for s in set(sizes) if 0 < s <= LATENCY_MAX_SIZE)


def plateau_busbw(series: Series, sizes: list[int] | None = None) -> float | None:
    sizes = plateau_sizes(series.sizes) if sizes is None else sizes
    vals = [p.busbw for p in series.points if p.size in sizes and not math.isnan(p.busbw)]
    return statistics.median(vals) if vals else None


def latency_us(series: Series, sizes: list[int] | None = None) -> float | None:
    sizes = latency_sizes(series.sizes) if sizes is None else sizes
    vals = [p.time_us for p in series.points if p.size in sizes and not math.isnan(p.time_us)]
    return statistics.median(vals) if vals else None


def run_summary(rows: list[ResultRow], placement: str = "out_of_place") -> tuple[float | None, float | None]:
    """(plateau busbw, latency) of the first series: what `history` shows."""
    ss = series_of(rows, placement)
    if not ss:
        return None, None
    return plateau_busbw(ss[0]), latency_us(ss[0])


def resolution_pct(a: float, b: float, step: float = 0.01) -> float:
    """Relative size of one printed digit: text logs keep 2 decimals, so 0.01
    vs 0.02 GB/s is not a 100% change."""
    lo = min(abs(a), abs(b))
    return math.inf if lo == 0 else 100.0 * step / lo


def delta_pct(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or math.isnan(a) or math.isnan(b) or a == 0:
        return None
    return 100.0 * (b - a) / a


# ---------------------------------------------------------------- per-size values for the gate

SeriesKey = tuple[str, str, int]


def _value(half: HalfResult, per_iter_median: bool) -> float:
    """A size's time: the printed mean (what the gate uses: on the 2-core test
    machine under load, runs' medians of 3..20 iterations moved more from run to
    run than their means, bench/results/gate-false-alarms.md), or the median of
    the per-iteration times (-I)."""
    if per_iter_median and half.per_iter is not None and not math.isnan(half.per_iter.p50_us):
        return half.per_iter.p50_us
    return half.time_us


def cycle_values(rows: list[ResultRow], placement: str = "out_of_place",
                 per_iter_median: bool = False) -> dict[SeriesKey, list[dict[int, float]]]:
    """Per series, one {size: time} per -N cycle (the n-th time a size appears
    belongs to cycle n); one entry for a run without -N.  Size 0 is left out."""
    out: dict[SeriesKey, list[dict[int, float]]] = {}
    for r in rows:
        if r.size <= 0:
            continue
        cycles = out.setdefault((r.type, r.redop, r.root), [])
        v = _value(getattr(r, placement), per_iter_median)
        for c in cycles:
            if r.size not in c:
                c[r.size] = v
                break
        else:
            cycles.append({r.size: v})
    return out


def run_values(rows: list[ResultRow], placement: str = "out_of_place",
               per_iter_median: bool = False) -> dict[SeriesKey, dict[int, float]]:
    """Per series, {size: time}: the median over -N cycles."""
    out = {}
    for key, cycles in cycle_values(rows, placement, per_iter_median).items():
        sizes = sorted({s for c in cycles for s in c})
        out[key] = {s: _median([c[s] for c in cycles if s in c]) for s in sizes}
    return out


def _iteration_samples(rows: list[ResultRow], placement: str) -> Iterator[tuple[SeriesKey, int, int, float]]:
    """(series, size, samples kept, CV %) of every row with -I per-iteration samples."""
    for r in rows:
        p = getattr(r, placement).per_iter
        if r.size <= 0 or p is None or not p.times_us or math.isnan(p.cv_pct):
            continue
        yield (r.type, r.redop, r.root), r.size, max(1, len(p.times_us) - p.skipped_iterations), p.cv_pct


def iteration_noise(rows: list[ResultRow], placement: str = "out_of_place") -> dict[SeriesKey, dict[int, float]]:
    """Per series and size, the standard error of the printed mean time as a
    fraction of it, from the -I per-iteration samples (CV / sqrt(samples));
    sizes without samples are absent.  Repeats (-N) keep the largest."""
    out: dict[SeriesKey, dict[int, float]] = {}
    for key, size, n, cv_pct in _iteration_samples(rows, placement):
        se = cv_pct / 100.0 / math.sqrt(n)
        d = out.setdefault(key, {})
        d[size] = max(se, d.get(size, 0.0))
    return out


def iteration_counts(rows: list[ResultRow], placement: str = "out_of_place") -> dict[SeriesKey, dict[int, int]]:
    """Per series and size, how many -I samples its standard error (`iteration_noise`) rests on
    (the fewest over -N repeats): its degrees of freedom are that less one."""
    out: dict[SeriesKey, dict[int, int]] = {}
    for key, size, n, _ in _iteration_samples(rows, placement):
        d = out.setdefault(key, {})
        d[size] = min(n, d.get(size, n))
    return out


def has_per_iter(rows: list[ResultRow], placement: str = "out_of_place") -> bool:
    return any(getattr(r, placement).per_iter is not None for r in rows if r.size > 0)


# ---------------------------------------------------------------- the gate's latency rounds (--gate)

def gate_round_values(summary: RunSummary | None, placement: str = "out_of_place") -> dict[SeriesKey, list[dict[int, float]]]:
    """Per series, one {size: time} per gate round (run/gate_rounds.py: the small sizes measured
    again for the gate, `RunSummary.gate_latency`); {} for a run measured without --gate."""
    g = getattr(summary, "gate_latency", None) if summary is not None else None
    out: dict[SeriesKey, list[dict[int, float]]] = {}
    for s in (g or {}).get("series", []):
        rounds = []
        for r in s.get(placement) or []:
            rounds.append({int(size): float(t) for size, t in zip(s["sizes"], r)
                           if t is not None and not math.isnan(float(t)) and float(t) > 0})
        if rounds:
            out[(s["type"], s["redop"], int(s["root"]))] = rounds
    return out


def round_profile(rounds: list[dict[int, float]], figure: RoundFigure) -> dict[int, float]:
    """A run's gated small-message times: per size one value of its rounds, `figure` says which
    (noise.round_figure: by the backend, and why).  MEDIAN: the median of the size's rounds (on 2
    GPUs a round's level is drawn per fresh communicator and the fastest of 10 flips between two
    levels from run to run, where the median stays on the common one).  FASTEST: its fastest round
    (the CPU backend, where a round is at the floor or lifted whole by the shared cores).  A real
    rise in what an op costs lifts every round."""
    sizes = sorted({s for r in rounds for s in r})
    pick = _median if figure is RoundFigure.MEDIAN else _fastest
    return {s: pick([r[s] for r in rounds if s in r]) for s in sizes}


def _fastest(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return min(xs) if xs else math.nan


def gate_rounds_renew(summary: RunSummary | None) -> str:
    """What each of a run's gate rounds measured afresh (run/gate_rounds.py): "process",
    "communicator" or "nothing"; "communicator" for runs recorded before the record said it
    (their rounds were each on a fresh communicator where the backend made one)."""
    g = getattr(summary, "gate_latency", None) if summary is not None else None
    return str((g or {}).get("renews", "communicator"))


def gate_rounds_text(summary: RunSummary | None) -> str | None:
    """How a run's gated figure was measured ('8 rounds, each in a fresh NCCL communicator'), or None."""
    g = getattr(summary, "gate_latency", None) if summary is not None else None
    if not g:
        return None
    return f"{g.get('rounds')} rounds, each {g.get('fresh', 'on the run communicator')}"
