"""How much two runs of an unchanged system differ: the noise the gate judges against.

A regression gate that compares raw deltas fails identical runs (issue 13: two
back-to-back CPU runs differed by +11 % .. +569 % at small sizes).  Run-to-run
differences have two parts:

* size-to-size scatter: each size's time wobbles on its own;
* whole-run shifts: the machine was busier during one run (another job, a
  different core placement), so every size moved together.

The noise a change is judged against comes from the REFERENCE alone (issue 22):
the baseline's history (several runs of the same command), the -N cycles of the
baseline run (every cycle is a sweep of its own), or, for one size, its -I
samples.  Never from the checked run: a regression that makes the checked run
noisy would otherwise widen its own limit (a -44.6 % drop passed a 5 % gate so).
Where the reference carries no noise information, a declared prior per backend
and size class stands in (`PRIORS`, each from recorded figures), and the verdict
says "assumed".  How noisy the checked run is gets its own verdict
(`figure_noise.instability`): far noisier than the reference cannot confirm anything.

So each judged quantity (a summary over several sizes, or one size) gets the
median of its per-size log ratios as its change, and a noise figure (one
standard deviation, in log units) with the source it came from.  Pure functions
on per-size values: summary_stats.py turns stored rows into those.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.robust import MAD_TO_SIGMA

MEDIAN_EFFICIENCY = 1.2533  # sqrt(pi/2): standard error of a median over a mean's

# How many standard deviations a change must exceed: one-sided probability 0.995 that an
# unchanged system stays inside (one false alarm in 200 judged figures, a check judges about 2)
# for a noise known exactly (2.576), more when the noise itself was estimated from few runs:
# Student's t quantile t(0.995, dof) for the degrees of freedom the estimate had.  (Issue 13's
# 3 sigma with t at 0.99865 let a -44.6 % drop pass a 3-run baseline whose runs spread 8 %:
# t(0.99865, 2) = 19.2 standard deviations.)
#
# One rule for every limit (`noise_multiple`): Student's t at the degrees of freedom of the
# estimate the noise was taken from, and every estimate the baseline carries updates the prior by
# its own dof (`posterior`): its runs, its -N cycles, and, for a baseline of one run, its size-to-size
# roughness on that roughness's effective dof (`roughness_dof`); the -I samples' (n - 1) for one
# size.  2.576 is the limit of t at infinite dof, never a figure of its own: the roughness once
# replaced the prior with 2.576 while the prior was judged with t on its dof, so a roughness just
# above the prior gave a NARROWER limit than the prior (the issue-31 CPU case: "noise 58.4% x 2.576
# from assumed: the baseline's own size-to-size roughness 32.5% per run").
CONFIDENCE = 0.995
_T = ((1, 63.66), (2, 9.925), (3, 5.841), (4, 4.604), (5, 4.032), (6, 3.707), (7, 3.499), (8, 3.355),
      (9, 3.250), (10, 3.169), (12, 3.055), (15, 2.947), (19, 2.861), (20, 2.845), (24, 2.797), (30, 2.750),
      (40, 2.704), (50, 2.678), (100, 2.626))
Z_KNOWN = 2.576


def noise_multiple(dof: float | None) -> float:
    """Standard deviations a change must exceed, for a noise estimated with `dof` degrees of
    freedom: t(0.995, dof), from the table at the largest tabulated dof not above `dof` (never
    less strict than exact; below 1 dof, as 1).  None: a noise known exactly, 2.576 (no figure
    of the gate is: every estimate carries its dof)."""
    if dof is None:
        return Z_KNOWN
    m = _T[0][1]
    for d, t in _T:
        if dof >= d:
            m = t
    return m if dof < 1000 else Z_KNOWN


# A prior recorded on another machine or day weighs at most as much as this many degrees of
# freedom (runs - 1) of the baseline's own history: after about as many runs the baseline speaks
# for itself.  (A prior of 90 recorded runs would otherwise outweigh any history a team keeps.)
PRIOR_MAX_DOF = 20


@dataclass(frozen=True)
class Prior:
    """A declared run-to-run noise (one standard deviation of a whole run's figure, log
    units) for a backend, system and size class, the recorded figures it comes from, and
    the degrees of freedom those figures carry (runs - 1, at most PRIOR_MAX_DOF): the
    prior's weight when the baseline's own runs update it (`posterior`)."""

    sigma: float
    evidence: str
    dof: int = 1
    # Known only as an upper bound (a kind of measurement not yet recorded on this system): it
    # stands in where the baseline measured nothing, and is never pooled with what it measured
    # (`posterior`), since pooling would pull a quieter measurement back to the bound.
    upper_bound: bool = False


# Where the reference carries no noise of its own (one run, no -N cycles): what runs of the
# same command were measured to move by.  (device, size class) -> Prior; size class 'latency'
# is sizes <= 64 KiB (time judged), 'bandwidth' the larger ones (busbw judged).
PRIORS: dict[tuple[str, str], Prior] = {
    ("cpu", "bandwidth"): Prior(0.05, "CPU backend plateau busbw, 10-run baselines on a shared 2-core VM: "
                                      "noise 5.1 % median (bench/results/gate-false-alarms.md)", 9),
    # Whole-run shifts of small-message time (shift_sigma over each collection's identical runs,
    # leave one out): 17.7 % over 25 runs of `-n 12` on a quiet VM (load 0.1-2, commit 9fac3c2:
    # bench/results/gate-trials-cpu-2026-11-26-quiet.md); 6.1 % over 19 runs of `-n 40` under
    # load 3-4 (bench/results/gate-false-alarms.md); 29.1 % over 25 runs of `-n 40` at load 0.2-3.6
    # while other engineers' tests ran (bench/results/gate-trials-cpu-2026-11-28-first.md); 144-184 %
    # under load 4-13 (the first two gate-trials collections of 2026-11-26, left out: a machine that
    # loaded is not one to gate small messages on).  The prior is the largest of the rest: more
    # iterations did not make whole runs move less when the cores were shared.
    ("cpu", "latency"): Prior(0.29, "CPU backend small-message time over namespace hosts: whole runs "
                                    "shift 29.1 % (1 sd, 25 identical -n 40 runs, 2-core VM shared with "
                                    "other tests, bench/results/gate-trials-cpu-2026-11-28-first.md; 17.7 % "
                                    "quiet at -n 12, gate-trials-cpu-2026-11-26-quiet.md; 6.1 % at -n 40, "
                                    "gate-false-alarms.md)", PRIOR_MAX_DOF),
    # GPU plateau busbw, whole-run shifts pooled on their dof: about 3 % per run over 5 runs per tool
    # on 4x H200 (4 dof, bench/results/gpu-h200x4-2026-11-21-repeats.md), 0.83 % over 25 identical runs on
    # 2x H200 (24 dof, leave one out, bench/results/gate-trials-gpu-2026-11-28-2xH200/): pooled
    # sqrt((4 x 3.0^2 + 24 x 0.83^2) / 28) = 1.37 %, weighed as PRIOR_MAX_DOF.
    ("gpu", "bandwidth"): Prior(0.0137, "GPU plateau busbw, whole runs shift 1.37 % (1 sd) pooled over 3 % "
                                        "on 4 dof (4x H200, bench/results/gpu-h200x4-2026-11-21-repeats.md) and 0.83 % "
                                        "on 24 dof (25 identical runs, 2x H200, "
                                        "bench/results/gate-trials-gpu-2026-11-28-2xH200/)", PRIOR_MAX_DOF),
    # GPU small-message time: coefficient of variation of per-run means 0.132 over 90 runs on one
    # H100 (bench/results/stability-h100-2026-11-24/README.md), whole-run shift 10.89 % over 25
    # identical runs on 2x H200 (24 dof, bench/results/gate-trials-gpu-2026-11-28-2xH200/): pooled on
    # 89 + 24 dof, sqrt((89 x 13.2^2 + 24 x 10.89^2) / 113) = 12.7 %, weighed as PRIOR_MAX_DOF.
    ("gpu", "latency"): Prior(0.127, "GPU small-message time, whole runs shift 12.7 % (1 sd) pooled over 13.2 % "
                                     "(90 runs, one H100, bench/results/stability-h100-2026-11-24/README.md) and "
                                     "10.9 % (25 identical runs, 2x H200, "
                                     "bench/results/gate-trials-gpu-2026-11-28-2xH200/)", PRIOR_MAX_DOF),
}

# The gate's latency figure of runs measured for the gate (`--gate`, run/gate_rounds.py: the small
# sizes again in several rounds, each on a fresh communicator where the backend makes one): per size
# one value of the run's rounds, which one by the backend (`ROUND_FIGURE`), then the median over sizes.
# What moves it between runs is the machine's state over minutes, not the process: on 1x H200
# (2026-11-28, bench/results/gate-rounds-1xH200-2026-11-28/) rounds that were each a process of their
# own agreed within 3 % inside a run while the runs drifted 12 % (the fastest round) to 38 % (the median
# of rounds) over four minutes.
GATED_LATENCY = "latency rounds"


class RoundFigure(str, enum.Enum):
    """Which value of a run's gate rounds stands for each size (summary_stats.round_profile)."""

    MEDIAN = "median"  # per size the median of its rounds
    FASTEST = "fastest"  # per size the fastest round

    @property
    def text(self) -> str:
        """How the verdict line and the run's footer name it."""
        return "per size the median of its rounds" if self is RoundFigure.MEDIAN else "per size the fastest round"


# Which value of the rounds per size, by device class (device_class), and why.  Run-to-run spread of
# the two figures (1 sd per run, leave one out, identical runs):
#
# * GPU (NCCL), 2x H200, NCCL 2.28.9: a round's level is drawn per fresh communicator (7-8 us or
#   10-11 us), and the fastest of 10 rounds flips between the two levels from run to run while the
#   median of rounds stays on the common one.  Median of rounds against fastest round: 2.1 % / 7.0 %
#   (C loop, 7 runs of 10 rounds, f0e8fa2) and 3.3 % / 4.5 % (nccl4py, 7 runs), both
#   bench/results/gate-latency-2026-11-28-pm/cloop-2xH200-f0e8fa2.md; 6.1 % / 2.9 % (5 runs of 20 rounds,
#   1eb0992, rounds20-2xH200-1eb0992.md there); 5.7 % / 5.7 % (8 runs of 5 rounds, 0e379b5,
#   bench/results/gate-rounds-1xH200-2026-11-28/2xH200/gate-rounds-ab.md); and, held out to judge the
#   choice, 4.2 % / 12.9 % over the 25 runs of the 10-round trial (5e57f0c,
#   bench/results/gate-latency-2026-11-28-pm/README.md section 4).  The median: GPU.  (The fastest round
#   was chosen first from one GPU, broadcast of one rank: no peer and no such two levels, and a run the
#   gate refuses to judge.)
# * CPU backend, 2 namespace hosts on a shared 2-core VM, 25 runs of 10 rounds (c6b0e35): fastest round
#   26.5 %, median of rounds 46.6 % (bench/results/gate-rounds-1xH200-2026-11-28/README.md,
#   bench/results/gate-trials-cpu-latency-2026-11-28.md): the shared cores lift rounds whole, the
#   fastest is at the floor.  The fastest: CPU.
ROUND_FIGURE: dict[str, RoundFigure] = {"gpu": RoundFigure.MEDIAN, "cpu": RoundFigure.FASTEST}


def round_figure(backend: str) -> RoundFigure:
    """The value of a run's gate rounds that stands for each size, for runs of `backend` (ROUND_FIGURE)."""
    return ROUND_FIGURE[device_class(backend)]


# The priors of the gated figure, each for its backend's figure.  GPU, the median of rounds on 2x H200
# (the collections above, the 10-round trial 5e57f0c held out): 2.1 % (C loop, 6 dof) and 3.3 % (nccl4py,
# 6 dof), 6.1 % (20 rounds, 4 dof), 5.7 % (morning A/B, 7 dof) -- pooled
# sqrt((6 x 2.1^2 + 6 x 3.3^2 + 4 x 6.1^2 + 7 x 5.7^2) / 23) = 4.5 %, 23 dof weighed as PRIOR_MAX_DOF.
# (The fastest round's GPU prior was 11.7 %, pooled over 4.68 % and 10.1 % on 1x H200 and 16.2 % and
# 5.7 % on 2x H200, bench/results/gate-rounds-1xH200-2026-11-28/.)  CPU backend, the fastest round over
# 2 namespace hosts on the shared 2-core VM, 26.5 % over 25 runs (24 dof, 10 rounds,
# bench/results/gate-trials-cpu-latency-2026-11-28.md's collection judged again).  Pooled with a
# baseline's own runs like every prior: a few quiet runs must not set the limit alone (there, 5 runs
# agreeing within 6.9 % judged a run lifted 2.06x whole a regression).
PRIORS[("gpu", GATED_LATENCY)] = Prior(
    0.045, "GPU gated small-message time (per size the median of its rounds), whole runs shift 4.5 % (1 sd) "
           "pooled over 2.1 % (C loop, 7 runs) and 3.3 % (nccl4py, 7 runs), "
           "bench/results/gate-latency-2026-11-28-pm/cloop-2xH200-f0e8fa2.md, 6.1 % (20 rounds, 5 runs, "
           "rounds20-2xH200-1eb0992.md there) and 5.7 % (8 runs, "
           "bench/results/gate-rounds-1xH200-2026-11-28/2xH200/gate-rounds-ab.md), all 2x H200",
    PRIOR_MAX_DOF)
PRIORS[("cpu", GATED_LATENCY)] = Prior(
    0.265, "CPU backend gated small-message time (per size the fastest round), whole runs shift 26.5 % (1 sd, "
           "25 runs over 2 namespace hosts on a shared 2-core VM, bench/results/gate-rounds-1xH200-2026-11-28/)",
    PRIOR_MAX_DOF)

# Priors of one system where recorded figures single it out: (device, system, size class), the
# system as `system_of` names it.  CPU runs across several hosts move at the pace of their links,
# not of the shared cores: plateau busbw of pairs of identical runs over 2 tbf-shaped namespace
# hosts moved 0.01-0.07 % per run (1 sd, 20 pairs each, four collections at load <= 2.2) and
# 1.6 % under load 3.6-8.8 (bench/results/gate-trials-cpu-2026-11-26*.json: identical, 1-run
# baseline); the prior is the loaded figure, the largest.
SYSTEM_PRIORS: dict[tuple[str, str, str], Prior] = {
    ("cpu", "several hosts", "bandwidth"): Prior(
        0.016, "CPU backend plateau busbw across 2 namespace hosts on shaped links: pairs of identical runs "
               "moved 1.6 % per run under load 3.6-8.8, 0.01-0.07 % at load <= 2.2 (1 sd, 20 pairs each, "
               "bench/results/gate-trials-cpu-2026-11-26*.json)", 19),
}


def system_of(backend: str, hosts: Sequence[str], gpu_models: Sequence[str]) -> str:
    """The system a prior is looked up for: 'one host' / 'several hosts' on the CPU backend
    (the pace is set by the cores or by the links), the GPU model(s) on GPUs."""
    if device_class(backend) == "cpu":
        return "several hosts" if len(set(hosts)) > 1 else "one host"
    return ", ".join(sorted(set(gpu_models))) or "unknown GPU"


def prior_for(backend: str, size_class: str, system: str | None = None) -> Prior:
    """The prior of this system where one is recorded, else of the backend's device class."""
    dev = device_class(backend)
    return SYSTEM_PRIORS.get((dev, system or "", size_class)) or PRIORS[(dev, size_class)]


@dataclass(frozen=True)
class Posterior:
    """A figure's whole-run noise after the baseline's runs updated its prior."""

    sigma: float
    dof: float
    source: str
    far_noisier: bool  # the baseline's runs disagree with the prior: they alone set the noise


def posterior(prior: Prior, measured: float | None, measured_dof: float, what: str) -> Posterior:
    """The prior (a scaled-inverse-chi-square on the variance of one run's log figure, scale
    prior.sigma^2, prior.dof degrees of freedom) updated by the baseline's own estimate
    `measured` on `measured_dof` degrees of freedom: the dof-weighted pooled variance, on the
    sum of the dof (Gelman et al., Bayesian Data Analysis, sec. 3.3: the conjugate update
    with known mean).  A 3-run baseline so gets a limit near the prior's rather than
    Student's t on 2 dof.  Where the baseline is far noisier than its prior (the log variance
    ratio beyond Z_KNOWN of its sampling spread, sqrt(2/dof1 + 2/dof2)) the prior does not
    describe this machine: the baseline's runs alone set the noise (Student's t on their dof),
    and the source says so.  A baseline far quieter than its prior is pooled all the same: few
    runs agree closely by chance, and small-message time jumps by whole runs rarely (3 identical
    CPU runs within 3 % then a fourth 34 % slower: gate trials 2026-11-26, quiet2), so only
    many runs outweigh the prior."""
    cite = f"prior {100 * prior.sigma:g}% per run on {prior.dof} dof ({prior.evidence})"
    if measured is None or measured_dof <= 0:
        return Posterior(prior.sigma, prior.dof, f"assumed: {cite}", False)
    if prior.upper_bound:
        return Posterior(measured, measured_dof, f"{what}, {100 * measured:.1f}% per run (not pooled: the "
                         f"{cite} is only an upper bound)", False)
    ratio = measured ** 2 / prior.sigma ** 2 if prior.sigma > 0 else math.inf
    if ratio > 1 and math.log(ratio) / math.sqrt(2 / measured_dof + 2 / prior.dof) > Z_KNOWN:
        return Posterior(measured, measured_dof, f"{what}, {100 * measured:.1f}% per run: far noisier than "
                         f"the {cite}, which is left out", True)
    dof = prior.dof + measured_dof
    sigma = math.sqrt((prior.dof * prior.sigma ** 2 + measured_dof * measured ** 2) / dof)
    return Posterior(sigma, dof, f"{what} ({100 * measured:.1f}% per run on {measured_dof:.3g} dof) pooled with "
                     f"the {cite}", False)


def device_class(backend: str) -> str:
    """'cpu' for the CPU (MPI) backend, 'gpu' for NCCL runs and imported nccl-tests logs."""
    return "cpu" if backend == "mpi" else "gpu"


def prior_noise(backend: str, size_class: str, n_reference: int = 1, n_checked: int = 1,
                system: str | None = None) -> Noise:
    """The declared noise of a change between two runs (each side the median of its cycles),
    judged with Student's t on the prior's degrees of freedom (its predictive distribution)."""
    p = prior_for(backend, size_class, system)
    spread = p.sigma * math.sqrt(median_variance(n_checked) + median_variance(n_reference))
    return Noise(spread, f"assumed: {100 * p.sigma:g}% per run on {p.dof} dof, {p.evidence}", False, p.dof,
                 assumed=True)


def roughness_dof(rough: Spread, size_class: str) -> float:
    """The degrees of freedom a size-to-size roughness carries as an estimate of a noise: its
    second differences' dof over ROUGHNESS_SCATTER_INFLATION (ln of its square scatters that many
    times more between identical runs than 2 / dof says, so it is worth that many times fewer dof)."""
    return rough.dof / ROUGHNESS_SCATTER_INFLATION.get(size_class.split()[0], 1.0)


def assumed_noise(backend: str, size_class: str, rough: Spread | None = None, system: str | None = None) -> Noise:
    """The noise of a change where the reference measured none: the declared prior, updated by
    the reference's own size-to-size roughness where that is larger (a baseline measured on a
    machine whose sizes jittered by 40 % says more about it than a 7 % prior), as any estimate
    updates it (`posterior`), on the roughness's effective dof (`roughness_dof`): a roughness
    far beyond the prior stands alone, one a little above it moves the prior a little.  A quieter
    roughness says nothing (sizes of one run wobble less than whole runs shift).  Like the prior,
    the roughness is a stand-in, not a measured run-to-run noise: "assumed"."""
    prior = prior_noise(backend, size_class, system=system)
    p = prior_for(backend, size_class, system)
    if rough is None or rough.sigma <= p.sigma:
        return prior
    post = posterior(dataclasses.replace(p, upper_bound=False), rough.sigma, roughness_dof(rough, size_class),
                     "the baseline's own size-to-size roughness")
    return Noise(post.sigma * math.sqrt(2), f"assumed: {post.source}", False, post.dof, assumed=True)


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


def leave_one_out_ratios(runs: Sequence[Mapping[int, float]], sizes: Sequence[int]) -> list[dict[int, float]]:
    """Each run's log ratios to the per-size median of the OTHER runs: a run is never
    judged against a profile it is part of (`shift_sigma` says why), so `shift_sigma`
    and `jitter_floor` read the same leave-one-out comparison."""
    return [log_ratios(reference_profile([*runs[:i], *runs[i + 1:]]), r, sizes) for i, r in enumerate(runs)]


def shift_sigma(runs: Sequence[Mapping[int, float]], sizes: Sequence[int]) -> float | None:
    """How far whole runs (or cycles) move against each other, as one run's standard
    deviation: each run's median log ratio to the per-size median of the OTHER runs
    (leave one out), d_i; for values x_i with variance s^2, sum(d_i^2) has expectation
    n^2 s^2 / (n - 1), hence s = sqrt((n - 1) sum(d_i^2)) / n.  Leaving the run out
    matters: against a profile it is part of (with 3 runs each size's median IS one of
    them) a run's median ratio comes out ~0 whatever the sizes do, and on a busy host 3
    runs whose small sizes jittered 10x measured a noise of 0.0 % (3 false alarms in 20,
    bench/results/gate-trials-cpu-2026-11-26.md).  None for < 2 runs."""
    n = len(runs)
    if n < 2:
        return None
    d = [m for m in map(median_change, leave_one_out_ratios(runs, sizes)) if m is not None]
    if len(d) < 2:
        return None
    return math.sqrt((len(d) - 1) * sum(x * x for x in d)) / len(d)


def jitter_floor(runs: Sequence[Mapping[int, float]], sizes: Sequence[int]) -> float | None:
    """The least a figure moves between runs (or cycles), one run's standard deviation:
    each run's figure is the median of its sizes, so it moves at least by the standard
    error that its sizes' own run-to-run jitter gives that median.  The jitter is the
    size-to-size scatter of each run's log ratios to the other runs' profile
    (`scatter_sigma`: MAD-based, so structure every run shares, such as the bend where
    latency gives way to bandwidth, cancels), less the other runs' part of it, pooled over
    the runs.  A floor for `shift_sigma` on few runs: 3 runs whose medians agreed by chance
    within 1.5 % while their small sizes jittered 13 % between runs measured a noise of
    1.9 % and failed an identical run 37 % slower, on a quiet VM whose runs shift 17.7 %
    (gate trials 2026-11-26, trial 6 of the 3-run baselines).  None for < 2 runs or < 3 sizes."""
    n = len(runs)
    if n < 2:
        return None
    v = [se * se / (1 + median_variance(n - 1))
         for se in map(scatter_sigma, leave_one_out_ratios(runs, sizes)) if se is not None]
    return math.sqrt(sum(v) / len(v)) if v else None


@dataclass(frozen=True)
class Noise:
    """One standard deviation of a judged change (log units) and where it came from.
    `whole_run_known`: the part whole-run shifts add was measured (history or
    cycles); False when only the size-to-size scatter of the pair was seen."""

    sigma: float | None
    source: str
    whole_run_known: bool
    dof: float | None = None  # degrees of freedom of the estimate (sets the multiple a change must exceed)
    assumed: bool = False  # a declared prior (PRIORS), not measured on the reference
    # The reference's own whole-run shift per run (log units) and its dof, before `posterior`
    # pooled it with the prior; None where it measured none.  A projection to more runs pools
    # this with the prior (baseline_advice.py): `sigma` has the prior in it already.
    measured: tuple[float, float] | None = None

    @property
    def multiple(self) -> float:
        return noise_multiple(self.dof)

    @property
    def pct(self) -> float | None:
        return None if self.sigma is None else 100.0 * math.expm1(self.sigma)


def median_variance(n: int) -> float:
    """Variance of a median of n values, in units of one value's variance
    (a mean for n <= 2; the median's pi/2 efficiency loss from 3 on)."""
    n = max(1, n)
    return 1.0 / n if n <= 2 else MEDIAN_EFFICIENCY ** 2 / n


# Variance of the smallest of n independent normal values, in units of one value's variance (the
# order statistics' tables; checked by simulation, 400 000 draws each); beyond 10 the Gumbel limit
# (pi^2 / 6) / (2 ln n), within 1.3 % of simulation from n = 15.
_MIN_VARIANCE = {1: 1.0, 2: 0.6817, 3: 0.5595, 4: 0.4917, 5: 0.4475, 6: 0.4159, 7: 0.3919, 8: 0.3729, 9: 0.3574,
                 10: 0.3443}


def min_variance(n: int) -> float:
    """Variance of the minimum of n values, in units of one value's variance (normal values)."""
    n = max(1, n)
    return _MIN_VARIANCE.get(n) or (math.pi ** 2 / 6) / (2 * math.log(n))


def combine(shift: float, shift_source: str, n_reference: int = 1, n_checked: int = 1, *,
            shift_dof: float | None = None) -> Noise:
    """The noise of a change between a reference (the median of `n_reference`
    runs or cycles) and a checked value (the median of `n_checked`): whole-run
    shifts (sigma `shift`, measured on the reference from `shift_source`) hit
    both sides, shrunk by the medians taken.  A shift estimate from few runs can
    come out too small by chance: the multiple (Student's t at `shift_dof`) pays
    for that, for normal shifts; 3 runs that agree by chance closer than their
    sizes' jitter allows get `jitter_floor` instead (figure_noise.reference_noise).  (A
    standard-deviation size scatter was tried as a floor earlier: with 4..6 plateau
    sizes, two of them jittering 15 % on shaped links, it put the limit at 12-20 %
    while the medians of identical runs moved 0.3 %; the floor is MAD-based, of the
    runs' ratios to each other, and replaces the measured shift only where larger.)"""
    spread = shift * math.sqrt(median_variance(n_checked) + median_variance(n_reference))
    return Noise(spread, shift_source, True, shift_dof)


# ---------------------------------------------------------------- how noisy the checked run is

# A checked run is "far noisier" than its reference when its own spread is larger at this
# one-sided probability (a false "unstable" in 1000 checks of an unchanged system)...
Z_UNSTABLE = 3.09
# ...and large enough to hide a change of the figure's limit: the checked run's own standard
# error on the figure, times the multiple, above this fraction of the limit.
UNSTABLE_SHARE_OF_LIMIT = 0.5
# Second differences of iid values have 6x their variance; overlapping ones are correlated,
# so n of them carry about n / 1.94 degrees of freedom (1 + 2 (16 + 1) / 36).
_D2_VARIANCE, _D2_DOF_SHARE = 6.0, 1.94
# How far ln(roughness^2) of identical runs really scatters, as a multiple of the 2 / dof that a
# sample variance of normal values would have.  The spread is a median absolute value of few
# overlapping second differences, and a run's sizes wobble heavy-tailed (one size that blips in
# half the runs, a plateau smooth to the printed resolution but for one size), so the normal
# theory promised 1 false "unstable" in 1000 and gave ~10 % (gate trials 2026-11-26, quiet VM).
# Measured: the standard deviation of ln(roughness^2) over each recorded collection's identical
# runs against sqrt(2 / dof) -- latency (14 sizes, dof 6, normal 0.58): 1.11, 2.05, 2.15, 0.76,
# 1.19; plateau (5 sizes, dof 2, normal 1.00): 3.16, 3.77, 3.12, 3.54, 4.48 (bench/results/raw/:
# the quiet, loaded and first gate-trials collections of 2026-11-26, 2026-11-24-gate-r3-shaped
# without and with -I; CPU backend only: no GPU collection records it yet).  The median of each,
# squared over the normal figure, is the inflation.
ROUGHNESS_SCATTER_INFLATION = {"latency": (1.19 / 0.58) ** 2, "bandwidth": (3.54 / 1.00) ** 2}


@dataclass(frozen=True)
class Spread:
    """How much one run's values wobble (one standard deviation, log units), the
    degrees of freedom of that estimate, and what it was measured from."""

    sigma: float
    dof: int
    what: str


def roughness(values: Mapping[int, float], sizes: Sequence[int]) -> Spread | None:
    """One run's size-to-size wobble over `sizes`: the second differences of log
    time along the sweep (a smooth curve of time against size leaves ~0; each
    size's own jitter shows), by their median absolute value, so that the one bend
    where latency gives way to bandwidth (or one size that stalled) is not taken
    for a noisy run.  Needs no second run, so a reference and a checked run are
    measured the same way.  None for < 5 sizes."""
    xs = [math.log(values[s]) for s in sorted(sizes)
          if s in values and values[s] > 0 and not math.isnan(values[s])]
    d2 = [xs[i + 1] - 2 * xs[i] + xs[i - 1] for i in range(1, len(xs) - 1)]
    if len(d2) < 3:
        return None
    sigma = MAD_TO_SIGMA * statistics.median(abs(d) for d in d2) / math.sqrt(_D2_VARIANCE)
    return Spread(sigma, max(1, round(len(d2) / _D2_DOF_SHARE)), "size-to-size roughness")


def pooled(spreads: Sequence[Spread | None]) -> Spread | None:
    """Several runs' spreads of one kind as one (variances weighted by dof)."""
    xs = [x for x in spreads if x is not None]
    if not xs:
        return None
    dof = sum(x.dof for x in xs)
    return Spread(math.sqrt(sum(x.sigma ** 2 * x.dof for x in xs) / dof), dof, xs[0].what)


def cycle_spread(cycles: Sequence[Mapping[int, float]], sizes: Sequence[int]) -> Spread | None:
    """How far one run's -N cycles move against each other; None for < 3 cycles."""
    if len(cycles) < 3:
        return None
    s = shift_sigma(cycles, sizes)
    return None if s is None else Spread(s, len(cycles) - 1, "-N cycle shifts")


def floor_spread(rounds_of_runs: Sequence[Sequence[Mapping[int, float]]], sizes: Sequence[int]) -> Spread | None:
    """How far one round moves at the machine's floor, from the gap between each run's two fastest
    rounds; None where no run has 2 rounds.  Why not the rounds' spread: rounds are at the floor or
    lifted whole (1x H200, 2026-11-28: within 3 % or 30-50 % above), and the lifted ones set any
    spread of all rounds (12.5 % there, where the fastest round moved 4.7 % between runs).  The two
    fastest are at the floor while at most n - 2 rounds are lifted.  Each round's whole shift is the
    median over sizes of its log ratio to the per-size median of its run's rounds; for normal values
    the gap between the two smallest of n has mean (e2 - e1) sigma (e: the expected normal order
    statistics, Blom's approximation), so sigma = mean gap / (e2 - e1); about one dof per run."""
    gaps: list[float] = []
    for rounds in rounds_of_runs:
        n = len(rounds)
        if n < 2:
            continue
        shifts = sorted(round_shifts(rounds, sizes))
        if len(shifts) < 2:
            continue
        z = statistics.NormalDist()
        e1, e2 = (z.inv_cdf((k - 0.375) / (n + 0.25)) for k in (1, 2))
        gaps.append((shifts[1] - shifts[0]) / (e2 - e1))
    if not gaps:
        return None
    return Spread(statistics.fmean(gaps), len(gaps), "two fastest rounds' gap")


# The Gaussian efficiency of the median absolute deviation as an estimate of sigma (its variance
# over a standard deviation's is 1 / 0.37): a MAD over n values carries about 0.37 (n - 1) dof.
MAD_EFFICIENCY = 0.37


def round_shifts(rounds: Sequence[Mapping[int, float]], sizes: Sequence[int]) -> list[float]:
    """Each round's whole shift within its run: the median over sizes of its log ratio to the
    per-size median of the run's rounds."""
    ref = reference_profile(list(rounds))
    return [m for m in (median_change(log_ratios(ref, r, sizes)) for r in rounds) if m is not None]


def median_round_spread(rounds_of_runs: Sequence[Sequence[Mapping[int, float]]],
                        sizes: Sequence[int]) -> Spread | None:
    """How far a run's figure that is per size the median of its n rounds moves by its rounds alone:
    per run, its rounds' whole shifts (`round_shifts`) around their median, robustly (MAD x
    MAD_TO_SIGMA: a round lifted whole does not set it), times sqrt(median_variance(n)) (sqrt(pi/2 / n)
    from 3 rounds: the standard error of a median of n normal values); pooled over the runs on their
    dof (MAD_EFFICIENCY (n - 1) each, at least 1).  None where no run has 2 rounds."""
    spreads: list[Spread] = []
    for rounds in rounds_of_runs:
        shifts = round_shifts(rounds, sizes)
        n = len(shifts)
        if n < 2:
            continue
        m = statistics.median(shifts)
        sigma = MAD_TO_SIGMA * statistics.median(abs(x - m) for x in shifts)
        spreads.append(Spread(sigma * math.sqrt(median_variance(n)), max(1, round(MAD_EFFICIENCY * (n - 1))),
                              "rounds' spread around their median"))
    return pooled(spreads)


def far_noisier(checked: Spread, reference: Spread, size_class: str | None = None) -> float | None:
    """The z-score of log(checked variance / reference variance) when the checked run
    is significantly noisier (> Z_UNSTABLE), else None.  ln of a sample variance has a
    variance of about 2 / dof for normal values; a size-to-size roughness (`size_class`
    'latency' or 'bandwidth') scatters ROUGHNESS_SCATTER_INFLATION times more between
    identical runs, as recorded (-N cycle shifts: the normal figure)."""
    if checked.sigma <= reference.sigma:
        return None
    if reference.sigma <= 0:
        return math.inf
    inflation = 1.0
    if size_class is not None and checked.what == reference.what == "size-to-size roughness":
        inflation = ROUGHNESS_SCATTER_INFLATION[size_class]
    z = math.log(checked.sigma ** 2 / reference.sigma ** 2) / math.sqrt(
        inflation * (2 / checked.dof + 2 / reference.dof))
    return z if z > Z_UNSTABLE else None
