"""The noise one figure's change is judged against (store/noise.py holds the statistics, gate.py
the rule): `reference_noise`, from the reference alone, and `instability`, whether the checked
run is too noisy to confirm a figure.  `compare` marks a size with the same noise (comparison.py)."""

from __future__ import annotations

import dataclasses
import math

from . import noise
from .gate_figures import Metric, pct_text, worse_log
from .noise import Noise
from .run_like import RunLike
from .summary_stats import LATENCY_MAX_SIZE


def run_system(run: RunLike) -> str:
    """The system whose prior the gate uses (noise.system_of): hosts and GPU models of the run."""
    info = run.info
    hosts = info.hosts or [d.hostname for d in info.devices]
    return noise.system_of(info.backend, hosts, [d.device_info for d in info.devices if d.device_info])


def class_sizes(ref: dict[int, float], metric: Metric) -> list[int]:
    """The reference's sizes of a figure's size class: > 64 KiB for busbw, <= 64 KiB for time."""
    big = metric is Metric.BUSBW
    return sorted(s for s in ref if (s > LATENCY_MAX_SIZE) == big)


def iteration_sigma(a: dict[int, float], counts: dict[int, int], sizes: list[int]) -> tuple[float, int] | None:
    """One size's noise from the baseline's -I samples: the standard error of its mean,
    on both sides of the change (the checked run is taken to be as steady), and the dof of
    that estimate (samples - 1); None for a group of sizes or without samples."""
    if len(sizes) != 1 or sizes[0] not in a:
        return None
    return math.hypot(a[sizes[0]], a[sizes[0]]), max(1, counts.get(sizes[0], 2) - 1)


def reference_noise(sizes: list[int], per_run: list[dict[int, float]], cyc_a: list[dict[int, float]],
                    backend: str, metric: Metric, *, single: bool = False, iters: tuple[float, int] | None = None,
                    system: str | None = None, rough_sizes: list[int] | None = None,
                    size_class: str | None = None, floor: noise.Spread | None = None,
                    estimate: noise.Spread | None = None) -> Noise:
    """The noise of one figure's change, from the reference alone (see store/noise.py): the
    prior for the backend, system and size class, updated by what the baseline measured
    (`noise.posterior`): its history's whole-run shifts (2 runs or more), else its -N
    cycles' (2 or more).  Without either: for one size its -I samples, else the prior
    alone, or the baseline's own size-to-size roughness where larger ("assumed"; over
    `rough_sizes`, the figure's size class: a plateau of 2 sizes shows no roughness).
    `size_class`: the prior's class where not the metric's (the gate rounds' latency figure);
    `floor`: the least a run's figure moves between runs (the gate rounds' spread within runs);
    `estimate`: a measure of the whole-run noise itself, pooled with the runs' shifts (the gate
    rounds' spread where each round was a process of its own: run/gate_processes.py)."""
    size_class = size_class or metric.size_class
    measured = _measured_shift(sizes, per_run, cyc_a, single, floor if estimate is None else None)
    if estimate is not None:
        measured = _with_estimate(measured, estimate, max(1, len(per_run)))
    if measured is not None:
        shift, dof, what, n_ref = measured
        post = noise.posterior(noise.prior_for(backend, size_class, system), shift, dof, what)
        nz = noise.combine(post.sigma, post.source, n_ref, 1, shift_dof=post.dof)
        return dataclasses.replace(nz, measured=(shift, dof))
    if iters is not None:
        return Noise(iters[0], f"the baseline's -I samples of this size ({iters[1] + 1}; noise of whole runs "
                     "unknown)", False, iters[1])
    rough = None if single else noise.pooled([noise.roughness(r, rough_sizes or sizes) for r in per_run])
    return noise.assumed_noise(backend, size_class, rough, system)


def _with_estimate(measured: tuple[float, int, str, int] | None, estimate: noise.Spread,
                   n_runs: int) -> tuple[float, int, str, int]:
    """The runs' shifts (if any) and an estimate of the same whole-run noise as one (variances
    weighted by their dof): rounds that are each a fresh process are independent draws of what
    moves between runs, so their spread, shrunk by the median taken, is a run's noise too."""
    what = f"the baseline's rounds, each a fresh process ({100 * math.expm1(estimate.sigma):.1f}% per run on {estimate.dof} dof)"
    if measured is None or measured[1] <= 0:
        return estimate.sigma, estimate.dof, what, n_runs
    shift, dof, source, n_ref = measured
    total = dof + estimate.dof
    sigma = math.sqrt((dof * shift ** 2 + estimate.dof * estimate.sigma ** 2) / total)
    return sigma, total, f"{source} and {what}", n_ref


def _measured_shift(sizes: list[int], per_run: list[dict[int, float]], cyc_a: list[dict[int, float]],
                    single: bool, least: noise.Spread | None = None) -> tuple[float, int, str, int] | None:
    """(whole-run shift, its dof, what it was measured on, runs the reference is the median of)
    from the baseline's history, else its -N cycles; None when it has neither.  Where few runs'
    medians agreed closer than their sizes' jitter allows, `noise.jitter_floor` stands in; where
    they agreed closer than `least` (a figure made of rounds moves at least by their spread), that
    does.  Cycles of one process measure shifts within it: the reference is still one run."""
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
                metric: Metric, rough_sizes: list[int] | None = None) -> str | None:
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
    z = noise.far_noisier(cand, ref, metric.size_class)
    if z is None:
        return None
    own = cand.sigma * (math.sqrt(noise.median_variance(n)) if n else
                        noise.MEDIAN_EFFICIENCY / math.sqrt(len(sizes)))
    if nz.multiple * own < noise.UNSTABLE_SHARE_OF_LIMIT * worse_log(limit_pct, metric):
        return None  # noisier, but not enough to hide a change of the limit
    return (f"unstable candidate: cannot confirm; re-run (its {cand.what} {pct_text(100 * math.expm1(cand.sigma))} "
            f"against the baseline's {pct_text(100 * math.expm1(ref.sigma))})")
