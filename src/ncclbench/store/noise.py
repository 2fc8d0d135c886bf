"""How much two runs of an unchanged system differ: the noise the gate judges against.

A regression gate that compares raw deltas fails identical runs (issue 13: two
back-to-back CPU runs differed by +11 % .. +569 % at small sizes).  Run-to-run
differences have two parts, and only one of them can be seen in a single pair
of runs:

* size-to-size scatter: each size's time wobbles on its own.  Seen in the pair
  itself: the per-size log ratios of the two runs scatter around their median.
* whole-run shifts: the machine was busier during one run (another job, a
  different core placement), so every size moved together.  One pair cannot
  tell that from a regression; it takes several runs: the baseline's history
  (a baseline of several runs of the same command), or the `-N` cycles of
  each run (every cycle is a sweep of its own).

So each judged quantity (a summary over several sizes, or one size) gets
the median of its per-size log ratios as its change, and a noise figure (one
standard deviation, in percent) with the source it came from; when only the
scatter is known, the source says that the noise of whole runs is unknown.
Pure functions on per-size values: stats.py turns stored rows into those.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAD_TO_SIGMA = 1.4826  # robust standard deviation from the median absolute deviation
MEDIAN_EFFICIENCY = 1.2533  # sqrt(pi/2): standard error of a median over a mean's

# How many standard deviations a change must exceed: 3 for a noise known exactly
# (one false alarm in 740 judged figures), more when the noise itself was estimated
# from few runs -- Student's t quantile at the same probability (0.99865) for the
# degrees of freedom the estimate had (scipy.stats.t.ppf(norm.cdf(3), dof)).
_T_3SIGMA = ((1, 235.8), (2, 19.21), (3, 9.22), (4, 6.62), (5, 5.51), (6, 4.90), (7, 4.53), (8, 4.28),
             (9, 4.09), (10, 3.96), (12, 3.76), (15, 3.59), (20, 3.42), (30, 3.27), (50, 3.16), (100, 3.08))


def noise_multiple(dof: int | None) -> float:
    """Standard deviations a change must exceed, for a noise estimated with `dof`
    degrees of freedom (None: treated as known, 3)."""
    if dof is None:
        return 3.0
    m = _T_3SIGMA[0][1]
    for d, t in _T_3SIGMA:
        if dof >= d:
            m = t  # the largest tabulated dof not above ours: never less strict than exact
    return m if dof < 1000 else 3.0


def robust_sigma(values: Sequence[float]) -> float | None:
    """Standard deviation of whole-run shifts: the sample standard deviation, not
    a median-based one.  Run-to-run shifts on a busy host are heavy-tailed (a
    run that lost its cores for a while is 10x slower at small sizes); a
    median-based estimate ignores those runs and so promises a gate fewer false
    alarms than it gives, while one busy run widening the noise only errs on the
    safe side.  None for fewer than 2 values."""
    xs = [x for x in values if not math.isnan(x)]
    if len(xs) < 2:
        return None
    return statistics.stdev(xs)


def log_ratios(a: Mapping[int, float], b: Mapping[int, float], sizes: Sequence[int]) -> dict[int, float]:
    """ln(b/a) per size, for sizes where both values are positive."""
    out = {}
    for s in sizes:
        va, vb = a.get(s), b.get(s)
        if va and vb and va > 0 and vb > 0 and not (math.isnan(va) or math.isnan(vb)):
            out[s] = math.log(vb / va)
    return out


def median_change(ratios: Mapping[int, float]) -> float | None:
    """The change of a group of sizes: the median of their log ratios (one slow
    size, or one lucky one, does not move it)."""
    return statistics.median(ratios.values()) if ratios else None


def scatter_sigma(ratios: Mapping[int, float]) -> float | None:
    """Standard error of `median_change` from the size-to-size scatter of the
    ratios alone (assumes the sizes wobble independently); None for < 3 sizes."""
    if len(ratios) < 3:
        return None
    xs = list(ratios.values())
    m = statistics.median(xs)
    sigma = MAD_TO_SIGMA * statistics.median([abs(x - m) for x in xs])
    return MEDIAN_EFFICIENCY * sigma / math.sqrt(len(xs))


def reference_profile(runs: Sequence[Mapping[int, float]]) -> dict[int, float]:
    """Per-size median over several runs (the baseline's history): sizes that
    at least half of the runs measured."""
    sizes = sorted({s for r in runs for s in r})
    out = {}
    for s in sizes:
        vals = [r[s] for r in runs if s in r and r[s] > 0 and not math.isnan(r[s])]
        if vals and 2 * len(vals) >= len(runs):
            out[s] = statistics.median(vals)
    return out


def shift_sigma(runs: Sequence[Mapping[int, float]], sizes: Sequence[int]) -> float | None:
    """How far whole runs (or cycles) move against each other: the spread of each
    run's median log ratio to the per-size median of them all; None for < 2 runs."""
    if len(runs) < 2:
        return None
    ref = reference_profile(runs)
    shifts = [median_change(log_ratios(ref, r, sizes)) for r in runs]
    return robust_sigma([s for s in shifts if s is not None])


@dataclass(frozen=True)
class Noise:
    """One standard deviation of a judged change (log units) and where it came from.
    `whole_run_known`: the part whole-run shifts add was measured (history or
    cycles); False when only the size-to-size scatter of the pair was seen."""

    sigma: float | None
    source: str
    whole_run_known: bool
    dof: int | None = None  # degrees of freedom of the estimate (sets the multiple a change must exceed)

    @property
    def multiple(self) -> float:
        return noise_multiple(self.dof)

    @property
    def pct(self) -> float | None:
        return None if self.sigma is None else 100.0 * math.expm1(self.sigma)


def _median_variance(n: int) -> float:
    """Variance of a median of n values, in units of one value's variance
    (a mean for n <= 2; the median's pi/2 efficiency loss from 3 on)."""
    n = max(1, n)
    return 1.0 / n if n <= 2 else MEDIAN_EFFICIENCY ** 2 / n


def combine(scatter: float | None, shift: float | None, shift_source: str | None,
            n_reference: int = 1, n_checked: int = 1, *, shift_dof: int | None = None,
            scatter_dof: int | None = None) -> Noise:
    """The noise of a change between a reference (the median of `n_reference`
    runs or cycles) and a checked value (the median of `n_checked`): whole-run
    shifts (sigma `shift`, measured from `shift_source`) hit both sides, shrunk
    by the medians taken; the size scatter of this very pair is the floor (a
    shift estimate from few runs can come out too small by chance)."""
    if shift is not None:
        spread = shift * math.sqrt(_median_variance(n_checked) + _median_variance(n_reference))
        if scatter is not None and scatter > spread:
            return Noise(scatter, f"the size-to-size scatter of the two runs (more than {shift_source} show)",
                         True, scatter_dof)
        return Noise(spread, shift_source or "runs", True, shift_dof)
    if scatter is not None:
        return Noise(scatter, "the size-to-size scatter of the two runs (noise of whole runs unknown)", False,
                     scatter_dof)
    return Noise(None, "unknown (too few sizes, one run each)", False)
