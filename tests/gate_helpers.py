"""Shared by the regression-gate tests (check, noise, reference, JUnit): a result row as a
slower machine would have measured it."""

from ncclbench.results import ResultRow


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
