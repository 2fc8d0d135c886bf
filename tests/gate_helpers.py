"""Shared by the regression-gate tests (check, noise, reference, JUnit): a result row as a
slower machine would have measured it, and the smallest drop a one-run GPU baseline can see."""

import math

from ncclbench.core.results import ResultRow
from ncclbench.store import noise


def slow_down(row: ResultRow, factor: float) -> None:
    """Make `row` `factor` times slower in place, both halves alike: time x factor, algbw and
    busbw / factor, and under -I the iterations' times and their median, which the gate reads."""
    for h in (row.out_of_place, row.in_place):
        h.time_us *= factor
        h.algbw /= factor
        h.busbw /= factor
        if h.per_iter is not None:
            p = h.per_iter
            p.p50_us *= factor
            p.times_us = [t * factor for t in p.times_us]


def one_run_limit_pct() -> float:
    """The smallest plateau busbw drop a GPU baseline of one run can see against one checked
    run by the recorded prior alone: its per-run noise on both sides, Student's t on its dof.
    (A baseline whose own size-to-size roughness is larger is judged on that instead; the
    fixture's, 1.5 % per run, gives a limit within a few % of this one.)"""
    p = noise.PRIORS[("gpu", "bandwidth")]
    return -100 * math.expm1(-noise.noise_multiple(p.dof) * p.sigma * math.sqrt(2))
