"""Judging one round: robust statistics over the fleet in this run.

A group's bandwidth is compared with the other groups of the same shape in
the same run: the median is the reference and the spread is the median
absolute deviation scaled to a standard deviation (1.4826 * MAD), which a
few slow groups cannot drag.  With few groups (the 8 rails of a fleet) the
MAD itself is uncertain - its relative standard error is about 1.16/sqrt(n)
for normal data - so the spread is taken one standard error up.  And
run-to-run noise is never zero, so a spread that comes out tiny is floored
at a fraction of the median, as together's find_stragglers does with
max(stdev, 0.5 % of the median).  Our floor is 1 %: this repo's recorded
all_reduce busbw at >= 64 MiB moved by up to 2.06 % (max-min) over 3 runs,
sigma ~1.2 % (bench/results/compare-2026-11-21-repeats-2gpu-busbw.json), and with 0.5 % a
rail 1.5 % low by chance read as -4 sigma in the simulated fleets
(bench/results/health-sim.md).  Latency is judged the same way, higher being worse, with a
larger floor (small-message times move by 8-15 % between processes:
bench/results/gpu-h200x4-2026-11-21-hypercube.md).

A stored baseline for the cluster is a second reference: it is reported
beside the fleet's (z against the baseline) and, when fewer groups answered
than a fleet statistic needs, it is the reference.  The third is physics
(`physics.PhysicsRef`): the explain model's ceiling of the group's shape with
a threshold at the scan's size; it judges every group whose ceiling is known,
beside the fleet or alone.  With none of the three, a group is "not judged" -
an unknown is said to be unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from math import erf, exp, lgamma, log, sqrt
from typing import TYPE_CHECKING

import numpy as np

from ...core.robust import MAD_TO_SIGMA

if TYPE_CHECKING:
    from .physics import PhysicsRef


MAD_SE = 1.16  # relative standard error of the MAD-based sigma is ~1.16/sqrt(n) (37 % efficiency)

# A measurement that does not repeat is not judged: when fewer than half of a group's
# timed cycles lie within these ratios of their median, its figure says more about
# the host's scheduler than about the fabric.  On GPUs the cycles of one group agree
# within a few per cent; on the CPU backend with 6 ranks on 2 shared, loaded cores
# they ranged 2-30x (latency 23-829 us, busbw 0.07-0.6 GB/s between identical pairs).
STABLE_BW_RATIO = 1.5
STABLE_LAT_RATIO = 2.0
# Nor is a fleet whose groups scatter this much (MAD / median): with half the groups 50 %
# off the median there is no "normal" to compare a group with (seen: 8-byte latencies of
# 23 us to 3 ms between identical shaped pairs on a loaded machine).
SCATTER_LIMIT = 0.5

OK, SLOW, NO_ANSWER, WRONG, UNJUDGED = "ok", "slow", "no answer", "wrong results", "not judged"
CONTROL = "control"  # measured as a later round's yardstick, not judged itself (`RoundShift`)


@dataclass(frozen=True)
class Thresholds:
    suspect_z: float = 3.5  # a group this far below the reference is measured again
    confirm_z: float = 3.5  # a second measurement this far below confirms the fault
    bw_floor: float = 0.01  # spread floor, fraction of the median (together: 0.5 %; see above)
    # latency spread floor, fraction of the median: small-message times moved 0.5-0.9 us between
    # two runs of one command on 6-8 us (8-15 %, bench/results/gpu-h200x4-2026-11-21-hypercube.md)
    lat_floor: float = 0.15
    min_groups: int = 3  # fewer answering groups make no fleet reference (the MAD of 3 is already rough)
    fleet_fault_fraction: float = 0.25  # more groups than this slow: a fleet-wide problem, not a node
    # A group below this fraction of the reference median is slow whatever its z: with
    # three or four groups the MAD is the healthy groups' own scatter and even a 7x
    # slowdown can stay under the z limit (seen across 6 namespace hosts sharing 2 cores).
    gross_fraction: float = 0.5
    # ... but only while the fleet is that small: from this many groups the MAD is a usable
    # spread (relative error 1.16/sqrt(8) = 41 %), and the z says what is normal.  Over 13 host
    # pairs on 2 shared cores, healthy pairs measured 0.14-0.96 GB/s (z down to -2.2): the rule
    # made two 29 % figures of one healthy host a conviction (CI, 2026-11-26).  Baselines
    # (n = 0: a stored spread) keep it.
    gross_max_groups: int = 7
    judge_latency: bool = True  # False: latency is measured and reported, never a verdict
    floor_source: str = ("GPU: all_reduce busbw >= 64 MiB moved up to 2.06 % over 3 runs "
                         "(bench/results/compare-2026-11-21-repeats-2gpu-busbw.json), small-message time 8-15 % between runs "
                         "(bench/results/gpu-h200x4-2026-11-21-hypercube.md)")

    def describe(self) -> str:
        """The thresholds every verdict of the scan used, with where the floors come from."""
        lat = (f"latency z > +{self.confirm_z:g}" if self.judge_latency else "latency not judged")
        return (f"slow at busbw z < -{self.suspect_z:g} (then confirmed at z < -{self.confirm_z:g} on a new "
                f"communicator, against the round's controls), {lat}, or busbw under "
                f"{self.gross_fraction:.0%} of the fleet median while it has at most {self.gross_max_groups} groups; "
                f"spread floored at {self.bw_floor:.0%} of the median (busbw) and {self.lat_floor:.0%} (latency): "
                f"{self.floor_source}")


# The CPU backend's floors (fractions of the median).  Its figures are the scheduler's as much
# as the transport's: on the 2-core CI machine, healthy local-phase (memory copy) figures sat
# 3.6 % MAD-sigma from their round's median, but 5 % of them fell 23 % below it and 1 % 33 %
# (latency: +55 % / +62 %), one process at a time; floors at the 1 % tail / the z limit keep such
# dips from reading as -4 sigma (bench/results/health-cpu-noise-2026-11-26.md).  GPU figures
# keep the GPU floors above.
CPU_BW_FLOOR = 0.10
CPU_LAT_FLOOR = 0.20
CPU_FLOOR_SOURCE = ("CPU backend: the 1 % tail of healthy figures on a shared 2-core machine / the z limit "
                    "(bench/results/health-cpu-noise-2026-11-26.md)")


def thresholds_for(gpus: bool, judge_latency: bool = True) -> Thresholds:
    """The thresholds of a scan on GPUs (NCCL) or on the CPU backend (its own noise floors)."""
    if gpus:
        return Thresholds(judge_latency=judge_latency)
    return Thresholds(bw_floor=CPU_BW_FLOOR, lat_floor=CPU_LAT_FLOOR, judge_latency=judge_latency,
                      floor_source=CPU_FLOOR_SOURCE)


@dataclass(frozen=True)
class Reference:
    center: float
    spread: float  # after the floor
    n: int  # groups it was computed from
    source: str  # "fleet" or "baseline"
    raw_spread: float = 0.0  # before the floor

    def z(self, values: np.ndarray | float) -> np.ndarray:
        return (np.asarray(values, dtype=float) - self.center) / self.spread

    def describe(self, unit: str) -> str:
        return f"{self.source} median {self.center:.4g} {unit}, spread {self.spread:.3g} (n={self.n})"


def robust_reference(values: Sequence[float] | np.ndarray, floor: float, min_groups: int = 5,
                     source: str = "fleet") -> Reference | None:
    """Median and 1.4826*MAD of the finite values, one standard error up, floored;
    None below min_groups."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size < max(1, min_groups):
        return None
    center = float(np.median(v))
    raw = MAD_TO_SIGMA * float(np.median(np.abs(v - center)))
    spread = max(raw * (1 + MAD_SE / np.sqrt(v.size)), floor * abs(center), 1e-12)
    return Reference(center, spread, int(v.size), source, raw)


def _chi2_sf(x: float, df: int) -> float:
    """P(chi-square with df degrees of freedom > x): the regularized upper incomplete gamma
    Q(df/2, x/2), by its series below a + 1 and its continued fraction above (Numerical Recipes 6.2)."""
    a, x = 0.5 * df, 0.5 * x
    if x <= 0.0:
        return 1.0
    log_front = -x + a * log(x) - lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        k = a
        while abs(term) > 1e-15 * abs(total):
            k += 1.0
            term *= x / k
            total += term
        return max(0.0, 1.0 - total * exp(log_front))
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return exp(log_front) * h


@lru_cache(maxsize=256)
def chi2_bound(df: int, limit_z: float) -> float:
    """The sum of squared deviations from their mean, in variances, that df + 1 figures of one noise
    exceed by chance as rarely as two figures' difference exceeds `limit_z` x sqrt(2) (2 Phi(-limit_z),
    4.7e-4 at 3.5): the chi-square quantile with df degrees of freedom.  For two figures (df = 1) the
    sum is half their squared difference and the bound is exactly limit_z ** 2: their difference
    within limit_z x sqrt(2) standard deviations.  Per degree of freedom the bound falls toward 1 as
    the figures grow in number (at 3.5: 12.25 for df 1, 4.05 for 6, 2.66 for 15, 1.70 for 62, 1.32
    for 254, 1.15 for 1022): many figures tell their noise well, and a fleet a fifth noisier than
    the floor (variance 1.44x) is told from it from about 256 groups."""
    if df < 1:
        return float("inf")
    if df == 1:
        return limit_z * limit_z
    p = 1.0 - erf(limit_z / sqrt(2.0))  # 2 Phi(-limit_z)
    lo, hi = 0.0, df + 20.0 * sqrt(2.0 * df) + 4.0 * limit_z * limit_z
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _chi2_sf(mid, df) > p else (lo, mid)
    return hi


@dataclass(frozen=True)
class FloorNoiseReference(Reference):
    """A reference whose spread is the recorded noise floor, not its groups' own (`floor_noise_reference`)."""


def floor_noise_reference(ref: Reference, values: Sequence[float] | np.ndarray, floor: float,
                          limit_z: float) -> Reference:
    """A fleet reference with the recorded noise floor as its spread, where `values` (the figures
    a group is judged against) agree with that noise: the intra phase's reference at every fleet
    size (`localize.RepeatScan._fleet_refs`).

    A fleet's own spread is a MAD: relative error 1.16/sqrt(n), taken one standard error up.  With
    2 to 6 other groups (3 to 7 hosts, `localize.RepeatScan._leave_one_out`) that is 82-47 % and
    1.82-1.47x: two healthy NVLink groups 2.6 % apart made a spread of 3.5 %, under which a host 10 %
    slow read z -2.8 and was never measured again (found in 77 % of simulated 3-host fleets and 84 %
    of 4-host ones, 98 % of both against the floor: 200 fleets each on held-out seeds,
    bench/results/health-sim-model-2026-11-28-intra.md).  From 8 groups the slow group is one of
    the figures the MAD is taken over, and it lifts it: at 8 hosts the MAD came out 1.5-2.7 % of
    the median in the fleets that missed a -10 % NVLink (the noise is 1.2 %), 2.1-3.8 % one
    standard error up (1.41x), and the slow host read z -2.4 to -4.7 - a suspect in 12 of 32
    misses, whose confirmation then read -2.8 to -3.4 against the same spread: 84 % found
    (bench/results/health-sim-model-2026-11-28-intra-large.md).
    What the figures do tell is their level.  The noise of one group's figure against the median
    of n figures is the scan's noise floor (`Thresholds.bw_floor`, the run-to-run spread of these
    groups as recorded, `Thresholds.floor_source`, which every scan prints with its thresholds) times
    sqrt(1 + 1/n) (n = `ref.n`), the others carrying noise too.

    Only where the figures agree with that noise: their squared deviations summing beyond
    `chi2_bound` floor variances (a chi-square test with n - 1 degrees of freedom, failed by
    figures of the floor's noise as rarely as two figures' difference exceeds `limit_z` times the
    floor's noise of a difference, the bound for two, which it equals there) say the fleet scatters
    more than the record, or that one of them is off, and the reference keeps its own spread (`ref`,
    unchanged).  The test scales with the number of figures: a bound on their range fixed at two
    figures' (4.95 floors) would call the figures of a fleet at the floor's own noise "scattered"
    in 3.5 % of 16-host fleets (15 others), 31 % of 64-host ones and 91 % of 256-host ones, at the
    simulated 1.2 % noise in 19 %, 80 % and all; and where many figures show a noise above the
    floor (a 256-host fleet at 1.2 %, variance 1.44 floors against a bound of 1.32), their own
    spread, by then well determined, judges them.

    A later round rescales such a reference by its controls whether or not they moved
    (`RoundShift`): its center is the fleet round's figures, whose chance error a confirmation
    against them would share with the first verdict."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if ref.source != "fleet" or v.size < 2 or not ref.center:
        return ref
    sigma = floor * abs(ref.center)
    if float(np.sum((v - v.mean()) ** 2)) > chi2_bound(int(v.size) - 1, limit_z) * sigma * sigma:
        return ref
    spread = sigma * float(np.sqrt(1.0 + 1.0 / ref.n))
    source = (f"fleet ({v.size} other groups, within the noise floor of each other; spread: the recorded "
              f"floor {100 * floor:g} % x sqrt(1 + 1/{ref.n}), its source in the thresholds)")
    return FloorNoiseReference(ref.center, spread, ref.n, source, ref.raw_spread)


@dataclass(frozen=True)
class Baseline:
    """A stored reference per group shape: {shape: (busbw median, spread)}, same for latency."""

    busbw: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    lat_us: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    name: str = "baseline"
    hosts: tuple[str, ...] = ()  # the hosts it was saved from (empty: not recorded, an older file)
    version: str = ""  # the ncclbench version that saved it (empty: not recorded, an older file)

    def reference(self, shape: str, metric: str, floor: float) -> Reference | None:
        table = self.busbw if metric == "busbw" else self.lat_us
        if shape not in table:
            return None
        center, spread = table[shape]
        return Reference(center, max(spread, floor * abs(center)), 0, f"baseline {self.name}", spread)


@dataclass
class RoundResult:
    """What one round measured, one entry per group (NaN: no answer or not measured)."""

    busbw: np.ndarray  # GB/s at the bandwidth size
    lat_us: np.ndarray  # µs at the latency size
    wrong: np.ndarray  # wrong elements found by the bit-exact check (0 when clean)
    errors: dict[int, str] = field(default_factory=dict)  # group -> why it gave no answer
    wall_s: float = 0.0
    # group -> why it is not judged: its bandwidth cycles disagreed (see STABLE_BW_RATIO)
    unstable: dict[int, str] = field(default_factory=dict)
    # group -> why its latency alone is not judged (its latency cycles disagreed)
    unsteady_lat: dict[int, str] = field(default_factory=dict)
    # group -> why its busbw is an upper bound, not a figure: a straggler still measuring when
    # the round was cut (health/runtime/live_rounds.py STRAGGLER_K); busbw holds the bound; the whole-phase
    # model (`pair_model.Measurement.upper_bound`) takes it as a censored measurement
    upper_bound: dict[int, str] = field(default_factory=dict)
    # group -> the most ranks of its round on one of its devices, where ranks share devices
    # (`sharing.round_loads`); absent: 1 (every rank on a device of its own)
    load: dict[int, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, n: int) -> RoundResult:
        return cls(np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=np.int64))


@dataclass(frozen=True)
class References:
    busbw: Reference | None
    lat_us: Reference | None
    base_busbw: Reference | None = None
    base_lat_us: Reference | None = None
    notes: tuple[str, ...] = ()  # why a metric of this shape is not judged

    @property
    def judged(self) -> bool:
        return self.busbw is not None


def references(values_bw: np.ndarray, values_lat: np.ndarray, shape: str, thr: Thresholds,
               baseline: Baseline | None = None) -> References:
    """The fleet references of one group shape, the baseline's beside them.  When the
    fleet is too small for its own statistic, the baseline takes its place."""
    bw = robust_reference(values_bw, thr.bw_floor, thr.min_groups)
    lat = robust_reference(values_lat, thr.lat_floor, thr.min_groups)
    notes = []
    for name, ref, unit in (("busbw", bw, "GB/s"), ("latency", lat, "us")):
        if ref is not None and ref.raw_spread > SCATTER_LIMIT * abs(ref.center):
            notes.append(f"{shape}: {name} not judged: the fleet's groups scatter too much to say what is normal "
                         f"(MAD-sigma {ref.raw_spread:.3g} {unit} on a median of {ref.center:.3g} {unit}, "
                         f"over {SCATTER_LIMIT:.0%})")
    if bw is not None and bw.raw_spread > SCATTER_LIMIT * abs(bw.center):
        bw = None
    if lat is not None and lat.raw_spread > SCATTER_LIMIT * abs(lat.center):
        lat = None
    base_bw = baseline.reference(shape, "busbw", thr.bw_floor) if baseline else None
    base_lat = baseline.reference(shape, "lat_us", thr.lat_floor) if baseline else None
    return References(bw or base_bw, lat or base_lat, base_bw, base_lat, tuple(notes))


@dataclass(frozen=True)
class RoundShift:
    """How a later round as a whole moved against the fleet round(s), read from its controls:
    groups that were ok in a fleet round, run again beside the suspects.

    A fleet round's reference holds the spread between groups measured at one time, not how
    a whole round moves from one minute to the next: on a shared machine (the 2-core CPU
    backend, a rank that hung and left its partners spinning) a later round ran 2x slower
    as a whole and convicted healthy links against the fleet round's figures.  Judging the
    suspects against the reference scaled by their own round's controls is a paired
    comparison: what moved the whole round cancels, a fault does not.

    Only a round that moved is rescaled: the controls' mean ratio carries their own noise, and
    widening every later round's spread for it cost the simulated 16-host fleet a tenth of its
    -10 % NVLink faults (found 97 % -> 84-87 %, `bench/health_sim.py`).  So the reference is
    scaled (its spread widened by sqrt(1 + 1/n) for the controls' noise) only where the round's
    movement is beyond MOVED_Z standard errors of that mean (a control's ratio taken to scatter
    like sqrt(2) groups of the reference); otherwise the suspect is judged as before, and the
    evidence says the controls did not move.

    Except a reference with the noise floor as its spread (`FloorNoiseReference`, the intra groups'
    where they agree with the floor): its center is the other groups' fleet-round figures, and a
    suspect confirmed against them shares their chance error with its first verdict (others high by
    chance make a healthy host "slow" twice).  Its controls are those groups measured again beside
    the suspect, so the reference is always scaled by them (spread widened as above): the
    confirmation then rests on figures of its own round.  Kept unscaled, such a reference had
    doubled the false alarms of simulated 3-host fleets whose run-to-run noise is 2.5x the
    recorded one (the floor judges them too strictly there, as it does any phase); scaled, they
    stay near what the MAD made of them (bench/results/health-sim-model-2026-11-28-intra.md).  At 8
    and 16 hosts (the median of all the groups as center) scaling halved the false alarms of
    healthy fleets at 2 % noise against rescaling only a round that moved (13 -> 6 and 14 -> 8 of
    1000, seed 11, bench/results/health-sim-model-2026-11-28-intra-large.md)."""

    bw: float  # control busbw now / in its fleet round (geometric mean over the controls)
    lat: float | None  # control latency now / in its fleet round (None: no latency figure)
    n: int  # independent controls (host sets) it was read from
    text: str  # what the controls measured, for the evidence

    @classmethod
    def from_ratios(cls, bw: Sequence[float], lat: Sequence[float], n: int) -> RoundShift | None:
        """From the controls' ratios (now / fleet round); None without a busbw ratio."""
        if not bw:
            return None
        f_bw = _geometric_mean(bw)
        f_lat = _geometric_mean(lat) if lat else None
        lat_text = f", latency {f_lat:.2f}x" if f_lat is not None else ""
        text = f"this round's {n} control(s) ran at {f_bw:.2f}x their fleet-round busbw{lat_text}"
        return cls(f_bw, f_lat, n, text)

    def apply(self, refs: References) -> References:
        """The references scaled by the round's movement where it moved (see the class)."""
        return References(self._scaled(refs.busbw, self.bw), self._scaled(refs.lat_us, self.lat),
                          refs.base_busbw, refs.base_lat_us, refs.notes)

    def _scaled(self, ref: Reference | None, factor: float | None) -> Reference | None:
        """ref scaled by factor where the round moved; None where the controls gave no factor."""
        if ref is None or factor is None or not np.isfinite(factor) or factor <= 0:
            return None
        n = max(1, self.n)
        rel = ref.spread / abs(ref.center) if ref.center else float("inf")
        if abs(np.log(factor)) <= MOVED_Z * rel * np.sqrt(2.0 / n) and not isinstance(ref, FloorNoiseReference):
            return replace(ref, source=f"{ref.source} ({self.text}: within their noise, not rescaled)")
        widen = float(np.sqrt(1.0 + 1.0 / n))
        return Reference(ref.center * factor, ref.spread * factor * widen, ref.n,
                         f"{ref.source} x{factor:.2f} ({self.text})", ref.raw_spread * factor)


MOVED_Z = 2.0  # a round moved when its controls' mean ratio is this many standard errors from 1


def _geometric_mean(ratios: Sequence[float]) -> float:
    return float(np.exp(np.log(np.asarray(ratios, dtype=float)).mean()))


@dataclass
class Score:
    """The verdict on each group of one round."""

    status: list[str]  # OK / SLOW / NO_ANSWER / WRONG / UNJUDGED per group
    z_bw: np.ndarray
    z_lat: np.ndarray
    why: list[str]  # one line of evidence per group ("" when ok)
    # per group, what was bad: "bw", "lat", "bw+lat", "no answer", "wrong" ("" when ok)
    symptom: list[str] = field(default_factory=list)
    # per group, its verdict against the ceiling of its shape ("" where no ceiling is known)
    physics: list[str] = field(default_factory=list)
    # per group, whether the ceiling's threshold alone makes it slow (an absolute verdict, which
    # needs no fleet, baseline or control)
    below_ceiling: list[bool] = field(default_factory=list)

    def bad(self) -> np.ndarray:
        return np.array([s in (SLOW, NO_ANSWER, WRONG) for s in self.status], dtype=bool)


def symptoms(text: str) -> set[str]:
    """The parts of a symptom ("bw+lat" -> {"bw", "lat"}).  A fault shows the same symptom
    each time it is measured; two bad measurements of different kinds (a latency spike,
    then a bandwidth dip) corroborate nothing."""
    return set(text.split("+")) if text else {"?"}


def score(result: RoundResult, refs: References, limit_z: float, gross_fraction: float = 0.0,
          physics: PhysicsRef | None = None, gross_max_groups: int = 1 << 30) -> Score:
    """Each group against the references: slow when busbw z < -limit, or busbw below
    gross_fraction x the reference median, or latency z > +limit; and against physics
    (the ceiling of its shape, `physics`): slow below its threshold, with or without a
    fleet.  A group with no fleet or baseline reference is judged by physics alone; above
    the model (or with no threshold at this size) it is not judged."""
    n = len(result.busbw)
    bw = np.asarray(result.busbw, dtype=float)
    lat = np.asarray(result.lat_us, dtype=float)
    z_bw = refs.busbw.z(bw) if refs.busbw else np.full(n, np.nan)
    z_lat = refs.lat_us.z(lat) if refs.lat_us else np.full(n, np.nan)
    no_answer, wrong, unstable = _unmeasured(result, bw)
    m = _slow_masks(result, refs, bw, z_bw, z_lat, limit_z, gross_fraction, physics, gross_max_groups)
    has_ref = refs.busbw is not None
    judged = np.full(n, has_ref) | ((m.threshold is not None) & ~m.above)
    slow = ~no_answer & ~wrong & ~unstable & judged & (m.slow_bw | m.slow_lat | m.slow_phys)
    status = np.full(n, OK, dtype=object)
    status[~judged] = UNJUDGED
    status[unstable] = UNJUDGED
    status[slow] = SLOW
    status[wrong] = WRONG
    status[no_answer] = NO_ANSWER
    phys = [_physics_line(physics, float(bw[i]), bool(m.slow_phys[i]), bool(m.above[i])) if np.isfinite(bw[i]) else ""
            for i in range(n)]
    symptom = [""] * n
    for i in np.flatnonzero(slow):
        symptom[i] = "+".join(k for k, on in (("bw", m.slow_bw[i] or m.slow_phys[i]), ("lat", m.slow_lat[i])) if on)
    for i in np.flatnonzero(wrong):
        symptom[i] = "wrong"
    for i in np.flatnonzero(no_answer):
        symptom[i] = "no answer"
    why = [""] * n
    for i in np.flatnonzero(status != OK):
        if no_answer[i]:
            why[i] = result.errors.get(int(i), "no answer")
        elif wrong[i]:
            why[i] = f"{int(result.wrong[i])} wrong elements (bit-exact check)"
        elif unstable[i]:
            why[i] = f"not judged: {result.unstable[int(i)]}"
        elif status[i] == UNJUDGED:
            why[i] = "no reference: too few groups of this shape for fleet statistics and no baseline" + (
                f"; against the ceiling: {phys[i]}" if phys[i] else "; no ceiling known for its shape")
        else:
            why[i] = _slow_why(int(i), refs, bw, lat, z_bw, z_lat, m, phys[i])
    return Score(list(status), z_bw, z_lat, why, symptom, phys, [bool(x) for x in slow & m.slow_phys])


def _unmeasured(result: RoundResult, bw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(no answer, wrong elements, unstable): the groups whose figure is no measurement to judge."""
    n = len(bw)
    no_answer = ~np.isfinite(bw)
    if result.errors:
        no_answer[list(result.errors)] = True
    wrong = ~no_answer & (np.asarray(result.wrong) > 0)
    unstable = np.zeros(n, dtype=bool)
    if result.unstable:
        unstable[list(result.unstable)] = True
    unstable &= ~no_answer & ~wrong
    return no_answer, wrong, unstable


@dataclass(frozen=True)
class _SlowMasks:
    """Per group: slow by busbw z (or gross), by latency z, by physics; above the model."""

    slow_bw: np.ndarray
    gross: np.ndarray
    slow_lat: np.ndarray
    slow_phys: np.ndarray
    above: np.ndarray
    threshold: float | None


def _slow_masks(result: RoundResult, refs: References, bw: np.ndarray, z_bw: np.ndarray, z_lat: np.ndarray,
                limit_z: float, gross_fraction: float, physics: PhysicsRef | None,
                gross_max_groups: int) -> _SlowMasks:
    """Which references call each group slow; the fleet's ones only where a reference exists."""
    n = len(bw)
    threshold = physics.threshold if physics is not None else None
    with np.errstate(invalid="ignore"):
        slow_bw = z_bw < -limit_z
        gross = (bw < gross_fraction * refs.busbw.center) if refs.busbw and refs.busbw.n <= gross_max_groups \
            else np.zeros(n, dtype=bool)
        slow_bw |= gross
        slow_lat = np.isfinite(z_lat) & (z_lat > limit_z)
        if result.unsteady_lat:
            slow_lat[list(result.unsteady_lat)] = False
        slow_phys = (bw < threshold) if threshold is not None else np.zeros(n, dtype=bool)
        above = (bw > physics.above) if physics is not None else np.zeros(n, dtype=bool)
    if refs.busbw is None:
        slow_bw[:] = False
        slow_lat[:] = False
    return _SlowMasks(slow_bw, gross, slow_lat, slow_phys, above, threshold)


def _slow_why(i: int, refs: References, bw: np.ndarray, lat: np.ndarray, z_bw: np.ndarray, z_lat: np.ndarray,
              m: _SlowMasks, phys: str) -> str:
    """Why group i is slow: each reference that says so, with its figure."""
    parts = []
    if m.slow_bw[i] and refs.busbw is not None:
        share = f" ({100 * bw[i] / refs.busbw.center:.0f} % of it)" if m.gross[i] else ""
        parts.append(f"busbw {bw[i]:.4g} GB/s, z {z_bw[i]:+.1f} vs {refs.busbw.describe('GB/s')}{share}")
    if m.slow_lat[i] and refs.lat_us is not None:
        parts.append(f"latency {lat[i]:.4g} us, z {z_lat[i]:+.1f} vs {refs.lat_us.describe('us')}")
    if m.slow_phys[i]:
        parts.append(phys)
    return "; ".join(parts)


def _physics_line(physics: PhysicsRef | None, value: float, slow: bool, above: bool) -> str:
    """A group's verdict against the ceiling of its shape, with the threshold and its source."""
    if physics is None:
        return ""
    pct = f"{value:.4g} GB/s = {100 * value / physics.ceiling:.0f} % of the {physics.ceiling:.4g} GB/s " \
          f"{physics.bound} ceiling"
    if above:
        return f"above the model: {pct}, over {physics.above:.4g} GB/s: {physics.above_why}"
    if physics.threshold is None:
        return f"not judged against the ceiling: {pct}; {physics.why_not}"
    prov = ", provisional" if physics.provisional else ""
    if slow:
        return f"below the ceiling's threshold: {pct}, under {physics.threshold:.4g} GB/s{prov}"
    return f"within the ceiling: {pct}, over the {physics.threshold:.4g} GB/s threshold{prov}"


def fleet_shift(refs: References, thr: Thresholds, shape: str) -> str | None:
    """A line when this run's fleet median sits well below the stored baseline (every
    group slow at once is a fleet-wide change - a driver, NCCL version, fabric setting -,
    not a node fault, and fleet-relative z-scores cannot see it)."""
    fleet, base = refs.busbw, refs.base_busbw
    if fleet is None or base is None or fleet.source != "fleet":
        return None
    z = (fleet.center - base.center) / base.spread
    if z < -thr.confirm_z:
        drop = 100.0 * (1 - fleet.center / base.center)
        return (f"{shape}: fleet median busbw {fleet.center:.4g} GB/s is {drop:.1f} % below {base.source} "
                f"({base.center:.4g} GB/s, z {z:+.1f}): a fleet-wide change, not one component")
    return None


def percent_of(expected: Mapping[str, float] | None, shape: str, value: float) -> float | None:
    """value as % of the expected ceiling of its shape (the explain model), when known."""
    if not expected or shape not in expected or not np.isfinite(value) or expected[shape] <= 0:
        return None
    return 100.0 * value / expected[shape]
