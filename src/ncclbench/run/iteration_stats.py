"""Statistics over per-iteration samples and across ranks (docs/behaviour.md §3.5, §3.7)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..core.results import PerIterStats


def per_iter_stats(times_us: Sequence[float], skip: int,
                   per_process: list[list[float]] | None = None) -> PerIterStats:
    """nccl-tests' -I summary over samples[skip:]: p50 = sorted[N//2] (upper
    median), pX nearest-rank = sorted[min(N-1, ceil(N*X/100)-1)], population stdev,
    cv% = stdev/mean*100 (0 when mean is 0)."""
    kept = sorted(times_us[skip:])
    n = len(kept)
    if n == 0:
        zero = 0.0
        return PerIterStats(skip, zero, zero, zero, zero, zero, zero, zero, zero, list(times_us), per_process)
    mean = sum(kept) / n
    var = sum((x - mean) ** 2 for x in kept) / n
    stdev = math.sqrt(var)

    def pct(x: float) -> float:
        return kept[min(n - 1, max(0, math.ceil(n * x / 100) - 1))]

    return PerIterStats(
        skipped_iterations=skip,
        min_us=kept[0],
        max_us=kept[-1],
        avg_us=mean,
        p50_us=kept[n // 2],
        p95_us=pct(95),
        p99_us=pct(99),
        stdev_us=stdev,
        cv_pct=(stdev / mean * 100.0) if mean else 0.0,
        times_us=list(times_us),
        per_process_max_times_us=per_process,
    )


def elementwise_max(rows: Sequence[Sequence[float]]) -> list[float]:
    """Per-iteration max over process rows (what nccl-tests prints as i_*)."""
    return [max(col) for col in zip(*rows)] if rows else []


def bandwidths(nbytes: float, time_us: float, factor: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9) for `nbytes` moved in `time_us`."""
    if time_us <= 0:
        return 0.0, 0.0
    algbw = nbytes / 1e9 / (time_us * 1e-6)
    return algbw, algbw * factor
